"""The `--root` option the three `rankstream services` commands share."""

from __future__ import annotations

import argparse
from pathlib import Path

from rankstream.services.manager import ServiceManager, default_root


def add_root_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--root",
        type=Path,
        default=None,
        help="services directory (default: $RANKSTREAM_DATA_DIR/services)",
    )


def manager_for(args: argparse.Namespace) -> ServiceManager:
    return ServiceManager(args.root or default_root())
