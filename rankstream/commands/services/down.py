"""`rankstream services down`: stop the local services (their data is kept)."""

from __future__ import annotations

import argparse

from rankstream.commands._json_output import add_json_argument, print_json
from rankstream.commands.services._args import add_root_argument, managed


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_root_argument(parser)
    add_json_argument(parser, "at exit: the root and the services it stopped")


def run(args: argparse.Namespace) -> int:
    manager, stopped = managed(args, "down")
    if args.json:
        print_json({"root": str(manager.root), "stopped": stopped})
    return 0
