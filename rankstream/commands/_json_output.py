"""`--json`: one JSON object on stdout and nothing else there (docs/architecture.md's CLI contract).

Every command that reports something takes the option from here and prints through
`print_json`; its human output (tables, progress, notes) goes to stderr or is left out.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from collections.abc import Callable
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


def strict(value: Any) -> Any:
    """`value` with every non-finite float as null: JSON has no NaN or Infinity, and
    strict parsers (jq, browsers, Go) refuse the tokens Python's json would write."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {key: strict(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [strict(item) for item in value]
    return value


def print_json(report: Any) -> None:
    """`report` as one line of strict JSON on stdout, flushed (a pipe reader sees it at
    once); NaN and Inf (a metric over no queries, say) print as null."""
    sys.stdout.write(json.dumps(strict(report), allow_nan=False) + "\n")
    sys.stdout.flush()


def print_report(args: argparse.Namespace, report: Any, summary: Callable[[Any], None]) -> int:
    """The report as JSON with `--json`, else `summary(report)` for people; exit code 0."""
    if args.json:
        print_json(report)
    else:
        summary(report)
    return 0
