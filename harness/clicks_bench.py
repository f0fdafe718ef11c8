"""`rankstream bench clicks`: click events/s through POST /v1/clicks to the click join's output.

Three kinds of run, alternating within each repeat:

* `http`: `rankstream serve --workers off` as its own process on the configured Kafka and
  Redis, the real click join (`workers.click_join`, default options) on a thread here;
* `producer`, the reference: the same join and services, a producer process instead of
  the server (below);
* `embedded`: the embedded default, `serve`'s app with its in-process workers and join
  (`create_app(workers=True)`, what `rankstream serve` runs without Kafka/Redis) on
  uvicorn on a thread of this process, on the process-wide embedded log and store (so
  its output can be read here).

Set-up (before the clock), per run on a fresh topic/key prefix: `impressions` impressions
(`candidates` results each, one phi table shared by all, query ids 0..n-1) written
straight to the impressions topic (one partition), as `/v1/rank`'s writer
(`producers.impression_producer`) logs a busy server's: up to `BATCH_MAX` impressions a message, cut
by `message_groups`, keyed by the message's first impression. Every impression gets two
clicks (at ranks 1-5 and 6-12, with position and dwell, as an engine reports them).

The load. HTTP: a JSON body of `batch` impressions' clicks (`{"impressions": [...]}`,
an engine's batch) is written once with `__N__` in its impression ids; `harness.http_load
--numbered` posts one per request number over `connections` keep-alive connections from
its own process; each is answered after the broker's acknowledgement. Reference, same
run: the very same Click rows handed to `ClickProducer` in a process of their own (one
message per request and partition, as the server writes them; one flush at the end), no HTTP: the
same processes, transport and join, so the HTTP figure can be read against what this
loaded machine does without HTTP.

Clock: from the first click sent until a consumer of the join's output (the triplets
topic) has read as many triplets as the clicks make (the join emits at its checkpoints,
so its checkpoint cadence, 1 s by default, is inside the figure). Sessions close in
event time: after the load one more impression, timed past every session's window, and
its session-over row close them all (`stream.click_window`), as a later click would.

Then counted at the output, not assumed: the triplets topic is read on to its end (a
second after the last expected triplet) and each click event's pairs
(`ranking.click_pairs`: the click over the skipped results above it and the next
unclicked one below) are looked for by (query id, winner, loser). A click
event is lost if one of its pairs is missing, duplicated if one appears more than once.
The kinds alternate within each repeat; medians over `repeats`, with the load average.
Topics and stored models of every run are deleted.
"""

from __future__ import annotations

import json
import multiprocessing
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np

from rankstream.harness.bench_options import ClicksBenchOptions
from rankstream.harness.ingest_bench import publish_unicon
from rankstream.harness.serve_process import ServeProcess, free_port
from rankstream.producers.click_producer import ClickProducer
from rankstream.producers.impression_producer import BATCH_MAX, message_groups
from rankstream.ranking.click_pairs import click_pairs
from rankstream.stream.click_schema import Click, Impression, encode_impressions, impression_key
from rankstream.stream.connect import open_store, open_transport
from rankstream.stream.schema import decode_triplets
from rankstream.stream.settings import Settings
from rankstream.workers.click_join import ClickJoin, JoinOptions

KINDS = ("http", "producer", "embedded")
CLICKS_PER_IMPRESSION = 2
_OUTPUT_DEADLINE_S = 300.0


def clicked_ranks(j: int) -> tuple[int, int]:
    """The two 1-based ranks clicked on the j-th impression of a batch."""
    return 1 + j % 5, 6 + j % 7


def impression_id(request: int, j: int) -> str:
    return f"bench-{request}-{j}"


def clicks_body(batch: int) -> bytes:
    """A /v1/clicks JSON body of `batch` impressions' clicks, `__N__` the request number."""
    entries = [
        {
            "impression_id": impression_id(0, j).replace("-0-", "-__N__-"),
            "clicks": [
                {"candidate_id": rank - 1, "position": rank, "dwell": 5.0 + rank}
                for rank in clicked_ranks(j)
            ],
        }
        for j in range(batch)
    ]
    return json.dumps({"impressions": entries}).encode()


