"""Our ranking metrics against scikit-learn's, with the conventions of their docstrings.

ndcg_at_k uses gains 2^rel - 1 and breaks ties by input order; sklearn's ndcg_score uses
the relevance as the gain and averages tied gains. average_precision breaks ties by input
order; sklearn's average_precision_score takes tied scores as one threshold. Where the
conventions coincide (exponential gains handed to sklearn, no ties or ties broken by
index) the numbers must agree; where they do not, the difference is the documented one.
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from sklearn.metrics import average_precision_score, ndcg_score

from rankstream.ranking.metrics import average_precision, ndcg_at_k, ranked_order

queries = st.tuples(
    st.integers(2, 40),  # candidates (sklearn's NDCG needs more than one)
    st.integers(1, 4),  # highest grade
    st.integers(1, 45),  # k
    st.integers(0, 2**32 - 1),  # seed
)


def graded_query(n: int, top: int, seed: int, tied: bool) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    relevance = rng.integers(0, top + 1, n).astype(float)
    scores = (
        rng.integers(0, 3, n).astype(float) if tied else rng.permutation(n) + 0.5 * rng.random(n)
    )
    return scores, relevance


def ties_broken_by_index(scores: np.ndarray) -> np.ndarray:
    """Distinct scores that rank exactly as our stable sort ranks `scores`."""
    position = np.empty(scores.shape[0])
    position[ranked_order(scores)] = np.arange(scores.shape[0])
    return -position


@settings(max_examples=300, deadline=None)
@given(queries)
def test_ndcg_is_sklearns_with_exponential_gains_when_no_scores_tie(query):
    n, top, k, seed = query
    scores, relevance = graded_query(n, top, seed, tied=False)
    ours = ndcg_at_k(scores, relevance, k=k)
    for ignore_ties in (False, True):  # without ties the two sklearn paths agree
        theirs = ndcg_score([2.0**relevance - 1.0], [scores], k=k, ignore_ties=ignore_ties)
        assert ours == pytest.approx(theirs, abs=1e-12)


@settings(max_examples=300, deadline=None)
@given(queries)
def test_ndcg_with_ties_is_sklearns_on_the_index_broken_order(query):
    n, top, k, seed = query
    scores, relevance = graded_query(n, top, seed, tied=True)
    theirs = ndcg_score([2.0**relevance - 1.0], [ties_broken_by_index(scores)], k=k)
    assert ndcg_at_k(scores, relevance, k=k) == pytest.approx(theirs, abs=1e-12)


def test_where_the_ndcg_conventions_differ():
    # Tie at the top: we rank index 0 (rel 0) first; sklearn averages the two gains.
    assert ndcg_at_k([1.0, 1.0], [0, 2], k=1) == 0.0
    assert ndcg_score([[0.0, 3.0]], [[1.0, 1.0]], k=1) == pytest.approx(0.5)
    # Gains: grades 1 and 2 weigh 1 : 3 for us, 1 : 2 for sklearn's linear gains.
    ours = ndcg_at_k([2.0, 1.0], [1, 2], k=2)
    assert ours == pytest.approx((1 + 3 / np.log2(3)) / (3 + 1 / np.log2(3)))
    assert ndcg_score([[1.0, 2.0]], [[2.0, 1.0]], k=2) != pytest.approx(ours)
    assert ndcg_at_k([1.0, 2.0], [0, 0]) == ndcg_score([[0.0, 0.0]], [[1.0, 2.0]]) == 0.0


@settings(max_examples=300, deadline=None)
@given(queries)
def test_average_precision_is_sklearns_when_no_scores_tie(query):
    n, top, _, seed = query
    scores, relevance = graded_query(n, top, seed, tied=False)
    ours = average_precision(scores, relevance)
    if not (relevance > 0).any():
        assert ours == 0.0  # sklearn: 0.0 too, with a "no positive class" warning
        return
    assert ours == pytest.approx(average_precision_score(relevance > 0, scores), abs=1e-12)


@settings(max_examples=300, deadline=None)
@given(queries)
def test_average_precision_with_ties_is_sklearns_on_the_index_broken_order(query):
    n, top, _, seed = query
    scores, relevance = graded_query(n, top, seed, tied=True)
    if not (relevance > 0).any():
        return
    theirs = average_precision_score(relevance > 0, ties_broken_by_index(scores))
    assert average_precision(scores, relevance) == pytest.approx(theirs, abs=1e-12)


def test_where_the_average_precision_conventions_differ():
    assert average_precision([1.0, 1.0], [1, 0]) == 1.0  # index 0 ranks first: a hit
    assert average_precision_score([1, 0], [1.0, 1.0]) == 0.5  # one threshold: precision 1/2
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # sklearn warns that there is no positive class
        assert average_precision_score([0, 0], [1.0, 2.0]) == 0.0
    assert average_precision([1.0, 2.0], [0, 0]) == 0.0
