"""Target neighbours (eq. 2): the K nearest same-label points of each sample.

cMDS-DML and LDMLR share this step (S3 of Algorithm 2), and both only ever need the
difference vectors x_i - x_j of the target pairs, so that is what this module returns.
"""

from __future__ import annotations

import numpy as np


def target_neighbor_pairs(Z: np.ndarray, r: np.ndarray, n_neighbors: int) -> np.ndarray:
    """Rows (i, j) with eta_ij = 1: j among the K Euclidean-nearest points of i sharing r_i.

    A label with c <= K samples gives each of them its c - 1 other samples (the most the
    definition allows); a label seen once contributes no pair. i itself is excluded by
    index, so a duplicate of x_i is a legitimate (zero-distance) neighbour.
    """
    pairs: list[np.ndarray] = []
    for level in np.unique(r):
        members = np.flatnonzero(r == level)
        k = min(n_neighbors, members.size - 1)
        if k < 1:
            continue
        neighbors = _nearest_others(Z[members], k)
        pairs.append(np.column_stack([np.repeat(members, k), members[neighbors.ravel()]]))
    if not pairs:
        return np.empty((0, 2), dtype=np.int64)
    return np.vstack(pairs).astype(np.int64)


def _nearest_others(P: np.ndarray, k: int, chunk: int = 1024) -> np.ndarray:
    """Indices (c, k) of each row's k nearest other rows, nearest first (brute force, chunked).

    Plain numpy rather than sklearn's threaded search: the groups are small, and on a
    busy machine thread start-up costs more than the distances.
    """
    sq = np.einsum("ij,ij->i", P, P)
    out = np.empty((P.shape[0], k), dtype=np.int64)
    for start in range(0, P.shape[0], chunk):
        rows = np.arange(start, min(start + chunk, P.shape[0]))
        dist = sq[rows, None] + sq[None, :] - 2.0 * P[rows] @ P.T
        dist[np.arange(rows.size), rows] = np.inf  # never your own neighbour
        nearest = np.argpartition(dist, k - 1, axis=1)[:, :k]
        order = np.argsort(np.take_along_axis(dist, nearest, axis=1), axis=1, kind="stable")
        out[rows] = np.take_along_axis(nearest, order, axis=1)
    return out


def pair_differences(Z: np.ndarray, pairs: np.ndarray) -> np.ndarray:
    """x_i - x_j for every target pair (p, d)."""
    return Z[pairs[:, 0]] - Z[pairs[:, 1]]
