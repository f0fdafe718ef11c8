"""The learning side of `rankstream serve` in the embedded default: one process does it all.

With no Kafka and no Redis configured, the transport and the model store live inside one
process, so the workers that learn from the API's feedback must run in the API's
process: the online worker (every registered online learner), the evaluator (rolling
NDCG@50 and the champion the API serves) and the click join (impressions and clicks into
weighted triplets for the online worker), each on its own thread with its usual stream
runtime and cadences. With services configured they are separate processes (compose
runs them) and `rankstream serve` starts none (`--workers auto`).

Their options are their commands': each reads the variables its `rankstream worker ...`
reads (`RANKSTREAM_ONLINE_*`, `RANKSTREAM_EVALUATOR_*`, `RANKSTREAM_CLICK_JOIN_*`, e.g.
`RANKSTREAM_CLICK_JOIN_LOSERS`; `workers.options.from_environment`), and only where
none is set does this process's own default apply: saves are in-memory here, so each
checkpoints and publishes every second (`EMBEDDED_SECONDS`), and what the workers learn
reaches the API (and is stamped on what it ranks) within a second.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Mapping
from typing import NamedTuple

from rankstream.stream.settings import Settings
from rankstream.telemetry.structured_log import get_logger, log_event
from rankstream.workers import click_join_options, evaluator_options
from rankstream.workers import online_worker_options as online_options
from rankstream.workers.click_join import ClickJoin
from rankstream.workers.click_join_options import JoinOptions
from rankstream.workers.evaluator import Evaluator, EvaluatorOptions
from rankstream.workers.online_worker import OnlineWorker, WorkerOptions
from rankstream.workers.options import from_environment, to_argv
from rankstream.workers.runtime import StreamRuntime

log = get_logger("rankstream.serve.workers")

EMBEDDED_SECONDS = 1.0  # checkpoint and publish this often where no variable says otherwise


class EmbeddedOptions(NamedTuple):
    """The embedded workers' options (module docstring)."""

    online: WorkerOptions
    evaluator: EvaluatorOptions
    join: JoinOptions


def embedded_options(environ: Mapping[str, str] | None = None) -> EmbeddedOptions:
    """The options the three commands' variables give, with the embedded cadences where
    none is set; an `OptionError` (or ValueError) names a bad one."""
    seconds = EMBEDDED_SECONDS
    return EmbeddedOptions(
        from_environment(WorkerOptions, online_options.COMMAND, environ,
                         checkpoint_seconds=seconds),
        from_environment(EvaluatorOptions, evaluator_options.COMMAND, environ,
                         publish_seconds=seconds),
        from_environment(JoinOptions, click_join_options.COMMAND, environ,
                         checkpoint_seconds=seconds),
    )  # fmt: skip


class EmbeddedWorkers:
    """The online worker, the evaluator and the click join on threads of this process."""

    def __init__(self, settings: Settings, options: EmbeddedOptions | None = None) -> None:
        self.options = options if options is not None else embedded_options()
        self.runtimes: list[StreamRuntime] = [
            OnlineWorker(settings, self.options.online),
            Evaluator(settings, self.options.evaluator),
            ClickJoin(settings, self.options.join),
        ]
        self.threads: list[threading.Thread] = []

    def start(self) -> None:
        for runtime in self.runtimes:
            thread = threading.Thread(
                target=runtime.run, name=f"worker-{runtime.handler.name}", daemon=True
            )
            thread.start()
            self.threads.append(thread)
        options = {name: to_argv(chosen) for name, chosen in self.options._asdict().items()}
        workers = [r.handler.name for r in self.runtimes]
        log_event(log, "embedded workers started", workers=workers, options=options)

    def stop(self, timeout: float = 30.0) -> None:
        """Ask each runtime to stop (final checkpoint) and wait for it, at most `timeout`
        seconds in all (daemon threads: the process may exit without them)."""
        for runtime in self.runtimes:
            runtime.stop()
        until = time.monotonic() + timeout
        for thread in self.threads:
            thread.join(timeout=max(until - time.monotonic(), 0.0))
