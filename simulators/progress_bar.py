"""A progress bar on stderr for long builds (collections, indexes, descriptors)."""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from rich.console import Console
from rich.progress import Progress


@contextmanager
def progress_bar(enabled: bool, label: str, total: int) -> Iterator[Callable[[], None]]:
    """A rich progress bar on stderr (or nothing); yields the `advance()` callable."""
    if not enabled:
        yield lambda: None
        return

    with Progress(console=Console(file=sys.stderr), transient=True) as bar:
        task = bar.add_task(label, total=total)
        yield lambda: bar.advance(task)
