"""`eval interleaving` on a small synthetic collection (fixed seeds: the runs are exact)."""

from __future__ import annotations

import json

import numpy as np
import pytest

from rankstream.evals.interleaving_eval import Comparison, build_pool, evaluate_interleaving
from rankstream.ranking.sequential import PairedTest
from rankstream.simulators.click_models import click_model

SMALL = {"n_images": 4000}
HORIZONS = {"interleaving": 6000, "ab": 6000}


@pytest.fixture(scope="module")
def cache(tmp_path_factory):
    return tmp_path_factory.mktemp("interleaving-cache")


@pytest.fixture(scope="module")
def result(cache, tmp_path_factory):
    plot = tmp_path_factory.mktemp("plots") / "interleaving.png"
    return evaluate_interleaving(
        "synthetic",
        ["perfect"],
        cache,
        PairedTest(),
        runs=3,
        aa_runs=4,
        targets=(0.05,),
        horizons=HORIZONS,
        pool_queries=100,
        options=SMALL,
        plot_path=plot,
    )


def test_the_pair_differs_by_about_the_target_and_the_better_is_the_challenger(result) -> None:
    pair = result["pairs"]["0.05"]
    assert abs(pair["ndcg_difference"] - 0.05) < 0.01
    assert pair["challenger_ndcg"] - pair["champion_ndcg"] == pytest.approx(pair["ndcg_difference"])


def test_interleaving_decides_correctly_and_sooner_than_ab(result) -> None:
    cells = result["click_models"]["perfect"]["0.05"]
    inter, ab = cells["interleaving"], cells["ab"]
    assert inter["switched"] == 1.0 and inter["error_rate"] == 0.0
    # seed 0: 882 interleaved impressions against 2,278 A/B ones (perfect users click
    # without stopping, so even CTR finds this large a difference within the horizon)
    assert ab["median_impressions"] is not None
    assert 2 * inter["median_impressions"] < ab["median_impressions"]
    ratio = result["click_models"]["perfect"]["ab_over_interleaving"]["0.05"]
    assert ratio == {
        "ratio": ab["median_impressions"] / inter["median_impressions"],
        "lower_bound": False,
    }
    # the fixed-sample yardstick: the sequential test needs more pairs than it
    assert 0 < inter["fixed_sample_pairs"] < inter["median_impressions"]


def test_aa_runs_make_no_false_decision_and_the_report_is_json(result) -> None:
    aa = result["click_models"]["perfect"]["aa"]
    assert aa["interleaving"]["false_decisions"] == 0.0 == aa["ab"]["false_decisions"]
    assert aa["interleaving"]["horizon_impressions"] == HORIZONS["interleaving"]
    assert aa["interleaving"]["runs"] == 4 == aa["ab"]["runs"] == result["aa_runs"]
    assert result["click_models"]["perfect"]["0.05"]["interleaving"]["runs"] == 3
    # 0 of 4: no evidence against alpha (p-value 1), and a wide bound (1 - 0.05^(1/4))
    assert aa["interleaving"]["false_decision_bound"]["p_value"] == 1.0
    assert aa["interleaving"]["false_decision_bound"]["upper"] == pytest.approx(0.5271, abs=1e-4)
    json.dumps(result)
    with open(result["plot"], "rb") as plot:
        assert plot.read(8) == b"\x89PNG\r\n\x1a\n"


def test_outcomes_favour_the_better_ranker_under_navigational_users(cache) -> None:
    pool = build_pool("synthetic", cache, 0, 100, SMALL)
    worse, better = np.ones(36), np.ones(36)
    worse[np.arange(0, 36, 2)] = -1.0  # half of Uni-Con's signals reversed
    users = click_model("navigational", 3)
    assert pool.true_ndcg(better) > pool.true_ndcg(worse) + 0.05
    comparison = Comparison(pool, worse, better, users)
    outcomes = comparison.interleaving(4000, np.random.default_rng(0))
    assert set(np.unique(outcomes)) <= {-1.0, 0.0, 1.0}
    assert outcomes.mean() > 3 * outcomes.std() / np.sqrt(outcomes.size)


def test_a_seed_gives_the_same_evaluation(cache) -> None:
    again = [
        evaluate_interleaving(
            "synthetic",
            ["perfect"],
            cache,
            PairedTest(),
            runs=1,
            targets=(0.05,),
            horizons={"interleaving": 2000, "ab": 2000},
            pool_queries=50,
            options=SMALL,
        )
        for _ in range(2)
    ]
    assert again[0] == again[1]


def test_an_unknown_click_model_is_refused_before_loading(cache) -> None:
    with pytest.raises(ValueError, match="unknown click model"):
        evaluate_interleaving("synthetic", ["nobody"], cache, PairedTest(), options=SMALL)


def test_an_ab_that_never_switches_gives_its_horizon_as_a_lower_bound() -> None:
    from rankstream.evals.interleaving_eval import _ratio

    cells = {
        "interleaving": {"median_impressions": 1000.0, "horizon_impressions": 5000},
        "ab": {"median_impressions": None, "horizon_impressions": 20000},
    }
    assert _ratio(cells) == {"ratio": 20.0, "lower_bound": True}
    cells["interleaving"]["median_impressions"] = None
    assert _ratio(cells) is None


def test_ab_click_counts_follow_the_users_clicks(cache) -> None:
    """The A/B arm draws click counts from their exact distribution: the same CTR mean
    and spread as simulating every click (`clicks_many`), to a few standard errors."""
    pool = build_pool("synthetic", cache, 0, 100, SMALL)
    users = click_model("informational", 3)
    comparison = Comparison(pool, np.ones(36), np.ones(36), users)
    rng = np.random.default_rng(3)
    queries = rng.integers(0, 100, 50_000)
    ranking = comparison.rankings[0]
    grades = np.take_along_axis(pool.relevance[queries], ranking[queries, :50], 1)
    simulated = users.clicks_many(grades, rng).mean(axis=1)
    drawn = comparison.ab(50_000, rng)  # two arms of one ranker: CTR differences
    assert abs(drawn.mean()) < 4 * drawn.std() / np.sqrt(drawn.size)
    assert drawn.std() == pytest.approx(np.sqrt(2) * simulated.std(), rel=0.03)


def test_a_horizon_shorter_than_the_burn_in_is_refused(cache) -> None:
    test = PairedTest(min_pairs=100)  # the default test by betting has no burn-in
    with pytest.raises(ValueError, match="under the test's 100 pairs"):
        evaluate_interleaving(
            "synthetic", ["perfect"], cache, test, horizons={"ab": 150}, options=SMALL
        )
