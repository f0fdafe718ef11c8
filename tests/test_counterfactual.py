"""ranking.counterfactual: IPS click-DCG@k is unbiased under position-based users with
known propensities, its intervals cover at about the nominal rate, clipping costs what
the docstring says, SNIPS is free of the propensities' scale.

The logs are simulated with fixed seeds, so every number here is the same on every run;
tolerances are in standard errors measured from the simulated logs themselves."""

from __future__ import annotations

import numpy as np
import pytest

from rankstream.ranking.counterfactual import (
    Moments,
    Terms,
    difference,
    estimate,
    gains,
    impression_terms,
    policy_terms,
    rerank,
)

L, QUERIES, IMPRESSIONS, LOGS, K = 5, 20, 400, 200, 4
P = np.array([1.0, 0.6, 0.4, 0.3, 0.2])  # all >= 0.1: nothing clipped


def _queries(seed: int = 7) -> tuple[np.ndarray, np.ndarray]:
    """Per query the attractiveness of its shown results (displayed order) and a policy's
    scores for them."""
    rng = np.random.default_rng(seed)
    return rng.uniform(0.05, 0.9, (QUERIES, L)), rng.standard_normal((QUERIES, L))


def _truth(attractive: np.ndarray, ranks: np.ndarray, k: int = K) -> float:
    """E over the (uniform) queries of sum_d a_d gain_k(rank of d): the target."""
    return float(np.mean([a @ gains(r, k) for a, r in zip(attractive, ranks, strict=True)]))


def _logs(propensities: np.ndarray, seed: int = 11) -> tuple[np.ndarray, np.ndarray]:
    """LOGS logs of IMPRESSIONS position-based sessions: (queries drawn, clicks)."""
    attractive, _ = _queries()
    rng = np.random.default_rng(seed)
    query = rng.integers(0, QUERIES, (LOGS, IMPRESSIONS))
    clicks = rng.random((LOGS, IMPRESSIONS, L)) < propensities * attractive[query]
    return query, clicks


def _terms(query_row, clicks_row, ranks, propensities, **kw):
    return policy_terms(list(clicks_row), [ranks[q] for q in query_row], propensities, K, **kw)


@pytest.fixture(scope="module")
def simulated():
    attractive, scores = _queries()
    policy = np.array([rerank(s) for s in scores])
    logged = np.tile(np.arange(L), (QUERIES, 1))
    query, clicks = _logs(P)
    runs = [
        (_terms(q, c, policy, P), _terms(q, c, logged, P))
        for q, c in zip(query, clicks, strict=True)
    ]
    return attractive, policy, logged, runs


def test_ips_is_unbiased_under_position_based_users(simulated):
    attractive, policy, _, runs = simulated
    truth = _truth(attractive, policy)
    found = np.array([estimate(a).ips for a, _ in runs])
    se = found.std(ddof=1) / np.sqrt(LOGS)
    assert abs(found.mean() - truth) <= 4 * se
    # the test has power: clicks counted without propensities miss the truth by far
    naive = _truth(attractive * P, policy)  # E[clicks' gains without 1/p], exactly
    assert abs(naive - truth) > 20 * se


def test_intervals_cover_at_about_the_nominal_rate(simulated):
    attractive, policy, logged, runs = simulated
    truth, truth_logged = _truth(attractive, policy), _truth(attractive, logged)
    clicks = np.mean([(attractive[q] * P).sum() for q in range(QUERIES)])
    weights = np.mean([attractive[q].sum() for q in range(QUERIES)])  # E[w]: nothing clipped

    def covers(interval, value):
        return interval[0] <= value <= interval[1]

    ips = np.mean([covers(estimate(a).ips_interval, truth) for a, _ in runs])
    paired = np.mean([covers(difference(a, b).ips_interval, truth - truth_logged) for a, b in runs])
    limit = truth * clicks / weights  # where SNIPS converges (module docstring)
    snips = np.mean([covers(estimate(a).snips_interval, limit) for a, _ in runs])
    # 95% intervals; with 200 logs the rate's standard error is 0.015: 0.90 is generous
    assert min(ips, paired, snips) >= 0.90, (ips, paired, snips)
    assert max(ips, paired, snips) <= 0.99  # not vacuous: intervals are not all-covering


def test_clipping_costs_what_the_docstring_says():
    """At a rank with p below min_propensity a click counts p / min_propensity of its
    worth: the estimate's mean is that clipped expectation, far from the truth."""
    attractive, scores = _queries()
    shallow = np.array([1.0, 0.5, 0.2, 0.05, 0.02])
    policy = np.array([rerank(s) for s in scores])
    query, clicks = _logs(shallow, seed=12)
    found = np.array(
        [estimate(_terms(q, c, policy, shallow)).ips for q, c in zip(query, clicks, strict=True)]
    )
    se = found.std(ddof=1) / np.sqrt(LOGS)
    share = shallow / np.maximum(shallow, 0.1)  # what a click is worth after clipping
    expected = float(
        np.mean([(a * share) @ gains(r, K) for a, r in zip(attractive, policy, strict=True)])
    )
    truth = _truth(attractive, policy)
    assert abs(found.mean() - expected) <= 4 * se
    assert truth - expected > 8 * se  # the premise: clipping costs something visible here
    unclipped = _terms(query[0], clicks[0], policy, shallow, min_propensity=0.01)
    assert unclipped.clipped == 0 and _terms(query[0], clicks[0], policy, shallow).clipped > 0


