"""`rankstream worker online`: consume triplets and keep the online rankers up to date.

Its options are `workers.online_options.WorkerOptions`' fields (one spelling, shared
with the harnesses that start workers: `workers.options`).
"""

from __future__ import annotations

import argparse

from rankstream.commands._json_output import add_json_argument, print_json


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from rankstream.workers.online_options import WorkerOptions
    from rankstream.workers.options import add_arguments as add_option_arguments

    add_option_arguments(parser, WorkerOptions)
    add_json_argument(parser, "at exit: what the worker learned")


def run(args: argparse.Namespace) -> int:
    from rankstream.commands._usage import options_checked
    from rankstream.stream.settings import Settings
    from rankstream.workers.metrics import start_metrics_server
    from rankstream.workers.online import OnlineWorker, WorkerOptions
    from rankstream.workers.options import from_arguments
    from rankstream.workers.structured_log import configure_logging, get_logger, log_event

    configure_logging()
    with options_checked():
        options = from_arguments(WorkerOptions, args)
    settings = Settings.from_env()
    port = start_metrics_server(settings)
    log_event(
        get_logger("rankstream.worker.online"),
        "starting",
        algos=list(options.algos),
        kafka=settings.kafka_bootstrap or "embedded",
        redis="configured" if settings.redis_url else "embedded",
        metrics_port=port,
    )
    worker = OnlineWorker(settings, options)
    worker.install_signal_handlers()
    code = worker.run()
    if args.json:
        print_json(worker.report())
    return code
