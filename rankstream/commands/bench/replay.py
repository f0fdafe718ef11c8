"""`rankstream bench replay`: a recorded log through the four linear learners, whole
process (the benchmark: `harness.replay_bench`)."""

from __future__ import annotations

import argparse

from rankstream.commands._json_output import print_json
from rankstream.commands._options import chosen, options_arguments
from rankstream.harness.replay_bench import ReplayBenchOptions
from rankstream.ranking import learners

add_arguments = options_arguments(ReplayBenchOptions)


def run(args: argparse.Namespace) -> int:
    import tempfile
    from pathlib import Path

    from rich.console import Console
    from rich.progress import Progress

    from rankstream.harness.replay_bench import (
        ensure_aot_build,
        replay_report,
        timed_replay,
        timed_runs,
        write_log,
    )

    options = chosen(ReplayBenchOptions, args)
    triplets, repeats = options.triplets, options.repeats
    err = Console(stderr=True)
    build_seconds, no_build = ensure_aot_build(err.status)
    modes = ("jit",) if no_build else ("aot", "jit")
    with tempfile.TemporaryDirectory(prefix="rankstream-bench-replay-") as tmp:
        directory = Path(tmp)
        with Progress(console=err, transient=True) as progress:
            task = progress.add_task(f"recording {triplets:,} triplets", total=triplets)
            log_bytes = write_log(
                directory,
                triplets,
                options.queries_per_message,
                options.seed,
                lambda n: progress.advance(task, n),
            )
        with err.status("warm-up runs (numba cache, page cache)"):
            warmup = {mode: timed_replay(directory, triplets, mode)[0] for mode in modes}
        with Progress(console=err, transient=True) as progress:
            task = progress.add_task("timed runs", total=repeats * len(modes))
            runs, cpu_runs = timed_runs(
                directory, triplets, repeats, modes, lambda: progress.advance(task)
            )
    report = replay_report(
        triplets, options.queries_per_message, modes, runs, cpu_runs, warmup, log_bytes
    )
    report.update(aot_build_seconds=build_seconds, aot_note=no_build)
    if args.json:
        print_json(report)
        return 0
    seconds = report["seconds"]
    jit = report["jit_seconds"]
    Console().print(
        f"replay --direct of {triplets:,} triplets through "
        f"{','.join(learners.worker_defaults())}: "
        f"{seconds:.3f} s median of {repeats} (whole process, {modes[0]} kernel), "
        f"{triplets / seconds / 1e6:.2f} M triplets/s; CPU {report['cpu_seconds']:.3f} s "
        f"median; numba's JIT in the same run {jit:.3f} s; same weights"
    )
    return 0
