"""deploy/image/healthcheck.py, the containers' health check: healthy means progress.

Unit tests of its decision on /metrics bodies, and one run against a real /metrics
endpoint (prometheus_client's, as the workers serve it). The engine test
(tests/test_compose_engine.py) sees it pass inside the containers.
"""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry, Counter, Gauge, start_http_server

SCRIPT = Path(__file__).resolve().parents[1] / "deploy" / "image" / "healthcheck.py"
spec = importlib.util.spec_from_file_location("rankstream_healthcheck", SCRIPT)
assert spec and spec.loader
healthcheck = importlib.util.module_from_spec(spec)
spec.loader.exec_module(healthcheck)

NOW = 1_800_000_000.0
OPTIONS = dict(
    max_poll_age=60.0, stall_seconds=120.0, progress=healthcheck.PROGRESS, require_progress=False
)


def metrics(poll: float | None = None, lag: float | None = None, consumed: float = 0) -> str:
    lines = [
        "# HELP rankstream_triplets_consumed_total Triplets.",
        "# TYPE rankstream_triplets_consumed_total counter",
        f"rankstream_triplets_consumed_total {consumed}",
    ]
    if poll is not None:
        lines.append(f"rankstream_worker_last_poll_timestamp_seconds {poll}")
    if lag is not None:
        lines += [
            f'rankstream_consumer_lag_records{{topic="rankstream.triplets",partition="0"}} {lag}',
            f'rankstream_consumer_lag_records{{topic="rankstream.triplets",partition="1"}} {lag}',
        ]
    return "\n".join(lines) + "\n"


def look(text: str, state: dict, now: float = NOW, **options) -> tuple[bool, str, dict]:
    return healthcheck.check(healthcheck.parse_metrics(text), state, now, **{**OPTIONS, **options})


def test_parses_labelled_samples_and_skips_comments() -> None:
    samples = healthcheck.parse_metrics(metrics(poll=NOW, lag=5, consumed=7))
    assert samples[healthcheck.LAG] == [5.0, 5.0]
    assert samples["rankstream_triplets_consumed_total"] == [7.0]
    assert "#" not in "".join(samples)


def test_a_recent_poll_is_healthy_and_a_stale_one_is_not() -> None:
    assert look(metrics(poll=NOW - 5, lag=0), {})[0]
    healthy, reason, _ = look(metrics(poll=NOW - 90, lag=0), {})
    assert not healthy and "last poll 90 s ago" in reason


def test_idle_with_no_lag_is_healthy_however_long() -> None:
    _, _, state = look(metrics(poll=NOW, lag=0, consumed=10), {})
    healthy, _, _ = look(metrics(poll=NOW + 3600, lag=0, consumed=10), state, now=NOW + 3600)
    assert healthy


def test_lag_without_progress_is_unhealthy_once_stalled() -> None:
    _, _, state = look(metrics(poll=NOW, lag=50, consumed=10), {})
    assert look(metrics(poll=NOW + 60, lag=50, consumed=10), state, now=NOW + 60)[0]
    healthy, reason, _ = look(metrics(poll=NOW + 200, lag=50, consumed=10), state, now=NOW + 200)
    assert not healthy and "lag 100 records" in reason and "no progress for 200 s" in reason


def test_lag_with_progress_is_healthy() -> None:
    state: dict = {}
    for step in range(5):
        now = NOW + 100 * step
        healthy, _, state = look(metrics(poll=now, lag=1000, consumed=step * 10), state, now=now)
        assert healthy


def test_a_producer_must_progress_whatever_the_lag() -> None:
    options = dict(progress=("rankstream_triplets_produced_total",), require_progress=True)
    text = "rankstream_triplets_produced_total 5\n"
    _, _, state = look(text, {}, **options)
    assert not look(text, state, now=NOW + 200, **options)[0]
    assert look("rankstream_triplets_produced_total 6\n", state, now=NOW + 200, **options)[0]


def test_missing_metrics_are_reported_not_guessed() -> None:
    healthy, reason, _ = look(metrics(), {})
    assert healthy
    assert healthcheck.LAST_POLL in reason and "poll age not checked" in reason


@pytest.fixture
def endpoint() -> tuple[str, Gauge, Counter]:
    registry = CollectorRegistry()
    poll = Gauge("rankstream_worker_last_poll_timestamp_seconds", "poll", registry=registry)
    consumed = Counter("rankstream_triplets_consumed_total", "consumed", registry=registry)
    server, thread = start_http_server(0, addr="127.0.0.1", registry=registry)
    try:
        yield f"http://127.0.0.1:{server.server_port}/metrics", poll, consumed
    finally:
        server.shutdown()
        thread.join(timeout=5)


def _run(url: str, state: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(SCRIPT), "--url", url, "--state", str(state)],
        capture_output=True, text=True, timeout=30,
    )  # fmt: skip


def test_the_script_reads_a_real_metrics_endpoint(endpoint, tmp_path: Path) -> None:
    url, poll, consumed = endpoint
    poll.set_to_current_time()
    consumed.inc(3)
    result = _run(url, tmp_path / "state.json")
    assert result.returncode == 0 and result.stdout.startswith("healthy: "), result.stdout
    assert json.loads((tmp_path / "state.json").read_text())["progress"] == 3
    poll.set(1.0)  # a poll long ago
    result = _run(url, tmp_path / "state.json")
    assert result.returncode == 1 and result.stdout.startswith("unhealthy: last poll")


def test_the_script_fails_when_metrics_do_not_answer(tmp_path: Path) -> None:
    result = _run("http://127.0.0.1:9/metrics", tmp_path / "state.json")
    assert result.returncode == 1 and "does not answer" in result.stdout
