"""`rankstream eval stream`: the §5.5 loop per learner on both collections (small sizes),
its summary, and how the learners' default hyper-parameters are chosen from its grid."""

from __future__ import annotations

import json

import numpy as np
import pytest

from rankstream.cli import main
from rankstream.evals.stream import (
    choose_defaults,
    default_variants,
    evaluate_stream,
    grid_variants,
)
from rankstream.ranking import learners
from rankstream.simulators.judged_feedback import (
    BASELINE,
    online_experiment_scores,
    run_online_experiment,
)

SMALL = {"synthetic": {"n_images": 4000}, "fashion-mnist": {"limit": 200}}


@pytest.fixture(scope="module")
def result(tmp_path_factory):
    return evaluate_stream(
        ["synthetic", "fashion-mnist"],
        seeds=[0, 1],
        cache_dir=tmp_path_factory.mktemp("stream-cache"),
        queries=12,
        options=SMALL,
    )


def test_each_collection_and_seed_scores_uni_con_and_every_learner(result) -> None:
    runs = result["runs"]
    assert [(r["collection"], r["seed"]) for r in runs] == [
        ("synthetic", 0),
        ("synthetic", 1),
        ("fashion-mnist", 0),
        ("fashion-mnist", 1),
    ]
    assert [r["images"] for r in runs] == [4000, 4000, 400, 400]
    for run in runs:
        assert set(run["variants"]) == set(learners.names())
        assert 0 < run["uni_con"]["ndcg_at_50"] <= 1 and 0 < run["uni_con"]["map"] <= 1
        for cell in run["variants"].values():  # paired: the mean of differences
            assert cell["ndcg_gain"] == pytest.approx(
                cell["ndcg_at_50"] - run["uni_con"]["ndcg_at_50"]
            )
            assert cell["map_gain"] == pytest.approx(cell["map"] - run["uni_con"]["map"])
    assert runs[0]["variants"]["opr"] != runs[1]["variants"]["opr"]  # seeds differ
    assert result["hyperparameters"] == learners.hyperparameters() and "chosen" not in result
    json.dumps(result)


def test_summary_spreads_each_gain_over_the_seeds(result) -> None:
    summary = result["summary"]["fashion-mnist"]
    runs = [r for r in result["runs"] if r["collection"] == "fashion-mnist"]
    assert summary["seeds"] == [0, 1]
    gains = [r["variants"]["ogdr"]["ndcg_gain"] for r in runs]
    cell = summary["variants"]["ogdr"]["ndcg_gain"]
    assert cell["mean"] == pytest.approx(np.mean(gains))
    assert cell["std"] == pytest.approx(np.std(gains, ddof=1))
    relative = [
        r["variants"]["ogdr"]["map_gain"] / r["uni_con"]["map"] * 100 for r in runs
    ]  # percent of the same seed's Uni-Con
    assert summary["variants"]["ogdr"]["map_gain_percent"]["mean"] == pytest.approx(
        np.mean(relative)
    )


def test_the_grid_is_eval_cbirs_and_every_point_is_a_variant() -> None:
    variants = grid_variants()
    expected = sum(
        int(np.prod([len(v) for v in grid.values()])) for grid in learners.grids().values()
    )
    assert len(variants) == expected
    assert variants["opr"] == ("opr", {}) and variants["opar1 C=0.0001"] == ("opar1", {"C": 1e-4})
    assert default_variants() == {algo: (algo, {}) for algo in learners.names()}


def test_defaults_average_the_gain_over_collections_not_just_one() -> None:
    """Large steps win on one collection and lose more on the other: the mean decides."""

    def run(big: float, small: float) -> dict:
        return {
            "variants": {
                "ogdr eta=0.1": {"params": {"eta": 0.1}, "ndcg_gain": big},
                "ogdr eta=0.0001": {"params": {"eta": 1e-4}, "ndcg_gain": small},
            }
        }

    synthetic, photos = run(0.05, 0.04), run(-0.03, 0.01)
    assert choose_defaults([synthetic])["eta"]["value"] == 0.1
    chosen = choose_defaults([synthetic, photos])["eta"]
    assert chosen["value"] == 1e-4
    assert chosen["mean_gain"] == pytest.approx({0.1: 0.01, 1e-4: 0.025})


def test_the_learners_defaults_are_points_of_the_validation_grid() -> None:
    """`ranking.learners.HYPERPARAMETERS` holds what `eval stream --grid` chose (the click
    ones read on click triplets only, which a judged stream has none of)."""
    clicks = {h.name for h in learners.CLICK_HYPERPARAMETERS}
    for name, spec in learners.HYPERPARAMETERS.items():
        if name in clicks:
            continue
        assert any(spec.default in grid.get(name, ()) for grid in learners.grids().values()), name


def test_run_online_experiment_is_the_ndcg_of_the_named_loop(tmp_path) -> None:
    from rankstream.simulators.collection import build_collection

    collection = build_collection(n_images=3000, progress=False)
    curves = run_online_experiment(collection, algos=("ogdr",), n_queries=8, seed=3)
    scores = online_experiment_scores(collection, {"ogdr": ("ogdr", {})}, n_queries=8, seed=3)
    np.testing.assert_array_equal(curves["ogdr"], scores["ndcg"]["ogdr"])
    assert ((scores["ap"][BASELINE] > 0) & (scores["ap"][BASELINE] <= 1)).all()
    with pytest.raises(ValueError, match="baseline"):
        online_experiment_scores(collection, {BASELINE: ("ogdr", {})}, n_queries=1)


def test_cli_refuses_bad_options(capsys) -> None:
    assert main(["eval", "stream", "--queries", "0", "--json"]) == 2
    assert "queries must be >= 1" in capsys.readouterr().err
