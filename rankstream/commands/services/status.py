"""`rankstream services status`: which local services run, where; exit 1 unless all answer."""

from __future__ import annotations

import argparse

from rankstream.commands._json_output import add_json_argument, print_json
from rankstream.commands.services._args import add_root_argument, manager_for


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_root_argument(parser)
    add_json_argument(parser)


def run(args: argparse.Namespace) -> int:

    manager = manager_for(args)
    report = manager.status()
    all_ready = all(entry["ready"] for entry in report.values())
    if args.json:
        print_json({"root": str(manager.root), "ready": all_ready, "services": report})
        return 0 if all_ready else 1
    from rich.console import Console
    from rich.table import Table

    table = Table("service", "state", "address", "pid", title=f"services in {manager.root}")
    for name, entry in report.items():
        state = "ready" if entry["ready"] else "running" if entry["running"] else "stopped"
        table.add_row(name, state, entry["address"] or "-", str(entry["pid"] or "-"))
    Console().print(table)
    return 0 if all_ready else 1