def batch_clicks(request: int, batch: int) -> list[Click]:
    """The Click rows of request `request`'s body (what the server decodes from it)."""
    return [
        Click(impression_id(request, j), rank - 1, position=rank, dwell=5.0 + rank)
        for j in range(batch)
        for rank in clicked_ranks(j)
    ]


@dataclass
class ClicksRun:
    kind: str
    events: int
    seconds: float
    joined: int
    lost: int
    duplicated: int
    errors: int

    @property
    def events_per_s(self) -> float:
        return self.events / self.seconds


class _Bench:
    """One run's prefix, impressions, join and output check."""

    def __init__(self, settings: Settings, options: ClicksBenchOptions) -> None:
        self.options = options
        self.settings = replace(
            settings, topic_prefix=f"{settings.topic_prefix}.bench-clicks-{uuid.uuid4().hex[:8]}"
        )
        self.n = bench_impressions(options)
        self.requests = self.n // options.batch
        self.transport = open_transport(self.settings)
        self.t0 = time.time()
        rng = np.random.default_rng(0)
        self.phi = rng.random((options.candidates, self.settings.phi_dim), dtype=np.float32)

    def _impression(self, request: int, j: int, at: float) -> Impression:
        return Impression(
            impression_id=impression_id(request, j),
            time=at,
            model="uni_con",
            version=1,
            model_versions={"uni_con": 1},
            candidate_ids=np.arange(self.options.candidates, dtype=np.int64),
            phi=self.phi,
            query_id=request * self.options.batch + j,
        )

    def produce_impressions(self) -> None:
        s = self.settings
        self.transport.ensure_topics(
            {s.impressions_topic: 1, s.clicks_topic: 1, s.triplets_topic: 1,
             s.dead_letter_topic: 1}
        )  # fmt: skip
        producer = self.transport.producer()
        served = [
            self._impression(request, j, self.t0)
            for request in range(self.requests)
            for j in range(self.options.batch)
        ]
        for start in range(0, len(served), BATCH_MAX):
            for group in message_groups(served[start : start + BATCH_MAX]):
                producer.send(s.impressions_topic, encode_impressions(group),
                              key=impression_key(group[0].impression_id), partition=0)  # fmt: skip
        producer.flush()
        producer.close()

    def close_sessions(self) -> None:
        """An impression past every session's window and its session-over row."""
        s = self.settings
        closer = self._impression(self.requests, 0, self.t0 + s.click_window_s + 0.5)
        producer = self.transport.producer()
        producer.send(s.impressions_topic, encode_impressions([closer]),
                      key=impression_key(closer.impression_id))  # fmt: skip
        producer.flush()
        producer.close()
        clicks = self.transport.producer()
        ClickProducer(s, clicks).deliver([Click.no_click(closer.impression_id,
                                                         time=closer.time + 0.5)])  # fmt: skip
        clicks.close()

    def expected(self) -> Counter:
        """(query id, winner id, loser id) -> how often the join must emit it."""
        found: Counter = Counter()
        for j in range(self.options.batch):
            clicked = np.zeros(self.options.candidates, bool)
            clicked[[rank - 1 for rank in clicked_ranks(j)]] = True
            pairs = list(zip(click_pairs(clicked).winner.tolist(),
                             click_pairs(clicked).loser.tolist(), strict=True))  # fmt: skip
            for request in range(self.requests):
                qid = request * self.options.batch + j
                found.update((qid, winner, loser) for winner, loser in pairs)
        return found

    def output(self, total: int, deadline_s: float) -> tuple[Counter, float]:
        """Every (query id, p1 id, p2 id) on the triplets topic, with its count, read until
        `total` triplets came (or the deadline), then on to the topic's end; and the
        `time.perf_counter()` when the `total`-th came (or the deadline's)."""
        topic = self.settings.triplets_topic
        consumer = self.transport.consumer(None)
        consumer.assign([(topic, 0)])
        consumer.seek_to_beginning(topic, 0)
        found: Counter = Counter()
        deadline = time.monotonic() + deadline_s
        ends: dict[int, int] | None = None
        position, complete = 0, None
        while time.monotonic() < deadline:
            for message in consumer.poll(timeout_ms=100, max_records=1000):
                position = message.offset + 1
                block = decode_triplets(message.value, width=self.settings.phi_dim)
                found.update(zip(block.query_id.tolist(), block.p1_id.tolist(),
                                 block.p2_id.tolist(), strict=True))  # fmt: skip
            if ends is None and found.total() >= total:
                complete = time.perf_counter()
                time.sleep(1.0)  # a late duplicate would be there by now
                ends = self.transport.end_offsets(topic)
            if ends is not None and position >= ends.get(0, 0):
                break
        consumer.close()
        return found, complete if complete is not None else time.perf_counter()

    def clean(self) -> None:
        store = open_store(self.settings)
        for name in store.names():
            store.delete(name)
        store.close()
        self.transport.delete_topics(self.settings.topics)
        self.transport.close()


