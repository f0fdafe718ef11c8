"""`rankstream bench clicks`: click events/s through /v1/clicks to the click join's output,
lost and duplicated counted there, beside the same clicks sent by `ClickProducer` alone."""

from __future__ import annotations

import argparse

from rankstream.commands._json_output import print_json
from rankstream.commands._options import options_arguments
from rankstream.commands._real_services import on_real_services
from rankstream.harness.bench_options import ClicksBenchOptions

add_arguments = options_arguments(ClicksBenchOptions)


def run(args: argparse.Namespace) -> int:
    from rich.console import Console

    from rankstream.harness.clicks_bench import run_clicks_bench

    options, settings = on_real_services("bench clicks", ClicksBenchOptions, args)
    err = Console(stderr=True)
    result = run_clicks_bench(settings, options, progress=lambda line: err.print(line))
    if args.json:
        print_json(result)
    else:
        print(
            f"{result['events_per_s']} click events/s through /v1/clicks to the join "
            f"(ClickProducer alone: {result['reference_events_per_s']}); lost "
            f"{result['lost']}, duplicated {result['duplicated']}"
        )
    return 0 if result["lost"] == 0 and result["duplicated"] == 0 and not result["errors"] else 1
