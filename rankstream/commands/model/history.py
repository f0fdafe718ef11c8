"""`rankstream model history NAME`: the versions the store keeps, and every pin and unpin."""

from __future__ import annotations

import argparse
import sys

from rankstream.commands._json_output import print_json
from rankstream.commands.model._store import add_name_arguments

add_arguments = add_name_arguments


def run(args: argparse.Namespace) -> int:
    from rankstream.commands._usage import UsageError
    from rankstream.commands.model._store import configured_store
    from rankstream.selection.pins import model_history

    with configured_store() as store:
        try:
            history = model_history(store, args.name)
        except ValueError as exc:
            raise UsageError(f"bad model name: {exc}") from exc
    if not history["versions"] and not history["pins"]:
        print(f"no stored model {args.name}", file=sys.stderr)
        return 1
    if args.json:
        print_json(history)
        return 0
    from rich.console import Console
    from rich.table import Table

    table = Table(title=f"{args.name}: kept versions")
    columns = ("version", "created_ms", "triplets_seen", "writer")
    for column in columns:
        table.add_column(column)
    for entry in history["versions"]:
        table.add_row(*("" if entry[c] is None else str(entry[c]) for c in columns))
    Console().print(table)
    for event in history["pins"]:
        what = f"pinned at v{event['version']}" if event["pinned"] else "unpinned"
        print(f"{event['at_ms']}  {what}  by {event['by']}")
    return 0
