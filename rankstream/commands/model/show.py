"""`rankstream model show NAME`: a stored model's version, counters, offsets and weights hash."""

from __future__ import annotations

import argparse
import json
import sys

from rankstream.commands._json_output import add_json_argument, print_json


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("name", help="model name (e.g. opr, opar1, cmds_dml)")
    parser.add_argument(
        "--version", type=int, default=None, help="a specific stored version (default: the latest)"
    )
    add_json_argument(parser)


def run(args: argparse.Namespace) -> int:
    from rankstream.commands.model._store import configured_store
    from rankstream.workers.checkpoint import summarize

    with configured_store() as store:
        stored = (
            store.load(args.name)
            if args.version is None
            else store.load_version(args.name, args.version)
        )
    if stored is None:
        what = args.name if args.version is None else f"{args.name} version {args.version}"
        print(f"no stored model {what}", file=sys.stderr)
        return 1
    summary = summarize(stored)
    if args.json:
        print_json(summary)
        return 0
    from rich.console import Console
    from rich.table import Table

    table = Table(title=f"model {summary['name']}", show_header=False)
    for key, value in summary.items():
        table.add_row(key, json.dumps(value) if isinstance(value, dict) else str(value))
    Console().print(table)
    return 0
