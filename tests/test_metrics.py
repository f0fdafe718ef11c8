"""Metrics on hand-computed examples, tie-breaking, conventions and bad input."""

from __future__ import annotations

import math
from functools import partial

import numpy as np
import pytest

from rankstream.ranking.metrics import (
    average_precision,
    mae,
    mean_over_queries,
    ndcg_at_k,
    pairwise_accuracy,
    ranked_order,
)


def test_ndcg_hand_computed():
    # ranked relevance [2, 0, 1]: DCG = 3/1 + 0 + 1/log2(4) = 3.5
    # ideal [2, 1, 0]:            IDCG = 3 + 1/log2(3)
    got = ndcg_at_k([0.9, 0.5, 0.1], [2, 0, 1], k=3)
    assert got == pytest.approx(3.5 / (3 + 1 / math.log2(3)), abs=1e-12)


def test_ndcg_cut_at_k_and_perfect_order():
    assert ndcg_at_k([3, 2, 1], [2, 1, 0], k=3) == 1.0
    # k=1: only the top item counts; it has rel 0 while the ideal top has rel 1
    assert ndcg_at_k([3, 2, 1], [0, 1, 1], k=1) == 0.0
    # k=2 over [0, 1, 1]: DCG = 1/log2(3), IDCG = 1 + 1/log2(3)
    expected = (1 / math.log2(3)) / (1 + 1 / math.log2(3))
    assert ndcg_at_k([3, 2, 1], [0, 1, 1], k=2) == pytest.approx(expected, abs=1e-12)


def test_ndcg_no_relevant_candidates_is_zero():
    assert ndcg_at_k([1.0, 2.0], [0, 0]) == 0.0


def test_ties_are_broken_by_index():
    np.testing.assert_array_equal(ranked_order([1.0, 2.0, 1.0, 2.0]), [1, 3, 0, 2])
    # all tied: input order; the relevant item at index 1 ranks second
    assert average_precision([0.0, 0.0, 0.0], [0, 1, 0]) == 0.5
    assert ndcg_at_k([0.0, 0.0], [0, 1], k=2) == pytest.approx(1 / math.log2(3))


def test_average_precision_hand_computed():
    # ranked hits [1, 0, 1, 1]: precisions 1/1, 2/3, 3/4
    got = average_precision([4, 3, 2, 1], [1, 0, 2, 1])
    assert got == pytest.approx((1 + 2 / 3 + 3 / 4) / 3, abs=1e-12)
    assert average_precision([1, 2], [0, 0]) == 0.0


def test_mean_over_queries():
    queries = [([1, 0], [1, 0]), ([1, 0], [0, 1])]
    assert mean_over_queries(average_precision, queries) == pytest.approx(0.75)
    ndcg2 = partial(ndcg_at_k, k=2)
    assert mean_over_queries(ndcg2, queries) == pytest.approx((1 + 1 / math.log2(3)) / 2)
    with pytest.raises(ValueError, match="no queries"):
        mean_over_queries(average_precision, [])


def test_pairwise_accuracy_and_mae():
    assert pairwise_accuracy([3.0, 1.0, 1.0], [[0, 1], [1, 2], [2, 0]]) == pytest.approx(1 / 3)
    assert mae([0, 2, 4], [1, 2, 1]) == pytest.approx(4 / 3)


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda: ndcg_at_k([1.0, np.nan], [0, 1]), "NaN"),
        (lambda: ndcg_at_k([1.0, 2.0], [0, 1, 1]), "length 3, expected 2"),
        (lambda: ndcg_at_k([1.0, 2.0], [0, -1]), ">= 0"),
        (lambda: ndcg_at_k([1.0, 2.0], [0, 1], k=0), "k must"),
        (lambda: ndcg_at_k([[1.0, 2.0]], [0, 1]), "1-d"),
        (lambda: average_precision([1.0], [np.inf]), "NaN or Inf"),
        (lambda: pairwise_accuracy([1.0, 2.0], [[0, 2]]), "outside"),
        (lambda: pairwise_accuracy([1.0, 2.0], [0, 1]), r"\(p, 2\)"),
        (lambda: mae([1.0], [1.0, 2.0]), "expected 1"),
    ],
)
def test_bad_input(call, message):
    with pytest.raises(ValueError, match=message):
        call()