def test_snips_does_not_depend_on_the_propensities_scale():
    _, scores = _queries()
    policy = np.array([rerank(s) for s in scores])
    query, clicks = _logs(P, seed=13)
    base = estimate(_terms(query[0], clicks[0], policy, P, min_propensity=0.01))
    half = estimate(_terms(query[0], clicks[0], policy, P / 2, min_propensity=0.01))
    assert half.ips == pytest.approx(2 * base.ips)
    assert half.snips == pytest.approx(base.snips)
    assert half.snips_interval == pytest.approx(base.snips_interval)


def test_one_impression_exactly():
    clicked = np.array([False, True, False, True])
    ranks = np.array([3, 0, 1, 2])  # the policy puts the two clicked results at ranks 1 and 3
    x, w, c, clipped = impression_terms(clicked, ranks, np.array([1.0, 0.5, 0.25, 0.05]), k=2)
    assert (x, w, c, clipped) == (2.0, 12.0, 2, 1)  # rank 3 is past k=2; 1/0.05 clipped to 10


def test_bad_input_is_refused_with_a_reason():
    with pytest.raises(ValueError, match="permutation"):
        impression_terms(np.array([True, False]), np.array([0, 0]), P)
    with pytest.raises(ValueError, match="bool"):
        impression_terms(np.array([1, 0]), np.array([0, 1]), P)
    with pytest.raises(ValueError, match="finite"):
        rerank(np.array([0.0, np.nan]))
    with pytest.raises(ValueError, match="no impressions"):
        estimate(policy_terms([], [], P))
    a = policy_terms([np.array([True, False])], [np.array([0, 1])], P)
    b = policy_terms([np.array([False, True])], [np.array([0, 1])], P)
    with pytest.raises(ValueError, match="same impressions"):
        difference(a, b)


def test_no_clicks_gives_zero_and_no_snips():
    found = estimate(policy_terms([np.zeros(3, bool)] * 3, [np.arange(3)] * 3, P))
    assert (found.ips, found.ips_interval, found.snips, found.clicks) == (0.0, (0.0, 0.0), None, 0)


def test_moments_added_piece_by_piece_estimate_as_the_whole_log(simulated):
    """What a live estimate keeps instead of the terms: sessions added one at a time (and
    an empty piece) give the whole log's estimates."""
    _, _, _, runs = simulated
    policy, logged = runs[0]
    whole, paired = estimate(policy), difference(policy, logged)
    total, pairs = Moments.of(policy_terms([], [], P)), Moments.of(policy_terms([], [], P))
    for i in range(len(policy)):
        one = [Terms(t.x[i : i + 1], t.w[i : i + 1], t.c[i : i + 1], 0) for t in (policy, logged)]
        total, pairs = total + Moments.of(one[0]), pairs + Moments.of_difference(*one)
    for found, expected in ((total.estimate(), whole), (pairs.estimate(), paired)):
        assert (found.impressions, found.clicks) == (expected.impressions, expected.clicks)
        assert found.ips == pytest.approx(expected.ips, rel=1e-12)
        assert found.snips == pytest.approx(expected.snips, rel=1e-12)
        assert found.ips_interval == pytest.approx(expected.ips_interval, rel=1e-9)
        assert found.snips_interval == pytest.approx(expected.snips_interval, rel=1e-9)


def test_cascade_users_bias_it_whatever_position_only_propensities_say():
    """The documented limit: cascade users (read down, stop at the first click) examine by
    what is above, not by rank alone. Even the true average examination per rank as the
    propensities (nothing clipped) leaves the estimate far from the truth."""
    attractive, scores = _queries()
    policy = np.array([rerank(s) for s in scores])
    above_unclicked = np.cumprod(np.hstack([np.ones((QUERIES, 1)), 1 - attractive[:, :-1]]), 1)
    examined = above_unclicked.mean(axis=0)  # P(examined at rank j), averaged over queries
    rng = np.random.default_rng(21)
    query = rng.integers(0, QUERIES, (LOGS, IMPRESSIONS))
    would = rng.random((LOGS, IMPRESSIONS, L)) < attractive[query]
    first = np.where(would.any(axis=2), would.argmax(axis=2), L)
    clicks = np.arange(L) == first[..., None]  # only the first attractive result is clicked
    found = np.array(
        [
            estimate(_terms(q, c, policy, examined, min_propensity=0.01)).ips
            for q, c in zip(query, clicks, strict=True)
        ]
    )
    se = found.std(ddof=1) / np.sqrt(LOGS)
    assert examined.min() >= 0.01  # the premise: nothing clipped
    assert abs(found.mean() - _truth(attractive, policy)) > 8 * se
