"""Simulated clicking users, click pairs with IPS weights, the propensity estimator, PDGD."""

from __future__ import annotations

import itertools
from collections import Counter

import numpy as np
import pytest

from rankstream.ranking.click_pairs import click_pairs, ips_weights
from rankstream.ranking.pdgd import PDGD, document_weights, examined_pairs, sample_ranking
from rankstream.ranking.propensity import (
    SHUFFLE,
    PropensityEstimator,
    randomize,
    shuffle_intervention,
)
from rankstream.simulators.click_models import (
    CASCADE_MODELS,
    CascadeClickModel,
    PositionBasedClickModel,
    click_model,
)

DRAWS = 40_000


def _margin(p: float, n: int = DRAWS) -> float:
    """5 standard errors of a click rate p from n draws (a fixed seed: the premise holds)."""
    return 5 * np.sqrt(max(p * (1 - p), 1e-4) / n)


# ------------------------------------------------------------------ click models
def test_the_tables_are_the_references() -> None:
    informational = click_model("informational", 5)
    assert informational.click_probability == (0.4, 0.6, 0.7, 0.8, 0.9)
    assert informational.stop_probability == (0.1, 0.2, 0.3, 0.4, 0.5)
    assert click_model("navigational", 5).click_probability == (0.05, 0.3, 0.5, 0.7, 0.95)
    assert click_model("navigational", 5).stop_probability == (0.2, 0.3, 0.5, 0.7, 0.9)
    assert click_model("perfect", 5).click_probability == (0.0, 0.2, 0.4, 0.8, 1.0)
    assert click_model("almost-random", 5).stop_probability == (0.5,) * 5
    assert click_model("navigational", 3).click_probability == (0.05, 0.5, 0.95)
    assert click_model("informational", 2).stop_probability == (0.1, 0.5)