def _post(port: int, body: Path, options: ClicksBenchOptions, requests: int) -> dict:
    command = [
        sys.executable, "-m", "rankstream.harness.http_load", "--port", str(port),
        "--path", "/v1/clicks", "--body", str(body), "--rate", "1",
        "--connections", str(options.connections), "--numbered", str(requests),
        "--count-field", "clicks",
    ]  # fmt: skip
    done = subprocess.run(command, capture_output=True, text=True, timeout=3600)
    if done.returncode != 0:
        raise RuntimeError(f"http_load failed: {done.stderr[-2000:]}")
    return json.loads(done.stdout)


class _EmbeddedServer:
    """The embedded `rankstream serve` (its app with the in-process workers and join, on
    the process-wide embedded log and store) on uvicorn, on a thread of this process."""

    def __init__(self, settings: Settings) -> None:
        import uvicorn

        from rankstream.serve.app import create_app

        self.port = free_port()
        config = uvicorn.Config(create_app(settings, workers=True), host="127.0.0.1",
                                port=self.port, lifespan="on", access_log=False,
                                log_level="warning")  # fmt: skip
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(target=self.server.run, daemon=True)
        self.thread.start()

    def wait_ready(self, seconds: float = 60.0) -> None:
        deadline = time.monotonic() + seconds
        while not self.server.started:
            if time.monotonic() > deadline or not self.thread.is_alive():
                raise RuntimeError("the embedded server did not start")
            time.sleep(0.05)

    def stop(self) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=60)


def produce_clicks(settings: Settings, batch: int, requests: int, ready: Any, go: Any) -> None:
    """The reference's producer process: every request's clicks through `ClickProducer`
    (one message per partition a request touches, as the server writes them), one flush
    at the end."""
    transport = open_transport(settings)
    producer = transport.producer()
    clicks = ClickProducer(settings, producer, transport)
    bodies = [batch_clicks(request, batch) for request in range(requests)]
    ready.set()
    go.wait()
    for rows in bodies:
        clicks.send(rows)
    clicks.flush()
    producer.close()
    transport.close()


