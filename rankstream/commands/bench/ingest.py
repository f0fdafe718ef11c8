"""`rankstream bench ingest`: judged queries/s through /v1/feedback into Kafka, exactly once."""

from __future__ import annotations

import argparse

from rankstream.commands._json_output import print_json
from rankstream.commands._options import options_arguments
from rankstream.commands._real_services import on_real_services
from rankstream.harness.bench_options import IngestBenchOptions

add_arguments = options_arguments(IngestBenchOptions)


def run(args: argparse.Namespace) -> int:
    from rich.console import Console

    from rankstream.harness.ingest_bench import run_ingest_bench

    options, settings = on_real_services("bench ingest", IngestBenchOptions, args)
    err = Console(stderr=True)
    result = run_ingest_bench(settings, options, progress=lambda line: err.print(line))
    if args.json:
        print_json(result)
    else:
        print(
            f"{result['queries_per_s']} judged queries/s, {result['triplets_per_s']} triplets/s; "
            f"lost {result['lost']}, duplicated {result['duplicated']}"
        )
    return 0 if result["lost"] == 0 and result["duplicated"] == 0 and not result["errors"] else 1
