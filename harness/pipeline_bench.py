"""End-to-end pipeline throughput: produce -> broker -> consume -> decode -> learn -> checkpoint.

What the clock covers, and what it does not:

* before the clock: a producer subprocess generates its triplet blocks (a pool of at
  most `POOL_TRIPLETS` generated triplets, re-used with fresh `seq` numbers so memory
  stays small at millions of triplets), the consumer connects and seeks, the numba
  kernels are compiled;
* inside the clock: Arrow encoding and sending (a real producer encodes), the broker,
  the online worker's fetch, decode, one `learn_many` per linear learner, its periodic
  checkpoints to the store, and the final checkpoint.

Producing runs in a separate process so it overlaps consuming without sharing a GIL.
Every run uses a fresh topic prefix (`{prefix}.bench-<id>`), so topics and models start
empty; when the run ends (or fails) its models are deleted from the store and, on
Kafka, its topics from the broker, so repeated benchmarks leave nothing behind.

Exactly-once is checked, not assumed: every consumed block's `seq` values are counted
against the produced 0..n-1, and every model's stored `triplets_seen` must equal n.
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
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from rankstream.harness.accounting import SeqCounter
from rankstream.stream.settings import Settings

if TYPE_CHECKING:
    from rankstream.stream.transport import Transport

POOL_TRIPLETS = 200_000
_READY_TIMEOUT_S = 600.0
_STALL_SECONDS = 30.0  # producer finished but nothing new arrived: report what was lost


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

    @property
    def triplets_per_s(self) -> float:
        return self.triplets / self.seconds if self.seconds > 0 else 0.0


def _produce(
    settings: Settings,
    n_triplets: int,
    block_size: int,
    seed: int,
    share: tuple[int, int],
    partitions: int,
    go: Any,
    status: Any,
) -> None:
    """Producer subprocess: generate, report "ready", wait for `go`, encode and send.

    `share` = (index, count): this producer sends blocks index, index+count, ... of the
    same deterministic sequence, so several producers together send every seq once.
    Every block but the last holds `block_size` triplets (the pool is whole blocks).
    `partitions` > 0 sends block i to partition i % partitions (even shares, known in
    advance: see `partition_shares`); 0 leaves the partition to the key (query_id).
    Reports ("ready", 0), then ("ok", seconds spent producing) or ("error", text).
    """
    from rankstream.stream.connect import open_transport
    from rankstream.stream.generator import TripletGenerator
    from rankstream.stream.schema import block_key, encode_triplets

    try:
        generator = TripletGenerator(seed=seed)
        pool_blocks = max(1, min(n_triplets, POOL_TRIPLETS) // block_size)  # whole blocks
        pool = list(generator.blocks(min(n_triplets, pool_blocks * block_size), block_size))
        blocks, start = [], 0
        while start < n_triplets:
            base = pool[len(blocks) % len(pool)]
            n = min(len(base), n_triplets - start)
            seq = np.arange(start, start + n, dtype=np.int64)
            blocks.append(dataclasses.replace(base.select(slice(0, n)), seq=seq))
            start += n
        transport = open_transport(settings)
        producer = transport.producer()
        status.put(("ready", 0))
        go.wait()
        started = time.perf_counter()
        index, count = share
        for i in range(index, len(blocks), count):
            partition = i % partitions if partitions > 0 else None
            producer.send(
                settings.triplets_topic,
                encode_triplets(blocks[i]),
                key=block_key(blocks[i]),
                partition=partition,
            )
        producer.flush()
        producer.close()
        transport.close()
        status.put(("ok", time.perf_counter() - started))
    except Exception as exc:  # reported to the parent, which raises it
        status.put(("error", repr(exc)))


def partition_shares(n_triplets: int, block_size: int, partitions: int) -> list[int]:
    """Triplets each partition receives when block i goes to partition i % partitions.

    Relies on `_produce`'s block sizes: `block_size` each, the last one the remainder.
    """
    if min(n_triplets, block_size, partitions) < 1:
        raise ValueError("n_triplets, block_size and partitions must be >= 1")
    sizes = [min(block_size, n_triplets - start) for start in range(0, n_triplets, block_size)]
    return [sum(sizes[p::partitions]) for p in range(partitions)]


def start_producers(
    settings: Settings, n_triplets: int, block_size: int, seed: int, count: int, partitions: int = 0
) -> tuple[Any, Any, list[Any]]:
    """Start `count` producers sharing the blocks; returns (go event, status queue, them).

    Spawned processes on a real broker; threads for the in-process embedded log. Each
    reports ("ready", 0) once generated, then sends when `go` is set (`expect_all`).
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
            args=(settings, n_triplets, block_size, seed, (i, count), partitions, go, status),
        )
        for i in range(count)
    ]
    for producer in producers:
        producer.start()
    return go, status, producers