def run_once(
    settings: Settings, options: ClicksBenchOptions, kind: str, directory: Path
) -> ClicksRun:
    """One run of `kind`: "http" (a serve process, the join on a thread here, Kafka and
    Redis), "producer" (ClickProducer in a process of its own, same join and services) or
    "embedded" (the embedded serve, join included, in this process)."""
    if kind == "embedded":
        settings = replace(settings, kafka_bootstrap=None, redis_url=None, redis_password=None)
    bench = _Bench(settings, options)
    bench.produce_impressions()
    expected = bench.expected()
    join, thread, server, producing = None, None, None, None
    if kind != "embedded":
        join = ClickJoin(bench.settings, JoinOptions())
        thread = threading.Thread(target=join.run, daemon=True)
        thread.start()
    errors = 0
    try:
        if kind != "producer":
            publish_unicon(bench.settings)  # a server with a model is ready
            if kind == "http":
                server = ServeProcess(bench.settings, directory / "serve.log")
            else:
                server = _EmbeddedServer(bench.settings)
            body = directory / "clicks.json"
            body.write_bytes(clicks_body(options.batch))
            server.wait_ready()
        else:
            context = multiprocessing.get_context("spawn")
            ready, go = context.Event(), context.Event()
            producing = context.Process(target=produce_clicks, daemon=True,
                                        args=(bench.settings, options.batch, bench.requests,
                                              ready, go))  # fmt: skip
            producing.start()
            if not ready.wait(120):
                raise RuntimeError("the click producer did not start")
        started = time.perf_counter()
        if server is not None:
            errors = _post(server.port, body, options, bench.requests)["errors"]
        else:
            go.set()
            producing.join(timeout=3600)
            if producing.exitcode != 0:
                raise RuntimeError(f"the click producer exited with {producing.exitcode}")
        bench.close_sessions()
        found, complete = bench.output(sum(expected.values()), _OUTPUT_DEADLINE_S)
        seconds = complete - started
    finally:
        if server is not None:
            server.stop()
        if producing is not None and producing.is_alive():
            producing.terminate()
        if join is not None:
            join.stop()
            thread.join(timeout=60)
    bench.clean()
    joined, lost, duplicated = account(expected, found)
    return ClicksRun(kind, bench.n * CLICKS_PER_IMPRESSION, seconds, joined, lost, duplicated,
                     errors)  # fmt: skip


def account(expected: Counter, found: Counter) -> tuple[int, int, int]:
    """Click events (query id, winner) joined, lost (a pair of it missing) and duplicated
    (a pair of it more than once), from the pairs expected and found at the output."""
    events: dict[tuple[int, int], tuple[bool, bool]] = {}  # (qid, winner) -> (lost, dup)
    for key in expected.keys() | found.keys():
        want, got = expected.get(key, 0), found.get(key, 0)
        lost, dup = events.get(key[:2], (False, False))
        events[key[:2]] = (lost or got < want, dup or got > want)
    lost = sum(1 for missing, _ in events.values() if missing)
    duplicated = sum(1 for _, twice in events.values() if twice)
    return len(events) - lost, lost, duplicated


def run_clicks_bench(
    settings: Settings, options: ClicksBenchOptions, progress: Callable[[str], None] = print
) -> dict[str, Any]:
    directory = Path(tempfile.mkdtemp(prefix="bench-clicks-"))
    load_before = os.getloadavg()
    runs: dict[str, list[ClicksRun]] = {kind: [] for kind in KINDS}
    for repeat in range(options.repeats):
        for kind in KINDS:
            run = run_once(settings, options, kind, directory)
            runs[kind].append(run)
            progress(f"run {repeat + 1}/{options.repeats} {kind}: {run.events_per_s:,.0f} "
                     f"click events/s ({run.events} in {run.seconds:.2f} s), joined "
                     f"{run.joined}, lost {run.lost}, duplicated {run.duplicated}, "
                     f"errors {run.errors}")  # fmt: skip
    medians = {k: statistics.median(r.events_per_s for r in rs) for k, rs in runs.items()}
    every = [r for rs in runs.values() for r in rs]
    return {
        "impressions": bench_impressions(options),
        "events_per_run": bench_impressions(options) * CLICKS_PER_IMPRESSION,
        "batch": options.batch,
        "candidates": options.candidates,
        "connections": options.connections,
        "repeats": options.repeats,
        "events_per_s": round(medians["http"], 1),
        "reference_events_per_s": round(medians["producer"], 1),
        "http_to_reference": round(medians["http"] / medians["producer"], 3),
        "embedded_events_per_s": round(medians["embedded"], 1),
        "lost": sum(r.lost for r in every),
        "duplicated": sum(r.duplicated for r in every),
        "errors": sum(r.errors for r in every),
        "runs": {k: [dict(r.__dict__, events_per_s=round(r.events_per_s, 1)) for r in rs]
                 for k, rs in runs.items()},
        "loadavg_before": [round(x, 2) for x in load_before],
        "loadavg_after": [round(x, 2) for x in os.getloadavg()],
        "cpus": os.cpu_count(),
    }  # fmt: skip


def bench_impressions(options: ClicksBenchOptions) -> int:
    """Impressions per run: `impressions` rounded up to whole batches."""
    return -(-options.impressions // options.batch) * options.batch
