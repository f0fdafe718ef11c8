"""The digits CBIR test bed: scikit-learn's 1,797 real 8x8 digit images, §5.1 style.

The online-LTR paper (§5.1) builds each learning-to-rank test bed the same way, and so
does `build_cbir_testbed` here for any labelled image collection:

* phi(q, p) = nine descriptors x four similarity measures = 36 numbers
  (`simulators.descriptors`, `simulators.similarity.PhiMap`);
* relevance = same class (binary 1/0);
* the images are split at random into five folds: one fold's images are the test
  queries, one fold's the validation queries, the other three folds' the training
  queries (the paper rotates the folds; one rotation is enough to compare methods);
* training data: for each training query, all its relevant images against sampled
  irrelevant ones; each pair becomes a row x = phi(q, p_rel) - phi(q, p_irr), y = +1,
  and a random half of the rows is flipped to (-x, -1) so both labels occur. The
  total is a budget (200,000 rows by default, as the paper's standard-dataset runs)
  spread evenly over the training queries: a query whose share is smaller than its
  relevant set uses a random subset of it, a larger share cycles through the set;
* validation and test queries rank the whole database minus the query itself.

Digits are upsampled (bilinear) from 8x8 to 16x16 before describing them: LBP's
radius-1 neighbourhoods and the Gabor bank need strokes wider than one pixel to
respond to them. Descriptors are computed once per process and cached.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import lru_cache
from typing import NamedTuple

import numpy as np

from simulators.descriptors import describe
from simulators.similarity import PhiMap

N_FOLDS = 5
DEFAULT_TRAIN_ROWS = 200_000
DIGITS_IMAGE_SIZE = 16


class RankedQuery(NamedTuple):
    """One judged query: phi of every candidate (m, d) and its relevance (m,)."""

    phi: np.ndarray
    relevance: np.ndarray


@dataclass(frozen=True)
class CBIRTestBed:
    """Training triplet rows plus validation and test queries of one CBIR collection.

    `train_triplets[i] = (query, p1, p2)` image indices with
    `train_X[i] = phi(query, p1) - phi(query, p2)`; `train_phi` holds phi of every
    (training query, candidate) pair the rows were built from, for fitting a scaler on
    training data only.
    """

    name: str
    feature_names: list[str]
    train_X: np.ndarray  # noqa: N815 (the task and scikit-learn spell it so)
    train_y: np.ndarray
    train_triplets: np.ndarray
    train_phi: np.ndarray
    val_queries: list[RankedQuery]
    test_queries: list[RankedQuery]
    train_query_ids: np.ndarray
    val_query_ids: np.ndarray
    test_query_ids: np.ndarray
    phi_map: PhiMap = field(repr=False)

    @property
    def query_counts(self) -> dict[str, int]:
        return {
            "train": int(self.train_query_ids.size),
            "val": int(self.val_query_ids.size),
            "test": int(self.test_query_ids.size),
        }


@lru_cache(maxsize=4)
def digit_descriptors(
    image_size: int = DIGITS_IMAGE_SIZE,
) -> tuple[dict[str, np.ndarray], np.ndarray]:
    """(descriptor name -> (1797, d) matrix, digit labels), computed once per size."""
    from skimage.transform import resize
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


def _fold_split(
    n_images: int, rng: np.random.Generator, max_val: int | None, max_test: int | None
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Five random folds: fold 0 -> test queries, fold 1 -> validation, rest -> training."""
    folds = np.array_split(rng.permutation(n_images), N_FOLDS)
    test, val = folds[0][:max_test], folds[1][:max_val]
    train = np.concatenate(folds[2:])
    return np.sort(train), np.sort(val), np.sort(test)


def _ranked_query(phi_map: PhiMap, labels: np.ndarray, query: int) -> RankedQuery:
    candidates = np.delete(np.arange(labels.size), query)
    phi = phi_map.phi(query, candidates).astype(np.float32)
    return RankedQuery(phi, (labels[candidates] == labels[query]).astype(np.int8))


