"""`rankstream bench pipeline`: end-to-end throughput through the configured Kafka and Redis,
wire versions 1 and 2 alternating in the same invocation."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from rankstream.commands._json_output import add_json_argument, print_json
from rankstream.workers.feedback_batching import QUERIES_PER_MESSAGE

if TYPE_CHECKING:
    from rich.console import Console

    from rankstream.harness.pipeline_bench import PipelineRun
    from rankstream.stream.settings import Settings


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--triplets",
        type=int,
        default=3_000_000,
        metavar="N",
        help="triplets per run (default 3,000,000)",
    )
    parser.add_argument(
        "--queries-per-message",
        type=int,
        default=QUERIES_PER_MESSAGE,
        metavar="Q",
        help=f"judged queries per Kafka message (default {QUERIES_PER_MESSAGE}, as the "
        "simulator sends them: ~2,260 triplets; at 1 both wire versions are bound by the "
        "Python Kafka client's cost per message, not by bytes)",
    )
    parser.add_argument(
        "--repeats",
        type=int,
        default=3,
        metavar="R",
        help="timed runs of each wire version; the medians are reported (default 3)",
    )
    parser.add_argument(
        "--checkpoint-records",
        type=int,
        default=100_000,
        metavar="N",
        help="worker checkpoint interval in triplets (default 100000)",
    )
    parser.add_argument(
        "--producers",
        type=int,
        default=2,
        metavar="P",
        help="producer processes sharing the messages (default 2)",
    )
    parser.add_argument(
        "--compare-kafka",
        default=None,
        metavar="BOOTSTRAP",
        help="instead of wire v1 vs v2: v2 on the configured Kafka vs on this one (host:port "
        "list; e.g. `services up --kafka-brokers 3` under another --root), alternating, "
        "same seeds and Redis",
    )
    add_json_argument(parser)


def run(args: argparse.Namespace) -> int:
    from rich.console import Console

    from rankstream.commands._real_services import real_services_settings
    from rankstream.commands._usage import UsageError
    from rankstream.harness.pipeline_bench import compare, comparison_summary

    err = Console(stderr=True)
    settings = real_services_settings("bench pipeline", err)
    if settings is None:
        return 2
    numbers = (args.triplets, args.queries_per_message, args.repeats, args.producers)
    if min(numbers) < 1:
        raise UsageError(
            "--triplets, --queries-per-message, --repeats and --producers must be >= 1"
        )

    def report(repeat: int, result: PipelineRun) -> None:
        err.print(
            f"run {repeat + 1} v{result.version}: {result.triplets_per_s:,.0f} triplets/s "
            f"({result.seconds:.2f} s, {result.bytes_per_triplet:.1f} bytes/triplet, lost "
            f"{result.lost}, duplicated {result.duplicated}, {result.checkpoints} checkpoints; "
            f"producing took {result.producer_seconds:.2f} s)"
        )

    if args.compare_kafka:
        return _compare_kafka(args, settings, err)
    with err.status("generating") as status:

        def progress(repeat: int, version: int, records: int) -> None:
            status.update(f"run {repeat + 1} v{version}: {records:,}/{args.triplets:,}")

        runs = compare(
            settings,
            args.triplets,
            repeats=args.repeats,
            queries_per_message=args.queries_per_message,
            checkpoint_records=args.checkpoint_records,
            producers=args.producers,
            on_run=report,
            progress=progress,
        )
    summary = comparison_summary(runs, args.queries_per_message)
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


def _compare_kafka(args: argparse.Namespace, settings: Settings, err: Console) -> int:
    from rankstream.harness.pipeline_bench import compare_kafka, kafka_comparison_summary
    from rankstream.stream.settings import VARIABLES

    check = VARIABLES["kafka_bootstrap"][1]
    other = check("KAFKA_BOOTSTRAP", args.compare_kafka)  # the same check as the variable's

    def report(repeat: int, name: str, result: PipelineRun) -> None:
        err.print(
            f"run {repeat + 1} {name}: {result.triplets_per_s:,.0f} triplets/s "
            f"(lost {result.lost}, duplicated {result.duplicated})"
        )

    runs = compare_kafka(
        settings,
        other,
        args.triplets,
        repeats=args.repeats,
        queries_per_message=args.queries_per_message,
        checkpoint_records=args.checkpoint_records,
        producers=args.producers,
        on_run=report,
    )
    bootstraps = {"configured": settings.kafka_bootstrap or "", "other": other}
    summary = kafka_comparison_summary(runs, bootstraps)
    if args.json:
        print_json(summary)
    else:
        for name in ("configured", "other"):
            print(name, "  ".join(f"{k}={v}" for k, v in summary[name].items()))
        print(f"other/configured: {summary['ratio_other_to_configured']}x triplets/s")
    return 0 if summary["lost"] == 0 and summary["duplicated"] == 0 else 1
