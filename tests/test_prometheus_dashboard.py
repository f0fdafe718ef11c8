"""Every Grafana panel's query returns data from a real Prometheus scraping the pipeline.

The harness's Prometheus (Debian package) scrapes the natively-run simulator, online
worker, batch worker, evaluator and click join (fed a paced stream of impressions and
clicks), each a `rankstream` subprocess on the session's
Kafka and Redis with its own metrics port, registered with `add_scrape_target`. The
interleaving race's panels get their data from a second simulator whose users click
(`simulate --feedback clicks:navigational`, every impression interleaved): it drafts each
impression against the champion of the moment, read from the store, with the
`Interleaver` serve drafts with. Impressions drafted against a fixed Uni-Con would turn
stale the moment the judged race switches (the join skips them) and leave those panels
empty: a premise on the data, not on timing. A few
undecodable messages go to the triplets topic so the dead-letter panel has something
to show. The test then evaluates each panel's PromQL (Grafana's `$__rate_interval` set
to a fixed window) through `/api/v1/query` until every one returns at least one finite
sample, bounded in time. Grafana itself is not needed: it only forwards these queries.
"""

from __future__ import annotations

import json
import math
import os
import re
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from test_grafana import dashboard_queries

from rankstream.harness.services.process import free_port
from rankstream.stream.settings import Settings

WINDOW = "30s"  # replaces $__rate_interval: 15 scrapes of the harness's 2 s interval
DATA_DEADLINE_S = 150.0
STOP_TIMEOUT_S = 15.0

# job (as in deploy/docker-compose.yml) -> `rankstream` arguments; small and quick.
PIPELINE: dict[str, list[str]] = {
    "online-1": ["worker", "online", "--checkpoint-seconds", "1", "--scaler-rows", "500"],
    "batch": [
        "worker", "batch", "--reservoir", "1000", "--refit-records", "2000",
        "--refit-seconds", "5", "--mkl-pairs", "300",
    ],
    "evaluator": ["worker", "evaluator", "--window", "50"],
    "click-join": ["worker", "click-join"],
    "simulator": [
        "simulate", "--serving", "champion", "--images", "20000",
        "--triplets", "100000000", "--rate", "1500",
    ],
    "clicking-users": [
        "simulate", "--feedback", "clicks:navigational", "--serving", "champion",
        "--images", "20000", "--queries", "100000000", "--rate", "60",
    ],
}  # fmt: skip
# job -> its own environment on top of the shared one: the clicking users interleave every
# impression. Each simulator builds its collection in a data directory of its own (both
# build the same one at the same time).
JOB_ENV: dict[str, dict[str, str]] = {
    "clicking-users": {"RANKSTREAM_INTERLEAVING_SHARE": "1"},
}


@dataclass
class Worker:
    job: str
    process: subprocess.Popen[bytes]
    log: Path

    def tail(self, lines: int = 15) -> str:
        text = self.log.read_text(errors="replace").splitlines()[-lines:]
        return f"--- {self.job} (exit {self.process.poll()}) ---\n" + "\n".join(text)


