"""`rankstream bench learners`: sequential throughput of the online learners.

Times exactly `OnlineRanker.learn_many` over N pre-generated 36-d float64 pair
differences, from a fresh model each pass; data generation, model construction and
the first (compiling or cache-loading) call are outside the timed region, and the
latter is reported on its own as compile_seconds. Wall and CPU time (of this process)
are both reported: on a shared machine the CPU time is the steadier measure.
"""

from __future__ import annotations

import argparse
import json
import sys
import time

DIM = 36
WARMUP_ROWS = 1000


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--triplets", type=int, default=3_000_000, help="rows per pass")
    parser.add_argument("--repeats", type=int, default=3, help="timed passes per learner")
    parser.add_argument("--seed", type=int, default=0, help="seed of the random stream")
    parser.add_argument("--json", action="store_true", help="print one JSON object")


def make_stream(n: int, seed: int):
    """Random pair differences with random labels: the hinge loss stays positive, so
    the passive-aggressive rules and AROW update on (almost) every row, the slow case.
    """
    import numpy as np

    rng = np.random.default_rng(seed)
    X = rng.standard_normal((n, DIM))
    y = np.where(rng.random(n) < 0.5, -1.0, 1.0)
    return X, y


def bench_algo(algo: str, X, y, repeats: int) -> dict[str, float]:
    import numpy as np

    from rankstream.ranking.online import OnlineRanker

    start = time.perf_counter()
    OnlineRanker(algo).learn_many(X[:WARMUP_ROWS], y[:WARMUP_ROWS])
    compile_seconds = time.perf_counter() - start
    passes, cpu_passes = [], []
    for _ in range(repeats):
        ranker = OnlineRanker(algo, dim=DIM)
        start, cpu_start = time.perf_counter(), time.process_time()
        ranker.learn_many(X, y)
        passes.append(time.perf_counter() - start)
        cpu_passes.append(time.process_time() - cpu_start)
    seconds = float(np.median(passes))
    cpu_seconds = float(np.median(cpu_passes))
    return {
        "seconds": seconds,
        "triplets_per_s": X.shape[0] / seconds,
        "cpu_seconds": cpu_seconds,
        "cpu_triplets_per_s": X.shape[0] / cpu_seconds if cpu_seconds > 0 else None,
        "compile_seconds": compile_seconds,
    }


def run(args: argparse.Namespace) -> int:
    from rich.console import Console
    from rich.progress import Progress
    from rich.table import Table

    from rankstream.ranking.learners import names

    algos = names()

    if args.triplets < 1 or args.repeats < 1:
        print("--triplets and --repeats must be >= 1", file=sys.stderr)
        return 2
    err = Console(stderr=True)
    with err.status(f"generating {args.triplets:,} triplets of {DIM} features"):
        X, y = make_stream(args.triplets, args.seed)
    results = {}
    with Progress(console=err, transient=True) as progress:
        task = progress.add_task("benchmarking", total=len(algos))
        for algo in algos:
            progress.update(task, description=f"benchmarking {algo}")
            results[algo] = bench_algo(algo, X, y, args.repeats)
            progress.advance(task)
    report = {"triplets": args.triplets, "dim": DIM, "results": results}
    if args.json:
        print(json.dumps(report))
        return 0
    table = Table(
        title=f"learn_many over {args.triplets:,} triplets x {DIM} (median of {args.repeats})"
    )
    for column in ("algo", "seconds", "M triplets/s", "CPU M triplets/s", "compile s"):
        table.add_column(column, justify="left" if column == "algo" else "right")
    for algo, r in results.items():
        table.add_row(
            algo,
            f"{r['seconds']:.3f}",
            f"{r['triplets_per_s'] / 1e6:.2f}",
            "-" if r["cpu_triplets_per_s"] is None else f"{r['cpu_triplets_per_s'] / 1e6:.2f}",
            f"{r['compile_seconds']:.2f}",
        )
    Console().print(table)
    return 0
