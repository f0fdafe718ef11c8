"""Progress on stderr, so `--json` and `--env` output on stdout stays clean."""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager


class Progress:
    """Spinner while a step runs, then one line with how long it took."""

    def __init__(self, quiet: bool = False) -> None:
        from rich.console import Console

        self._console = Console(stderr=True, quiet=quiet)

    @contextmanager
    def step(self, what: str) -> Iterator[None]:
        start = time.monotonic()
        with self._console.status(what):
            try:
                yield
            except BaseException:
                self._console.print(f"[red]✗[/] {what}")
                raise
        self._console.print(f"[green]✓[/] {what} [dim]({time.monotonic() - start:.1f} s)[/]")

    def note(self, message: str) -> None:
        self._console.print(message)
