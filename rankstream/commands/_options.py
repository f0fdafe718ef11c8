"""A command's options from its options dataclass (`workers.options`): flags, and back.

Every command whose options are a dataclass declares them with `option(...)` fields and
takes them from here: `add_options` in its `add_arguments` (or `options_arguments` as
its `add_arguments`), `chosen` in its `run`. The
long-running ones (`_launch.long_running`) also pass the prefix of their variables.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import Any, TypeVar

from rankstream.commands._json_output import add_json_argument
from rankstream.commands._usage import options_checked
from rankstream.workers import options as declared

T = TypeVar("T")


def add_options(
    parser: argparse.ArgumentParser,
    options: type,
    json_when: str | None = "",
    variables: str | None = None,
) -> None:
    """One flag per option of `options`, and `--json` (unless `json_when` is None)."""
    declared.add_arguments(parser, options, variables)
    if json_when is not None:
        add_json_argument(parser, json_when)


def options_arguments(
    options: type, json_when: str | None = ""
) -> Callable[[argparse.ArgumentParser], None]:
    """A command's whole `add_arguments` when its options are `options` (and `--json`)."""
    return lambda parser: add_options(parser, options, json_when)


def chosen(options: type[T], args: argparse.Namespace, variables: str | None = None) -> T:
    """The options the command line gave (else their variables, else the defaults); a
    value the options refuse is a UsageError naming its flag."""
    with options_checked():
        return declared.from_arguments(options, args, variables)


def options_flags(options: Any) -> dict[str, Any]:
    """{flag without --: value} of every option: how a log line or a report names them."""
    return {spec.flag[2:]: spec.value_in(options) for spec in declared.specs(type(options))}
