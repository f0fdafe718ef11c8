"""`rankstream bench ingest`: judged queries/s through /v1/feedback into Kafka, exactly once."""

from __future__ import annotations

from typing import Any

from rankstream.commands._real_services import exactly_once_exit, service_bench
from rankstream.harness.bench_options import IngestBenchOptions


def _print_summary(result: dict[str, Any]) -> None:
    print(
        f"{result['queries_per_s']} judged queries/s, {result['triplets_per_s']} triplets/s; "
        f"lost {result['lost']}, duplicated {result['duplicated']}"
    )


add_arguments, run = service_bench(
    "bench ingest",
    IngestBenchOptions,
    "ingest_bench:run_ingest_bench",
    _print_summary,
    exactly_once_exit,
)
