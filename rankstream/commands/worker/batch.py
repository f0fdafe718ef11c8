"""`rankstream worker batch`: keep a reservoir of the triplet stream; refit cMDS-DML and RankMKL."""

from __future__ import annotations

import dataclasses

from rankstream.commands._launch import Launch, long_running
from rankstream.workers.batch_worker_options import BatchOptions


def start(launch: Launch):  # type: ignore[no-untyped-def]
    from rankstream.workers.batch_worker import BatchWorker

    options = launch.options  # RankMKL samples its pairs with the reservoir's seed
    rankmkl = dataclasses.replace(options.rankmkl, seed=options.seed)
    return BatchWorker(launch.settings, dataclasses.replace(options, rankmkl=rankmkl))


add_arguments, run = long_running(
    "worker batch", BatchOptions, start, "at exit: the reservoir and the refits"
)
