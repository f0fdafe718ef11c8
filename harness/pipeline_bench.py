"""End-to-end pipeline throughput: produce -> broker -> consume -> decode -> learn -> checkpoint.

The stream is the simulator's (`harness.generator.TripletGenerator.messages`: judged
queries of ~283 triplets over 50 images each, `queries_per_message` to a message), sent
in one wire version per run; `compare` alternates versions 1 and 2 in the same invocation,
so both see the same broker, Redis and machine load.

What the clock covers, and what it does not:

* before the clock: a producer subprocess generates its messages' blocks (a pool of
  at most `POOL_TRIPLETS` generated triplets, re-used with fresh `seq` numbers so
  memory stays small at millions of triplets), the consumer connects and seeks, the
  numba kernels are compiled;
* inside the clock: Arrow encoding and sending (a real producer encodes), the broker,
  the online worker's fetch, decode, learning by the four linear learners, its
  periodic checkpoints to the store, and the final checkpoint.

Producing runs in a separate process so it overlaps consuming without sharing a GIL.
Every run uses a fresh topic prefix (`{prefix}.bench-<id>`), so topics and models start
empty; when the run ends (or fails) its models are deleted from the store and, on
Kafka, its topics from the broker, so repeated benchmarks leave nothing behind.

Exactly-once is checked, not assumed: every consumed block's `seq` values are counted
against the produced 0..n-1, and every model's stored `triplets_seen` must equal n.
Producers also report the bytes they sent, hence bytes per triplet of each version.
"""

from __future__ import annotations

import dataclasses
import multiprocessing as mp
import queue
import statistics
import threading
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from rankstream.harness.accounting import SeqCounter
from rankstream.producers.feedback_batching import QUERIES_PER_MESSAGE
from rankstream.stream.settings import Settings

if TYPE_CHECKING:
    from rankstream.ranking.triplets import TripletBlock
    from rankstream.stream.transport import Transport

POOL_TRIPLETS = 200_000
VERSIONS = (1, 2)  # the wire versions `compare` alternates
_READY_TIMEOUT_S = 600.0
_STALL_SECONDS = 30.0  # producer finished but nothing new arrived: report what was lost


@dataclass(frozen=True)
class StreamSpec:
    """What the producers send: `triplets` simulator-shaped triplets, whole judged
    queries packed `queries_per_message` to a message, encoded in wire `version`."""

    triplets: int
    queries_per_message: int = QUERIES_PER_MESSAGE  # as the simulator sends them
    version: int = 2
    seed: int = 0

    def __post_init__(self) -> None:
        if self.triplets < 1 or self.queries_per_message < 1:
            raise ValueError("triplets and queries_per_message must be >= 1")
        if self.version not in VERSIONS:
            raise ValueError(f"version must be one of {VERSIONS}, got {self.version}")


def stream_messages(spec: StreamSpec) -> list[TripletBlock]:
    """The spec's messages, in order, with seq 0..triplets-1 (a pool re-used with fresh
    seq: the blocks share the pool's tables)."""
    from rankstream.harness.generator import TripletGenerator

    generator = TripletGenerator(seed=spec.seed)
    pool = list(generator.messages(min(spec.triplets, POOL_TRIPLETS), spec.queries_per_message))
    blocks: list[TripletBlock] = []
    start = 0
    while start < spec.triplets:
        base = pool[len(blocks) % len(pool)]
        n = min(len(base), spec.triplets - start)
        block = base if n == len(base) else base.select(slice(0, n)).compact()
        blocks.append(dataclasses.replace(block, seq=np.arange(start, start + n, dtype=np.int64)))
        start += n
    return blocks


@dataclass(frozen=True)
class Produced:
    """What one producer sent: seconds, bytes, and triplets per partition it chose."""

    seconds: float
    bytes: int
    partition_triplets: dict[int, int] = field(default_factory=dict)


@dataclass(frozen=True)
class PipelineRun:
    """One timed run; `lost`/`duplicated` count triplets (seq values and model counts)."""

    triplets: int
    seconds: float
    lost: int
    duplicated: int
    checkpoints: int
    producer_seconds: float  # slowest producer's encode + send + flush (who is the bottleneck)
    prefix: str = ""  # the run's topic/key prefix (its topics and models are deleted after)
    version: int = 2
    bytes_sent: int = 0  # message values, all producers

    @property
    def bytes_per_triplet(self) -> float:
        return self.bytes_sent / self.triplets if self.triplets else 0.0

    @property
    def triplets_per_s(self) -> float:
        return self.triplets / self.seconds if self.seconds > 0 else 0.0


