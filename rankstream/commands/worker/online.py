"""`rankstream worker online`: consume triplets and keep the online rankers up to date.

Its options are `workers.online_options.WorkerOptions`' fields (one spelling, shared
with the harnesses that start workers: `workers.options`).
"""

from __future__ import annotations

import argparse

from rankstream.commands._json_output import add_json_argument


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from rankstream.workers.online_options import WorkerOptions
    from rankstream.workers.options import add_arguments as add_option_arguments

    add_option_arguments(parser, WorkerOptions)
    add_json_argument(parser, "at exit: what the worker learned")


def run(args: argparse.Namespace) -> int:
    from rankstream.commands._usage import options_checked
    from rankstream.commands.worker._launch import launch_worker
    from rankstream.workers.online import OnlineWorker, WorkerOptions
    from rankstream.workers.options import from_arguments
    from rankstream.workers.structured_log import configure_logging

    configure_logging()
    with options_checked():
        options = from_arguments(WorkerOptions, args)
    return launch_worker(
        "online", args, lambda settings: OnlineWorker(settings, options), algos=list(options.algos)
    )
