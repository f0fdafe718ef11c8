"""`rankstream serve`: the HTTP API: rank with the learned models, ingest feedback."""

from __future__ import annotations

import dataclasses
import sys
from dataclasses import dataclass

from rankstream.commands._json_output import print_json
from rankstream.commands._launch import Launch, long_running
from rankstream.stream.settings import Settings
from rankstream.workers.options import option

_DEFAULTS = Settings()


@dataclass(frozen=True)
class ServeOptions:
    """Where the API listens (the deployment's RANKSTREAM_API_HOST/PORT) and what it runs."""

    host: str = option(_DEFAULTS.api_host, "bind address", variable="API_HOST")
    port: int = option(_DEFAULTS.api_port, "port, 0 for any free one", variable="API_PORT")
    workers: str = option(
        "auto",
        "run the online worker and the evaluator in this process: auto = when no "
        "Kafka/Redis is configured (the embedded pipeline lives in one process)",
        choices=("auto", "on", "off"),
    )
    poll_seconds: float = option(
        1.0, "re-read the store at least this often besides its announcements", metavar="S"
    )

    def __post_init__(self) -> None:
        if not self.poll_seconds > 0 or not 0 <= self.port < 65536:
            raise ValueError("poll_seconds must be > 0 and the port within 0..65535")


class Serving:
    """The API on uvicorn, whose own SIGTERM/SIGINT handling drains it within
    RANKSTREAM_API_GRACE_SECONDS; with --json it reports once listening, not at exit."""

    def __init__(self, launch: Launch) -> None:
        options = launch.options
        self.launch = launch
        self.settings = dataclasses.replace(
            launch.settings, api_host=options.host, api_port=options.port
        )
        embedded = not self.settings.kafka_bootstrap and not self.settings.redis_url
        self.workers = options.workers == "on" or (options.workers == "auto" and embedded)
        if self.workers:  # their options' variables are refused now, not once listening
            from rankstream.commands._usage import options_checked
            from rankstream.serve.embedded_workers import embedded_options

            with options_checked():
                embedded_options()
        from rankstream.serve.processes import serving_processes

        self.processes = serving_processes(self.settings, self.workers)
        if self.settings.api_processes > 1 and self.processes == 1:
            print(
                "note: one serving process (RANKSTREAM_API_PROCESSES is for Kafka and Redis; "
                "the embedded transport, store and workers live in one process)",
                file=sys.stderr,
            )
        if embedded:
            print(
                "note: no RANKSTREAM_KAFKA_BOOTSTRAP / RANKSTREAM_REDIS_URL: embedded transport "
                "and store (this process only)" + ("; learning in-process" if self.workers else ""),
                file=sys.stderr,
            )

    def install_signal_handlers(self) -> None:
        """uvicorn installs its own (see `serve.app.serve`), the parent of several serving
        processes its own (`serve.processes`)."""

    def listening(self, host: str, port: int) -> None:
        url = f"http://{host}:{port}"
        if not self.launch.json:
            print(f"serving on {url}", file=sys.stderr)
            return
        print_json(
            {
                "url": url,
                "host": host,
                "port": port,
                "metrics_port": self.launch.metrics_port,
                "workers": self.workers,
                "processes": self.processes,
                "transport": "kafka" if self.settings.kafka_bootstrap else "embedded",
                "store": "redis" if self.settings.redis_url else "embedded",
            }
        )

    def run(self) -> int:
        if self.processes > 1:
            from rankstream.serve.processes import serve_processes

            return serve_processes(
                self.settings,
                self.processes,
                poll_seconds=self.launch.options.poll_seconds,
                on_listening=self.listening,
            )
        from rankstream.serve.app import serve

        return serve(
            self.settings,
            poll_seconds=self.launch.options.poll_seconds,
            workers=self.workers,
            on_listening=self.listening,
        )

    def report(self) -> None:
        """Printed once listening (`listening`)."""


add_arguments, run = long_running(
    "serve", ServeOptions, Serving, "once listening: its URL, port and what backs it"
)