def _produce(
    settings: Settings,
    spec: StreamSpec,
    share: tuple[int, int],
    partitions: int,
    go: Any,
    status: Any,
) -> None:
    """Producer subprocess: generate, report "ready", wait for `go`, encode and send.

    `share` = (index, count): this producer sends messages index, index+count, ... of
    the spec's deterministic sequence, so several producers together send every seq
    once. `partitions` > 0 sends message i to partition i % partitions; 0 leaves the
    partition to the key (query_id). Reports ("ready", None), then ("ok", Produced) or
    ("error", text).
    """
    from rankstream.stream.connect import open_transport
    from rankstream.stream.schema import block_key, encode_triplets

    try:
        blocks = stream_messages(spec)
        transport = open_transport(settings)
        producer = transport.producer()
        status.put(("ready", None))
        go.wait()
        started = time.perf_counter()
        index, count = share
        sent, per_partition = 0, dict.fromkeys(range(partitions), 0)
        for i in range(index, len(blocks), count):
            partition = i % partitions if partitions > 0 else None
            value = encode_triplets(blocks[i], version=spec.version)
            producer.send(
                settings.triplets_topic, value, key=block_key(blocks[i]), partition=partition
            )
            sent += len(value)
            if partition is not None:
                per_partition[partition] += len(blocks[i])
        producer.flush()
        producer.close()
        transport.close()
        status.put(("ok", Produced(time.perf_counter() - started, sent, per_partition)))
    except Exception as exc:  # reported to the parent, which raises it
        status.put(("error", repr(exc)))


def start_producers(
    settings: Settings, spec: StreamSpec, count: int, partitions: int = 0
) -> tuple[Any, Any, list[Any]]:
    """Start `count` producers sharing the messages; returns (go event, status queue, them).

    Spawned processes on a real broker; threads for the in-process embedded log. Each
    reports ("ready", None) once generated, then sends when `go` is set (`expect_all`).
    """
    if settings.kafka_bootstrap:
        ctx: Any = mp.get_context("spawn")
        go, status, make = ctx.Event(), ctx.Queue(), ctx.Process
    else:
        go, status, make = threading.Event(), queue.Queue(), threading.Thread
    producers = [
        make(
            target=_produce,
            daemon=True,
            name=f"bench-producer-{i}",
            args=(settings, spec, (i, count), partitions, go, status),
        )
        for i in range(count)
    ]
    for producer in producers:
        producer.start()
    return go, status, producers


def _warm_up(algos: tuple[str, ...]) -> None:
    """Pay one-time costs before the clock: numba compiles, pyarrow.compute's import."""
    from rankstream.harness.generator import TripletGenerator
    from rankstream.stream.schema import decode_triplets, encode_triplets
    from rankstream.workers.checkpoint import TrackedModel

    block = decode_triplets(encode_triplets(TripletGenerator(seed=1).query_block()))
    for algo in algos:
        TrackedModel(name=algo, algo=algo, scaler_rows=1).learn(
            "warm-up", 0, 0, block.phi1, block.phi2, block.y(), x=block.x()
        )


def run_once(
    settings: Settings,
    spec: StreamSpec,
    *,
    checkpoint_records: int = 100_000,
    producers: int = 1,
    progress: Callable[[int], None] | None = None,
) -> PipelineRun:
    """One timed run on a fresh topic prefix (see module doc for what is timed)."""
    from rankstream.stream.connect import open_store, open_transport

    if producers < 1:
        raise ValueError("producers must be >= 1")
    run_settings = dataclasses.replace(
        settings,
        topic_prefix=f"{settings.topic_prefix}.bench-{uuid.uuid4().hex[:10]}",
        metrics_port=None,
    )
    transport = open_transport(run_settings)
    store = open_store(run_settings)
    try:
        return _timed_run(
            run_settings, transport, store, spec, checkpoint_records, producers, progress
        )
    finally:
        clean_up(run_settings, transport, store)


