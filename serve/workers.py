"""The learning side of `rankstream serve` in the embedded default: one process does it all.

With no Kafka and no Redis configured, the transport and the model store live inside one
process, so the workers that learn from the API's feedback must run in the API's
process: the online worker (every registered online learner), the evaluator (rolling
NDCG@50 and the champion the API serves) and the click join (impressions and clicks into
weighted triplets for the online worker), each on its own thread with its usual stream
runtime and cadences. With services configured they are separate processes (compose
runs them) and `rankstream serve` starts none (`--workers auto`).
"""

from __future__ import annotations

import threading
import time

from rankstream.stream.settings import Settings
from rankstream.workers.click_join import ClickJoin
from rankstream.workers.click_join_options import JoinOptions
from rankstream.workers.evaluator import Evaluator, EvaluatorOptions
from rankstream.workers.online import OnlineWorker, WorkerOptions
from rankstream.workers.runtime import StreamRuntime
from rankstream.workers.structured_log import get_logger, log_event

log = get_logger("rankstream.serve.workers")


class EmbeddedWorkers:
    """The online worker, the evaluator and the click join on threads of this process."""

    def __init__(self, settings: Settings) -> None:
        # Saves are in-memory here: checkpoint and publish every second, so what the
        # workers learn reaches the API (and is stamped on what it ranks) within a second.
        self.runtimes: list[StreamRuntime] = [
            OnlineWorker(settings, WorkerOptions(checkpoint_seconds=1.0)),
            Evaluator(settings, EvaluatorOptions(publish_seconds=1.0)),
            ClickJoin(settings, JoinOptions(checkpoint_seconds=1.0)),
        ]
        self.threads: list[threading.Thread] = []

    def start(self) -> None:
        for runtime in self.runtimes:
            thread = threading.Thread(
                target=runtime.run, name=f"worker-{runtime.handler.name}", daemon=True
            )
            thread.start()
            self.threads.append(thread)
        log_event(log, "embedded workers started", workers=[r.handler.name for r in self.runtimes])

    def stop(self, timeout: float = 30.0) -> None:
        """Ask each runtime to stop (final checkpoint) and wait for it, at most `timeout`
        seconds in all (daemon threads: the process may exit without them)."""
        for runtime in self.runtimes:
            runtime.stop()
        until = time.monotonic() + timeout
        for thread in self.threads:
            thread.join(timeout=max(until - time.monotonic(), 0.0))
