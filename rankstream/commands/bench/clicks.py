"""`rankstream bench clicks`: click events/s through /v1/clicks to the click join's output,
lost and duplicated counted there, beside the same clicks sent by `ClickProducer` alone."""

from __future__ import annotations

import argparse
from typing import Any

from rankstream.commands._options import options_arguments
from rankstream.commands._real_services import exactly_once_exit, run_service_bench
from rankstream.harness.bench_options import ClicksBenchOptions

add_arguments = options_arguments(ClicksBenchOptions)


def run(args: argparse.Namespace) -> int:
    from rankstream.harness.clicks_bench import run_clicks_bench

    result = run_service_bench(
        args, "bench clicks", ClicksBenchOptions, run_clicks_bench, _print_summary
    )
    return exactly_once_exit(result)


def _print_summary(result: dict[str, Any]) -> None:
    print(
        f"{result['events_per_s']} click events/s through /v1/clicks to the join "
        f"(ClickProducer alone: {result['reference_events_per_s']}); lost "
        f"{result['lost']}, duplicated {result['duplicated']}"
    )
