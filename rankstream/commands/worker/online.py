"""`rankstream worker online`: consume triplets and keep the online rankers up to date.

Its options are `workers.online_worker_options.WorkerOptions`' fields (one spelling, shared
with the harnesses that start workers: `workers.options`).
"""

from __future__ import annotations

from rankstream.commands._launch import Launch, long_running
from rankstream.workers.online_worker_options import COMMAND, WorkerOptions


def start(launch: Launch):  # type: ignore[no-untyped-def]
    from rankstream.workers.online_worker import OnlineWorker

    return OnlineWorker(launch.settings, launch.options)


add_arguments, run = long_running(COMMAND, WorkerOptions, start, "at exit: what the worker learned")
