"""`rankstream worker evaluator`: score judged queries with every model; export NDCG@50."""

from __future__ import annotations

import argparse

from rankstream.commands._json_output import add_json_argument


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
    from rankstream.commands.worker._launch import launch_worker
    from rankstream.workers.evaluator import Evaluator, EvaluatorOptions
    from rankstream.workers.structured_log import configure_logging

    configure_logging()
    with options_checked():
        options = EvaluatorOptions(
            window=args.window,
            exit_when_idle=args.exit_when_idle,
        )
    return launch_worker("evaluator", args, lambda settings: Evaluator(settings, options))