def _warm_up(algos: tuple[str, ...]) -> None:
    """Pay one-time costs before the clock: numba compiles, pyarrow.compute's import."""
    from rankstream.stream.generator import TripletGenerator
    from rankstream.stream.schema import decode_triplets, encode_triplets
    from rankstream.workers.checkpoint import TrackedModel

    block = decode_triplets(encode_triplets(TripletGenerator(seed=1).block(8)))
    for algo in algos:
        TrackedModel(name=algo, algo=algo, scaler_rows=1).learn(
            "warm-up", 0, 0, block.phi1, block.phi2, block.y(), x=block.x()
        )


def run_once(
    settings: Settings,
    n_triplets: int,
    block_size: int,
    *,
    seed: int = 0,
    checkpoint_records: int = 100_000,
    producers: int = 1,
    progress: Callable[[int], None] | None = None,
) -> PipelineRun:
    """One timed run on a fresh topic prefix (see module doc for what is timed)."""
    from rankstream.stream.connect import open_store, open_transport

    if n_triplets < 1 or block_size < 1 or producers < 1:
        raise ValueError("n_triplets, block_size and producers must be >= 1")
    run_settings = dataclasses.replace(
        settings,
        topic_prefix=f"{settings.topic_prefix}.bench-{uuid.uuid4().hex[:10]}",
        metrics_port=None,
    )
    transport = open_transport(run_settings)
    store = open_store(run_settings)
    try:
        return _timed_run(
            run_settings,
            transport,
            store,
            n_triplets,
            block_size,
            seed,
            checkpoint_records,
            producers,
            progress,
        )
    finally:
        clean_up(run_settings, transport, store)


def _timed_run(
    run_settings: Settings,
    transport: Any,
    store: Any,
    n_triplets: int,
    block_size: int,
    seed: int,
    checkpoint_records: int,
    producers: int,
    progress: Callable[[int], None] | None,
) -> PipelineRun:
    from rankstream.workers.online import LINEAR_ALGOS, OnlineWorker, WorkerOptions

    transport.ensure_topics({run_settings.triplets_topic: 1, run_settings.dead_letter_topic: 1})
    _warm_up(LINEAR_ALGOS)

    go, status, producer_list = start_producers(
        run_settings, n_triplets, block_size, seed, producers
    )
    seqs = SeqCounter()
    options = WorkerOptions(
        algos=LINEAR_ALGOS,
        checkpoint_records=checkpoint_records,
        checkpoint_seconds=3600.0,
        poll_ms=100,
        max_poll_records=64,
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
    producer_seconds = max(expect_all(status, producer_list, "ok", 60.0))
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
        producer_seconds=producer_seconds,
        prefix=run_settings.topic_prefix,
    )


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


def expect_all(status: Any, producers: list[Any], what: str, timeout: float) -> list[float]:
    """Wait for every producer's next status and return their numbers; raise if not `what`."""
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
        values.append(float(detail))
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
