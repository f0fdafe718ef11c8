"""`rankstream bench learners --json`: one JSON object of the documented shape."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest

from rankstream.cli import main
from rankstream.harness import learner_c_reference as _c_reference
from rankstream.harness.learners_bench import make_stream
from rankstream.ranking.learners import CLICK_HYPERPARAMETERS, hyperparameters, learner
from rankstream.ranking.learners import names as learner_names


def test_bench_learners_json_shape(capsys):
    assert main(["bench", "learners", "--triplets", "3000", "--repeats", "3", "--json"]) == 0
    out = capsys.readouterr().out
    report = json.loads(out)
    assert report["triplets"] == 3000
    assert report["dim"] == 36 and report["images"] == 20_000
    assert sorted(report["results"]) == sorted(learner_names())
    with_c = shutil.which("cc") is not None
    assert report["c_reference"].startswith("cc -O3 -march=native -ffast-math") == with_c
    for result in report["results"].values():
        assert set(result) == {
            "seconds",
            "triplets_per_s",
            "cpu_seconds",
            "cpu_triplets_per_s",
            "compile_seconds",
            "c_seconds",
            "c_triplets_per_s",
            "ratio_to_c",
            "cpu_ratio_to_c",
        }
        assert result["seconds"] > 0 and result["compile_seconds"] >= 0
        if with_c:  # every built-in learner has a C reference of its rule
            assert result["ratio_to_c"] == pytest.approx(result["c_seconds"] / result["seconds"])
        else:
            assert result["ratio_to_c"] is None
        assert abs(result["triplets_per_s"] * result["seconds"] - 3000) < 1e-6 * 3000
        assert result["cpu_seconds"] >= 0
        if result["cpu_seconds"] > 0:  # a clock tick may be coarser than 3000 rows
            rate = result["cpu_triplets_per_s"]
            assert abs(rate * result["cpu_seconds"] - 3000) < 1e-6 * 3000
        else:
            assert result["cpu_triplets_per_s"] is None


def test_bench_learners_table_and_bad_arguments(capsys):
    assert main(["bench", "learners", "--triplets", "2000", "--repeats", "1"]) == 0
    assert "opar1" in capsys.readouterr().out
    assert main(["bench", "learners", "--triplets", "0"]) == 2


def test_the_stream_is_shaped_like_the_simulators() -> None:
    phi, p1, p2, y = make_stream(1000, seed=0)
    assert phi.dtype == np.float32 and p1.dtype == p2.dtype == np.int32
    query = np.arange(1000) // 123
    assert (p1 // 50 == query).all() and (p2 // 50 == query).all()  # its own candidates
    assert (p1 != p2).all() and set(np.unique(y)) == {-1.0, 1.0}


@pytest.mark.skipif(shutil.which("cc") is None, reason="no C compiler")
@pytest.mark.parametrize("algo", learner_names())
def test_the_c_reference_computes_each_rule(algo: str) -> None:
    """Its weights equal a plain Python loop of the rule (the tests' reference loop)."""
    from test_online import reference_loop

    reference = _c_reference.build()
    assert not isinstance(reference, str), reference
    # linked without -ffast-math: loading it left the process's float state alone
    assert np.nextafter(0.0, 1.0) * 1.0 > 0.0
    phi, p1, p2, y = make_stream(400, seed=1)
    hyper = hyperparameters()  # the registry's defaults, given to both sides
    weights, updates = reference.learner(learner(algo), hyper)(phi, p1, p2, y)
    x = np.subtract(phi[p1], phi[p2], dtype=np.float64)
    clicks = {h.name for h in CLICK_HYPERPARAMETERS}
    rules = {k: v for k, v in hyper.items() if k not in clicks}  # judged rows: the papers' rules
    expected, _, expected_updates = reference_loop(algo, x, y, **rules)
    np.testing.assert_allclose(weights, expected, rtol=1e-9, atol=1e-9)
    assert updates == expected_updates > 0


def test_the_c_reference_is_skipped_with_a_note_without_a_compiler(monkeypatch) -> None:
    monkeypatch.setattr(shutil, "which", lambda name: None)
    assert "no C compiler" in _c_reference.build()
