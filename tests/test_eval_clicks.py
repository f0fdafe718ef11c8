"""`rankstream eval clicks` on a small synthetic collection: every arm scored on what it
served, gains paired with Uni-Con, the summary's comparisons, the plot, the CLI."""

from __future__ import annotations

import json

import numpy as np
import pytest

from rankstream.cli import main
from rankstream.evals.clicks import evaluate_clicks

SMALL = {"n_images": 4000}
ARMS = {
    "opar1 judged", "opar1 judged@3", "opar1 naive", "opar1 ips",
    "arow judged", "arow judged@3", "arow naive", "arow ips", "pdgd",
}  # fmt: skip


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


def test_the_learning_curves_are_saved(result) -> None:
    with open(result["plot"], "rb") as plot:
        assert plot.read(8) == b"\x89PNG\r\n\x1a\n"


def test_a_seed_gives_the_same_run_again(cache, result) -> None:
    again = evaluate_clicks("synthetic", "pbm:1", [1], cache, impressions=40, options=SMALL)
    assert again["runs"][0] == result["runs"][1]


def test_the_command_refuses_an_unknown_click_model(capsys) -> None:
    assert main(["eval", "clicks", "--click-model", "curious", "--json"]) == 2
    assert "unknown click model" in capsys.readouterr().err
