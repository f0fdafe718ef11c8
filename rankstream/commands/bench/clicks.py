"""`rankstream bench clicks`: click events/s through /v1/clicks to the click join's output,
lost and duplicated counted there, beside the same clicks sent by `ClickProducer` alone."""

from __future__ import annotations

from typing import Any

from rankstream.commands._real_services import exactly_once_exit, service_bench
from rankstream.harness.bench_options import ClicksBenchOptions


def _print_summary(result: dict[str, Any]) -> None:
    print(
        f"{result['events_per_s']} click events/s through /v1/clicks to the join "
        f"(ClickProducer alone: {result['reference_events_per_s']}); lost "
        f"{result['lost']}, duplicated {result['duplicated']}"
    )


add_arguments, run = service_bench(
    "bench clicks",
    ClicksBenchOptions,
    "clicks_bench:run_clicks_bench",
    _print_summary,
    exactly_once_exit,
)
