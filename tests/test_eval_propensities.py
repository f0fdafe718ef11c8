"""`rankstream eval propensities` on a small synthetic collection: serve's intervention
(swap, and the default shuffle) into the join's estimator, errors against the simulator's
truth, the counts reported, the CLI."""

from __future__ import annotations

import json

import numpy as np
import pytest

from rankstream.cli import main
from rankstream.evals.propensities import evaluate_propensities
from rankstream.ranking.propensity import PropensityEstimator

SMALL = {"n_images": 4000}


@pytest.fixture(scope="module")
def cache(tmp_path_factory):
    return tmp_path_factory.mktemp("propensities-cache")


@pytest.fixture(scope="module")
def result(cache, tmp_path_factory):
    plot = tmp_path_factory.mktemp("plots") / "propensities.png"
    return evaluate_propensities(
        "synthetic", ["pbm:1"], [0], cache, intervention="swap", impressions=200_000, share=0.5,
        check_every=20_000, pool_queries=50, options=SMALL, plot_path=plot,
    )  # fmt: skip


def test_rank_one_is_one_by_normalization_and_the_truth_is_the_users(result) -> None:
    run = result["click_models"]["pbm:1"]["runs"][0]
    ranks = run["per_rank"]
    assert [r["rank"] for r in ranks] == list(range(1, 11))
    assert ranks[0]["estimate"] == 1.0 and ranks[0]["relative_error"] == 0.0
    assert [r["truth"] for r in ranks] == [round(1 / k, 4) for k in range(1, 11)]
    assert max(r["relative_error"] for r in ranks) == run["max_relative_error"]


def test_the_error_shrinks_with_impressions(result) -> None:
    """~100,000 swaps (share 0.5): ~11,000 per rank, the estimate near the truth at the
    end (the binomial error at rank 10 is ~5%: 0.25 leaves a wide margin), and far nearer
    than after the first check's ~1,100 per rank."""
    run = result["click_models"]["pbm:1"]["runs"][0]
    checks = np.asarray(run["checks"])
    assert checks[:, 0].tolist() == list(range(20_000, 200_001, 20_000))
    assert checks[-1, 1] < 0.25 and checks[-1, 1] < checks[0, 1]
    assert 0.45 * 200_000 < run["intervened"] < 0.55 * 200_000


def test_the_counts_are_checks_where_every_rank_was_within(result) -> None:
    cell = result["click_models"]["pbm:1"]
    run = cell["runs"][0]
    within = [n for n, error in run["checks"] if error <= result["tolerance"]]
    assert run["first_within_tolerance"] == (within[0] if within else None)
    if run["within_tolerance_from"] is not None:
        assert run["checks"][-1][1] <= result["tolerance"]
    assert cell["first_within_tolerance"] == run["first_within_tolerance"]


def test_the_plot_is_saved(result) -> None:
    with open(result["plot"], "rb") as plot:
        assert plot.read(8) == b"\x89PNG\r\n\x1a\n"


def test_counting_at_once_is_counting_one_by_one() -> None:
    rng = np.random.default_rng(3)
    kinds = [None, None, None, "swap:1-1", "swap:1-2", "swap:1-5", "swap:1-10", "swap:1-12",
             "shuffle:1-10", "shuffle:1-4", "shuffle:1-12", "pair:1-2"]  # fmt: skip
    logged = [kinds[i] for i in rng.integers(0, len(kinds), 600)]
    clicks = rng.random((600, 10)) < 0.3
    one, many = PropensityEstimator(), PropensityEstimator()
    for intervention, row in zip(logged, clicks, strict=True):
        one.observe(intervention, row)
    many.observe_many(logged, clicks)
    assert one.to_state() == many.to_state()
    assert one.shuffled.tolist() == [one.shuffled[0]] * 4 + [one.shuffled[4]] * 6  # 1-4 short
    assert one.impressions[11 - 1 :].sum() == 0 and one.observed < 600  # 1-1, 1-12, pair: not


def test_serves_shuffle_is_nearer_the_truth_than_its_swap_on_the_same_traffic(cache) -> None:
    """At a 5% share on 1/rank^2 users (~2,000 shuffles per 40,000 impressions), the
    shuffle's worst error at ranks 2-10 is below the swap's on the same impressions (each
    intervention observes 1 rank vs all of them: the swap sees ~220 per rank)."""
    run = {}
    for kind in ("shuffle", "swap"):
        result = evaluate_propensities(
            "synthetic", ["pbm:2"], [0], cache, intervention=kind, impressions=40_000,
            share=0.05, check_every=40_000, pool_queries=50, options=SMALL,
        )  # fmt: skip
        run[kind] = result["click_models"]["pbm:2"]["runs"][0]
    assert 1_800 < run["shuffle"]["intervened"] < 2_200
    assert run["shuffle"]["max_relative_error"] < run["swap"]["max_relative_error"]


def test_the_command_prints_one_json_object(cache, monkeypatch, capsys, tmp_path) -> None:
    monkeypatch.setenv("RANKSTREAM_DATA_DIR", str(cache.parent / "cli-data"))
    args = ["eval", "propensities", "--images", "4000", "--click-model", "pbm:2",
            "--intervention", "shuffle", "--impressions", "20000", "--seeds", "1",
            "--queries", "20", "--plot", str(tmp_path / "p.png"), "--json"]  # fmt: skip
    assert main(args) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["intervention"] == "shuffle" and list(out["click_models"]) == ["pbm:2"]
    assert out["click_models"]["pbm:2"]["runs"][0]["checks"][-1][0] == 20_000


def test_the_command_refuses_users_without_position_bias(capsys) -> None:
    assert main(["eval", "propensities", "--click-model", "informational", "--json"]) == 2
    assert "position-based" in capsys.readouterr().err
