"""`rankstream bench pipeline`: end-to-end throughput through the configured Kafka and Redis."""

from __future__ import annotations

import argparse
import json


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--triplets",
        type=int,
        default=3_000_000,
        metavar="N",
        help="triplets per run (default 3,000,000)",
    )
    parser.add_argument(
        "--block-size",
        type=int,
        default=2000,
        metavar="B",
        help="triplets per Kafka message (default 2000)",
    )
    parser.add_argument(
        "--repeats",
        type=int,
        default=3,
        metavar="R",
        help="timed runs; the median is reported (default 3)",
    )
    parser.add_argument(
        "--checkpoint-records",
        type=int,
        default=100_000,
        metavar="N",
        help="worker checkpoint interval in triplets (default 100000)",
    )
    parser.add_argument(
        "--producers",
        type=int,
        default=2,
        metavar="P",
        help="producer processes sharing the blocks (default 2)",
    )
    parser.add_argument("--json", action="store_true", help="print one JSON object")


def run(args: argparse.Namespace) -> int:
    from rich.console import Console

    from rankstream.commands._real_services import real_services_settings
    from rankstream.harness.pipeline_bench import run_once, summarize_runs

    err = Console(stderr=True)
    settings = real_services_settings("bench pipeline", err)
    if settings is None:
        return 2
    if min(args.triplets, args.block_size, args.repeats, args.producers) < 1:
        err.print("--triplets, --block-size, --repeats and --producers must be >= 1")
        return 2
    runs = []
    for repeat in range(args.repeats):
        with err.status(f"run {repeat + 1}/{args.repeats}: generating") as status:

            def progress(records: int, repeat: int = repeat, status=status) -> None:
                status.update(f"run {repeat + 1}/{args.repeats}: {records:,}/{args.triplets:,}")

            result = run_once(
                settings,
                args.triplets,
                args.block_size,
                seed=repeat,
                checkpoint_records=args.checkpoint_records,
                producers=args.producers,
                progress=progress,
            )
        runs.append(result)
        err.print(
            f"run {repeat + 1}: {result.triplets_per_s:,.0f} triplets/s "
            f"({result.seconds:.2f} s, lost {result.lost}, duplicated {result.duplicated}, "
            f"{result.checkpoints} checkpoints; producing took "
            f"{result.producer_seconds:.2f} s)"
        )
    summary = summarize_runs(runs)
    if args.json:
        print(json.dumps(summary))
    else:
        print("  ".join(f"{key}={value}" for key, value in summary.items()))
    return 0 if summary["lost"] == 0 and summary["duplicated"] == 0 else 1
