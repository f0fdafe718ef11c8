"""Scale-out throughput: k `rankstream worker online --group --per-partition` processes.

What the clock covers, and what it does not:

* before the clock: N seeded simulator-shaped triplets are produced over P partitions
  (`BENCH_QUERIES_PER_MESSAGE` judged queries a message, message i to partition i % P, by
  `rankstream.harness.pipeline_bench`'s producers, which report every partition's
  share), and the k worker processes start up (imports, connecting);
* inside the clock: from the first "partition assigned" log line of any worker
  until, for every algorithm, every stored `{algo}.p{k}` has `triplets_seen` equal to
  its partition's share: joins and their rebalances, fetch, decode, learning, the
  numba compile of each process, and checkpoints (every second, so the clock may
  overrun the last update by up to one checkpoint interval).

Workers produce and consume on separate topics per run (`{prefix}.scaleout-<id>`);
when the run ends (or fails) the workers are killed if still alive, and the run's
models and topics are deleted (`pipeline_bench.clean_up`).

Exactly-once is checked per partition after the workers' clean exit (their final
checkpoint): `lost` counts a partition model's shortfall against its partition's
share, `duplicated` its excess, the worst algorithm counting.
"""

from __future__ import annotations

import dataclasses
import subprocess
import tempfile
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rankstream.ranking import learners
from rankstream.stream.settings import Settings

BENCH_QUERIES_PER_MESSAGE = 7  # ~2,000 triplets a message, as the benchmark always sent
GROUP = "scaleout-bench"
BENCH_CHECKPOINT_SECONDS = 1.0
MIX_SECONDS = 5.0
# Long enough to outlast a first rebalance that finds no topic metadata yet (kafka-python
# "No partition metadata for topic"): the member rejoins once metadata arrives, but an
# idle timer shorter than that makes it exit with nothing assigned. Not timed.
EXIT_WHEN_IDLE = 15.0
_START_TIMEOUT_S = 180.0  # worker processes up and assigned
_STALL_SECONDS = 60.0  # no partition model advanced for this long: report what was lost
_EXIT_TIMEOUT_S = 120.0


@dataclass(frozen=True)
class ScaleoutRun:
    """One timed run of `workers` processes; `lost`/`duplicated` count triplets."""

    workers: int
    triplets: int
    seconds: float
    lost: int
    duplicated: int
    prefix: str = ""  # the run's topic/key prefix (its topics and models are deleted after)

    @property
    def triplets_per_s(self) -> float:
        return self.triplets / self.seconds if self.seconds > 0 else 0.0


def worker_command(group: str) -> list[str]:
    """The `rankstream worker online` command line of one scale-out worker."""
    from rankstream.harness.chaos import worker_argv
    from rankstream.workers.online_worker import WorkerOptions

    options = WorkerOptions(
        algos=learners.worker_defaults(),  # the online worker's default learners
        checkpoint_records=1_000_000,
        checkpoint_seconds=BENCH_CHECKPOINT_SECONDS,
        exit_when_idle=EXIT_WHEN_IDLE,
        group=group,
        per_partition=True,
        mix_seconds=MIX_SECONDS,
    )
    return [
        *worker_argv(options),
        "--group",
        group,
        "--per-partition",
        "--mix-seconds",
        str(options.mix_seconds),
    ]


def seen_by_partition(store: Any, partitions: int) -> dict[str, list[int]]:
    """Stored `triplets_seen` of every `{algo}.p{k}` (0 where none is stored yet)."""
    from rankstream.workers.scaleout import partition_model_name

    seen: dict[str, list[int]] = {}
    for algo in learners.worker_defaults():
        models = [store.load(partition_model_name(algo, p)) for p in range(partitions)]
        seen[algo] = [0 if m is None else int(m.meta["triplets_seen"]) for m in models]
    return seen


def lost_and_duplicated(seen: dict[str, list[int]], shares: list[int]) -> tuple[int, int]:
    """Worst algorithm's shortfall and excess against each partition's share."""
    lost = max(
        sum(max(0, want - got) for want, got in zip(shares, counts, strict=True))
        for counts in seen.values()
    )
    duplicated = max(
        sum(max(0, got - want) for want, got in zip(shares, counts, strict=True))
        for counts in seen.values()
    )
    return lost, duplicated


