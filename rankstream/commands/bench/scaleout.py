"""`rankstream bench scaleout`: throughput of 1, 2, 4... per-partition online workers."""

from __future__ import annotations

import argparse

from rankstream.commands._json_output import add_json_argument, print_json


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--triplets",
        type=int,
        default=2_000_000,
        metavar="N",
        help="triplets pre-produced per run (default 2,000,000)",
    )
    parser.add_argument(
        "--workers",
        default="1,2,4",
        metavar="K,K,...",
        help="worker process counts to time (default 1,2,4)",
    )
    parser.add_argument(
        "--partitions",
        type=int,
        default=4,
        metavar="P",
        help="partitions of the run's triplets topic (default 4)",
    )
    parser.add_argument(
        "--repeats",
        type=int,
        default=3,
        metavar="R",
        help="timed runs per worker count; the median is reported (default 3)",
    )
    add_json_argument(parser)


def _worker_counts(text: str) -> list[int] | None:
    """`1,2,4` -> [1, 2, 4]; None unless every item is a whole number >= 1."""
    from rankstream.commands._choices import comma_list

    items = comma_list(text)
    if not items or not all(item.isdigit() and int(item) >= 1 for item in items):
        return None
    return [int(item) for item in items]


def run(args: argparse.Namespace) -> int:
    from rich.console import Console

    from rankstream.commands._real_services import real_services_settings
    from rankstream.commands._usage import UsageError

    err = Console(stderr=True)
    counts = _worker_counts(args.workers)
    if counts is None:
        raise UsageError(f"--workers wants comma-separated counts >= 1, got {args.workers!r}")
    if min(args.triplets, args.partitions, args.repeats) < 1:
        raise UsageError("--triplets, --partitions and --repeats must be >= 1")
    settings = real_services_settings("bench scaleout", err)
    if settings is None:
        return 2

    from rankstream.harness.pipeline_bench import summarize_runs
    from rankstream.harness.scaleout_bench import run_once

    results = {}
    for workers in counts:
        runs = []
        for repeat in range(args.repeats):
            label = f"{workers} worker(s), run {repeat + 1}/{args.repeats}"
            try:
                with err.status(f"{label}: starting") as status:
                    result = run_once(
                        settings,
                        args.triplets,
                        workers,
                        partitions=args.partitions,
                        seed=repeat,
                        progress=lambda text, s=status, lb=label: s.update(f"{lb}: {text}"),
                    )
            except RuntimeError as exc:  # a worker or producer failed; the run cleaned up
                err.print(f"{label} failed: {exc}")
                return 1
            runs.append(result)
            err.print(
                f"{label}: {result.triplets_per_s:,.0f} triplets/s "
                f"({result.seconds:.2f} s, lost {result.lost}, "
                f"duplicated {result.duplicated})"
            )
        summary = summarize_runs(runs)
        results[str(workers)] = {
            key: summary[key] for key in ("seconds", "triplets_per_s", "lost", "duplicated")
        }
    report = {"triplets": args.triplets, "partitions": args.partitions, "results": results}
    if args.json:
        print_json(report)
    else:
        for workers, row in results.items():
            print(f"workers={workers}  " + "  ".join(f"{k}={v}" for k, v in row.items()))
    clean = all(row["lost"] == 0 and row["duplicated"] == 0 for row in results.values())
    return 0 if clean else 1
