"""`rankstream model unpin NAME`: serve NAME's newest version again."""

from __future__ import annotations

import argparse

from rankstream.commands._json_output import print_json
from rankstream.commands.model._store import add_name_arguments

add_arguments = add_name_arguments


def run(args: argparse.Namespace) -> int:
    from rankstream.commands.model._store import configured_store, pin_refused
    from rankstream.selection.pins import unpin
    from rankstream.stream.store import FencingError

    with configured_store() as store:
        try:
            was = unpin(store, args.name)
        except (ValueError, FencingError) as exc:
            return pin_refused("unpinned", exc)
    if args.json:
        print_json({"model": args.name, "was_pinned_version": was})
    else:
        print(
            f"{args.name} was not pinned" if was is None else f"{args.name} unpinned (was v{was})"
        )
    return 0
