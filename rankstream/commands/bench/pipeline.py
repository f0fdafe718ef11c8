"""`rankstream bench pipeline`: end-to-end throughput through the configured Kafka and Redis,
wire versions 1 and 2 alternating in the same invocation."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from rankstream.commands._json_output import print_json
from rankstream.commands._options import options_arguments
from rankstream.commands._real_services import on_real_services
from rankstream.harness.bench_options import PipelineBenchOptions

if TYPE_CHECKING:
    from rich.console import Console

    from rankstream.harness.pipeline_bench import PipelineRun
    from rankstream.stream.settings import Settings


add_arguments = options_arguments(PipelineBenchOptions)


def run(args: argparse.Namespace) -> int:
    from rich.console import Console

    from rankstream.harness.pipeline_bench import compare, comparison_summary

    options, settings = on_real_services("bench pipeline", PipelineBenchOptions, args)
    err = Console(stderr=True)
    runs_of = {
        "repeats": options.repeats,
        "queries_per_message": options.queries_per_message,
        "checkpoint_records": options.checkpoint_records,
        "producers": options.producers,
    }

    def report(repeat: int, result: PipelineRun) -> None:
        err.print(
            f"run {repeat + 1} v{result.version}: {result.triplets_per_s:,.0f} triplets/s "
            f"({result.seconds:.2f} s, {result.bytes_per_triplet:.1f} bytes/triplet, lost "
            f"{result.lost}, duplicated {result.duplicated}, {result.checkpoints} checkpoints; "
            f"producing took {result.producer_seconds:.2f} s)"
        )

    if options.compare_kafka:
        return _compare_kafka(args, options, runs_of, settings, err)
    with err.status("generating") as status:

        def progress(repeat: int, version: int, records: int) -> None:
            status.update(f"run {repeat + 1} v{version}: {records:,}/{options.triplets:,}")

        runs = compare(settings, options.triplets, **runs_of, on_run=report, progress=progress)
    summary = comparison_summary(runs, options.queries_per_message)
    if args.json:
        print_json(summary)
    else:
        for version in ("v1", "v2"):
            print(version, "  ".join(f"{k}={v}" for k, v in summary[version].items()))
        print(
            f"v2/v1: {summary['speedup_v2_over_v1']}x triplets/s, "
            f"{summary['bytes_ratio_v2_to_v1']}x bytes per triplet"
        )
    return 0 if summary["lost"] == 0 and summary["duplicated"] == 0 else 1


def _compare_kafka(
    args: argparse.Namespace,
    options: PipelineBenchOptions,
    runs_of: dict,
    settings: Settings,
    err: Console,
) -> int:
    from rankstream.harness.pipeline_bench import compare_kafka, kafka_comparison_summary
    from rankstream.stream.settings import VARIABLES

    check = VARIABLES["kafka_bootstrap"][1]
    other = check("KAFKA_BOOTSTRAP", options.compare_kafka)  # the same check as the variable's

    def report(repeat: int, name: str, result: PipelineRun) -> None:
        err.print(
            f"run {repeat + 1} {name}: {result.triplets_per_s:,.0f} triplets/s "
            f"(lost {result.lost}, duplicated {result.duplicated})"
        )

    runs = compare_kafka(settings, other, options.triplets, **runs_of, on_run=report)
    bootstraps = {"configured": settings.kafka_bootstrap or "", "other": other}
    summary = kafka_comparison_summary(runs, bootstraps)
    if args.json:
        print_json(summary)
    else:
        for name in ("configured", "other"):
            print(name, "  ".join(f"{k}={v}" for k, v in summary[name].items()))
        print(f"other/configured: {summary['ratio_other_to_configured']}x triplets/s")
    return 0 if summary["lost"] == 0 and summary["duplicated"] == 0 else 1
