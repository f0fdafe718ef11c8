"""Two `rankstream serve` processes and an engine that retries once on the other.

What a search engine in front of two serve replicas does: send each `/v1/rank` to one
of them in turn and, when that one fails (refused, reset, 5xx, no answer within
`TIMEOUT_S`), send it once to the other. `rankstream chaos --cluster` runs it through
the whole fault run (Kafka leader kills, Redis failovers) and kills a serve process as
one of its faults; the engine's figures are what a caller saw: the share of requests
that failed twice, the longest time without an answer, and whether any (model, version)
ever came back with two different scores for the same request (a version served twice
with different weights).
"""

from __future__ import annotations

import hashlib
import json
import signal
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from rankstream.harness.serve_process import ServeProcess
from rankstream.stream.settings import Settings

TIMEOUT_S = 2.0
START_DEADLINE_S = 120.0  # guards against a hang only
INTERVAL_S = 0.05  # ~20 requests a second: a steady caller, not a load test
PROBE_CANDIDATES = 50  # candidates in each probing rank request


def _answers(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=TIMEOUT_S) as reply:
            return reply.status == 200
    except (urllib.error.URLError, OSError):
        return False


class Engine(threading.Thread):
    """Ranks one fixed request against `model` on `urls`, in turn, retrying once."""

    def __init__(self, urls: list[str], model: str, phi_dim: int, seed: int = 0) -> None:
        super().__init__(name="engine", daemon=True)
        rng = np.random.default_rng(seed)
        body = {
            "candidate_ids": list(range(PROBE_CANDIDATES)),
            "phi": rng.random((PROBE_CANDIDATES, phi_dim)).round(6).tolist(),
            "model": model,
        }
        self.body = json.dumps(body).encode()
        self.urls = urls
        self.stop = threading.Event()
        self.requests = self.failed = self.retried = 0
        self.longest_gap_s = 0.0
        self.scores_by_version: dict[int, set[str]] = {}
        self._last_answer: float | None = None  # None until the model is first served

    def _ask(self, url: str) -> dict | None:
        request = urllib.request.Request(
            url + "/v1/rank", self.body, {"Content-Type": "application/json"}
        )
        try:
            with urllib.request.urlopen(request, timeout=TIMEOUT_S) as reply:
                return json.load(reply)
        except (urllib.error.URLError, OSError, ValueError):
            return None  # HTTPError (404 before the first checkpoint, 503) is a URLError

    def run(self) -> None:
        turn = 0
        while not self.stop.wait(INTERVAL_S):
            turn += 1
            first, other = self.urls[turn % 2], self.urls[(turn + 1) % 2]
            answer = self._ask(first)
            if answer is None:
                answer = self._ask(other)
                self.retried += self._last_answer is not None
            now = time.monotonic()
            if self._last_answer is None and answer is None:
                continue  # the model has not been served yet: not a failure
            self.requests += 1
            if answer is None:
                self.failed += 1
                continue
            if self._last_answer is not None:
                self.longest_gap_s = max(self.longest_gap_s, now - self._last_answer)
            self._last_answer = now
            scores = hashlib.sha256(json.dumps(answer["scores"]).encode()).hexdigest()
            self.scores_by_version.setdefault(int(answer["version"]), set()).add(scores)

    def figures(self) -> dict[str, Any]:
        return {
            "requests": self.requests,
            "failed": self.failed,
            "failed_share": round(self.failed / self.requests, 5) if self.requests else None,
            "retried_on_the_other": self.retried,
            "longest_gap_s": round(self.longest_gap_s, 3),
            "versions_served": len(self.scores_by_version),
            "versions_with_two_weights": sum(len(s) > 1 for s in self.scores_by_version.values()),
        }


class ServePair:
    """Two serve processes on `settings`, and the engine in front of them."""

    def __init__(self, settings: Settings, log_dir: Path, model: str) -> None:
        self.settings, self.log_dir = settings, log_dir
        self.restarts = 0
        self.replicas = [self._start(i) for i in range(2)]
        self.engine = Engine([r.url for r in self.replicas], model, settings.phi_dim)
        for replica in self.replicas:
            self._wait(replica, lambda url: _answers(url + "/healthz"))
        self.engine.start()

    def _start(self, index: int, port: int | None = None) -> ServeProcess:
        log = self.log_dir / f"serve-{index}-{self.restarts}.log"
        return ServeProcess(self.settings, log, port=port)

    def kill_one(self) -> dict[str, float]:
        """SIGKILL one replica (in turn), start it again on its port; seconds until ready."""
        index = self.restarts % 2
        victim = self.replicas[index]
        victim.process.send_signal(signal.SIGKILL)
        victim.process.wait()
        victim.stop()
        self.restarts += 1
        started = time.monotonic()
        self.replicas[index] = self._start(index, victim.port)
        # ready = it ranks with the model again (its /readyz wants a champion this run's
        # store does not have: only the online models are in it)
        self._wait(self.replicas[index], lambda url: self.engine._ask(url) is not None)
        return {"restart_s": round(time.monotonic() - started, 2)}

    @staticmethod
    def _wait(replica: ServeProcess, ready: Callable[[str], bool]) -> None:
        deadline = time.monotonic() + START_DEADLINE_S
        while not ready(replica.url):
            if replica.process.poll() is not None:
                raise RuntimeError(f"rankstream serve exited with {replica.process.returncode}")
            if time.monotonic() > deadline:
                raise RuntimeError(f"rankstream serve at {replica.url} not answering")
            time.sleep(0.1)

    def close(self) -> dict[str, Any]:
        """Stop the engine and both replicas; the engine's figures."""
        self.engine.stop.set()
        self.engine.join()
        for replica in self.replicas:
            replica.stop()
        return self.engine.figures()
