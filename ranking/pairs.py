"""Preference pairs: the (i above j) rows a pairwise ranker learns from and is scored on.

A pair (i, j) says item i should rank above item j. Graded labels y (relevance grades,
attribute strengths, ordinal levels) imply every pair with y_i > y_j; with query ids,
only items of the same query are compared (grades of different queries are not on one
scale). `preference_pairs` derives them, `check_pairs` validates pairs given directly,
and `sample_pairs` bounds their number reproducibly.
"""

from __future__ import annotations

import numpy as np

from rankstream.ranking.validation import as_float_vector


def check_pairs(pairs: object, n: int) -> np.ndarray:
    """Preference pairs as an int64 (p, 2) array of distinct in-range indices, p >= 1."""
    arr = np.asarray(pairs)
    if arr.ndim != 2 or arr.shape[1] != 2:
        raise ValueError(f"pairs must have shape (p, 2), got {arr.shape}")
    if arr.shape[0] < 1:
        raise ValueError("pairs is empty; a pairwise ranker needs at least one preference pair")
    if not np.issubdtype(arr.dtype, np.integer):
        raise ValueError(f"pairs must hold integer indices, got dtype {arr.dtype}")
    arr = arr.astype(np.int64)
    out = np.flatnonzero((arr < 0).any(axis=1) | (arr >= n).any(axis=1))
    if out.size:
        raise ValueError(f"pairs row {out[0]} = {arr[out[0]].tolist()} is out of range [0, {n})")
    same = np.flatnonzero(arr[:, 0] == arr[:, 1])
    if same.size:
        raise ValueError(f"pairs row {same[0]} compares item {arr[same[0], 0]} with itself")
    return arr


def preference_pairs(y: object, query_id: object | None = None) -> np.ndarray:
    """Every (i, j) with y[i] > y[j], within the same query when `query_id` is given.

    Rows come query by query (in sorted query-id order), and within a query in row-major
    (i, then j) order of the query's items, so the result is a pure function of its
    inputs. Without query ids all items form one query. May be empty (all labels equal
    within every query); the caller decides whether that is an error.

    >>> preference_pairs([2, 0, 1]).tolist()
    [[0, 1], [0, 2], [2, 1]]
    >>> preference_pairs([2, 0, 1, 0], query_id=[7, 7, 8, 8]).tolist()
    [[0, 1], [2, 3]]
    """
    labels = as_float_vector(y, "y")
    if query_id is None:
        queries = [np.arange(labels.shape[0])]
    else:
        ids = np.asarray(query_id)
        if ids.ndim != 1 or ids.shape[0] != labels.shape[0]:
            raise ValueError(
                f"query_id must be 1-d with one id per label ({labels.shape[0]}), "
                f"got shape {ids.shape}"
            )
        _, inverse = np.unique(ids, return_inverse=True)
        order = np.argsort(inverse, kind="stable")
        queries = np.split(order, np.flatnonzero(np.diff(inverse[order])) + 1)
    found = []
    for members in queries:
        above, below = np.nonzero(labels[members][:, None] > labels[members][None, :])
        found.append(np.stack([members[above], members[below]], axis=1))
    if not found:
        return np.empty((0, 2), dtype=np.int64)
    return np.concatenate(found).astype(np.int64)


def sample_pairs(pairs: np.ndarray, max_pairs: int | None, rng: np.random.Generator) -> np.ndarray:
    """At most `max_pairs` rows, drawn uniformly without replacement, kept in input order."""
    if max_pairs is None or pairs.shape[0] <= max_pairs:
        return pairs
    if int(max_pairs) < 1:
        raise ValueError(f"max_pairs must be >= 1 or None, got {max_pairs!r}")
    return pairs[np.sort(rng.choice(pairs.shape[0], int(max_pairs), replace=False))]
