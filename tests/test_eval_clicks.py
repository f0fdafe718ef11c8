"""`rankstream eval clicks` on a small synthetic collection: every arm scored on what it
served, gains paired with Uni-Con, the click arms learning through the product's join and
online worker, the summary's comparisons and intervals, the plot, the CLI."""

from __future__ import annotations

import json

import numpy as np
import pytest

from rankstream.cli import main
from rankstream.evals.clicks import evaluate_clicks

SMALL = {"n_images": 4000}
ARMS = {
    "opar1 judged", "opar1 judged@3", "opar1 naive", "opar1 ips",
    "arow judged", "arow judged@3", "arow naive", "arow ips", "pdgd", "pdgd perfect",
}  # fmt: skip
DEPLOYED = {"opar1 naive", "opar1 ips", "arow naive", "arow ips", "pdgd", "pdgd perfect"}


@pytest.fixture(scope="module")
def cache(tmp_path_factory):
    return tmp_path_factory.mktemp("clicks-cache")


@pytest.fixture(scope="module")
def result(cache, tmp_path_factory):
    plot = tmp_path_factory.mktemp("plots") / "clicks.png"
    return evaluate_clicks(
        "synthetic", "pbm:1", [0, 1], cache, impressions=40, options=SMALL, plot_path=plot
    )


def test_every_arm_is_scored_and_paired_with_uni_con(result) -> None:
    runs = result["runs"]
    assert [run["seed"] for run in runs] == [0, 1]
    for run in runs:
        assert set(run["arms"]) == ARMS
        for cell in run["arms"].values():
            assert 0 < cell["ndcg_at_50"] <= 1
            assert 0 < cell["ndcg_at_10"] <= 1 and 0 < cell["final_ndcg_at_10"] <= 1
            assert cell["ndcg_gain"] == pytest.approx(
                cell["ndcg_at_50"] - run["uni_con"]["ndcg_at_50"]
            )
    assert runs[0]["arms"]["pdgd"] != runs[1]["arms"]["pdgd"]  # seeds differ
    json.dumps(result)


def test_the_summary_gives_the_issues_comparisons(result) -> None:
    summary = result["summary"]
    gains = [run["arms"]["arow ips"]["final_ndcg_gain"] for run in result["runs"]]
    assert summary["arms"]["arow ips"]["final_ndcg_gain"]["mean"] == pytest.approx(np.mean(gains))
    assert summary["target_reads"] in summary["gains"]
    family = summary["families"]["arow"]
    for key in ("ndcg_gain", "final_ndcg_gain"):
        for reading, arms in (("same_family", {"arow naive", "arow ips"}), ("with_pdgd", ARMS)):
            cell = family[key][reading]
            assert "judged" not in cell["best_click_arm"] and cell["best_click_arm"] in arms
            gains = {
                n: summary["arms"][n][key]["mean"]
                for n in arms
                if n.startswith("arow") and "judged" not in n
            }
            if reading == "with_pdgd":
                gains["pdgd"] = summary["arms"]["pdgd"][key]["mean"]
            assert cell["best_click_gain"] == max(gains.values())
            assert cell["judged_gain"] == summary["arms"]["arow judged"][key]["mean"]
    differences = [
        run["arms"]["arow ips"]["final_ndcg_gain"] - run["arms"]["arow naive"]["final_ndcg_gain"]
        for run in result["runs"]
    ]
    assert family["final_ips_minus_naive"]["mean"] == pytest.approx(np.mean(differences))
    control = family["judged_at_click_depth"]
    assert control["arm"] == "arow judged@3"
    cell = control["final_ndcg_gain"]
    assert cell["best_click_gain"] == summary["arms"]["arow judged@3"]["final_ndcg_gain"]["mean"]
    worst = summary["worst_click_arm_final"]
    finals = {n: c["final_ndcg_gain"]["mean"] for n, c in summary["arms"].items()}
    assert worst["mean"] == min(v for n, v in finals.items() if "judged" not in n)