def _stop(workers: list[Worker]) -> None:
    """SIGTERM each (they checkpoint and exit), SIGKILL whatever outlives the timeout."""
    for worker in workers:
        if worker.process.poll() is None:
            os.killpg(worker.process.pid, signal.SIGTERM)
    deadline = time.monotonic() + STOP_TIMEOUT_S
    for worker in workers:
        try:
            worker.process.wait(timeout=max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            os.killpg(worker.process.pid, signal.SIGKILL)
            worker.process.wait()


@pytest.fixture
def pipeline(services, tmp_path: Path) -> Iterator[tuple[Settings, list[Worker]]]:
    """The pipeline's processes, scraped by the session's Prometheus; stopped afterwards."""
    prefix = f"dash{uuid.uuid4().hex[:10]}"
    env = {k: v for k, v in os.environ.items() if not k.startswith("RANKSTREAM_")}
    env.update(
        RANKSTREAM_KAFKA_BOOTSTRAP=services.kafka_bootstrap,
        RANKSTREAM_REDIS_URL=services.redis_url,
        RANKSTREAM_PROMETHEUS_URL=services.prometheus_url,
        RANKSTREAM_TOPIC_PREFIX=prefix,
        RANKSTREAM_DATA_DIR=str(tmp_path / "data"),
        RANKSTREAM_METRICS_HOST="127.0.0.1",
    )
    settings = Settings(
        kafka_bootstrap=services.kafka_bootstrap, redis_url=services.redis_url,
        topic_prefix=prefix, data_dir=str(tmp_path / "data"),
    )  # fmt: skip
    workers: list[Worker] = []
    try:
        for job, arguments in PIPELINE.items():
            port = free_port()
            log = tmp_path / f"{job}.log"
            with log.open("wb") as out:
                own = dict(JOB_ENV.get(job, {}))
                if arguments[0] == "simulate":  # its collection's cache, its own
                    own["RANKSTREAM_DATA_DIR"] = str(tmp_path / job)
                process = subprocess.Popen(
                    [sys.executable, "-m", "rankstream", *arguments],
                    env={**env, **own, "RANKSTREAM_METRICS_PORT": str(port)},
                    stdout=out, stderr=subprocess.STDOUT, start_new_session=True,
                )  # fmt: skip
            workers.append(Worker(f"{job}-{prefix}", process, log))
            services.manager.add_scrape_target(f"{job}-{prefix}", f"127.0.0.1:{port}")
        yield settings, workers
    finally:
        _stop(workers)


def _send_undecodable_triplets(settings: Settings, count: int = 3) -> None:
    """Bytes that are not an Arrow block: the online worker dead-letters each one."""
    from rankstream.stream.connect import open_transport

    transport = open_transport(settings)
    try:
        transport.ensure_topics({settings.triplets_topic: 1})
        producer = transport.producer()
        for i in range(count):
            producer.send(settings.triplets_topic, b"not an arrow block %d" % i, key=b"bad")
        producer.flush(timeout=30)
        producer.close()
    finally:
        transport.close()


def _start_click_stream(settings: Settings, seconds: float):  # type: ignore[no-untyped-def]
    """Impressions and their clicks for the click join, paced over `seconds` (its rates
    stay defined while the test waits), with an unknown impression's click early on."""
    from rankstream.harness.chaos_join import JoinChaosPlan, StreamProducer, join_stream
    from rankstream.stream.click_schema import Click, encode_clicks
    from rankstream.stream.connect import open_transport

    transport = open_transport(settings)
    try:
        transport.ensure_topics({settings.impressions_topic: 1, settings.clicks_topic: 1})
    finally:
        transport.close()
    messages = join_stream(JoinChaosPlan(impressions=2_000, kills=0), settings.phi_dim)
    unknown = encode_clicks([Click("f" * 32, 5, time=1.0)])  # long before any impression
    messages.insert(4, ("click", b"f" * 32, unknown))
    producer = StreamProducer(settings, messages, rate=len(messages) / seconds)
    producer.start()
    return producer


def _query(prometheus_url: str, expr: str) -> list[dict]:
    url = f"{prometheus_url}/api/v1/query?" + urllib.parse.urlencode({"query": expr})
    try:
        with urllib.request.urlopen(url, timeout=10) as reply:
            body = json.load(reply)
    except urllib.error.HTTPError as exc:  # 400 carries Prometheus' parse error
        raise AssertionError(f"{expr}: {exc.read().decode(errors='replace')}") from exc
    assert body["status"] == "success", f"{expr}: {body}"
    assert body["data"]["resultType"] == "vector"
    return body["data"]["result"]


def job_matcher(jobs: list[str]) -> str:
    assert all(re.fullmatch(r"[A-Za-z0-9-]+", job) for job in jobs)  # no regex specials
    return 'job=~"' + "|".join(jobs) + '"'


def scoped(expr: str, jobs: list[str]) -> str:
    """expr reading only these jobs' series: a job matcher on every rankstream selector.

    The session's Prometheus may scrape other tests' processes too; their data must not
    make a panel pass. Dashboard selectors are plain `name` or `name{...}`.
    """
    matcher = job_matcher(jobs)

    def add(match: re.Match[str]) -> str:
        name, labels = match.group(1), match.group(2)
        return f"{name}{{{matcher}, " if labels else f"{name}{{{matcher}}}"

    return re.sub(r"\b(rankstream_[a-z0-9_]+)(\{)?", add, expr)


def _finite(samples: list[dict]) -> list[dict]:
    return [s for s in samples if math.isfinite(float(s["value"][1]))]


def test_every_dashboard_query_returns_data(services, pipeline) -> None:
    settings, workers = pipeline
    queries = dashboard_queries(window=WINDOW)
    _send_undecodable_triplets(settings)
    clicks = _start_click_stream(settings, DATA_DEADLINE_S)
    try:
        _wait_for_every_panel(services, workers, queries)
    finally:
        clicks.stop()


def _wait_for_every_panel(services: Any, workers: list[Worker], queries: list) -> None:
    """Until every (panel, query) returns a finite sample from these workers' series."""
    jobs = [w.job for w in workers]
    queries = [(title, ref, scoped(expr, jobs)) for title, ref, expr in queries]
    empty: list[str] = []
    deadline = time.monotonic() + DATA_DEADLINE_S
    while True:
        crashed = [w for w in workers if w.process.poll() is not None]
        assert not crashed, "\n".join(w.tail() for w in crashed)
        up = _query(services.prometheus_url, f"up{{{job_matcher(jobs)}}} == 1")
        scraped = {s["metric"]["job"] for s in up}
        empty = [
            f"{title} [{ref}]: {expr}"
            for title, ref, expr in queries
            if not _finite(_query(services.prometheus_url, expr))
        ]
        if scraped == set(jobs) and not empty:
            break
        if time.monotonic() > deadline:
            logs = "\n".join(w.tail() for w in workers)
            pytest.fail(
                f"after {DATA_DEADLINE_S:.0f} s, scraped {sorted(scraped)} of {jobs}; "
                f"no data from:\n  " + "\n  ".join(empty) + "\n" + logs
            )
        time.sleep(3)
