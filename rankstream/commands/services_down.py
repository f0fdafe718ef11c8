"""`rankstream services down`: stop the local services (their data is kept)."""

from __future__ import annotations

import argparse
import sys

from rankstream.commands._services_args import add_root_argument, manager_for


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_root_argument(parser)


def run(args: argparse.Namespace) -> int:
    from rankstream.harness.services import ServiceError

    try:
        manager_for(args).down()
    except ServiceError as exc:
        print(f"rankstream services down: {exc}", file=sys.stderr)
        return 1
    return 0
