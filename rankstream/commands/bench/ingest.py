"""`rankstream bench ingest`: judged queries/s through /v1/feedback into Kafka, exactly once."""

from __future__ import annotations

import argparse

from rankstream.commands._json_output import add_json_argument, print_json


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--queries", type=int, default=2000, metavar="Q", help="judged queries per run (2000)"
    )
    parser.add_argument(
        "--connections", type=int, default=8, help="concurrent HTTP connections (default 8)"
    )
    parser.add_argument("--repeats", type=int, default=3, help="runs; medians (default 3)")
    add_json_argument(parser)


def run(args: argparse.Namespace) -> int:
    from rich.console import Console

    from rankstream.commands._real_services import real_services_settings
    from rankstream.commands._usage import UsageError
    from rankstream.harness.ingest_bench import IngestBenchOptions, run_ingest_bench

    err = Console(stderr=True)
    settings = real_services_settings("bench ingest", err)
    if settings is None:
        return 2
    if min(args.queries, args.connections, args.repeats) < 1:
        raise UsageError("--queries, --connections and --repeats must be >= 1")
    options = IngestBenchOptions(
        queries=args.queries, connections=args.connections, repeats=args.repeats
    )
    result = run_ingest_bench(settings, options, progress=lambda line: err.print(line))
    if args.json:
        print_json(result)
    else:
        print(
            f"{result['queries_per_s']} judged queries/s, {result['triplets_per_s']} triplets/s; "
            f"lost {result['lost']}, duplicated {result['duplicated']}"
        )
    return 0 if result["lost"] == 0 and result["duplicated"] == 0 and not result["errors"] else 1
