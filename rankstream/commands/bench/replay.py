"""`rankstream bench replay`: a recorded log through the four linear learners, whole
process (the benchmark: `harness.replay_bench`)."""

from __future__ import annotations

import argparse

from rankstream.commands._json_output import add_json_argument, print_json
from rankstream.producers.feedback_batching import QUERIES_PER_MESSAGE
from rankstream.ranking import learners


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


def run(args: argparse.Namespace) -> int:
    import tempfile
    from pathlib import Path

    from rich.console import Console
    from rich.progress import Progress

    from rankstream.commands._usage import UsageError
    from rankstream.harness.replay_bench import (
        ensure_aot_build,
        replay_report,
        timed_replay,
        timed_runs,
        write_log,
    )

    if args.triplets < 1 or args.repeats < 1 or args.queries_per_message < 1:
        raise UsageError("--triplets, --repeats and --queries-per-message must be >= 1")
    err = Console(stderr=True)
    build_seconds, no_build = ensure_aot_build(err.status)
    modes = ("jit",) if no_build else ("aot", "jit")
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
        with err.status("warm-up runs (numba cache, page cache)"):
            warmup = {mode: timed_replay(directory, args.triplets, mode)[0] for mode in modes}
        with Progress(console=err, transient=True) as progress:
            task = progress.add_task("timed runs", total=args.repeats * len(modes))
            runs, cpu_runs = timed_runs(
                directory, args.triplets, args.repeats, modes, lambda: progress.advance(task)
            )
    report = replay_report(
        args.triplets, args.queries_per_message, modes, runs, cpu_runs, warmup, log_bytes
    )
    report.update(aot_build_seconds=build_seconds, aot_note=no_build)
    if args.json:
        print_json(report)
        return 0
    seconds = report["seconds"]
    jit = report["jit_seconds"]
    Console().print(
        f"replay --direct of {args.triplets:,} triplets through "
        f"{','.join(learners.worker_defaults())}: "
        f"{seconds:.3f} s median of {args.repeats} (whole process, {modes[0]} kernel), "
        f"{args.triplets / seconds / 1e6:.2f} M triplets/s; CPU {report['cpu_seconds']:.3f} s "
        f"median; numba's JIT in the same run {jit:.3f} s; same weights"
    )
    return 0
