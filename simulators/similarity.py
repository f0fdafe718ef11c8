"""Similarity measures and the query-dependent feature map phi(q, p).

The online-LTR paper (§3, §5.1) ranks with phi(q, p): every descriptor compared with
every similarity measure, 9 x 4 = 36 numbers. Each measure here compares one query
descriptor with a matrix of candidate descriptors, vectorised, higher = more similar.

Chi-square is defined for non-negative histograms. For descriptors that can be negative
(moments, DCT) `PhiMap.fit` records each descriptor's global minimum over the collection
and chi-square compares the shifted vectors a - min and b - min: a fixed translation of
the whole descriptor space, so it keeps the same value for every pair and needs no data
from the query. Descriptors that are never negative get no shift.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np
from numba import njit

Similarity = Callable[[np.ndarray, np.ndarray], np.ndarray]


def _check_pair(query: np.ndarray, candidates: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Validate a (d,) query and an (m, d) candidate matrix; return them as float64."""
    query = np.asarray(query, dtype=np.float64)
    candidates = np.asarray(candidates, dtype=np.float64)
    if query.ndim != 1:
        raise ValueError(f"query must be a 1-d descriptor, got shape {query.shape}")
    if candidates.ndim != 2 or candidates.shape[1] != query.shape[0]:
        raise ValueError(
            f"candidates must be (m, {query.shape[0]}) to match the query, "
            f"got shape {candidates.shape}"
        )
    if not (np.all(np.isfinite(query)) and np.all(np.isfinite(candidates))):
        raise ValueError("descriptors contain NaN or Inf")
    return np.ascontiguousarray(query), np.ascontiguousarray(candidates)


@njit(cache=True, fastmath=False)
def _four_measures(query, candidates, shift):  # pragma: no cover - compiled
    """One pass over the candidates: columns euclidean, l1, cosine, chi-square (all
    "higher = more similar"). Sharing the pass keeps phi cheap; see the public
    functions below for each definition."""
    m, d = candidates.shape
    out = np.empty((m, 4))
    query_norm = np.sqrt(np.sum(query * query))
    for i in range(m):
        squared = absolute = dot = norm = chi = 0.0
        for j in range(d):
            a, b = query[j], candidates[i, j]
            diff = a - b
            squared += diff * diff
            absolute += abs(diff)
            dot += a * b
            norm += b * b
            total = a + b + 2.0 * shift
            if total > 0.0:
                chi += diff * diff / total
        denominator = query_norm * np.sqrt(norm)
        out[i, 0] = -np.sqrt(squared)
        out[i, 1] = -absolute
        out[i, 2] = dot / denominator if denominator > 0.0 else 0.0
        out[i, 3] = -0.5 * chi
    return out


MEASURE_COLUMNS = {"euclidean": 0, "l1": 1, "cosine": 2, "chi_square": 3}


def negative_euclidean(query: np.ndarray, candidates: np.ndarray) -> np.ndarray:
    """-||q - p||_2 for every candidate row p."""
    return _four_measures(*_check_pair(query, candidates), 0.0)[:, 0]


def negative_l1(query: np.ndarray, candidates: np.ndarray) -> np.ndarray:
    """-||q - p||_1 for every candidate row p."""
    return _four_measures(*_check_pair(query, candidates), 0.0)[:, 1]


def cosine(query: np.ndarray, candidates: np.ndarray) -> np.ndarray:
    """q.p / (|q| |p|); 0 when either vector is all zeros (no direction to compare)."""
    return _four_measures(*_check_pair(query, candidates), 0.0)[:, 2]


def negative_chi_square(
    query: np.ndarray, candidates: np.ndarray, shift: float = 0.0
) -> np.ndarray:
    """-(1/2) sum_i (q_i - p_i)^2 / (q_i + p_i), bins with q_i + p_i = 0 contributing 0.

    `shift` is added to both vectors first (see the module docstring); after the shift
    every value must be non-negative.
    """
    query, candidates = _check_pair(query, candidates)
    if query.min() + shift < 0 or candidates.min() + shift < 0:
        raise ValueError("chi-square needs non-negative descriptors; pass a shift")
    return _four_measures(query, candidates, float(shift))[:, 3]


SIMILARITIES: dict[str, Similarity] = {
    "euclidean": negative_euclidean,
    "l1": negative_l1,
    "cosine": cosine,
    "chi_square": negative_chi_square,
}
"""The four measures in their fixed order (phi's feature order follows it)."""


@dataclass
class PhiMap:
    """phi(q, p) over a fixed collection: descriptor-major, measure-minor, 36 columns.

    Fit once on the collection's descriptors (name -> (n, d) matrix, kept as float32 if
    given so, else float64; the measures accumulate in float64 either way); then
    `phi(query, candidates)` gives the (m, n_descriptors * n_measures) feature matrix
    between one query image and candidate images, all given as row indices.
    """

    measures: Sequence[str] = tuple(SIMILARITIES)
    descriptors_: dict[str, np.ndarray] = field(default_factory=dict, init=False)
    chi_square_shift_: dict[str, float] = field(default_factory=dict, init=False)

    def fit(self, descriptors: Mapping[str, np.ndarray]) -> PhiMap:
        unknown = [name for name in self.measures if name not in SIMILARITIES]
        if unknown:
            raise ValueError(f"unknown similarity measure(s) {unknown}")
        sizes = {np.asarray(matrix).shape[0] for matrix in descriptors.values()}
        if len(sizes) != 1:
            raise ValueError(f"descriptor matrices disagree on the number of images: {sizes}")
        self.descriptors_ = {}
        for name, matrix in descriptors.items():
            matrix = np.asarray(matrix)
            if matrix.dtype not in (np.float32, np.float64):  # float32 stays: half the memory
                matrix = matrix.astype(np.float64)
            if matrix.ndim != 2 or not np.all(np.isfinite(matrix)):
                raise ValueError(f"descriptor {name!r} must be a finite (n, d) matrix")
            self.descriptors_[name] = matrix
        self.chi_square_shift_ = {
            name: max(0.0, -float(matrix.min())) for name, matrix in self.descriptors_.items()
        }
        return self

    @property
    def feature_names(self) -> list[str]:
        """ "descriptor:measure" for each column of phi."""
        return [f"{d}:{m}" for d in self.descriptors_ for m in self.measures]

    @property
    def n_images(self) -> int:
        return next(iter(self.descriptors_.values())).shape[0]

    def phi(self, query: int, candidates: np.ndarray) -> np.ndarray:
        """(len(candidates), n_features) float64: phi(query image, each candidate image)."""
        if not self.descriptors_:
            raise ValueError("PhiMap is not fitted")
        candidates = np.asarray(candidates, dtype=np.int64)
        picked = [MEASURE_COLUMNS[measure] for measure in self.measures]
        blocks = [
            _four_measures(matrix[query], matrix[candidates], self.chi_square_shift_[name])[
                :, picked
            ]
            for name, matrix in self.descriptors_.items()
        ]
        return np.hstack(blocks)
