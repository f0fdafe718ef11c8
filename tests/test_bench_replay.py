"""`rankstream bench replay --json`: one JSON object of the documented shape."""

from __future__ import annotations

import json

from rankstream.cli import main


def test_bench_replay_json_shape(capsys):
    assert main(["bench", "replay", "--triplets", "5000", "--repeats", "3", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["triplets"] == 5000
    assert len(report["runs"]) == 3 and report["seconds"] == sorted(report["runs"])[1]
    assert abs(report["triplets_per_s"] * report["seconds"] - 5000) < 1e-6 * 5000
    assert report["warmup_seconds"] > 0
    # simulator-shaped: each judged image's 144 phi bytes once, far below the pair layout's
    # 2 x 144 a triplet, and at least one query's 50 images
    assert 50 * 144 < report["log_bytes"] < 5000 * 2 * 144 / 4
    assert len(report["cpu_runs"]) == 3 and report["cpu_seconds"] == sorted(report["cpu_runs"])[1]
    assert report["cpu_seconds"] > 0


def test_bench_replay_rejects_bad_arguments():
    assert main(["bench", "replay", "--triplets", "0"]) == 2
