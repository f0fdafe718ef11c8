"""`rankstream worker evaluator`: score judged queries with every model; export NDCG@50."""

from __future__ import annotations

from rankstream.commands._launch import Launch, long_running
from rankstream.workers.evaluator_options import COMMAND, EvaluatorOptions


def start(launch: Launch):  # type: ignore[no-untyped-def]
    from rankstream.workers.evaluator import Evaluator

    return Evaluator(launch.settings, launch.options)


add_arguments, run = long_running(
    COMMAND, EvaluatorOptions, start, "at exit: the rolling scores and the champion"
)
