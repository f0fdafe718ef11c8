"""`rankstream bench replay`: a recorded log through the four linear learners, whole process.

A log of N simulator-shaped triplets (`TripletGenerator.messages`: judged queries packed
`QUERIES_PER_MESSAGE` to a message by default, as the simulator sends them; recorded as
a recorder writes them)
is generated into a temporary directory first; then `rankstream replay DIR --direct --algo
opr,opar1,opar2,ogdr --json` runs as a subprocess and is timed from start to exit, so
interpreter start-up, imports, numba's cache load, Parquet reading and learning all
count. One warm-up run (populating numba's cache and the page cache) is reported apart;
`seconds` is the median of the timed runs, `cpu_seconds` the median CPU time (user +
system) of those processes: on a shared machine, the steadier measure.
"""

from __future__ import annotations

import argparse
import json
import sys
import time

from rankstream.commands._json_output import add_json_argument, print_json
from rankstream.ranking import learners
from rankstream.workers.batching import QUERIES_PER_MESSAGE

ALGOS = ",".join(learners.worker_defaults())  # the online worker's default learners
TOPIC = "bench.triplets"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--triplets", type=int, default=3_000_000, help="triplets in the log")
    parser.add_argument("--repeats", type=int, default=3, help="timed runs (median reported)")
    parser.add_argument(
        "--queries-per-message",
        type=int,
        default=QUERIES_PER_MESSAGE,
        help=f"judged queries per message (default {QUERIES_PER_MESSAGE}, as the simulator "
        "sends them)",
    )
    parser.add_argument("--seed", type=int, default=0, help="seed of the triplet generator")
    add_json_argument(parser)


def write_log(
    directory, n_triplets: int, queries_per_message: int, seed: int, on_rows=lambda n: None
) -> int:
    """Record a generated stream as `rankstream record` would; returns the bytes on disk."""
    from rankstream.harness.generator import TripletGenerator
    from rankstream.stream.recording import RecordingWriter
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


def replay_command(directory) -> list[str]:
    return [
        sys.executable,
        "-m",
        "rankstream",
        "replay",
        str(directory),
        "--direct",
        "--algo",
        ALGOS,
        "--json",
    ]


def timed_replay(directory, n_triplets: int) -> tuple[float, float]:
    """(wall, CPU) seconds of one whole `replay --direct` process; checks what it printed."""
    import resource
    import subprocess

    def children_cpu() -> float:
        usage = resource.getrusage(resource.RUSAGE_CHILDREN)
        return usage.ru_utime + usage.ru_stime

    cpu_start, start = children_cpu(), time.perf_counter()
    done = subprocess.run(replay_command(directory), capture_output=True, text=True)
    seconds, cpu_seconds = time.perf_counter() - start, children_cpu() - cpu_start
    if done.returncode != 0:
        raise RuntimeError(f"replay exited {done.returncode}: {done.stderr.strip()[-2000:]}")
    models = json.loads(done.stdout)
    seen = {name: m["triplets_seen"] for name, m in models.items()}
    if sorted(seen) != sorted(ALGOS.split(",")) or set(seen.values()) != {n_triplets}:
        raise RuntimeError(f"replay learned {seen}, expected {n_triplets} per model")
    return seconds, cpu_seconds


def run(args: argparse.Namespace) -> int:
    import statistics
    import tempfile
    from pathlib import Path

    from rich.console import Console
    from rich.progress import Progress

    from rankstream.commands._usage import UsageError

    if args.triplets < 1 or args.repeats < 1 or args.queries_per_message < 1:
        raise UsageError("--triplets, --repeats and --queries-per-message must be >= 1")
    err = Console(stderr=True)
    with tempfile.TemporaryDirectory(prefix="rankstream-bench-replay-") as tmp:
        directory = Path(tmp)
        with Progress(console=err, transient=True) as progress:
            task = progress.add_task(f"recording {args.triplets:,} triplets", total=args.triplets)
            log_bytes = write_log(
                directory,
                args.triplets,
                args.queries_per_message,
                args.seed,
                lambda n: progress.advance(task, n),
            )
        with err.status("warm-up run (numba cache, page cache)"):
            warmup, _ = timed_replay(directory, args.triplets)
        runs, cpu_runs = [], []
        with Progress(console=err, transient=True) as progress:
            task = progress.add_task("timed runs", total=args.repeats)
            for _ in range(args.repeats):
                wall, cpu = timed_replay(directory, args.triplets)
                runs.append(wall)
                cpu_runs.append(cpu)
                progress.advance(task)
    seconds = statistics.median(runs)
    report = {
        "triplets": args.triplets,
        "seconds": seconds,
        "triplets_per_s": args.triplets / seconds,
        "warmup_seconds": warmup,
        "runs": runs,
        "cpu_seconds": statistics.median(cpu_runs),
        "cpu_runs": cpu_runs,
        "log_bytes": log_bytes,
    }
    if args.json:
        print_json(report)
        return 0
    Console().print(
        f"replay --direct of {args.triplets:,} triplets through {ALGOS}: "
        f"{seconds:.3f} s median of {args.repeats} (whole process), "
        f"{args.triplets / seconds / 1e6:.2f} M triplets/s; CPU {report['cpu_seconds']:.3f} s "
        f"median; warm-up {warmup:.2f} s"
    )
    return 0
