"""`rankstream bench serve`: /v1/rank p50/p99 and requests/s (Arrow, JSON) while reloading,
with impression logging on and off, and interleaving at each `--interleaving-share` against
none, in the same run (`harness.serve_bench`)."""

from __future__ import annotations

import argparse

from rankstream.commands._json_output import print_json
from rankstream.commands._options import options_arguments
from rankstream.commands._real_services import on_real_services
from rankstream.harness.bench_options import ServeBenchOptions

add_arguments = options_arguments(ServeBenchOptions)


def run(args: argparse.Namespace) -> int:
    from rich.console import Console

    from rankstream.harness.serve_bench import run_serve_bench

    options, settings = on_real_services("bench serve", ServeBenchOptions, args, needs=("redis",))
    err = Console(stderr=True)
    result = run_serve_bench(settings, options, progress=lambda line: err.print(line))
    if args.json:
        print_json(result)
    else:
        for kind in ("arrow", "json"):
            r = result[kind]
            off, cost = r["impressions_off"], r["impression_logging_cost"]
            interleaving = "; ".join(
                f"interleaving share {il['share']:g} (measured {il['share_measured']}): p99 "
                f"{il['p99_ms']} ms, x{il['cost']['p99_ratio_paired_median']} of share 0 "
                f"(paired rounds, quartiles {il['cost']['p99_ratio_paired_quartiles']}), "
                f"sustained x{il['cost']['sustained_ratio']}"
                for il in r["interleaving"]
            )
            print(
                f"{kind}: p50 {r['p50_ms']} ms, p99 {r['p99_ms']} ms at {r['rate']:g} req/s "
                f"(achieved {r['achieved_rate']}); sustained {r['sustained_rps']} req/s; "
                f"impression logging off: p50 {off['p50_ms']} ms, p99 {off['p99_ms']} ms; "
                f"on/off p99 x{cost['p99_ratio']} (paired rounds x"
                f"{cost['p99_ratio_paired_median']}); {interleaving}"
            )
        print(f"reload lag p99 {result['reload']['lag_p99_s']} s")
    return 0
