"""`rankstream bench clicks`: its HTTP body is the very clicks of its reference, its
output accounting finds lost and duplicated events, and a tiny run on the real services
prints the JSON with every click event joined once."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections import Counter

import pytest

from rankstream.cli import main
from rankstream.harness.clicks_bench import account, batch_clicks, clicks_body
from rankstream.serve.bodies import clicks_from_json
from rankstream.stream.settings import Settings


def test_the_http_body_holds_the_reference_s_clicks() -> None:
    body = clicks_body(7)
    for request in (0, 12):
        numbered = body.replace(b"__N__", str(request).encode())
        assert clicks_from_json(numbered) == batch_clicks(request, 7)


def test_accounting_finds_lost_and_duplicated_click_events() -> None:
    expected = Counter({(1, 3, 0): 1, (1, 3, 1): 1, (1, 5, 4): 1, (2, 0, 1): 1})
    assert account(expected, Counter(expected)) == (3, 0, 0)
    found = Counter({(1, 3, 0): 1, (1, 5, 4): 2, (2, 0, 1): 1, (9, 9, 9): 1})
    assert account(expected, found) == (3, 1, 2)  # (1, 3) lost; (1, 5) twice; (9, 9) stray


def test_bench_clicks_refuses_to_run_without_services(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("RANKSTREAM_KAFKA_BOOTSTRAP", raising=False)
    monkeypatch.delenv("RANKSTREAM_REDIS_URL", raising=False)
    assert main(["bench", "clicks", "--impressions", "10", "--json"]) == 2


def test_bench_clicks_json_on_real_services(service_settings: Settings) -> None:
    env = dict(
        os.environ,
        RANKSTREAM_KAFKA_BOOTSTRAP=service_settings.kafka_bootstrap or "",
        RANKSTREAM_REDIS_URL=service_settings.redis_url or "",
        RANKSTREAM_TOPIC_PREFIX=service_settings.topic_prefix,
        RANKSTREAM_DATA_DIR=service_settings.data_dir,
    )
    command = [
        sys.executable,
        "-m",
        "rankstream.cli",
        "bench",
        "clicks",
        "--json",
        "--impressions",
        "300",
        "--batch",
        "20",
        "--repeats",
        "1",
        "--connections",
        "2",
    ]
    out = subprocess.run(command, env=env, capture_output=True, timeout=600, check=True).stdout
    result = json.loads(out)
    assert (result["impressions"], result["events_per_run"], result["batch"]) == (300, 600, 20)
    assert (result["lost"], result["duplicated"], result["errors"]) == (0, 0, 0)
    for kind in ("http", "producer", "embedded"):
        (run,) = result["runs"][kind]
        assert (run["events"], run["joined"], run["lost"], run["duplicated"]) == (600, 600, 0, 0)
        assert run["events_per_s"] == pytest.approx(600 / run["seconds"], rel=0.01)
    assert result["events_per_s"] == result["runs"]["http"][0]["events_per_s"]
    assert result["http_to_reference"] == pytest.approx(
        result["events_per_s"] / result["reference_events_per_s"], rel=0.01
    )
