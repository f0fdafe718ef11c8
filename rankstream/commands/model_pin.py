"""`rankstream model pin NAME VERSION`: serve NAME at VERSION until unpinned."""

from __future__ import annotations

import argparse
import json
import sys


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("name", help="model name (e.g. arow, opar1, cmds_dml)")
    parser.add_argument("version", type=int, help="a version the store still keeps")
    parser.add_argument("--json", action="store_true", help="print one JSON object")


def run(args: argparse.Namespace) -> int:
    from rankstream.commands._model_store import open_model_store
    from rankstream.stream.store import FencingError
    from rankstream.workers.pins import pin

    store = open_model_store()
    try:
        pinned = pin(store, args.name, args.version)
    except (LookupError, ValueError) as exc:
        print(f"not pinned: {exc}", file=sys.stderr)
        return 1
    except FencingError as exc:
        print(f"not pinned: another pin or unpin landed first ({exc}); retry", file=sys.stderr)
        return 1
    finally:
        store.close()
    result = {"model": pinned.name, "pinned_version": pinned.version, "kind": pinned.kind}
    print(json.dumps(result) if args.json else f"{pinned.name} pinned at v{pinned.version}")
    return 0
