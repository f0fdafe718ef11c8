"""`rankstream services up`: start (or reuse) local Kafka, Redis and Prometheus.

With `--env` stdout carries only `export` lines, so `eval "$(rankstream services up --env)"`
points a shell's rankstream commands at the services.
"""

from __future__ import annotations

import argparse
import shlex
import sys

from rankstream.commands._services_args import add_root_argument, manager_for


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--env", action="store_true", help="print only `export RANKSTREAM_...=...` lines"
    )
    add_root_argument(parser)


def run(args: argparse.Namespace) -> int:
    from rankstream.harness.services import ServiceError

    manager = manager_for(args)
    try:
        endpoints = manager.up()
    except ServiceError as exc:
        print(f"rankstream services up: {exc}", file=sys.stderr)
        return 1
    if args.env:
        for name, value in endpoints.env().items():
            print(f"export {name}={shlex.quote(value)}")
        return 0
    from rich.console import Console
    from rich.table import Table

    table = Table("service", "listens on", "pid", "log", title=f"services in {manager.root}")
    for name, entry in manager.status().items():
        table.add_row(name, entry["address"], str(entry["pid"]), entry["log"])
    Console().print(table)
    print(f'configure a shell with: eval "$(rankstream services up --env --root {manager.root})"')
    return 0
