"""`rankstream eval cbir` on small digits, synthetic and Fashion-MNIST configurations: JSON
shape and sanity."""

from __future__ import annotations

import json
from functools import partial

import pytest

from rankstream.cli import main
from rankstream.evals import cbir
from rankstream.evals.cbir import (
    DATASETS,
    INITIALISATIONS,
    LARGE_SCALE_ROWS,
    RANKSVM_GRID,
    evaluate_cbir,
    learned,
    methods,
    paper_table2_imageclef,
    paper_table3_seconds,
)
from rankstream.ranking import learners
from rankstream.simulators.cbir_testbed import load_synthetic_testbed
from rankstream.simulators.digits import load_digits_testbed


@pytest.fixture(autouse=True)
def plot_in_tmp(monkeypatch, tmp_path):
    """Figures of runs without --plot go to a temporary report/ directory."""
    monkeypatch.chdir(tmp_path)


def run_json(capsys, argv: list[str]) -> dict:
    code = main(["eval", "cbir", *argv, "--json"])
    out = capsys.readouterr().out
    assert code == 0
    return json.loads(out)  # nothing but the object on stdout


def check_shape(result: dict) -> None:
    for key in ("map", "ndcg_at_50", "params", "val_map"):
        assert set(result[key]) == set(methods())
    for metric in ("map", "ndcg_at_50"):
        assert all(0.0 < value <= 1.0 for value in result[metric].values())
    for algo, grid in learners.grids().items():
        params = result["params"][algo]
        assert set(params) == {"init", *grid}
        assert params["init"] in INITIALISATIONS
        for name, values in grid.items():
            assert params[name] in values
    assert result["params"]["ranksvm"]["C"] in RANKSVM_GRID
    assert ":" in result["params"]["best_fea"]["feature"]
    # learning from feedback must beat the uniform combination even on a small run
    assert max(result["map"][m] for m in learned()) > result["map"]["uni_con"]


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
    for algo, grid in learners.grids().items():
        candidates = cbir._online_candidates(algo, scaler, X[:0], y[:0])  # no rows: the start
        n_points = int(np.prod([len(v) for v in grid.values()]))
        assert len(candidates) == len(INITIALISATIONS) * n_points
        for params, build in candidates:
            expected = np.ones(4) if params["init"] == "uni_con" else np.zeros(4)
            np.testing.assert_array_equal(build().weights, expected)


def test_table_output_names_every_method(capsys, tmp_path) -> None:
    main(["eval", "cbir", "--train-rows", "2000", "--max-queries", "5"])
    out = capsys.readouterr().out
    for method in methods():
        assert method in out
    assert "paper ImageCLEF mAP" in out and "0.6174" in out  # Table 2 beside the result
    assert (tmp_path / "report" / "cbir_digits.png").stat().st_size > 0


def test_seeds_are_summarised_with_paired_gains(capsys, tmp_path) -> None:
    argv = ["--seeds", "0", "1", "--train-rows", "2000", "--max-queries", "8"]
    output = run_json(capsys, [*argv, "--plot", str(tmp_path / "cbir.png")])
    runs, summary = output["runs"], output["summary"]
    assert [run["seed"] for run in runs] == summary["seeds"] == [0, 1]
    assert output["plot"] == str(tmp_path / "cbir.png") and (tmp_path / "cbir.png").stat().st_size
    for method in learned():
        gains = [(run["map"][method] / run["map"]["uni_con"] - 1) * 100 for run in runs]
        cell = summary["gain_over_uni_con_percent"][method]
        assert cell["mean"] == pytest.approx(sum(gains) / 2)
        assert cell["min"] == pytest.approx(min(gains)) and cell["std"] >= 0
        above = all(
            run["map"][method] > max(run["map"]["uni_con"], run["map"]["best_fea"]) for run in runs
        )
        assert summary["above_uni_con_and_best_fea_every_seed"][method] == above
    assert set(summary["map"]) == set(methods())


def test_unknown_dataset_is_rejected() -> None:
    assert {"digits", "synthetic", "fashion-mnist", "fashion-mnist-retrieved"} <= set(DATASETS)
    with pytest.raises(ValueError, match="unknown dataset"):
        evaluate_cbir("imagenet")