def _query_pairs(
    relevant: np.ndarray, irrelevant: np.ndarray, quota: int, rng: np.random.Generator
) -> tuple[np.ndarray, np.ndarray]:
    """`quota` (relevant, irrelevant) pairs: every relevant image once per cycle."""
    if quota <= relevant.size:
        chosen = rng.choice(relevant, size=quota, replace=False)
    else:
        chosen = np.resize(rng.permutation(relevant), quota)
    others = rng.choice(irrelevant, size=quota, replace=quota > irrelevant.size)
    return chosen, others


def build_cbir_testbed(
    name: str,
    descriptors: dict[str, np.ndarray],
    labels: np.ndarray,
    seed: int = 0,
    train_rows: int = DEFAULT_TRAIN_ROWS,
    max_val_queries: int | None = None,
    max_test_queries: int | None = None,
) -> CBIRTestBed:
    """The §5.1 test bed for any labelled collection given its descriptor matrices."""
    labels = np.asarray(labels)
    if labels.ndim != 1 or labels.size < 2 * N_FOLDS:
        raise ValueError(f"labels must be 1-d with at least {2 * N_FOLDS} images")
    if train_rows < 1:
        raise ValueError(f"train_rows must be >= 1, got {train_rows}")
    rng = np.random.default_rng(seed)
    phi_map = PhiMap().fit(descriptors)
    if phi_map.n_images != labels.size:
        raise ValueError(f"{phi_map.n_images} descriptor rows but {labels.size} labels")
    train_ids, val_ids, test_ids = _fold_split(labels.size, rng, max_val_queries, max_test_queries)

    quotas = np.full(train_ids.size, train_rows // train_ids.size)
    quotas[: train_rows % train_ids.size] += 1
    all_ids = np.arange(labels.size)
    rows, triplets, phi_blocks = [], [], []
    for query, quota in zip(train_ids, quotas, strict=True):
        if quota == 0:
            continue
        same = labels == labels[query]
        relevant, irrelevant = all_ids[same & (all_ids != query)], all_ids[~same]
        if relevant.size == 0 or irrelevant.size == 0:
            continue
        first, second = _query_pairs(relevant, irrelevant, int(quota), rng)
        candidates, inverse = np.unique(np.concatenate([first, second]), return_inverse=True)
        phi = phi_map.phi(int(query), candidates)
        rows.append(phi[inverse[:quota]] - phi[inverse[quota:]])
        triplets.append(np.column_stack([np.full(quota, query), first, second]))
        phi_blocks.append(phi.astype(np.float32))
    if not rows:
        raise ValueError("no training query has both relevant and irrelevant images")
    train_X = np.vstack(rows)
    train_triplets = np.vstack(triplets)
    flip = rng.random(train_X.shape[0]) < 0.5
    train_X[flip] *= -1.0
    train_triplets[flip] = train_triplets[flip][:, [0, 2, 1]]
    train_y = np.where(flip, -1.0, 1.0)

    return CBIRTestBed(
        name=name,
        feature_names=phi_map.feature_names,
        train_X=train_X,
        train_y=train_y,
        train_triplets=train_triplets,
        train_phi=np.vstack(phi_blocks),
        val_queries=[_ranked_query(phi_map, labels, int(q)) for q in val_ids],
        test_queries=[_ranked_query(phi_map, labels, int(q)) for q in test_ids],
        train_query_ids=train_ids,
        val_query_ids=val_ids,
        test_query_ids=test_ids,
        phi_map=phi_map,
    )


def load_digits_testbed(
    seed: int = 0,
    train_rows: int = DEFAULT_TRAIN_ROWS,
    max_val_queries: int | None = None,
    max_test_queries: int | None = None,
) -> CBIRTestBed:
    """The digits CBIR test bed (1,797 images, 36-d phi), deterministic from `seed`."""
    descriptors, labels = digit_descriptors()
    return build_cbir_testbed(
        "digits", descriptors, labels, seed, train_rows, max_val_queries, max_test_queries
    )
