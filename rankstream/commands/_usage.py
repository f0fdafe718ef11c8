"""Refusing a command line: one exception for what the user asked that cannot be done.

A command raises `UsageError` (or lets `options_checked` turn its options' ValueError
into one); `rankstream.cli.main` prints it, like a bad `RANKSTREAM_*` setting
(`SettingsError`), as one line `rankstream: ...` on stderr and exits 2. A command that
was understood but could not be done raises `CommandError`: one line, exit 1.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from rankstream.stream.settings import SettingsError


class UsageError(ValueError):
    """An option (or argument) the command cannot run with; the message says which and why."""


class CommandError(RuntimeError):
    """What was asked could not be done (a service refused, a log is unreadable): printed
    by `rankstream.cli.main` as one line `rankstream: ...`, exit code 1."""


@contextmanager
def options_checked() -> Iterator[None]:
    """Turn a ValueError raised inside (an options class refusing a value) into a UsageError.

    A SettingsError passes unchanged: it names its variable, not an option.
    """
    try:
        yield
    except (SettingsError, UsageError):
        raise
    except ValueError as exc:
        raise UsageError(f"bad option: {exc}") from exc
