"""`rankstream eval mkl --json` on a small configuration: one attribute, few pairs."""

from __future__ import annotations

import json

import pytest

import rankstream.evals.mkl as mkl_eval
import rankstream.simulators.pubfig_features as pubfig_features
from rankstream.cli import main
from rankstream.evals.mkl import FEATURES, METHODS, PAPER_TABLE1, MKLEvalConfig, paper_accuracy
from rankstream.simulators.pubfig import resolve_root

pytestmark = pytest.mark.skipif(
    not (resolve_root() / "data.mat").is_file(), reason="PubFig data not available"
)


def test_eval_mkl_json_shape(monkeypatch, tmp_path, capsys):
    # Small face descriptors keep the test to seconds; the eval code path is unchanged.
    small = pubfig_features.FaceFeatureParams(
        size=32, lbp_grid=(2, 2), hog_cells=(4, 4), gabor_frequencies=(0.2,), gabor_grid=(2, 2)
    )
    real = pubfig_features.face_features
    monkeypatch.setattr(
        mkl_eval,  # the name the eval calls
        "face_features",
        lambda paths, cache_dir, params=None, progress=None: real(paths, None, small, progress),
    )
    monkeypatch.setenv("RANKSTREAM_DATA_DIR", str(tmp_path))
    argv = ["eval", "mkl", "--dataset", "pubfig", "--attributes", "male", "--json"]
    argv += ["--max-train-pairs", "400", "--max-test-pairs", "2000"]
    argv += ["--cv-folds", "2", "--cv-max-pairs", "150"]
    assert main(argv) == 0
    report = json.loads(capsys.readouterr().out)
    assert set(report) >= {"dataset", "attributes", "mean", "fit_seconds", "predict_pairs_per_s"}
    assert report["dataset"] == "pubfig"
    assert list(report["attributes"]) == ["Male"]
    row = report["attributes"]["Male"]
    assert set(row) == set(METHODS) == set(report["mean"])
    assert all(0.0 <= accuracy <= 100.0 for accuracy in row.values())
    assert row["rankmkl"] > 70.0 and row["gist"] > 70.0  # far above chance (50%)
    assert report["fit_seconds"] > 0 and report["predict_pairs_per_s"] > 0
    assert all(w >= 0 for w in report["rankmkl_weights"]["Male"].values())
    # RankMKL's bandwidth: a shared scale or each single feature's choice; lam is tuned too.
    chosen, config = report["selected"]["Male"], MKLEvalConfig()
    per_group = [chosen[f]["gamma_scale"] for f in FEATURES]
    assert chosen["rankmkl"]["gamma_scale"] in (*config.gamma_scales, per_group)
    assert chosen["rankmkl"]["lam"] in config.lam_grid


def test_paper_table_is_complete():
    assert set(PAPER_TABLE1) == set(METHODS)
    assert all(len(row) == 11 for row in PAPER_TABLE1.values())
    assert paper_accuracy("rankmkl", "Male") == 87.88
    assert paper_accuracy("rankmkl", "unknown") is None


def test_bad_attribute_fails_cleanly(capsys):
    assert main(["eval", "mkl", "--attributes", "Bald", "--json"]) == 2
    captured = capsys.readouterr()
    assert captured.out == "" and "Bald" in captured.err
