"""`rankstream worker online`: consume triplets and keep the online rankers up to date."""

from __future__ import annotations

import argparse
import sys

DEFAULT_ALGOS = "opr,opar1,opar2,ogdr"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--algo",
        default=DEFAULT_ALGOS,
        help="comma-separated models to update: opr,opar1,opar2,ogdr[,arow]",
    )
    parser.add_argument(
        "--exit-when-idle",
        type=float,
        default=None,
        metavar="SECONDS",
        help="checkpoint and exit when no record arrived for this long",
    )
    parser.add_argument(
        "--checkpoint-records",
        type=int,
        default=100_000,
        metavar="N",
        help="checkpoint after this many triplets (default 100000)",
    )
    parser.add_argument(
        "--checkpoint-seconds",
        type=float,
        default=5.0,
        metavar="T",
        help="checkpoint at least this often (default 5 s)",
    )
    parser.add_argument(
        "--group", default=None, help="join this consumer group instead of reading every partition"
    )
    parser.add_argument(
        "--scaler-rows",
        type=int,
        default=2000,
        metavar="N",
        help="triplets whose phi fit each model's frozen scaler (default 2000)",
    )
    parser.add_argument("--C", type=float, default=0.1, help="OPAR-I/II aggressiveness C")
    parser.add_argument("--eta", type=float, default=0.01, help="OGDR step size")
    parser.add_argument(
        "--partitions",
        type=int,
        default=1,
        help="partitions of the triplets topic if it must be created",
    )
    parser.add_argument(
        "--per-partition",
        action="store_true",
        help="scale-out (needs --group): models {algo}.p{k} per partition, "
        "mixed into {algo} by the owner of partition 0",
    )
    parser.add_argument(
        "--mix-seconds",
        type=float,
        default=10.0,
        metavar="T",
        help="with --per-partition: publish the mix this often (default 10 s)",
    )


def run(args: argparse.Namespace) -> int:
    from rankstream.commands._choices import parse_choices
    from rankstream.ranking.online import ALGOS
    from rankstream.stream.settings import Settings
    from rankstream.workers.logging import configure_logging, get_logger, log_event
    from rankstream.workers.metrics import start_metrics_server
    from rankstream.workers.online import OnlineWorker, WorkerOptions

    configure_logging()
    algos = parse_choices(args.algo, ALGOS, "--algo")
    if algos is None:
        return 2
    try:
        options = WorkerOptions(
            algos=algos,
            checkpoint_records=args.checkpoint_records,
            checkpoint_seconds=args.checkpoint_seconds,
            exit_when_idle=args.exit_when_idle,
            group=args.group,
            scaler_rows=args.scaler_rows,
            C=args.C,
            eta=args.eta,
            partitions=args.partitions,
            per_partition=args.per_partition,
            mix_seconds=args.mix_seconds,
        )
    except ValueError as exc:
        print(f"bad option: {exc}", file=sys.stderr)
        return 2
    settings = Settings.from_env()
    port = start_metrics_server(settings)
    log_event(
        get_logger("rankstream.worker.online"),
        "starting",
        algos=list(algos),
        kafka=settings.kafka_bootstrap or "embedded",
        redis="configured" if settings.redis_url else "embedded",
        metrics_port=port,
    )
    worker = OnlineWorker(settings, options)
    worker.install_signal_handlers()
    return worker.run()
