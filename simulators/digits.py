"""The digits CBIR test bed: scikit-learn's 1,797 real 8x8 digit images, §5.1 style.

What is digits-specific lives here: the images, their nine descriptors and the class
labels. The test bed itself (five folds, training pairs, validation and test queries)
is the generic one of `simulators.cbir_testbed`: phi(q, p) = nine descriptors x four
similarity measures (`simulators.descriptors`, `simulators.similarity.PhiMap`),
relevance = same digit (binary), every other image a candidate.

Digits are upsampled (bilinear) from 8x8 to 16x16 before describing them: LBP's
radius-1 neighbourhoods and the Gabor bank need strokes wider than one pixel to
respond to them. Descriptors are computed once per process and cached.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from functools import lru_cache

import numpy as np
from skimage.transform import resize

from rankstream.simulators.cbir_testbed import DEFAULT_TRAIN_ROWS, CBIRTestBed, build_cbir_testbed
from rankstream.simulators.descriptors import describe

DIGITS_IMAGE_SIZE = 16


@lru_cache(maxsize=4)
def digit_descriptors(
    image_size: int = DIGITS_IMAGE_SIZE,
) -> tuple[dict[str, np.ndarray], np.ndarray]:
    """(descriptor name -> (1797, d) matrix, digit labels), computed once per size."""
    # sklearn.datasets: +2.5 s at import; only the digits' loader needs it
    from sklearn.datasets import load_digits

    digits = load_digits()
    images = digits.images / 16.0
    if image_size != images.shape[1]:
        images = np.stack(
            [resize(image, (image_size, image_size), order=1, mode="reflect") for image in images]
        )
    descriptors = describe(images)
    for matrix in descriptors.values():
        matrix.setflags(write=False)
    labels = digits.target.copy()
    labels.setflags(write=False)
    return descriptors, labels


def load_digits_testbed(
    seed: int = 0,
    train_rows: int = DEFAULT_TRAIN_ROWS,
    max_val_queries: int | None = None,
    max_test_queries: int | None = None,
    cache_dir: str | os.PathLike | None = None,
    progress: Callable[[str], None] | None = None,
) -> CBIRTestBed:
    """The digits CBIR test bed (1,797 images, 36-d phi), deterministic from `seed`.

    `cache_dir` and `progress` are part of every test-bed loader's signature; digits
    needs neither (its descriptors take about a second and are kept in memory).
    """
    descriptors, labels = digit_descriptors()
    return build_cbir_testbed(
        "digits", descriptors, labels, seed, train_rows, max_val_queries, max_test_queries
    )
