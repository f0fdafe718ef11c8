"""`rankstream worker evaluator`: score judged queries with every model; export NDCG@50."""

from __future__ import annotations

import argparse

from rankstream.commands._json_output import add_json_argument, print_json


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--window",
        type=int,
        default=200,
        metavar="W",
        help="rolling means (a trend; the champion is chosen by the paired test of "
        "RANKSTREAM_CHAMPION_ALPHA/DELTA) over each model's last W judged queries (default 200)",
    )
    parser.add_argument(
        "--exit-when-idle",
        type=float,
        default=None,
        metavar="SECONDS",
        help="publish and exit when no query arrived for this long",
    )
    add_json_argument(parser, "at exit: the rolling scores and the champion")


def run(args: argparse.Namespace) -> int:
    from rankstream.commands._usage import options_checked
    from rankstream.stream.settings import Settings
    from rankstream.workers.evaluator import Evaluator, EvaluatorOptions
    from rankstream.workers.metrics import start_metrics_server
    from rankstream.workers.structured_log import configure_logging, get_logger, log_event

    configure_logging()
    with options_checked():
        options = EvaluatorOptions(
            window=args.window,
            exit_when_idle=args.exit_when_idle,
        )
    settings = Settings.from_env()
    port = start_metrics_server(settings)
    log_event(
        get_logger("rankstream.worker.evaluator"),
        "starting",
        kafka=settings.kafka_bootstrap or "embedded",
        redis="configured" if settings.redis_url else "embedded",
        metrics_port=port,
    )
    evaluator = Evaluator(settings, options)
    evaluator.install_signal_handlers()
    code = evaluator.run()
    if args.json:
        print_json(evaluator.report())
    return code