@pytest.mark.parametrize(("name", "n_grades"), list(itertools.product(CASCADE_MODELS, (2, 3, 5))))
def test_cascade_click_rates_match_the_table(name: str, n_grades: int) -> None:
    """Rank 1: P(click | g). Rank 2 (same grade below): P(click | g) (1 - P(click) P(stop))."""
    model = click_model(name, n_grades)
    assert isinstance(model, CascadeClickModel)
    rng = np.random.default_rng(7)
    for grade in range(n_grades):
        clicks = np.array([model.clicks(np.array([grade, grade]), rng) for _ in range(DRAWS // 10)])
        click, stop = model.click_probability[grade], model.stop_probability[grade]
        n = clicks.shape[0]
        assert abs(clicks[:, 0].mean() - click) <= _margin(click, n)
        second = click * (1 - click * stop)
        assert abs(clicks[:, 1].mean() - second) <= _margin(second, n)


def test_a_cascade_user_stops_only_after_a_click() -> None:
    rng = np.random.default_rng(1)
    stops_after_grade_1 = CascadeClickModel("t", (1.0, 1.0), (0.0, 1.0))
    assert stops_after_grade_1.clicks(np.array([0, 0, 1, 0, 0]), rng).tolist() == [
        True, True, True, False, False,
    ]  # fmt: skip
    # stop probability 1 on grade 0, which is never clicked: the user never stops there
    never_clicks_grade_0 = CascadeClickModel("t", (0.0, 1.0), (1.0, 0.0))
    assert never_clicks_grade_0.clicks(np.array([0, 1, 0, 1]), rng).tolist() == [
        False, True, False, True,
    ]  # fmt: skip


def test_the_module_examples_hold() -> None:
    import doctest

    from rankstream.simulators import click_models as clicks

    result = doctest.testmod(clicks)
    assert result.attempted > 0 and result.failed == 0


def test_position_based_clicks_follow_examination_times_attractiveness() -> None:
    model = click_model("pbm:2", 3)
    assert isinstance(model, PositionBasedClickModel)
    rng = np.random.default_rng(3)
    grades = np.array([2, 1, 2, 2])
    clicks = np.array([model.clicks(grades, rng) for _ in range(DRAWS)])
    expected = (1.0 / np.arange(1, 5)) ** 2 * np.array([1.0, 0.5, 1.0, 1.0])
    for rate, p in zip(clicks.mean(axis=0), expected, strict=True):
        assert abs(rate - p) <= _margin(p)


def test_clicks_are_deterministic_under_a_seed_and_refuse_bad_input() -> None:
    model = click_model("informational", 3)
    grades = np.array([0, 1, 2, 2, 1, 0])
    first = model.clicks(grades, np.random.default_rng(5))
    assert np.array_equal(first, model.clicks(grades, np.random.default_rng(5)))
    with pytest.raises(ValueError, match=r"0\.\.2"):
        model.clicks(np.array([0, 3]), np.random.default_rng(0))
    with pytest.raises(ValueError, match="unknown click model"):
        click_model("curious", 3)
    with pytest.raises(ValueError, match="eta > 0"):
        click_model("pbm:-1", 3)
    with pytest.raises(ValueError, match="2, 3 or 5 grades"):
        click_model("perfect", 4)


# ------------------------------------------------------------------ pairs and weights
def test_click_pairs_are_skips_above_and_the_next_unclicked() -> None:
    clicks = np.array([False, True, True, False, False, True])
    pairs = click_pairs(clicks, losers="skips")
    got = sorted(zip(pairs.winner.tolist(), pairs.loser.tolist(), strict=True))
    assert got == [(1, 0), (2, 0), (2, 3), (5, 0), (5, 3), (5, 4)]
    assert (pairs.weight == 1.0).all()
    assert len(click_pairs(np.zeros(5, dtype=bool), losers="skips")) == 0
    assert len(click_pairs(np.ones(5, dtype=bool), losers="skips")) == 0


def test_each_pair_weighs_the_inverse_propensity_of_its_clicked_rank() -> None:
    propensities = np.array([1.0, 0.5, 0.25, 0.125, 0.001, 0.001])
    clicks = np.array([False, True, False, True, False, False])
    pairs = click_pairs(clicks, propensities, min_propensity=0.01)
    np.testing.assert_array_equal(pairs.weight, 1.0 / propensities[pairs.winner])
    assert ips_weights(np.array([4]), propensities, 0.01).tolist() == [100.0]  # clipped
    with pytest.raises(ValueError, match="probabilities"):
        click_pairs(clicks, np.array([1.0, 0.0, 0.5, 0.5, 0.5, 0.5]))


def test_ips_weights_remove_the_position_bias_of_the_clicks() -> None:
    """Two results under the PBM (eta 1), shown in both orders: the weighted count of
    "b over a" minus "a over b" is 2 (attr(b) - attr(a)) = 1.0 per pair of lists (the
    skip side's term a_a a_b (p_i - p_j) cancels over the two orders); the naive one
    falls short (0.75): the rank-2 click is undercounted."""
    model = click_model("pbm:1", 3)
    truth = model.propensities(2)
    rng = np.random.default_rng(11)
    naive, weighted = np.zeros(2), np.zeros(2)
    for order in ((0, 1), (1, 0)):  # doc 0 (grade 1) above doc 1 (grade 2) and back
        grades = np.array([1, 2])[list(order)]
        for _ in range(DRAWS):
            pairs = click_pairs(model.clicks(grades, rng), truth, losers="skips")
            for w, winner in zip(pairs.weight, pairs.winner, strict=True):
                doc = order[winner]
                naive[doc] += 1
                weighted[doc] += w
    assert (weighted[1] - weighted[0]) / DRAWS == pytest.approx(1.0, abs=0.03)
    assert (naive[1] - naive[0]) / DRAWS == pytest.approx(0.75, abs=0.03)


def _expected_net_preferences(losers: str, weighted: bool) -> np.ndarray:
    """E[weighted count of "rank i over rank j"] - E["j over i"] for one fixed ranking of
    4 equally attractive results (a = 0.5) under the PBM with eta 1, exactly: every
    click outcome enumerated with its probability."""
    propensity, attractiveness = 1.0 / np.arange(1, 5), 0.5
    expected = np.zeros((4, 4))
    for outcome in itertools.product([False, True], repeat=4):
        clicks = np.array(outcome)
        click = propensity * attractiveness
        probability = np.prod(np.where(clicks, click, 1.0 - click))
        pairs = click_pairs(clicks, propensity if weighted else None, losers=losers)
        np.add.at(expected, (pairs.winner, pairs.loser), probability * pairs.weight)
    return expected - expected.T


def test_ips_on_the_shown_pairs_is_unbiased_for_one_fixed_ranking() -> None:
    """A deterministic learner shows one order: equally attractive results must come out
    with no net preference. The IPS-weighted shown pairs do; the skip pairs, naive or
    weighted, do not (the weighted ones prefer rank 4 over rank 1)."""
    np.testing.assert_allclose(_expected_net_preferences("shown", True), 0.0, atol=1e-12)
    skips = _expected_net_preferences("skips", True)
    assert skips[3, 0] == pytest.approx(0.25)
    assert np.abs(_expected_net_preferences("skips", False)).max() > 0.05
    assert _expected_net_preferences("shown", False)[0, 3] > 0.3  # naive: the top wins


# ------------------------------------------------------------------ propensities
def test_the_estimate_is_the_prior_without_data_and_the_data_with_plenty() -> None:
    estimator = PropensityEstimator(depth=10, prior_eta=1.0, prior_clicks=10.0)
    np.testing.assert_allclose(estimator.propensities(10), 1.0 / np.arange(1, 11))
    truth = (1.0 / np.arange(1, 11)) ** 2
    rng = np.random.default_rng(0)
    shuffled = [shuffle_intervention(10)] * 10_000
    for _ in range(30):  # 300,000 shuffled impressions of a PBM eta-2 user
        grades = rng.integers(0, 3, (10_000, 10))
        attractiveness = np.array([0.0, 0.5, 1.0])[grades]
        clicks = (rng.random(grades.shape) < truth) & (rng.random(grades.shape) < attractiveness)
        estimator.observe_many(shuffled, clicks)
    assert estimator.intervened == estimator.observed == 300_000
    np.testing.assert_allclose(estimator.propensities(10), truth, rtol=0.10)
    tail = estimator.propensities(50)[10:]
    assert (np.diff(tail) <= 0).all() and tail[0] <= estimator.propensities(10)[-1]
    again = PropensityEstimator.from_state(estimator.to_state())
    np.testing.assert_array_equal(again.propensities(50), estimator.propensities(50))
    with pytest.raises(ValueError, match="more clicks"):
        state = estimator.to_state()
        PropensityEstimator.from_state({**state, "shuffled_clicks": [300_001] * 10})


def test_a_shuffle_moves_only_the_top_and_says_how_likely_its_order_was() -> None:
    """RandTop-n as serve makes it: a `share` of the rankings get their top `depth` in a
    uniformly random order, the rest untouched; the probability logged is the order's
    under the policy (the ranked order is also what 1 - share shows), and the draw is
    the seed's."""
    ranking, share, draws = np.arange(20), 0.3, 4000
    shown = [randomize(ranking, SHUFFLE, share, np.random.default_rng(s), 4) for s in range(draws)]
    probability: dict[tuple[int, ...], float] = {}
    for one in shown:
        assert sorted(one.order[:4].tolist()) == [0, 1, 2, 3]
        assert one.order[4:].tolist() == list(range(4, 20))  # only the top 4 moved
        as_ranked = one.order.tolist() == ranking.tolist()
        assert one.intervention in (None, "shuffle:1-4")
        assert one.intervention is not None or as_ranked
        assert one.probability == pytest.approx(share / 24 + (1 - share) * as_ranked)
        probability[tuple(one.order[:4].tolist())] = one.probability
    shuffles = Counter(tuple(one.order[:4]) for one in shown if one.intervention is not None)
    n = sum(shuffles.values())
    assert abs(n / draws - share) < 5 * np.sqrt(share * (1 - share) / draws)
    assert len(shuffles) == 24 and sum(probability.values()) == pytest.approx(1.0)
    expected = n / 24  # each order of the top 4 equally often: within 5 standard errors
    assert all(abs(c - expected) < 5 * np.sqrt(expected) for c in shuffles.values()), shuffles
    again = randomize(ranking, SHUFFLE, share, np.random.default_rng(7), 4)
    assert again.order.tolist() == shown[7].order.tolist()
    assert again.intervention == shown[7].intervention
    short = randomize(np.array([5, 6, 7]), SHUFFLE, 1.0, np.random.default_rng(0))
    assert short.intervention == "shuffle:1-3" and short.probability == pytest.approx(1 / 6)
    alone = randomize(np.array([5]), SHUFFLE, 1.0, np.random.default_rng(0))
    assert (alone.intervention, alone.probability) == (None, 1.0)  # nothing to shuffle
    with pytest.raises(ValueError, match="intervention"):
        randomize(ranking, "pairs", share, np.random.default_rng(0))
    with pytest.raises(ValueError, match="share"):
        randomize(ranking, SHUFFLE, 1.5, np.random.default_rng(0))


def test_the_estimate_from_serves_shuffles_finds_the_truth_a_ranking_hides() -> None:
    """Rankings whose results grow less attractive with rank (a model that ranks well),
    three quarters shuffled by serve's `randomize`, position-based users (1/k)^2, every
    impression counted with its logged intervention: ranks 2-10 within 10% of the truth
    (~300,000 shuffles: ~1,500 clicks at rank 10, a ~2.6% standard error, so the margin
    is ~4 of them; a fixed seed), while the click rates of the unshuffled rankings, which
    mix examination with the ranking, are more than 30% off at rank 10."""
    rng = np.random.default_rng(5)
    n, truth = 400_000, (1.0 / np.arange(1, 11)) ** 2
    attractiveness = np.sort(rng.uniform(0.1, 0.9, (n, 10)), axis=1)[:, ::-1]
    logged = []
    for row in range(n):
        one = randomize(attractiveness[row], SHUFFLE, 0.75, rng)
        attractiveness[row] = one.order
        logged.append(one.intervention)
    clicks = rng.random((n, 10)) < truth * attractiveness
    estimator = PropensityEstimator(prior_clicks=10.0)
    estimator.observe_many(logged, clicks)
    assert estimator.observed == n and 0.74 * n < estimator.intervened < 0.76 * n
    np.testing.assert_allclose(estimator.propensities(10), truth, rtol=0.10)
    plain = clicks[np.array([i is None for i in logged])].mean(axis=0)
    assert plain[9] / plain[0] < 0.7 * truth[9]


# ------------------------------------------------------------------ PDGD
def _pl_probability(scores: np.ndarray, ranking: list[int]) -> float:
    """P(the top of a Plackett-Luce ranking is `ranking`), by its definition."""
    left = list(range(len(scores)))
    p = 1.0
    for doc in ranking:
        p *= np.exp(scores[doc]) / sum(np.exp(scores[d]) for d in left)
        left.remove(doc)
    return p


def test_pdgd_gradient_matches_the_papers_formula_by_hand() -> None:
    scores = np.array([0.3, -0.2, 1.1, 0.0, -0.7])
    ranking = np.array([2, 0, 3, 1])  # four of five shown
    clicks = np.array([False, False, True, False])  # doc 3 clicked at rank 3
    positive, negative = examined_pairs(clicks)
    assert positive.tolist() == [2] and negative.tolist() == [0, 1, 3]
    expected = np.zeros(5)
    for i, j in ((2, 0), (2, 1), (2, 3)):  # (clicked position, other position)
        swapped = ranking.copy()
        swapped[[i, j]] = swapped[[j, i]]
        p, p_swapped = (
            _pl_probability(scores, ranking.tolist()),
            _pl_probability(scores, swapped.tolist()),
        )
        rho = p_swapped / (p + p_swapped)
        ek, el = np.exp(scores[ranking[i]]), np.exp(scores[ranking[j]])
        weight = rho * ek * el / (ek + el) ** 2
        expected[ranking[i]] += weight
        expected[ranking[j]] -= weight
    documents, coefficients = document_weights(scores, ranking, clicks)
    got = np.zeros(5)
    np.add.at(got, documents, coefficients)
    np.testing.assert_allclose(got, expected, rtol=1e-12)

    phi = np.random.default_rng(0).standard_normal((5, 3))
    model = PDGD(learning_rate=0.5)
    model._w = np.linalg.lstsq(phi, scores, rcond=None)[0]  # scores as close as a line gets
    before = model.weights
    model.learn(phi, ranking, clicks)
    f = phi @ before
    documents, coefficients = document_weights(f, ranking, clicks)
    np.testing.assert_allclose(model.weights - before, 0.5 * coefficients @ phi[documents])


def test_pdgd_weighs_pairs_far_below_the_top_without_underflow() -> None:
    """Two shown documents 1,000 below the top score: exp f underflows to 0 for both, yet
    their pair keeps its weight sigma(d) sigma(-d) of their difference d (here 0.25:
    equal scores), so a learner whose scores spread widely still learns (no 0 / 0)."""
    scores = np.array([1000.0, 0.0, 0.0])
    ranking = np.array([0, 1, 2])
    clicks = np.array([False, True, False])  # doc 1 clicked over doc 0 above, doc 2 below
    documents, coefficients = document_weights(scores, ranking, clicks)
    assert np.isfinite(coefficients).all()
    got = np.zeros(3)
    np.add.at(got, documents, coefficients)
    # pair (1 over 2): equal scores, rho = 1/2, weight 1/4 * 1/2; pair (1 over 0): ~0
    np.testing.assert_allclose(got, [0.0, 0.125, -0.125], atol=1e-12)
    model = PDGD(warm_start=np.array([1000.0, 0.0]))
    model.learn(np.array([[1.0, 0.0], [0.0, 1.0], [0.0, 0.0]]), ranking, clicks)
    assert np.isfinite(model.weights).all() and model.n_updates == 1


def test_pdgd_starts_from_its_warm_start() -> None:
    phi = np.array([[1.0, 0.0], [0.0, 1.0], [0.5, 0.5]])
    model = PDGD(warm_start=np.array([2.0, -1.0]))
    np.testing.assert_array_equal(model.score(phi), [2.0, -1.0, 0.5])
    model.learn(phi, np.array([0, 1, 2]), np.array([False, True, False]))
    assert model.weights[1] > -1.0  # it learns from there
    with pytest.raises(ValueError, match="finite"):
        PDGD(warm_start=np.array([np.nan, 1.0]))


def test_plackett_luce_samples_follow_the_softmax() -> None:
    scores = np.array([1.0, 0.0, -1.0])
    rng = np.random.default_rng(4)
    firsts = np.bincount([sample_ranking(scores, 2, rng)[0] for _ in range(DRAWS)], minlength=3)
    softmax = np.exp(scores) / np.exp(scores).sum()
    for count, p in zip(firsts / DRAWS, softmax, strict=True):
        assert abs(count - p) <= _margin(p)
    assert sorted(sample_ranking(scores, 3, rng).tolist()) == [0, 1, 2]


def test_shown_losers_pair_each_click_with_every_other_shown_result() -> None:
    clicks = np.array([False, True, False, True])
    pairs = click_pairs(clicks, np.array([1.0, 0.5, 0.25, 0.2]), losers="shown")
    got = sorted(zip(pairs.winner.tolist(), pairs.loser.tolist(), strict=True))
    assert got == [(1, 0), (1, 2), (1, 3), (3, 0), (3, 1), (3, 2)]
    np.testing.assert_allclose(sorted(set(pairs.weight.tolist())), [2.0, 5.0])
    assert len(click_pairs(np.zeros(4, dtype=bool), losers="shown")) == 0
    with pytest.raises(ValueError, match="losers"):
        click_pairs(clicks, losers="everything")


@pytest.mark.parametrize("name", ["navigational", "informational", "pbm:1.5"])
def test_click_count_distribution_is_what_clicks_many_samples(name) -> None:
    """Exact P(k clicks) per list against 200,000 simulated users per list: within 5
    standard errors (plus 5 users, for counts too rare for the normal approximation) of
    every count's frequency (fixed seed)."""
    users = click_model(name, 3)
    rng = np.random.default_rng(11)
    grades = rng.integers(0, 3, (4, 12))
    exact = users.click_count_distribution(grades)
    assert exact.shape == (4, 13) and np.allclose(exact.sum(axis=1), 1.0)
    users_each = 200_000
    counts = users.clicks_many(np.repeat(grades, users_each, axis=0), rng).sum(axis=1)
    seen = np.stack([np.bincount(row, minlength=13) for row in counts.reshape(4, -1)])
    seen = seen / users_each
    standard_error = np.sqrt(exact * (1 - exact) / users_each)
    assert (np.abs(seen - exact) <= 5 * standard_error + 5 / users_each).all()


def test_a_tied_pair_learned_both_ways_cancels_only_within_the_margin() -> None:
    """Why a click-learning model starts at zero or near it (`workers.checkpoint`, "Start"):
    two equally attractive results give the pair both ways; within the hinge's margin
    OPAR-I's two steps cancel, beyond it only the step against the current order is taken
    (the ranking flattens)."""
    from rankstream.ranking.online import OnlineRanker

    x = np.array([[1.0, 0.5]])  # phi(a) - phi(b); a ranks first: w . x > 0
    both_ways = np.vstack([x, -x])
    for start, flattens in ((np.array([0.2, 0.2]), False), (np.array([4.0, 4.0]), True)):
        ranker = OnlineRanker(algo="opar1", warm_start=start, C=1e-3)
        ranker.learn_many(both_ways, np.array([1, 1]))
        moved = float((ranker.weights - start) @ x[0])
        if flattens:
            assert moved < -1e-3  # the margin w . x shrank: the pair "b over a" won alone
        else:
            assert abs(moved) < 1e-12


def test_the_default_pairs_are_the_shown_pairs_ips_leaves_unbiased_in_the_join_too() -> None:
    """Issue 38: the click join (and so `rankstream serve`) pairs each click with every
    other shown result unless told `losers="skips"`."""
    from rankstream.workers.click_join_options import JoinOptions

    clicks = np.array([False, True, False, True])
    default, shown = click_pairs(clicks), click_pairs(clicks, losers="shown")
    assert (default.winner.tolist(), default.loser.tolist()) == (
        shown.winner.tolist(), shown.loser.tolist()
    )  # fmt: skip
    assert JoinOptions().losers == "shown" and JoinOptions(losers="skips").losers == "skips"
