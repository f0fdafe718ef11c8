"""One way to print "method -> metrics" tables, shared by every eval command.

Eval commands print either exactly one JSON object (`--json`) or this table, so the
table goes to stdout by default; pass `stderr=True` to keep stdout clean for data.
"""

from __future__ import annotations

from collections.abc import Mapping

from rich.console import Console
from rich.table import Table

Cell = float | int | str | None


def print_method_table(
    title: str,
    rows: Mapping[str, Mapping[str, Cell]],
    formats: Mapping[str, str] | None = None,
    stderr: bool = False,
) -> None:
    """Print one row per method, one column per metric (columns in first-seen order).

    `formats` maps a column to a format spec (default ".4f" for floats); missing cells
    print as "-". Example: print_method_table("digits", {"uni_con": {"mAP": 0.62}}).
    """
    formats = formats or {}
    columns: list[str] = []
    for metrics in rows.values():
        columns.extend(column for column in metrics if column not in columns)
    table = Table(title=title)
    table.add_column("method", style="bold")
    for column in columns:
        table.add_column(column, justify="right")
    for method, metrics in rows.items():
        table.add_row(
            method, *(_cell(metrics.get(column), formats.get(column)) for column in columns)
        )
    console = Console(stderr=stderr)
    if not console.is_terminal:  # a file or pipe has no width to wrap at: keep rows whole
        console.width = max(console.width, 160)
    console.print(table)


def _cell(value: Cell, spec: str | None) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return format(value, spec or ".4f")
    return format(value, spec) if spec else str(value)
