"""How every `rankstream worker ...` starts: settings, metrics port, a log line, signals, report.

One place, so the workers cannot drift apart in how they start: the deployment settings
are read (`RANKSTREAM_*`), the Prometheus endpoint is started, a structured "starting"
line names the transport, the store and the metrics port, SIGTERM/SIGINT stop the worker
cleanly (its own `install_signal_handlers`), and with `--json` its report is printed at
exit. The command builds its options first (so a bad option is refused before anything
starts) and passes a factory for the worker.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import Any, Protocol

from rankstream.commands._json_output import print_json
from rankstream.stream.settings import Settings


class Worker(Protocol):
    def install_signal_handlers(self) -> None: ...
    def run(self) -> int: ...
    def report(self) -> dict[str, Any]: ...


def launch_worker(
    name: str, args: argparse.Namespace, build: Callable[[Settings], Worker], **fields: Any
) -> int:
    """Start the worker NAME that `build(settings)` makes; its exit code.

    `fields` join the "starting" log line (what this worker was asked to do).
    """
    from rankstream.workers.metrics import start_metrics_server
    from rankstream.workers.structured_log import get_logger, log_event

    settings = Settings.from_env()
    port = start_metrics_server(settings)
    log_event(
        get_logger(f"rankstream.worker.{name}"),
        "starting",
        **fields,
        kafka=settings.kafka_bootstrap or "embedded",
        redis="configured" if settings.redis_url else "embedded",
        metrics_port=port,
    )
    worker = build(settings)
    worker.install_signal_handlers()
    code = worker.run()
    if args.json:
        print_json(worker.report())
    return code
