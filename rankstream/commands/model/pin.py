"""`rankstream model pin NAME VERSION`: serve NAME at VERSION until unpinned."""

from __future__ import annotations

import argparse

from rankstream.commands._json_output import add_json_argument, print_json


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("name", help="model name (e.g. arow, opar1, cmds_dml)")
    parser.add_argument("version", type=int, help="a version the store still keeps")
    add_json_argument(parser)


def run(args: argparse.Namespace) -> int:
    from rankstream.commands.model._store import configured_store, pin_refused
    from rankstream.selection.pins import pin
    from rankstream.stream.store import FencingError

    with configured_store() as store:
        try:
            pinned = pin(store, args.name, args.version)
        except (LookupError, ValueError, FencingError) as exc:
            return pin_refused("pinned", exc)
    result = {"model": pinned.name, "pinned_version": pinned.version, "kind": pinned.kind}
    if args.json:
        print_json(result)
    else:
        print(f"{pinned.name} pinned at v{pinned.version}")
    return 0
