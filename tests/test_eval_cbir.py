"""`rankstream eval cbir` on a small digits configuration: JSON shape and sanity."""

from __future__ import annotations

import json

import pytest

from rankstream.cli import main
from rankstream.evals.cbir import DATASETS, METHODS, ONLINE_GRIDS, evaluate_cbir


def test_cli_prints_exactly_one_json_object(capsys) -> None:
    argv = ["eval", "cbir", "--dataset", "digits", "--seed", "1"]
    code = main([*argv, "--train-rows", "4000", "--max-queries", "15", "--json"])
    out = capsys.readouterr().out
    assert code == 0
    result = json.loads(out)  # nothing but the object on stdout
    assert result["dataset"] == "digits"
    assert result["queries"] == {"train": 1077, "val": 15, "test": 15}
    assert result["train_rows"] == 4000
    for key in ("map", "ndcg_at_50", "params", "val_map"):
        assert set(result[key]) == set(METHODS)
    for metric in ("map", "ndcg_at_50"):
        assert all(0.0 < value <= 1.0 for value in result[metric].values())
    for algo, grid in ONLINE_GRIDS.items():
        assert set(result["params"][algo]) == set(grid)
        for name, value in result["params"][algo].items():
            assert value in grid[name]
    assert ":" in result["params"]["best_fea"]["feature"]
    # learning from feedback must beat the uniform combination even on a small run
    assert (
        max(result["map"][m] for m in ("ranksvm", "opar1", "opar2", "ogdr", "arow"))
        > (result["map"]["uni_con"])
    )


def test_table_output_names_every_method(capsys) -> None:
    main(["eval", "cbir", "--train-rows", "2000", "--max-queries", "5"])
    out = capsys.readouterr().out
    for method in METHODS:
        assert method in out


def test_unknown_dataset_is_rejected() -> None:
    assert "digits" in DATASETS
    with pytest.raises(ValueError, match="unknown dataset"):
        evaluate_cbir("imagenet")
