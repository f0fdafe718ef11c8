"""`rankstream eval cbir` on small digits and synthetic configurations: JSON shape and sanity."""

from __future__ import annotations

import json
from functools import partial

import pytest

from rankstream.cli import main
from rankstream.evals import cbir
from rankstream.evals.cbir import (
    DATASETS,
    INITIALISATIONS,
    METHODS,
    ONLINE_GRIDS,
    RANKSVM_GRID,
    evaluate_cbir,
)
from rankstream.simulators.cbir_testbed import load_synthetic_testbed

LEARNED = ("ranksvm", "opr", "opar1", "opar2", "ogdr", "arow")


def run_json(capsys, argv: list[str]) -> dict:
    code = main(["eval", "cbir", *argv, "--json"])
    out = capsys.readouterr().out
    assert code == 0
    return json.loads(out)  # nothing but the object on stdout


def check_shape(result: dict) -> None:
    for key in ("map", "ndcg_at_50", "params", "val_map"):
        assert set(result[key]) == set(METHODS)
    for metric in ("map", "ndcg_at_50"):
        assert all(0.0 < value <= 1.0 for value in result[metric].values())
    for algo, grid in ONLINE_GRIDS.items():
        params = result["params"][algo]
        assert set(params) == {"init", *grid}
        assert params["init"] in INITIALISATIONS
        for name, values in grid.items():
            assert params[name] in values
    assert result["params"]["ranksvm"]["C"] in RANKSVM_GRID
    assert ":" in result["params"]["best_fea"]["feature"]
    # learning from feedback must beat the uniform combination even on a small run
    assert max(result["map"][m] for m in LEARNED) > result["map"]["uni_con"]


def test_digits_cli_prints_exactly_one_json_object(capsys) -> None:
    argv = ["--dataset", "digits", "--seed", "1", "--train-rows", "4000", "--max-queries", "15"]
    result = run_json(capsys, argv)
    assert result["dataset"] == "digits"
    assert result["queries"] == {"train": 1077, "val": 15, "test": 15}
    assert result["train_rows"] == 4000
    check_shape(result)


def test_synthetic_cli_json_on_a_small_collection(capsys, monkeypatch, tmp_path) -> None:
    small = partial(load_synthetic_testbed, n_images=3000, candidates=100, cache_dir=str(tmp_path))
    monkeypatch.setitem(cbir.DATASETS, "synthetic", small)
    argv = ["--dataset", "synthetic", "--train-rows", "3000", "--max-queries", "12"]
    result = run_json(capsys, argv)
    assert result["dataset"] == "synthetic"
    assert result["queries"]["val"] == result["queries"]["test"] == 12
    assert result["train_rows"] == 3000
    check_shape(result)


def test_warm_start_is_a_choice_validation_can_make() -> None:
    """Every online ranker's candidates cover both initialisations; Uni-Con's start is ones."""
    import numpy as np

    from rankstream.ranking.scaling import Standardizer

    rng = np.random.default_rng(0)
    scaler = Standardizer().fit(rng.standard_normal((50, 4)))
    X, y = rng.standard_normal((20, 4)), np.where(rng.random(20) < 0.5, 1.0, -1.0)
    for algo, grid in ONLINE_GRIDS.items():
        candidates = cbir._online_candidates(algo, scaler, X[:0], y[:0])  # no rows: the start
        n_points = int(np.prod([len(v) for v in grid.values()]))
        assert len(candidates) == len(INITIALISATIONS) * n_points
        for params, build in candidates:
            expected = np.ones(4) if params["init"] == "uni_con" else np.zeros(4)
            np.testing.assert_array_equal(build().weights, expected)


def test_table_output_names_every_method(capsys) -> None:
    main(["eval", "cbir", "--train-rows", "2000", "--max-queries", "5"])
    out = capsys.readouterr().out
    for method in METHODS:
        assert method in out


def test_unknown_dataset_is_rejected() -> None:
    assert {"digits", "synthetic"} <= set(DATASETS)
    with pytest.raises(ValueError, match="unknown dataset"):
        evaluate_cbir("imagenet")
