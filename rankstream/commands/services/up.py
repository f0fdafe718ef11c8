"""`rankstream services up`: start (or reuse) local Kafka, Redis and Prometheus.

With `--env` stdout carries only `export` lines, so `eval "$(rankstream services up --env)"`
points a shell's rankstream commands at the services; with `--json`, one object with the
same variables, each service's address and pid, and the root.
"""

from __future__ import annotations

import argparse
import shlex

from rankstream.commands._json_output import add_json_argument, print_json
from rankstream.commands.services._args import (
    add_root_argument,
    add_topology_arguments,
    managed,
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    output = parser.add_mutually_exclusive_group()
    output.add_argument(
        "--env", action="store_true", help="print only `export RANKSTREAM_...=...` lines"
    )
    add_json_argument(output, "once all answer: the RANKSTREAM_* values, addresses and pids")
    add_root_argument(parser)
    add_topology_arguments(parser)


def run(args: argparse.Namespace) -> int:
    manager, endpoints = managed(args, "up")
    if args.env:
        for name, value in endpoints.env().items():
            print(f"export {name}={shlex.quote(value)}")
        return 0
    status = manager.status()
    if args.json:
        print_json({"root": str(manager.root), "env": endpoints.env(), "services": status})
        return 0
    from rich.console import Console
    from rich.table import Table

    table = Table("service", "listens on", "pid", "log", title=f"services in {manager.root}")
    for name, entry in status.items():
        table.add_row(name, entry["address"], str(entry["pid"]), entry["log"])
    Console().print(table)
    print(f'configure a shell with: eval "$(rankstream services up --env --root {manager.root})"')
    return 0
