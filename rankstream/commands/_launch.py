"""How every long-running command starts: options, settings, logging, metrics, signals, report.

A long-running command (`worker online|batch|evaluator`, `serve`, `simulate`, `record`,
and the next one) is an options dataclass (`workers.options`), a `start` function that
makes its process from a `Launch`, and one line in its module that registers both:

    add_arguments, run = long_running("worker batch", BatchOptions, start, "at exit: ...")

(and its words in `rankstream.cli.COMMANDS`, like every command). From these, each one:

1. takes its options from its flags, else its variables `RANKSTREAM_<LAST WORD>_<OPTION>`
   (`RANKSTREAM_BATCH_RESERVOIR`), else their defaults; a bad value is refused (exit 2)
   before anything starts, naming the flag and the variable;
2. reads the deployment settings (`RANKSTREAM_*`, `stream.settings`);
3. logs JSON lines (`telemetry.structured_log`) and serves Prometheus /metrics on
   RANKSTREAM_METRICS_PORT, where `rankstream_worker_last_poll_timestamp_seconds` is what the
   healthcheck reads;
4. logs one "starting" line: its options, the transport, the store and the metrics port;
5. makes its process, on which SIGTERM/SIGINT stop cleanly (`install_signal_handlers`);
6. runs it to its exit code; with `--json`, prints its report at exit (a process whose
   report is None printed what it had to say already).
"""

from __future__ import annotations

import argparse
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

from rankstream.commands._json_output import print_json
from rankstream.commands._options import add_options, chosen, options_flags
from rankstream.stream.settings import Settings
from rankstream.workers.options import variables_for


class Process(Protocol):
    def install_signal_handlers(self) -> None: ...
    def run(self) -> int: ...
    def report(self) -> dict[str, Any] | None: ...


@dataclass(frozen=True)
class Launch:
    """What a command's `start` is given: its options, the settings, where it reports."""

    options: Any
    settings: Settings
    metrics_port: int | None
    json: bool
    log: logging.Logger


Start = Callable[[Launch], Process]


def long_running(
    command: str, options: type, start: Start, json_when: str
) -> tuple[Callable[[argparse.ArgumentParser], None], Callable[[argparse.Namespace], int]]:
    """The `add_arguments` and `run` of the long-running `command` ("worker batch")."""
    variables = variables_for(command)

    def add_arguments(parser: argparse.ArgumentParser) -> None:
        add_options(parser, options, json_when, variables)

    def run(args: argparse.Namespace) -> int:
        return launch(command, chosen(options, args, variables), start, json=args.json)

    return add_arguments, run


def launch(command: str, options: Any, start: Start, json: bool = False) -> int:
    """Start `command`'s process (steps 2-6 of the module docstring); its exit code."""
    # here, not at the top: `--help` builds every command's parser without prometheus_client
    from rankstream.telemetry.prometheus_metrics import start_metrics_server
    from rankstream.telemetry.structured_log import configure_logging, get_logger, log_event

    configure_logging()
    settings = Settings.from_env()
    port = start_metrics_server(settings)
    log = get_logger("rankstream." + command.replace(" ", "."))
    log_event(
        log,
        "starting",
        options=options_flags(options),
        kafka=settings.kafka_bootstrap or "embedded",
        redis="configured" if settings.redis_url else "embedded",
        metrics_port=port,
    )
    process = start(Launch(options, settings, port, json, log))
    process.install_signal_handlers()
    code = process.run()
    report = process.report() if json else None
    if report is not None:
        print_json(report)
    return code