def _timed_run(
    run_settings: Settings,
    transport: Any,
    store: Any,
    spec: StreamSpec,
    checkpoint_records: int,
    producers: int,
    progress: Callable[[int], None] | None,
) -> PipelineRun:
    from rankstream.workers.online_worker import LINEAR_ALGOS, OnlineWorker, WorkerOptions

    n_triplets = spec.triplets
    transport.ensure_topics({run_settings.triplets_topic: 1, run_settings.dead_letter_topic: 1})
    _warm_up(LINEAR_ALGOS)

    go, status, producer_list = start_producers(run_settings, spec, producers)
    seqs = SeqCounter()
    options = WorkerOptions(
        algos=LINEAR_ALGOS,
        checkpoint_records=checkpoint_records,
        checkpoint_seconds=3600.0,
        poll_ms=100,
        max_poll_records=500,
    )
    worker = OnlineWorker(run_settings, options, transport=transport, store=store, on_block=seqs)
    worker.start()
    expect_all(status, producer_list, "ready", _READY_TIMEOUT_S)
    last_records, last_change = 0, time.monotonic()

    def finished(w: OnlineWorker) -> bool:
        nonlocal last_records, last_change
        now = time.monotonic()
        if w.counters.records != last_records:
            last_records, last_change = w.counters.records, now
            if progress is not None:
                progress(last_records)
        producing = any(p.is_alive() for p in producer_list)
        stalled = not producing and now - last_change > _STALL_SECONDS
        return w.counters.records >= n_triplets or stalled

    started = time.perf_counter()
    go.set()
    exit_code = worker.run(until=finished)
    seconds = time.perf_counter() - started
    produced: list[Produced] = expect_all(status, producer_list, "ok", 60.0)
    for producer in producer_list:
        producer.join(timeout=10)
    if exit_code != 0:
        raise RuntimeError(f"online worker exited with {exit_code} during the benchmark")

    lost, duplicated = seqs.lost_and_duplicated(n_triplets)
    seen = []
    for name in LINEAR_ALGOS:
        stored = store.load(name)
        seen.append(0 if stored is None else int(stored.meta["triplets_seen"]))
    lost = max(lost, n_triplets - min(seen))
    duplicated = max(duplicated, max(seen) - n_triplets)
    return PipelineRun(
        triplets=n_triplets,
        seconds=seconds,
        lost=lost,
        duplicated=duplicated,
        checkpoints=worker.stats.checkpoints,
        producer_seconds=max(p.seconds for p in produced),
        prefix=run_settings.topic_prefix,
        version=spec.version,
        bytes_sent=sum(p.bytes for p in produced),
    )


def alternating(
    arms: dict[Any, Callable[[int], PipelineRun]],
    repeats: int,
    on_run: Callable[[int, Any, PipelineRun], None] | None = None,
) -> dict[Any, list[PipelineRun]]:
    """`repeats` runs of every arm (arm(repeat) runs with seed `repeat`), the order
    reversed every other repeat (a, b, b, a, ...) so that no arm always runs first."""
    runs: dict[Any, list[PipelineRun]] = {key: [] for key in arms}
    for repeat in range(repeats):
        for key in list(arms) if repeat % 2 == 0 else list(arms)[::-1]:
            run = arms[key](repeat)
            runs[key].append(run)
            if on_run is not None:
                on_run(repeat, key, run)
    return runs


def compare(
    settings: Settings,
    triplets: int,
    *,
    repeats: int = 3,
    queries_per_message: int = QUERIES_PER_MESSAGE,
    checkpoint_records: int = 100_000,
    producers: int = 2,
    on_run: Callable[[int, PipelineRun], None] | None = None,
    progress: Callable[[int, int, int], None] | None = None,
) -> dict[int, list[PipelineRun]]:
    """`repeats` runs of each wire version, alternating (1, 2, 2, 1, 1, 2, ...);
    {version: its runs}. Run r uses seed r, the same stream for both versions."""

    def arm(version: int) -> Callable[[int], PipelineRun]:
        def run(repeat: int) -> PipelineRun:
            return run_once(
                settings,
                StreamSpec(triplets, queries_per_message, version, seed=repeat),
                checkpoint_records=checkpoint_records,
                producers=producers,
                progress=None if progress is None else (lambda n: progress(repeat, version, n)),
            )

        return run

    report = None if on_run is None else (lambda repeat, _, run: on_run(repeat, run))
    return alternating({v: arm(v) for v in VERSIONS}, repeats, report)


def compare_kafka(
    settings: Settings,
    other_bootstrap: str,
    triplets: int,
    *,
    repeats: int = 3,
    queries_per_message: int = QUERIES_PER_MESSAGE,
    checkpoint_records: int = 100_000,
    producers: int = 2,
    on_run: Callable[[int, str, PipelineRun], None] | None = None,
) -> dict[str, list[PipelineRun]]:
    """Wire v2 on the configured Kafka and on `other_bootstrap` (e.g. a 3-node cluster
    against one node), alternating, run r with seed r on both; the same Redis, so only
    the brokers differ. {"configured" | "other": its runs}."""

    def arm(target: Settings) -> Callable[[int], PipelineRun]:
        def run(repeat: int) -> PipelineRun:
            spec = StreamSpec(triplets, queries_per_message, VERSIONS[-1], seed=repeat)
            return run_once(
                target, spec, checkpoint_records=checkpoint_records, producers=producers
            )

        return run

    other = dataclasses.replace(settings, kafka_bootstrap=other_bootstrap)
    return alternating({"configured": arm(settings), "other": arm(other)}, repeats, on_run)


