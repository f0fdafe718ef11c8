"""`rankstream bench serve`: /v1/rank p50/p99 and requests/s (Arrow, JSON) while reloading,
with impression logging on and off, and interleaving at each `--interleaving-share` against
none, in the same run, against another install's serve with `--baseline-python`, and the
impressions dropped at 80% of the sustained rate (`harness.serve_bench`)."""

from __future__ import annotations

from typing import Any

from rankstream.commands._real_services import service_bench
from rankstream.harness.bench_options import ServeBenchOptions


def _at_80(figures: dict[str, Any]) -> str:
    at = figures["at_80_percent"]
    if at["rate"] is None:
        return f"at 80% of sustained: {at['note']}"
    return (f"at 80% of sustained ({at['rate']:g} req/s, achieved {at['achieved_rate']}): p99 "
            f"{at['p99_ms']} ms, impressions logged {at['impressions_logged']}, dropped "
            f"{at['impressions_dropped']}")  # fmt: skip


def _print_summary(result: dict[str, Any]) -> None:
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
            f"{cost['p99_ratio_paired_median']}); {interleaving}; {_at_80(r)}"
        )
        if "processes" in r:
            several = r["processes"]
            print(
                f"{kind}, {several['processes']} serving processes: sustained "
                f"{several['sustained_rps']} req/s, x{several['cost']['sustained_ratio']} of one "
                f"(paired rounds x{several['cost']['sustained_ratio_paired_median']}); p99 "
                f"{several['p99_ms']} ms at {r['rate']:g} req/s; {_at_80(several)}"
            )
        if "baseline" in r:
            old, against = r["baseline"], r["baseline"]["cost"]
            several = (
                f"; {r['processes']['processes']} processes x"
                f"{against['processes']['sustained_ratio_paired_median']}"
                if "processes" in against
                else ""
            )
            print(
                f"{kind}, baseline ({result['baseline']['rankstream']}): sustained "
                f"{old['sustained_rps']} req/s, CPU {old['cpu_us_per_request']} us per "
                f"answer; against it (paired rounds) sustained: this one x"
                f"{against['on']['sustained_ratio_paired_median']}{several}; CPU per answer: "
                f"this one x{against['on']['cpu_ratio_paired_median']}"
            )
    print(f"reload lag p99 {result['reload']['lag_p99_s']} s")


add_arguments, run = service_bench(
    "bench serve",
    ServeBenchOptions,
    "serve_bench:run_serve_bench",
    _print_summary,
    needs=("redis",),
)
