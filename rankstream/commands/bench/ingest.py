"""`rankstream bench ingest`: judged queries/s through /v1/feedback into Kafka, exactly once."""

from __future__ import annotations

import argparse
from typing import Any

from rankstream.commands._options import options_arguments
from rankstream.commands._real_services import exactly_once_exit, run_service_bench
from rankstream.harness.bench_options import IngestBenchOptions

add_arguments = options_arguments(IngestBenchOptions)


def run(args: argparse.Namespace) -> int:
    from rankstream.harness.ingest_bench import run_ingest_bench

    result = run_service_bench(
        args, "bench ingest", IngestBenchOptions, run_ingest_bench, _print_summary
    )
    return exactly_once_exit(result)


def _print_summary(result: dict[str, Any]) -> None:
    print(
        f"{result['queries_per_s']} judged queries/s, {result['triplets_per_s']} triplets/s; "
        f"lost {result['lost']}, duplicated {result['duplicated']}"
    )