def kafka_comparison_summary(
    runs: dict[str, list[PipelineRun]], bootstraps: dict[str, str]
) -> dict:
    """Medians on each Kafka and the other's throughput as a ratio of the configured's."""
    per_kafka = {}
    for name, name_runs in runs.items():
        summary = summarize_runs(name_runs)
        summary["kafka_bootstrap"] = bootstraps[name]
        summary["brokers"] = len(bootstraps[name].split(","))
        summary["runs_triplets_per_s"] = [round(r.triplets_per_s, 1) for r in name_runs]
        per_kafka[name] = summary
    configured, other = per_kafka["configured"], per_kafka["other"]
    return {
        "wire_version": VERSIONS[-1],
        "repeats": len(runs["configured"]),
        **per_kafka,
        "ratio_other_to_configured": round(
            other["triplets_per_s"] / configured["triplets_per_s"], 3
        ),
        "lost": configured["lost"] + other["lost"],
        "duplicated": configured["duplicated"] + other["duplicated"],
    }


def comparison_summary(runs: dict[int, list[PipelineRun]], queries_per_message: int) -> dict:
    """Medians per version, bytes per triplet, and v2's ratios to v1 (same invocation)."""
    per_version = {}
    for version, version_runs in runs.items():
        summary = summarize_runs(version_runs)
        summary["bytes_per_triplet"] = round(
            statistics.median(r.bytes_per_triplet for r in version_runs), 2
        )
        summary["runs_triplets_per_s"] = [round(r.triplets_per_s, 1) for r in version_runs]
        per_version[f"v{version}"] = summary
    v1, v2 = per_version["v1"], per_version["v2"]
    return {
        "triplets": v1["triplets"],
        "queries_per_message": queries_per_message,
        "repeats": len(runs[1]),
        **per_version,
        "speedup_v2_over_v1": round(v2["triplets_per_s"] / v1["triplets_per_s"], 3),
        "bytes_ratio_v2_to_v1": round(v2["bytes_per_triplet"] / v1["bytes_per_triplet"], 4),
        "lost": v1["lost"] + v2["lost"],
        "duplicated": v1["duplicated"] + v2["duplicated"],
    }


def clean_up(run_settings: Settings, transport: Transport, store: Any) -> None:
    """Delete the run's models and topics; close what run_once opened."""
    try:
        for name in store.names():  # the run's own prefix: every model is the run's
            store.delete(name)
        transport.delete_topics([run_settings.triplets_topic, run_settings.dead_letter_topic])
    finally:
        try:
            store.close()
        finally:
            transport.close()


def expect_all(status: Any, producers: list[Any], what: str, timeout: float) -> list[Any]:
    """Wait for every producer's next status and return their details; raise if not `what`."""
    values = []
    for _ in producers:
        try:
            kind, detail = status.get(timeout=timeout)
        except queue.Empty:
            kind, detail = "error", f"no {what!r} within {timeout:.0f} s"
        if kind != what:
            for producer in producers:
                if isinstance(producer, mp.Process):
                    producer.kill()
            raise RuntimeError(f"benchmark producer failed: {detail}")
        values.append(detail)
    return values


def summarize_runs(runs: Sequence[Any]) -> dict[str, float | int]:
    """Median seconds over runs; lost/duplicated summed over runs (all must be 0).

    Serves any run with triplets, seconds, lost and duplicated (this module's
    `PipelineRun`, `rankstream.harness.scaleout_bench.ScaleoutRun`); a median `checkpoints`
    is added when the runs count them.
    """
    median_seconds = statistics.median(r.seconds for r in runs)
    summary: dict[str, float | int] = {
        "triplets": runs[0].triplets,
        "seconds": round(median_seconds, 3),
        "triplets_per_s": round(runs[0].triplets / median_seconds, 1),
        "lost": sum(r.lost for r in runs),
        "duplicated": sum(r.duplicated for r in runs),
    }
    if all(hasattr(r, "checkpoints") for r in runs):
        summary["checkpoints"] = int(statistics.median(r.checkpoints for r in runs))
    return summary
