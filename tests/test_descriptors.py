"""The nine image descriptors: fixed lengths, promised non-negativity, sanity properties."""

from __future__ import annotations

import numpy as np
import pytest
from sklearn.datasets import load_digits

from rankstream.simulators.descriptors import (
    DESCRIPTORS,
    NON_NEGATIVE,
    describe,
    hog_descriptor,
    intensity_histogram,
    lbp_histogram,
    projection_profiles,
)


@pytest.fixture(scope="module")
def digit_images() -> tuple[np.ndarray, np.ndarray]:
    digits = load_digits()
    picks = np.concatenate([np.flatnonzero(digits.target == k)[:3] for k in range(10)])
    return digits.images[picks] / 16.0, digits.target[picks]


def test_nine_descriptors_in_fixed_order() -> None:
    assert len(DESCRIPTORS) == 9
    assert NON_NEGATIVE.issubset(DESCRIPTORS)


def test_lengths_do_not_depend_on_image_size() -> None:
    rng = np.random.default_rng(0)
    small, large = rng.random((8, 8)), rng.random((97, 130))
    for name, function in DESCRIPTORS.items():
        a, b = function(small), function(large)
        assert a.ndim == 1 and a.shape == b.shape, name
        assert np.all(np.isfinite(a)) and np.all(np.isfinite(b)), name


def test_describe_shapes_and_determinism(digit_images) -> None:
    images, _ = digit_images
    first, second = describe(images), describe(list(images))
    assert list(first) == list(DESCRIPTORS)
    for name, matrix in first.items():
        assert matrix.shape[0] == len(images)
        assert matrix.dtype == np.float64
        np.testing.assert_array_equal(matrix, second[name])
        if name in NON_NEGATIVE:
            assert matrix.min() >= 0.0, name
    assert set(describe(images, names=["hog", "dct"])) == {"hog", "dct"}


def test_histograms_sum_to_one(digit_images) -> None:
    images, _ = digit_images
    for image in images:
        assert intensity_histogram(image).sum() == pytest.approx(1.0)
        assert projection_profiles(image).sum() == pytest.approx(1.0)
        lbp = lbp_histogram(image, grid=(2, 2)).reshape(4, -1)
        np.testing.assert_allclose(lbp.sum(axis=1), 1.0)


def test_hog_separates_a_zero_from_a_one(digit_images) -> None:
    images, labels = digit_images
    zeros, ones = images[labels == 0], images[labels == 1]
    within = np.linalg.norm(hog_descriptor(zeros[0]) - hog_descriptor(zeros[1]))
    between = np.linalg.norm(hog_descriptor(zeros[0]) - hog_descriptor(ones[0]))
    assert between > within


def test_same_digit_is_nearer_than_other_digits_on_average(digit_images) -> None:
    """Every descriptor carries at least some class information on real digits."""
    images, labels = digit_images
    features = describe(images)
    same = labels[:, None] == labels[None, :]
    off_diagonal = ~np.eye(len(labels), dtype=bool)
    for name, matrix in features.items():
        distances = np.linalg.norm(matrix[:, None, :] - matrix[None, :, :], axis=2)
        assert distances[same & off_diagonal].mean() < distances[~same].mean(), name


@pytest.mark.parametrize(
    "bad",
    [np.zeros(8), np.zeros((2, 8, 8)), np.full((8, 8), np.nan), np.ones((1, 8))],
    ids=["1-d", "3-d", "nan", "too-thin"],
)
def test_bad_images_raise(bad: np.ndarray) -> None:
    for function in DESCRIPTORS.values():
        with pytest.raises(ValueError):
            function(bad)


def test_unknown_descriptor_name_raises(digit_images) -> None:
    with pytest.raises(ValueError, match="unknown descriptor"):
        describe(digit_images[0], names=["sift"])
