"""`--json`: one JSON object on stdout and nothing else there (DESIGN.md's CLI contract).

Every command that reports something takes the option from here and prints through
`print_json`; its human output (tables, progress, notes) goes to stderr or is left out.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any


def add_json_argument(
    parser: argparse.ArgumentParser | argparse._ActionsContainer, when: str = ""
) -> None:
    """`--json`; `when` says when the object comes if not at the end ("once listening")."""
    moment = f" {when}" if when else ""
    parser.add_argument(
        "--json",
        action="store_true",
        help=f"print one JSON object on stdout{moment} (nothing else there)",
    )


def print_json(report: Any) -> None:
    """`report` as one line of JSON on stdout, flushed (a pipe reader sees it at once)."""
    sys.stdout.write(json.dumps(report) + "\n")
    sys.stdout.flush()