def test_fashion_mnist_cli_json_on_a_slice_of_the_real_files(capsys, monkeypatch, tmp_path):
    from rankstream.simulators.fashion_collection import load_fashion_mnist_testbed

    small = partial(load_fashion_mnist_testbed, limit=150, sample_size=120)
    monkeypatch.setitem(cbir.DATASETS, "fashion-mnist", small)
    monkeypatch.setenv("RANKSTREAM_DATA_DIR", str(tmp_path))
    argv = ["--dataset", "fashion-mnist", "--train-rows", "3000", "--max-queries", "12"]
    result = run_json(capsys, argv)
    assert result["dataset"] == "fashion-mnist"
    assert result["queries"] == {"train": 180, "val": 12, "test": 12}
    assert result["train_rows"] == 3000
    check_shape(result)
    assert result["paper"]["table2_imageclef_map"] == paper_table2_imageclef()
    assert result["paper"]["table3_seconds"] == paper_table3_seconds()
    seconds = result["train_cpu_seconds"]
    assert set(seconds) == set(methods()) and seconds["uni_con"] is None
    assert all(seconds[m] >= 0 for m in methods() if m != "uni_con")
    assert list((tmp_path / "collections").glob("fashion-mnist-*/hog.npy"))  # cached there


def test_the_command_offers_exactly_the_registered_datasets() -> None:
    from rankstream.cli import build_parser

    parser = build_parser(("eval", "cbir"))
    for name in DATASETS:
        assert parser.parse_args(["eval", "cbir", "--dataset", name]).dataset == name
    with pytest.raises(SystemExit):
        parser.parse_args(["eval", "cbir", "--dataset", "imagenet"])


def test_large_scale_trains_on_three_million_rows(monkeypatch) -> None:
    asked: dict = {}

    def loader(**options):
        asked.update(options)
        return load_digits_testbed(seed=0, train_rows=500, max_val_queries=6, max_test_queries=6)

    monkeypatch.setitem(cbir.DATASETS, "digits", loader)
    result = evaluate_cbir("digits", large_scale=True)
    assert asked["train_rows"] == LARGE_SCALE_ROWS == 3_000_000
    assert set(result["train_cpu_seconds"]) == set(methods())
    with pytest.raises(ValueError, match="large_scale"):
        evaluate_cbir("digits", large_scale=True, train_rows=1000)


def test_a_missing_data_package_is_a_clear_error(capsys, monkeypatch, tmp_path) -> None:
    from rankstream.simulators.fashion_collection import load_fashion_mnist_testbed
    from rankstream.simulators.fashion_mnist import DEBIAN_PACKAGE

    missing = partial(load_fashion_mnist_testbed, directory=tmp_path / "nowhere")
    monkeypatch.setitem(cbir.DATASETS, "fashion-mnist", missing)
    monkeypatch.setenv("RANKSTREAM_DATA_DIR", str(tmp_path))
    assert main(["eval", "cbir", "--dataset", "fashion-mnist", "--json"]) == 2
    captured = capsys.readouterr()
    assert captured.out == "" and f"apt-get install -y {DEBIAN_PACKAGE}" in captured.err


def test_the_papers_numbers_are_its_tables() -> None:
    """Table 2 (ImageCLEF test mAP) and Table 3 (seconds on 3M triplets) of the online-LTR
    paper, the learners' read from their specs: it reports none for AROW."""
    assert paper_table2_imageclef() == {
        "uni_con": 0.6174, "best_fea": 0.5777, "ranksvm": 0.6585, "opr": 0.6555,
        "opar1": 0.6556, "opar2": 0.6632, "ogdr": 0.6626, "arow": None,
    }  # fmt: skip
    assert paper_table3_seconds() == {
        "uni_con": None, "best_fea": None, "ranksvm": 4737.0, "opr": 1154.0,
        "opar1": 1370.0, "opar2": 1708.0, "ogdr": 2307.0, "arow": None,
    }  # fmt: skip
