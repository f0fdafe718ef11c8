"""A worker's options on the command line: one spelling, derived from the options class.

Each long-running process has a frozen options dataclass (`WorkerOptions`, ...) whose
fields carry their help text (`field(metadata={"help": ...})`). From it:

* `add_arguments(parser, Options)` adds one `--field-name` option per field, with its
  type, default and help (a learner's hyper-parameters, the `hyper` mapping, become one
  option each: `--C`, `--eta`, `--r`, from `ranking.learners.HYPERPARAMETERS`);
* `from_arguments(Options, args)` builds the options back (their `__post_init__`
  validates them: a ValueError names the bad value);
* `to_argv(options)` spells options as those arguments, so a harness that starts a
  worker as a subprocess (`harness.chaos`) passes every field, not a hand-picked few.

Field types understood: int, float, str (and `| None` of each: "none" on the command
line), bool (a flag), tuple[str, ...] (comma-separated) and the hyper-parameter mapping.
"""

from __future__ import annotations

import argparse
import dataclasses
import types
import typing
from collections.abc import Mapping
from typing import Any, TypeVar

from rankstream.ranking.learners import HYPERPARAMETERS

T = TypeVar("T")
HYPER_FIELD = "hyper"
_NONE = "none"


def _flag(f: dataclasses.Field) -> str:
    """A field's option: its metadata's "flag", else --field-name."""
    return str(f.metadata.get("flag", "--" + f.name.replace("_", "-")))


def _base_type(cls: type, name: str) -> tuple[Any, bool]:
    """(the field's type without None, whether None is allowed)."""
    hint = typing.get_type_hints(cls)[name]
    args = typing.get_args(hint)
    if typing.get_origin(hint) in (typing.Union, types.UnionType) and type(None) in args:
        (inner,) = [a for a in args if a is not type(None)]
        return inner, True
    return hint, False


def _parser_for(kind: Any, optional: bool):  # type: ignore[no-untyped-def]
    if typing.get_origin(kind) is tuple:
        return lambda text: tuple(item.strip() for item in text.split(",") if item.strip())

    def parse(text: str) -> Any:
        if optional and text.strip().lower() == _NONE:
            return None
        try:
            return kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"not a {kind.__name__}: {text!r}") from None

    return parse


def _fields(cls: type) -> list[dataclasses.Field]:
    return [f for f in dataclasses.fields(cls) if f.metadata.get("cli", True)]


def _default(f: dataclasses.Field) -> Any:
    if f.default is not dataclasses.MISSING:
        return f.default
    return f.default_factory()  # type: ignore[misc]


def add_hyperparameter_arguments(parser: argparse.ArgumentParser) -> None:
    """`--C`, `--eta`, `--r`, ...: one option per learner hyper-parameter."""
    for h in HYPERPARAMETERS.values():
        parser.add_argument(
            f"--{h.name}", type=float, default=h.default, help=f"{h.help} (default %(default)s)"
        )


def hyperparameter_values(args: argparse.Namespace) -> dict[str, float]:
    """The values `add_hyperparameter_arguments` read."""
    return {name: getattr(args, name) for name in HYPERPARAMETERS}


def add_arguments(parser: argparse.ArgumentParser, cls: type) -> None:
    """One option per field of the options class `cls` (see the module docstring)."""
    for f in _fields(cls):
        help_text = f.metadata.get("help", "")
        if f.name == HYPER_FIELD:
            add_hyperparameter_arguments(parser)
            continue
        kind, optional = _base_type(cls, f.name)
        default = _default(f)
        if kind is bool:
            parser.add_argument(_flag(f), dest=f.name, action="store_true", help=help_text)
            continue
        shown = ",".join(default) if isinstance(default, tuple) else default
        shown = _NONE if shown is None else shown
        off = "; 'none' to turn off" if optional else ""
        suffix = f" (default {shown}{off})"
        parser.add_argument(
            _flag(f),
            dest=f.name,
            type=_parser_for(kind, optional),
            default=default,
            metavar=f.metadata.get("metavar", f.name.upper()),
            help=(help_text + suffix).replace("%", "%%"),
        )


def from_arguments(cls: type[T], args: argparse.Namespace) -> T:
    """The options `add_arguments` read (ValueError from the class's own checks)."""
    values: dict[str, Any] = {}
    for f in _fields(cls):
        if f.name == HYPER_FIELD:
            values[f.name] = hyperparameter_values(args)
        else:
            values[f.name] = getattr(args, f.name)
    return cls(**values)


def to_argv(options: Any) -> list[str]:
    """The arguments that `from_arguments` turns back into `options` (every field)."""
    argv: list[str] = []
    for f in _fields(type(options)):
        value = getattr(options, f.name)
        if f.name == HYPER_FIELD:
            for name, number in value.items():
                argv += [f"--{name}", repr(float(number))]
        elif isinstance(value, bool):
            argv += [_flag(f)] if value else []
        elif value is None:
            argv += [_flag(f), _NONE]
        elif isinstance(value, tuple):
            argv += [_flag(f), ",".join(value)]
        elif isinstance(value, Mapping):
            raise TypeError(f"field {f.name!r} is a mapping; only {HYPER_FIELD!r} may be one")
        else:
            argv += [_flag(f), repr(value) if isinstance(value, float) else str(value)]
    return argv
