"""`rankstream model unpin NAME`: serve NAME's newest version again."""

from __future__ import annotations

import argparse
import sys

from rankstream.commands._json_output import add_json_argument, print_json


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("name", help="model name")
    add_json_argument(parser)


def run(args: argparse.Namespace) -> int:
    from rankstream.stream.connect import open_store
    from rankstream.stream.settings import Settings
    from rankstream.stream.store import FencingError
    from rankstream.workers.pins import unpin

    store = open_store(Settings.from_env())
    try:
        was = unpin(store, args.name)
    except ValueError as exc:
        print(f"not unpinned: {exc}", file=sys.stderr)
        return 1
    except FencingError as exc:
        print(f"not unpinned: another pin or unpin landed first ({exc}); retry", file=sys.stderr)
        return 1
    finally:
        store.close()
    if args.json:
        print_json({"model": args.name, "was_pinned_version": was})
    else:
        print(
            f"{args.name} was not pinned" if was is None else f"{args.name} unpinned (was v{was})"
        )
    return 0