def run_once(
    settings: Settings,
    n_triplets: int,
    workers: int,
    *,
    partitions: int = 4,
    seed: int = 0,
    producers: int = 2,
    progress: Callable[[str], None] | None = None,
) -> ScaleoutRun:
    """One timed run of `workers` processes on a fresh topic prefix (see module doc)."""
    from rankstream.harness.pipeline_bench import StreamSpec, clean_up
    from rankstream.stream.connect import open_store, open_transport

    if not (settings.kafka_bootstrap and settings.redis_url):
        raise ValueError("the scale-out benchmark needs real Kafka and Redis: configure both")
    if min(n_triplets, workers, partitions, producers) < 1:
        raise ValueError("n_triplets, workers, partitions and producers must be >= 1")
    spec = StreamSpec(n_triplets, BENCH_QUERIES_PER_MESSAGE, seed=seed)
    run_settings = dataclasses.replace(
        settings,
        topic_prefix=f"{settings.topic_prefix}.scaleout-{uuid.uuid4().hex[:10]}",
        metrics_port=None,
    )
    say = progress or (lambda _text: None)
    transport = open_transport(run_settings)
    store = open_store(run_settings)
    try:
        transport.ensure_topics(
            {run_settings.triplets_topic: partitions, run_settings.dead_letter_topic: 1}
        )
        say(f"producing {n_triplets:,} triplets")
        shares = _produce(run_settings, spec, producers, partitions)
        with tempfile.TemporaryDirectory(prefix="rankstream-scaleout-") as log_dir:
            seconds, seen = _timed_run(run_settings, store, workers, shares, Path(log_dir), say)
        lost, duplicated = lost_and_duplicated(seen, shares)
        return ScaleoutRun(
            workers=workers,
            triplets=n_triplets,
            seconds=seconds,
            lost=lost,
            duplicated=duplicated,
            prefix=run_settings.topic_prefix,
        )
    finally:
        clean_up(run_settings, transport, store)


def _produce(run_settings: Settings, spec: Any, producers: int, partitions: int) -> list[int]:
    """Pre-produce the whole stream (untimed), wait until it is flushed; returns the
    triplets each partition received."""
    from rankstream.harness.pipeline_bench import expect_all, start_producers

    go, status, producer_list = start_producers(
        run_settings, spec, producers, partitions=partitions
    )
    expect_all(status, producer_list, "ready", _START_TIMEOUT_S)
    go.set()
    produced = expect_all(status, producer_list, "ok", _START_TIMEOUT_S)
    for producer in producer_list:
        producer.join(timeout=10)
    return [sum(p.partition_triplets[k] for p in produced) for k in range(partitions)]


def _timed_run(
    run_settings: Settings,
    store: Any,
    workers: int,
    shares: list[int],
    log_dir: Path,
    say: Callable[[str], None],
) -> tuple[float, dict[str, list[int]]]:
    """Start the workers, time them to full coverage, wait for their clean exit."""
    from rankstream.harness.chaos import worker_env

    command, env = worker_command(GROUP), worker_env(run_settings)
    logs = [log_dir / f"worker-{i}.log" for i in range(workers)]
    procs: list[subprocess.Popen[bytes]] = []
    try:
        for log in logs:
            with log.open("wb") as err:
                procs.append(
                    subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL, stderr=err)
                )
        say(f"{workers} worker(s) starting")
        _wait_for_assignment(procs, logs)
        started = time.perf_counter()
        total = sum(shares)
        seen = seen_by_partition(store, len(shares))
        last_change, last_seen = time.monotonic(), seen
        while not _covered(seen, shares):
            if seen != last_seen:
                last_change, last_seen = time.monotonic(), seen
                say(f"{workers} worker(s): {min(map(sum, seen.values())):,}/{total:,}")
            if time.monotonic() - last_change > _STALL_SECONDS or _all_exited(procs):
                break  # counted as lost below
            time.sleep(0.1)
            seen = seen_by_partition(store, len(shares))
        seconds = time.perf_counter() - started
        say(f"{workers} worker(s): waiting for their clean exit")
        for proc, log in zip(procs, logs, strict=True):
            code = proc.wait(timeout=_EXIT_TIMEOUT_S)
            if code != 0:
                raise RuntimeError(f"a scale-out worker exited with {code}: {_tail(log)}")
        return seconds, seen_by_partition(store, len(shares))
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()


def _wait_for_assignment(procs: list[subprocess.Popen[bytes]], logs: list[Path]) -> None:
    """Block until any worker logs its first partition assignment; raise if one dies."""
    deadline = time.monotonic() + _START_TIMEOUT_S
    while not any(b'"partition assigned"' in log.read_bytes() for log in logs):
        for proc, log in zip(procs, logs, strict=True):
            if proc.poll() is not None:
                raise RuntimeError(
                    f"a scale-out worker exited with {proc.returncode} "
                    f"before any assignment: {_tail(log)}"
                )
        if time.monotonic() > deadline:
            raise RuntimeError(f"no partition assigned within {_START_TIMEOUT_S:.0f} s")
        time.sleep(0.05)


def _covered(seen: dict[str, list[int]], shares: list[int]) -> bool:
    return all(
        got >= want for counts in seen.values() for want, got in zip(shares, counts, strict=True)
    )


def _all_exited(procs: list[subprocess.Popen[bytes]]) -> bool:
    return all(proc.poll() is not None for proc in procs)


def _tail(log: Path, chars: int = 2000) -> str:
    return log.read_bytes()[-chars:].decode(errors="replace")
