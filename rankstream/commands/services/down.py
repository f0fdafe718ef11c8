"""`rankstream services down`: stop the local services (their data is kept)."""

from __future__ import annotations

import argparse
import sys

from rankstream.commands._json_output import add_json_argument, print_json
from rankstream.commands.services._args import add_root_argument, manager_for


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_root_argument(parser)
    add_json_argument(parser, "at exit: the root and the services it stopped")


def run(args: argparse.Namespace) -> int:
    from rankstream.harness.services import ServiceError

    manager = manager_for(args)
    try:
        stopped = manager.down()
    except ServiceError as exc:
        print(f"rankstream services down: {exc}", file=sys.stderr)
        return 1
    if args.json:
        print_json({"root": str(manager.root), "stopped": stopped})
    return 0
