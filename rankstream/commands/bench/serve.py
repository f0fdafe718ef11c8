"""`rankstream bench serve`: /v1/rank p50/p99 and requests/s (Arrow, JSON) while reloading,
with impression logging on and off in the same run (`harness.serve_bench`)."""

from __future__ import annotations

import argparse

from rankstream.commands._json_output import add_json_argument, print_json


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--arrow-rate",
        type=float,
        default=1000.0,
        metavar="R",
        help="open-loop requests/s of Arrow bodies (default 1000)",
    )
    parser.add_argument(
        "--json-rate",
        type=float,
        default=200.0,
        metavar="R",
        help="open-loop requests/s of JSON bodies (default 200)",
    )
    parser.add_argument("--seconds", type=float, default=10.0, help="per run (default 10)")
    parser.add_argument("--repeats", type=int, default=3, help="runs; medians (default 3)")
    parser.add_argument(
        "--reload-seconds",
        type=float,
        default=1.0,
        metavar="S",
        help="a new champion checkpoint every S seconds (default 1)",
    )
    add_json_argument(parser)


def run(args: argparse.Namespace) -> int:
    from rich.console import Console

    from rankstream.commands._usage import UsageError
    from rankstream.harness.serve_bench import ServeBenchOptions, run_serve_bench
    from rankstream.stream.settings import Settings

    err = Console(stderr=True)
    settings = Settings.from_env()
    if not settings.redis_url:
        err.print(
            "bench serve reloads models through a store another process sees: set "
            'RANKSTREAM_REDIS_URL (e.g. eval "$(rankstream services up --env)")'
        )
        return 2
    if min(args.arrow_rate, args.json_rate, args.seconds, args.reload_seconds) <= 0 or (
        args.repeats < 1
    ):
        raise UsageError("rates, --seconds and --reload-seconds must be > 0, --repeats >= 1")
    options = ServeBenchOptions(
        arrow_rate=args.arrow_rate,
        json_rate=args.json_rate,
        seconds=args.seconds,
        repeats=args.repeats,
        reload_seconds=args.reload_seconds,
    )
    result = run_serve_bench(settings, options, progress=lambda line: err.print(line))
    if args.json:
        print_json(result)
    else:
        for kind in ("arrow", "json"):
            r = result[kind]
            off, cost = r["impressions_off"], r["impression_logging_cost"]
            print(
                f"{kind}: p50 {r['p50_ms']} ms, p99 {r['p99_ms']} ms at {r['rate']:g} req/s "
                f"(achieved {r['achieved_rate']}); sustained {r['sustained_rps']} req/s; "
                f"impression logging off: p50 {off['p50_ms']} ms, p99 {off['p99_ms']} ms; "
                f"on/off p99 x{cost['p99_ratio']} (paired rounds x"
                f"{cost['p99_ratio_paired_median']})"
            )
        print(f"reload lag p99 {result['reload']['lag_p99_s']} s")
    return 0
