"""The replay benchmark (`rankstream bench replay`): a recorded log through the four
linear learners, whole process.

A log of N simulator-shaped triplets (`TripletGenerator.messages`: judged queries packed
`QUERIES_PER_MESSAGE` to a message by default, as the simulator sends them; recorded as
a recorder writes them) is generated into a temporary directory first; then `rankstream
replay DIR --direct --algo opr,opar1,opar2,ogdr --json` runs as a subprocess and is timed
from start to exit, so interpreter start-up, imports, the kernels' load, Parquet reading
and learning all count.

Two kernels, alternating in the same run: the ahead-of-time build (`ranking.aot`, built
here first if need be, its build time reported apart; `seconds`) and numba's JIT, the
reference (`jit_seconds`); the bench fails if their weights differ. One warm-up run of
each (numba's cache, the page cache) is reported apart; `seconds` is the median of the
timed runs, `cpu_seconds` the median CPU time (user + system) of those processes: on a
shared machine, the steadier measure. Without a C compiler there is no build: only the
JIT runs and `aot_note` says so.
"""

from __future__ import annotations

import json
import sys
import time
from dataclasses import dataclass

from rankstream.producers.feedback_batching import QUERIES_PER_MESSAGE
from rankstream.ranking import learners
from rankstream.workers.options import option

TOPIC = "bench.triplets"


@dataclass(frozen=True)
class ReplayBenchOptions:
    """What `rankstream bench replay` can be told."""

    triplets: int = option(3_000_000, "triplets in the log")
    repeats: int = option(3, "timed runs (median reported)")
    queries_per_message: int = option(
        QUERIES_PER_MESSAGE, "judged queries per message, as the simulator sends them"
    )
    seed: int = option(0, "seed of the triplet generator")

    def __post_init__(self) -> None:
        if min(self.triplets, self.repeats, self.queries_per_message) < 1:
            raise ValueError("triplets, repeats and queries_per_message must be >= 1")


def write_log(
    directory, n_triplets: int, queries_per_message: int, seed: int, on_rows=lambda n: None
) -> int:
    """Record a generated stream as `rankstream record` would; returns the bytes on disk."""
    from rankstream.harness.generator import TripletGenerator
    from rankstream.stream.recording_writer import RecordingWriter
    from rankstream.stream.schema import block_key, encode_triplets
    from rankstream.stream.transport import Message

    writer = RecordingWriter(directory, "triplets", TOPIC)
    start_ms = 1_700_000_000_000
    blocks = TripletGenerator(seed=seed).messages(n_triplets, queries_per_message)
    for offset, block in enumerate(blocks):
        writer.add(
            Message(TOPIC, 0, offset, block_key(block), encode_triplets(block), start_ms + offset)
        )
        if writer.pending_messages >= 500:
            writer.commit()
        on_rows(len(block))
    writer.commit()
    return sum(p.stat().st_size for p in directory.rglob("*.parquet"))


def replay_command(directory, kernels: str) -> list[str]:
    return [
        sys.executable,
        "-m",
        "rankstream",
        "replay",
        str(directory),
        "--direct",
        "--algo",
        ",".join(learners.worker_defaults()),  # the online worker's default learners
        "--kernels",
        kernels,
        "--json",
    ]


def timed_replay(directory, n_triplets: int, kernels: str) -> tuple[float, float, dict]:
    """(wall, CPU) seconds of one whole `replay --direct` process and its weights'
    digests; checks that every model learned every triplet."""
    import resource
    import subprocess

    def children_cpu() -> float:
        usage = resource.getrusage(resource.RUSAGE_CHILDREN)
        return usage.ru_utime + usage.ru_stime

    cpu_start, start = children_cpu(), time.perf_counter()
    done = subprocess.run(replay_command(directory, kernels), capture_output=True, text=True)
    seconds, cpu_seconds = time.perf_counter() - start, children_cpu() - cpu_start
    if done.returncode != 0:
        raise RuntimeError(f"replay exited {done.returncode}: {done.stderr.strip()[-2000:]}")
    models = json.loads(done.stdout)
    seen = {name: m["triplets_seen"] for name, m in models.items()}
    if sorted(seen) != sorted(learners.worker_defaults()) or set(seen.values()) != {n_triplets}:
        raise RuntimeError(f"replay learned {seen}, expected {n_triplets} per model")
    return seconds, cpu_seconds, {name: m["weights_sha256"] for name, m in models.items()}


def ensure_aot_build(status) -> tuple[float | None, str | None]:
    """Build the ahead-of-time kernel unless built: (build seconds or None, why not)."""
    from rankstream.ranking import aot

    if aot.built_path().exists():
        return None, None
    started = time.perf_counter()
    with status("building the ahead-of-time kernel (once per machine and source)"):
        try:
            aot.build()
        except Exception as exc:  # no C compiler: the JIT alone is measured
            return None, f"no ahead-of-time build ({exc}); every run used the JIT"
    return time.perf_counter() - started, None


def timed_runs(directory, n_triplets: int, repeats: int, modes, advance=lambda: None):
    """(wall runs, CPU runs) per kernel mode, the modes' order alternating run by run;
    the kernels must leave the same weights."""
    runs: dict[str, list[float]] = {mode: [] for mode in modes}
    cpu_runs: dict[str, list[float]] = {mode: [] for mode in modes}
    weights: dict[str, dict] = {}
    for repeat in range(repeats):
        for mode in modes if repeat % 2 == 0 else modes[::-1]:  # alternate the order
            wall, cpu, weights[mode] = timed_replay(directory, n_triplets, mode)
            runs[mode].append(wall)
            cpu_runs[mode].append(cpu)
            advance()
    if len(set(map(json.dumps, weights.values()))) != 1:
        raise RuntimeError(f"the kernels disagree: weights {weights}")
    return runs, cpu_runs


def replay_report(
    triplets: int, queries_per_message: int, modes, runs, cpu_runs, warmup, log_bytes
) -> dict:
    """`seconds` is the first mode's (the build when there is one), `jit_*` the JIT's."""
    import statistics

    first = modes[0]
    seconds = statistics.median(runs[first])
    return {
        "triplets": triplets,
        "queries_per_message": queries_per_message,
        "kernels": first,
        "seconds": seconds,
        "triplets_per_s": triplets / seconds,
        "warmup_seconds": warmup[first],
        "runs": runs[first],
        "cpu_seconds": statistics.median(cpu_runs[first]),
        "cpu_runs": cpu_runs[first],
        "jit_seconds": statistics.median(runs["jit"]),
        "jit_runs": runs["jit"],
        "jit_cpu_seconds": statistics.median(cpu_runs["jit"]),
        "speedup_over_jit": statistics.median(runs["jit"]) / seconds,
        "log_bytes": log_bytes,
    }
