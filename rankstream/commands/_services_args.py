"""The `--root` option the three `rankstream services` commands share.

Kept here, not in `rankstream.harness.services`, because every command's `add_arguments` runs
on every `rankstream` invocation: importing the services package (its manager pulls
in urllib, http.client, subprocess helpers) cost every command ~0.2 s of start-up.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from rankstream.harness.services import ServiceManager


def add_root_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--root",
        type=Path,
        default=None,
        help="services directory (default: $RANKSTREAM_DATA_DIR/services)",
    )


def manager_for(args: argparse.Namespace) -> ServiceManager:
    from rankstream.harness.services import ServiceManager, default_root

    return ServiceManager(args.root or default_root())
