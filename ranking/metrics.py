"""Ranking and ordinal metrics: NDCG@k, average precision, pairwise accuracy, MAE.

Ranking metrics take the model's `scores` and the judged `relevance` of the same
candidates and rank by a stable sort on descending score, so equal scores keep
their input order (ties go to the lower index). That makes every metric a pure,
deterministic function of its inputs, which is what a streamed evaluation that is
replayed after a restart needs.

Conventions against scikit-learn's (tests/test_metrics_sklearn.py checks both ways):
`ndcg_at_k` uses exponential gains 2^rel - 1 (the paper's and the usual LTR choice)
where `sklearn.metrics.ndcg_score` uses the relevance itself as the gain, and breaks
ties by input order where sklearn averages the gains of tied candidates (its default
`ignore_ties=False`). So ndcg_at_k(s, rel, k) == ndcg_score([2**rel - 1], [s], k=k)
whenever s has no ties; with ties, it equals sklearn's on scores with the ties broken
by index. `average_precision` (rel > 0 is relevant) equals
`sklearn.metrics.average_precision_score(rel > 0, s)` when s has no ties; sklearn
treats a run of tied scores as one threshold, so with ties the two differ.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

import numpy as np

from rankstream.ranking.validation import as_float_vector, as_relevance

NDCG_K = 50  # the papers' and the dashboards' cut-off: NDCG@50


def ranked_order(scores: object) -> np.ndarray:
    """Indices by descending score; ties keep input order (stable sort)."""
    s = as_float_vector(scores, "scores")
    return np.argsort(-s, kind="stable")


def _scores_and_relevance(scores: object, relevance: object) -> tuple[np.ndarray, np.ndarray]:
    s = as_float_vector(scores, "scores")
    return s, as_relevance(relevance, s.shape[0])


def dcg_at_k(relevance_in_ranked_order: np.ndarray, k: int) -> float:
    """sum_{i=1..k} (2^rel_i - 1) / log2(i + 1) over a list already in rank order."""
    gains = np.exp2(relevance_in_ranked_order[:k]) - 1.0
    discounts = np.log2(np.arange(2, gains.shape[0] + 2))
    return float(np.sum(gains / discounts))


def ndcg_at_k(scores: object, relevance: object, k: int = NDCG_K) -> float:
    """NDCG@k with graded gains 2^rel - 1 and discount log2(rank + 1).

    Tied scores rank in input order (lower index first), not averaged as in
    sklearn's `ndcg_score` (see the module docstring). The ideal DCG ranks by
    relevance itself. A query with no relevant candidate (every rel = 0) has no
    ideal ordering to approach; we define its NDCG as 0.0 (never NaN, as sklearn
    does too), so such queries count as failures rather than vanish from means.

    >>> # worst order: (0 + 1/log2(3) + 3/log2(4)) / (3 + 1/log2(3))
    >>> round(ndcg_at_k([3.0, 2.0, 1.0], [0, 1, 2], k=3), 4)
    0.5869
    """
    if int(k) < 1:
        raise ValueError(f"k must be >= 1, got {k!r}")
    s, rel = _scores_and_relevance(scores, relevance)
    ideal = dcg_at_k(np.sort(rel)[::-1], int(k))
    if ideal == 0.0:
        return 0.0
    return dcg_at_k(rel[ranked_order(s)], int(k)) / ideal


def average_precision(scores: object, relevance: object) -> float:
    """Mean of precision@i over the ranks i of the relevant (rel > 0) candidates.

    Tied scores rank in input order (sklearn's `average_precision_score` instead
    takes a run of ties as one threshold). A query with no relevant candidate
    scores 0.0 (same convention as ndcg_at_k).

    >>> average_precision([0.9, 0.8, 0.7], [1, 0, 1])  # (1/1 + 2/3) / 2
    0.8333333333333333
    """
    s, rel = _scores_and_relevance(scores, relevance)
    hits = rel[ranked_order(s)] > 0
    if not hits.any():
        return 0.0
    precision_at_hit = np.cumsum(hits)[hits] / (np.flatnonzero(hits) + 1.0)
    return float(precision_at_hit.mean())


Query = tuple[object, object]


def mean_over_queries(metric: Callable[[object, object], float], queries: Iterable[Query]) -> float:
    """Mean of `metric(scores, relevance)` over queries given as (scores, relevance).

    Use functools.partial to fix k, e.g. partial(ndcg_at_k, k=50). An empty
    iterable is an error: a mean over nothing would hide a broken pipeline.
    """
    values = [metric(s, r) for s, r in queries]
    if not values:
        raise ValueError("no queries to average over")
    return float(np.mean(values))


def pairwise_accuracy(scores: object, pairs: object) -> float:
    """Fraction of pairs (i, j) — i should rank above j — with scores[i] > scores[j].

    Ties count as errors: a model that scores everything equally orders nothing.

    >>> pairwise_accuracy([3.0, 1.0, 2.0], [[0, 1], [1, 2], [0, 2]])
    0.6666666666666666
    """
    s = as_float_vector(scores, "scores")
    p = np.asarray(pairs)
    if p.ndim != 2 or p.shape[1] != 2 or not np.issubdtype(p.dtype, np.integer):
        raise ValueError(f"pairs must be integer (p, 2) rows (i, j), got {p.dtype} {p.shape}")
    if p.shape[0] == 0:
        raise ValueError("pairs is empty")
    out = np.flatnonzero((p < 0).any(axis=1) | (p >= s.shape[0]).any(axis=1))
    if out.size:
        raise ValueError(f"pairs row {out[0]} indexes outside 0..{s.shape[0] - 1}")
    return float(np.mean(s[p[:, 0]] > s[p[:, 1]]))


def mae(y_true: object, y_pred: object) -> float:
    """Mean absolute error, as used for ordinal labels (cMDS-DML's evaluation).

    >>> mae([1, 2, 3], [1, 3, 5])
    1.0
    """
    t = as_float_vector(y_true, "y_true")
    p = as_float_vector(y_pred, "y_pred", t.shape[0])
    if t.shape[0] == 0:
        raise ValueError("y_true is empty")
    return float(np.mean(np.abs(t - p)))
