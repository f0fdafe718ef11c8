"""`rankstream serve` as a child process on a free loopback port, for benchmarks and tests."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

from rankstream.stream.settings import Settings

_GIVEN: set[int] = set()  # ports handed out by this process (not yet bound, maybe)


def free_port() -> int:
    """A free loopback port, never one this process handed out before: the OS may offer a
    port again until the child given it binds it (several servers start at once)."""
    while True:
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            port = int(sock.getsockname()[1])
        if port not in _GIVEN:
            _GIVEN.add(port)
            return port


def settings_env(settings: Settings, **extra: str) -> dict[str, str]:
    """This environment without RANKSTREAM_*, plus `settings`' services and prefix."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("RANKSTREAM_")}
    env["RANKSTREAM_TOPIC_PREFIX"] = settings.topic_prefix
    env["RANKSTREAM_DATA_DIR"] = settings.data_dir
    for name, value in (
        ("KAFKA_BOOTSTRAP", settings.kafka_bootstrap),
        ("REDIS_URL", settings.redis_url),
        ("REDIS_PASSWORD", settings.redis_password),
    ):
        if value:
            env[f"RANKSTREAM_{name}"] = value
    env.update(extra)
    return env


class ServeProcess:
    """A `rankstream serve --workers off` child; `url`, `metrics_url`; stop() ends it; as
    a context manager, ready inside and stopped after.

    `env` adds RANKSTREAM_* variables (deadlines, say) to what `settings` says; `port`
    keeps a restarted replica's address (else a free one); `python` another interpreter
    whose `rankstream` serves (another install, e.g. an older commit's: `installed_from`),
    this one's by default."""

    def __init__(
        self,
        settings: Settings,
        log: Path,
        *args: str,
        port: int | None = None,
        python: str | None = None,
        **env: str,
    ) -> None:
        self.port, self.metrics_port = port or free_port(), free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.metrics_url = f"http://127.0.0.1:{self.metrics_port}/metrics"
        env = settings_env(
            settings,
            RANKSTREAM_API_PORT=str(self.port),
            RANKSTREAM_METRICS_PORT=str(self.metrics_port),
            **env,
        )
        self._log = log.open("w")
        self.process = subprocess.Popen(
            [*_interpreter(python), "-m", "rankstream", "serve", "--workers", "off", *args],
            env=env, stdout=self._log, stderr=subprocess.STDOUT,
        )  # fmt: skip

    def wait_ready(self, seconds: float = 60.0) -> dict:
        """/readyz's answer once it is 200, asked again until `seconds` have passed. One
        ask may take a while: /readyz probes the broker, then the store, up to 2.5 s each
        (the first probe imports the clients), and a loaded machine adds to that; a slow
        answer is asked again like a refused connection, not an error."""
        deadline = time.monotonic() + seconds
        while True:
            if self.process.poll() is not None:
                raise RuntimeError(f"rankstream serve exited with {self.process.returncode}")
            try:
                with urllib.request.urlopen(self.url + "/readyz", timeout=10) as reply:
                    return json.load(reply)
            except (urllib.error.URLError, ConnectionError, TimeoutError):
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.1)

    def _samples(self) -> list[Any]:
        """Every sample of its /metrics."""
        from prometheus_client.parser import text_string_to_metric_families

        with urllib.request.urlopen(self.metrics_url, timeout=10) as reply:
            text = reply.read().decode()
        return [sample for family in text_string_to_metric_families(text)
                for sample in family.samples]  # fmt: skip

    def ranking_counts(self) -> dict[str, float]:
        """Its /v1/rank answers (status 200) and how many of them were interleaved."""
        counts = {"ranked": 0.0, "interleaved": 0.0}
        for sample in self._samples():
            if sample.name == "rankstream_http_requests_total" and sample.labels == {
                "route": "/v1/rank", "status": "200"
            }:  # fmt: skip
                counts["ranked"] += sample.value
            elif sample.name == "rankstream_rankings_interleaved_total":
                counts["interleaved"] += sample.value
        return counts

    def impression_counts(self) -> dict[str, Any]:
        """Its impressions written, dropped (total, and by reason) and waiting in its
        queue, from its /metrics."""
        counts: dict[str, Any] = {
            "logged": 0.0, "dropped": 0.0, "dropped_by_reason": {}, "waiting": 0.0,
        }  # fmt: skip
        for sample in self._samples():
            if sample.name == "rankstream_impressions_logged_total":
                counts["logged"] += sample.value
            elif sample.name == "rankstream_impressions_waiting":
                counts["waiting"] = sample.value
            elif sample.name == "rankstream_impressions_dropped_total":
                counts["dropped"] += sample.value
                counts["dropped_by_reason"][sample.labels["reason"]] = sample.value
        return counts

    def stop(self) -> None:
        """Ends it (at once if it ended already); again is harmless."""
        stop_child(self.process)
        self._log.close()

    def __enter__(self) -> ServeProcess:
        """Ready (`wait_ready`), or stopped and the error raised."""
        try:
            self.wait_ready()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def _interpreter(python: str | None) -> list[str]:
    """How to start `python` (this one when None) so that it imports its own install:
    another one with -P, which keeps the working directory off its sys.path (`-m` puts
    it first, and a checkout there, e.g. this one's, would shadow that install)."""
    return [sys.executable] if python is None else [python, "-P"]


def installed_from(python: str | None, env: dict[str, str] | None = None) -> str:
    """The directory of the `rankstream` package `python` imports (as `ServeProcess`
    starts it, with `env`): which code a server started with it runs."""
    done = subprocess.run(
        [*_interpreter(python), "-c", "import rankstream; print(rankstream.__file__)"],
        env=env, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    if done.returncode != 0:
        raise RuntimeError(f"{python or sys.executable} cannot import rankstream: "
                           f"{done.stderr.strip()[-500:]}")  # fmt: skip
    return str(Path(done.stdout.strip()).parent)


def stop_child(process: subprocess.Popen) -> None:
    """SIGTERM, then SIGKILL after 30 s: a child server that ignores its grace still ends."""
    process.terminate()
    try:
        process.wait(timeout=30)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()
