"""`rankstream bench learners --json`: one JSON object of the documented shape."""

from __future__ import annotations

import json

from rankstream.cli import main
from rankstream.ranking.learners import names as learner_names


def test_bench_learners_json_shape(capsys):
    assert main(["bench", "learners", "--triplets", "3000", "--repeats", "3", "--json"]) == 0
    out = capsys.readouterr().out
    report = json.loads(out)
    assert report["triplets"] == 3000
    assert report["dim"] == 36
    assert sorted(report["results"]) == sorted(learner_names())
    for result in report["results"].values():
        assert set(result) == {
            "seconds",
            "triplets_per_s",
            "cpu_seconds",
            "cpu_triplets_per_s",
            "compile_seconds",
        }
        assert result["seconds"] > 0 and result["compile_seconds"] >= 0
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
