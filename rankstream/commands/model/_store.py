"""The model store the `model` commands read and write: the configured one, closed after.

Without RANKSTREAM_REDIS_URL it is the embedded store of this process alone (empty), which
`stream.connect` says on stderr.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Iterator
from contextlib import contextmanager

from rankstream.commands._json_output import add_json_argument
from rankstream.stream.store import ModelStore


def add_name_arguments(parser: argparse.ArgumentParser) -> None:
    """The arguments of a command about one model: its name, and `--json`."""
    parser.add_argument("name", help="model name")
    add_json_argument(parser)


@contextmanager
def configured_store() -> Iterator[ModelStore]:
    from rankstream.stream.connect import open_store
    from rankstream.stream.settings import Settings

    store = open_store(Settings.from_env())
    try:
        yield store
    finally:
        store.close()


def pin_refused(verb: str, error: Exception) -> int:
    """A refused pin or unpin said in one line on stderr; the command's exit code, 1."""
    from rankstream.stream.store import FencingError

    if isinstance(error, FencingError):
        reason = f"another pin or unpin landed first ({error}); retry"
    else:
        reason = str(error)
    print(f"not {verb}: {reason}", file=sys.stderr)
    return 1