def test_the_click_arms_learn_through_the_product(result) -> None:
    """Every click arm is a deployment: its join joined every impression's session, the
    online worker learned every triplet the join sent, PDGD was taught by the join and
    served, naive pairs weigh 1 and the IPS arm runs the join's defaults."""
    from rankstream.workers.click_join_options import JoinOptions

    for run in result["runs"]:
        product = run["product"]
        assert set(product) == DEPLOYED
        for name, summary in product.items():
            join = summary["join"]
            assert join["sessions"] == run["impressions"], name
            if name.startswith("pdgd"):
                assert summary["learned_triplets"] is None
                assert join["learned"] == run["impressions"]  # taught every session
                assert summary["served_by_learner"] >= run["impressions"] - 1
            else:
                assert join["triplets"] > 0 and summary["learned_triplets"] == join["triplets"]
                assert join["learned"] == 0
        assert product["arow naive"]["join"]["losers"] == "skips"
        assert product["arow naive"]["join"]["min_propensity"] == 1.0
        defaults = JoinOptions()
        assert product["arow ips"]["join"]["losers"] == defaults.losers
        assert product["arow ips"]["join"]["min_propensity"] == defaults.min_propensity


@pytest.mark.parametrize("share", [0.0, 1.0])
def test_a_deployment_randomizes_as_serve_does_and_its_join_reads_it(cache, share) -> None:
    """The engine shows serve's randomized rankings (`logged_order`): with every ranking
    shuffled (serve's default intervention, the top 10) the join's estimate counts 5
    shuffles covering ranks 1-10 and no impression shown as ranked; with none, the
    reverse."""
    from rankstream.evals.click_deployment import ClickDeployment, eval_settings
    from rankstream.simulators.catalog import load_collection
    from rankstream.simulators.judged_feedback import FeedbackSimulator
    from rankstream.stream.settings import Settings

    served = load_collection("synthetic", cache, False, **SMALL)
    sim = FeedbackSimulator(served.collection, seed=3, index=served.index)
    deployment = ClickDeployment(
        "opar1",
        "clicks:pbm:1",
        served.collection,
        served.index,
        3,
        5,
        eval_settings(share, Settings()),  # serve's default intervention, whatever the env
    )
    try:
        for _ in range(5):
            query = sim.next_query()
            deployment.learn(query, deployment.serve(query))
        estimator = deployment.join.handler.estimator
    finally:
        deployment.close()
    shuffled = 5 if share == 1.0 else 0
    assert estimator.impressions[0] == 5 - shuffled
    assert (estimator.shuffled == shuffled).all()


def test_pdgd_against_perfect_clicks_is_paired_by_seed_with_bootstrap_intervals(result) -> None:
    reading = result["summary"]["pdgd_against_perfect_clicks"]
    assert reading["arms"] == ["pdgd", "pdgd perfect"]
    for cutoff, key in (("ndcg_at_10", "final_ndcg_at_10"), ("ndcg_at_50", "final_ndcg_at_50")):
        ours = [run["arms"]["pdgd"][key] for run in result["runs"]]
        theirs = [run["arms"]["pdgd perfect"][key] for run in result["runs"]]
        difference = reading[cutoff]["difference"]
        assert difference["mean"] == pytest.approx(np.mean(ours) - np.mean(theirs))
        differences = np.subtract(ours, theirs)
        assert differences.min() - 1e-12 <= difference["low"] <= difference["mean"]
        assert difference["mean"] <= difference["high"] <= differences.max() + 1e-12
        assert reading[cutoff]["pdgd"]["seeds"] == 2


def test_the_bootstrap_interval_is_the_percentile_interval_of_resampled_means() -> None:
    from rankstream.evals.clicks import bootstrap_mean

    values = [0.1, 0.2, 0.4, 0.8]
    cell = bootstrap_mean(values, resamples=20_000)
    assert cell["mean"] == pytest.approx(0.375)
    # the exact distribution of the mean of 4 draws with replacement, by enumeration
    grid = np.array(np.meshgrid(*[values] * 4)).reshape(4, -1).mean(axis=0)
    low, high = np.quantile(grid, [0.025, 0.975])
    assert cell["low"] == pytest.approx(low, abs=0.03) and cell["high"] == pytest.approx(
        high, abs=0.03
    )
    assert bootstrap_mean([0.5]) == {"mean": 0.5, "seeds": 1, "low": None, "high": None}


def test_the_learning_curves_are_saved(result) -> None:
    with open(result["plot"], "rb") as plot:
        assert plot.read(8) == b"\x89PNG\r\n\x1a\n"


def test_a_seed_gives_the_same_run_again(cache, result) -> None:
    again = evaluate_clicks("synthetic", "pbm:1", [1], cache, impressions=40, options=SMALL)
    assert again["runs"][0] == result["runs"][1]


def test_the_command_refuses_an_unknown_click_model(capsys) -> None:
    assert main(["eval", "clicks", "--click-model", "curious", "--json"]) == 2
    assert "unknown click model" in capsys.readouterr().err
