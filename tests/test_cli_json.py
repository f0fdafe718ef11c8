"""`--json` on the commands that gained it: one JSON object on stdout and nothing else there.

Each runs on the embedded transport and store (no services); `services up --json` is in
tests/test_services.py, on the real services.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import urllib.request

import pytest

from rankstream.cli import main


@pytest.fixture
def embedded_env(monkeypatch, embedded_settings):
    """RANKSTREAM_* for the embedded default, a fresh topic prefix and a private data dir."""
    for name in [n for n in os.environ if n.startswith("RANKSTREAM_")]:
        monkeypatch.delenv(name)
    monkeypatch.setenv("RANKSTREAM_TOPIC_PREFIX", embedded_settings.topic_prefix)
    monkeypatch.setenv("RANKSTREAM_DATA_DIR", embedded_settings.data_dir)
    return embedded_settings


def one_json_object(text: str) -> dict:
    """stdout holds exactly one line, one JSON object."""
    lines = text.splitlines()
    assert len(lines) == 1, text
    report = json.loads(lines[0])
    assert isinstance(report, dict)
    return report


@pytest.mark.parametrize(
    "words, worker",
    [(("worker", "online"), "online"), (("worker", "batch"), "batch")],
    ids=["online", "batch"],
)
def test_a_worker_reports_its_run_at_exit(embedded_env, capsys, words, worker):
    assert main([*words, "--exit-when-idle", "0.2", "--json"]) == 0
    report = one_json_object(capsys.readouterr().out)
    assert report["worker"] == worker and report["records"] == 0 and not report["fenced"]
    assert {"messages", "checkpoints", "dead_letters"} <= set(report)


def test_the_evaluator_reports_its_scores_and_run_at_exit(embedded_env, capsys):
    assert main(["worker", "evaluator", "--exit-when-idle", "0.2", "--json"]) == 0
    report = one_json_object(capsys.readouterr().out)
    assert report["worker"] == "evaluator" and report["champion"] == "uni_con"
    assert report["queries_evaluated"] == 0 and "rolling_ndcg" in report


def test_demo_json_is_its_report(embedded_env, tmp_path, capsys):
    out = tmp_path / "report"
    argv = ["demo", "--out", str(out), "--images", "4000", "--queries", "4", "--refit-every", "100"]
    assert main([*argv, "--json"]) == 0
    report = one_json_object(capsys.readouterr().out)
    assert report == json.loads((out / "report.json").read_text())
    assert report["queries"] == 4 and set(report["plots"]) == {"ndcg_at_50", "learning_time"}


def test_services_down_json_names_what_it_stopped(tmp_path, capsys):
    assert main(["services", "down", "--root", str(tmp_path), "--json"]) == 0
    assert one_json_object(capsys.readouterr().out) == {"root": str(tmp_path), "stopped": []}


def test_serve_json_says_where_it_listens_once_it_does(embedded_env):
    env = dict(os.environ)
    server = subprocess.Popen(
        [sys.executable, "-m", "rankstream", "serve", "--port", "0", "--workers", "off", "--json"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
    )  # fmt: skip
    try:
        line = server.stdout.readline()
        report = json.loads(line)
        assert report["host"] == "127.0.0.1" and report["port"] > 0
        assert report["url"] == f"http://127.0.0.1:{report['port']}"
        assert (report["transport"], report["store"], report["workers"]) == (
            "embedded", "embedded", False,
        )  # fmt: skip
        with urllib.request.urlopen(report["url"] + "/healthz", timeout=10) as answer:
            assert answer.status == 200
    finally:
        server.terminate()
        out, _err = server.communicate(timeout=30)
    # uvicorn stops gracefully, then re-raises the SIGTERM it caught
    assert server.returncode in (0, -signal.SIGTERM) and out == ""  # nothing after the object


def test_print_json_writes_strict_json_with_non_finite_numbers_as_null(capsys) -> None:
    import math

    from rankstream.commands._json_output import print_json

    print_json({"ndcg": math.nan, "rows": [1.5, -math.inf, {"x": math.inf}], "n": 3})
    out = capsys.readouterr().out
    assert "NaN" not in out and "Infinity" not in out
    assert json.loads(out) == {"ndcg": None, "rows": [1.5, None, {"x": None}], "n": 3}
