"""A command's options, declared once: a frozen dataclass -> CLI flags and `RANKSTREAM_*` variables.

Each long-running process has a frozen options dataclass (`WorkerOptions`, `BatchOptions`,
...) whose fields carry their help text (`option(default, "help", ...)`, or
`field(metadata=...)` with the same keys). From it:

* `add_arguments(parser, Options, variables)` adds one `--field-name` option per field,
  its help ending with its default and its variable (`variables` + FIELD_NAME, e.g.
  `RANKSTREAM_BATCH_RESERVOIR`); a learner's hyper-parameters (the `hyper` mapping) become
  one option each (`--C`, `--eta`, `--r`, from `ranking.learners.HYPERPARAMETERS`); a
  field holding another options dataclass (`nested=`) adds that one's fields;
* `from_arguments(Options, args, variables)` builds the options back: the flag if given,
  else the variable if set, else the field's default. A value that is not of the field's
  type or choices is an `OptionError` naming the flag and the variable; the class's own
  `__post_init__` checks the rest (its ValueError is given the flags it names);
* `to_argv(options)` spells options as those flags, so a harness that starts a worker as
  a subprocess (`harness.chaos`) passes every field, not a hand-picked few;
* `from_environment(Options, command, **defaults)` reads a command's options from its
  variables alone (`variables_for(command)`), for a process that runs that command's
  worker inside itself (the embedded `rankstream serve` runs the online worker, the
  evaluator and the click join): the same variables reach it, and its own defaults
  apply only where none is set.

Field types understood: int, float, str (and `| None` of each: "none" turns it off), bool
(`--flag` / `--no-flag`; the variable takes 1/0, true/false, yes/no, on/off),
tuple[str, ...] (comma-separated), tuple[float, ...] and tuple[int, ...] (several words:
`--k 4 5 6`), a nested options dataclass, and the hyper-parameter mapping. The variables
are read with the deployment settings' error (`SettingsError`), so the CLI reports both
kinds of bad value the same way: one line, exit 2.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import re
import types
import typing
from collections.abc import Callable, Iterator, Mapping
from typing import Any, TypeVar

from rankstream.ranking import learners
from rankstream.ranking.learners import HYPERPARAMETERS
from rankstream.stream.settings import ENV_PREFIX, SettingsError

T = TypeVar("T")
HYPER_FIELD = "hyper"
_NONE = "none"
_GIVEN = "_options_given"  # the namespace's set of dests given on the command line
_TRUE, _FALSE = ("1", "true", "yes", "on"), ("0", "false", "no", "off")


class OptionError(SettingsError):
    """A value an option cannot take, from its flag or its variable: names both."""

    def __init__(self, spec: OptionSpec, value: str, expected: str, message: str = "") -> None:
        super().__init__(spec.where, value, expected)
        if message:
            self.args = (f"{message} ({spec.where})",)


def option(
    default: Any = dataclasses.MISSING,
    help: str = "",
    *,
    name: str | None = None,
    metavar: str | None = None,
    choices: tuple[str, ...] | None = None,
    nested: str | None = None,
    default_factory: Callable[[], Any] | Any = dataclasses.MISSING,
    variable: str | None = None,
    cli: bool = True,
) -> Any:
    """A dataclass field declared as an option.

    `name`: the flag's word (default: the field's name, `_` as `-`); `nested`: the field
    holds an options dataclass whose flags get this prefix ("" for none); `variable`: the
    variable after RANKSTREAM_ when it is a deployment setting's (`API_PORT`); `cli=False`:
    not an option (set by code only).
    """
    metadata = {"help": help, "name": name, "metavar": metavar, "choices": choices}
    metadata |= {"nested": nested, "variable": variable, "cli": cli}
    return dataclasses.field(
        default=default,
        default_factory=default_factory,
        metadata={k: v for k, v in metadata.items() if v is not None},
    )


@dataclasses.dataclass(frozen=True)
class OptionSpec:
    """One option: where its value goes (`path` of field names), its flag and variable."""

    path: tuple[str, ...]
    flag: str
    variable: str | None
    kind: Any
    optional: bool
    default: Any
    help: str
    metavar: str | None
    choices: tuple[str, ...] | None

    @property
    def dest(self) -> str:
        return "__".join(self.path)

    def value_in(self, options: Any) -> Any:
        """This option's value in `options` (an instance of the class it was read from)."""
        for name in self.path:
            options = options[name] if isinstance(options, Mapping) else getattr(options, name)
        return options

    @property
    def where(self) -> str:
        """How an error names it: its flag and its variable."""
        return self.flag + (f" / {self.variable}" if self.variable else "")

    def parse(self, text: str) -> Any:
        """The value `text` spells; OptionError if it spells none of this option's."""
        if self.optional and text.strip().lower() == _NONE:
            return None
        if self.kind is bool:
            word = text.strip().lower()
            if word not in _TRUE + _FALSE:
                raise OptionError(self, text, "one of " + "/".join(_TRUE + _FALSE))
            return word in _TRUE
        if self.listed:
            return tuple(self.item(word) for word in text.replace(",", " ").split())
        if typing.get_origin(self.kind) is tuple:
            items = tuple(item.strip() for item in text.split(",") if item.strip())
            unknown = [item for item in items if item not in (self.choices or items)]
            if not items or unknown:
                allowed = f"; choose from {', '.join(self.choices)}" if self.choices else ""
                shown = ", ".join(unknown) or "(none)"
                message = f"unknown {self.flag} {shown}{allowed}"
                raise OptionError(self, text, "comma-separated items", message)
            return items
        return self.item(text)

    @property
    def listed(self) -> bool:
        """A tuple of numbers: given as several words (`--k 4 5 6`)."""
        return typing.get_origin(self.kind) is tuple and typing.get_args(self.kind)[0] is not str

    def item(self, text: str) -> Any:
        """One value of the option's type (of its items' type for a tuple of numbers)."""
        kind = typing.get_args(self.kind)[0] if self.listed else self.kind
        try:
            value = kind(text)
        except ValueError:
            wanted = {int: "an integer", float: "a number"}.get(kind, "a value")
            wanted += " or 'none'" if self.optional else ""
            raise OptionError(self, text, wanted) from None
        if self.choices and value not in self.choices:
            raise OptionError(self, text, f"one of {', '.join(self.choices)}")
        return value


def _base_type(cls: type, name: str) -> tuple[Any, bool]:
    """(the field's type without None, whether None is allowed)."""
    hint = typing.get_type_hints(cls)[name]
    args = typing.get_args(hint)
    if typing.get_origin(hint) in (typing.Union, types.UnionType) and type(None) in args:
        (inner,) = [a for a in args if a is not type(None)]
        return inner, True
    return hint, False


def _default(f: dataclasses.Field) -> Any:
    if f.default is not dataclasses.MISSING:
        return f.default
    if f.default_factory is not dataclasses.MISSING:
        return f.default_factory()
    return dataclasses.MISSING


def variables_for(command: str) -> str:
    """The prefix of a command's option variables: RANKSTREAM_ and its last word
    (`worker click-join`: RANKSTREAM_CLICK_JOIN_)."""
    return ENV_PREFIX + re.sub(r"\W", "_", command.split()[-1]).upper() + "_"


def _variable_name(variables: str | None, word: str) -> str | None:
    return None if variables is None else variables + re.sub(r"\W", "_", word).upper()


def specs(
    cls: type, variables: str | None = None, prefix: str = "", path: tuple[str, ...] = ()
) -> Iterator[OptionSpec]:
    """The options of `cls`, nested ones flattened; `variables`: their prefix (None: none)."""
    for f in dataclasses.fields(cls):
        meta = f.metadata
        if not meta.get("cli", True):
            continue
        if f.name == HYPER_FIELD:
            for h in HYPERPARAMETERS.values():
                yield OptionSpec(
                    (*path, f.name, h.name), f"--{prefix}{h.name}",
                    _variable_name(variables, prefix + h.name),
                    float, False, h.default, h.help, h.name.upper(), None,
                )  # fmt: skip
            continue
        kind, optional = _base_type(cls, f.name)
        word = prefix + meta.get("name", f.name.replace("_", "-"))
        if "nested" in meta:
            yield from specs(kind, variables, prefix + meta["nested"], (*path, f.name))
            continue
        own = meta.get("variable")
        yield OptionSpec(
            (*path, f.name), f"--{word}",
            ENV_PREFIX + own if own else _variable_name(variables, word),
            kind, optional, _default(f), meta.get("help", ""),
            meta.get("metavar", word.upper().replace("-", "_")), meta.get("choices"),
        )  # fmt: skip


class _Given(argparse.Action):
    """Store the flag's text as given, and remember that it was given (flag beats variable)."""

    def __call__(self, parser, namespace, values, option_string=None) -> None:  # type: ignore[no-untyped-def]
        if option_string and option_string.startswith("--no-"):
            values = "false"
        elif self.nargs == 0:
            values = "true"
        elif isinstance(values, list):
            values = " ".join(values)
        setattr(namespace, self.dest, values)
        given = set(getattr(namespace, _GIVEN, ()))
        setattr(namespace, _GIVEN, given | {self.dest})


def _shown(value: Any) -> str:
    if isinstance(value, tuple):
        return (
            " ".join(map(str, value))
            if value and not isinstance(value[0], str)
            else ",".join(value)
        )
    return _NONE if value is None else str(value)


def add_arguments(parser: argparse.ArgumentParser, cls: type, variables: str | None = None) -> None:
    """One option per field of the options class `cls` (see the module docstring)."""
    for spec in specs(cls, variables):
        required = spec.default is dataclasses.MISSING
        default = "required" if required else f"default {_shown(spec.default)}"
        off = "; 'none' to turn off" if spec.optional and spec.default is not None else ""
        env = f"; ${spec.variable}" if spec.variable else ""
        text = f"{spec.help} ({default}{off}{env})".replace("%", "%%")
        flags = [spec.flag]
        if spec.kind is bool:
            flags.append("--no-" + spec.flag[2:])
        parser.add_argument(
            *flags,
            dest=spec.dest,
            action=_Given,
            nargs=0 if spec.kind is bool else "+" if spec.listed else None,
            default=None if required else spec.default,
            metavar=None if spec.kind is bool or spec.choices else spec.metavar,
            choices=None if typing.get_origin(spec.kind) is tuple else spec.choices,
            help=text,
        )


def _place(values: dict[str, Any], path: tuple[str, ...], value: Any) -> None:
    for name in path[:-1]:
        values = values.setdefault(name, {})
    values[path[-1]] = value


def _build(cls: type, values: dict[str, Any]) -> Any:
    """`cls` from `values` (nested dicts for nested options; defaults for the rest)."""
    kwargs = {}
    for f in dataclasses.fields(cls):
        if f.name not in values:
            continue
        value = values[f.name]
        if "nested" in f.metadata:
            value = _build(type(_default(f)), {**dataclasses.asdict(_default(f)), **value})
        kwargs[f.name] = value
    return cls(**kwargs)


def from_arguments(
    cls: type[T],
    args: argparse.Namespace,
    variables: str | None = None,
    environ: Mapping[str, str] | None = None,
) -> T:
    """The options the command line gave, else the variables set, else the defaults.

    `variables`: the prefix `add_arguments` was given (None: the environment is not read).
    An `OptionError` names a value of the wrong type; the class's own ValueError is
    raised again with the flags and variables of the fields it names.
    """
    environ = os.environ if environ is None else environ
    given = getattr(args, _GIVEN, set())
    values: dict[str, Any] = {}
    all_specs = list(specs(cls, variables))
    for spec in all_specs:
        if spec.dest in given:
            _place(values, spec.path, spec.parse(getattr(args, spec.dest)))
        elif spec.variable and environ.get(spec.variable, "") != "":
            _place(values, spec.path, spec.parse(environ[spec.variable]))
        elif spec.default is dataclasses.MISSING:
            raise OptionError(spec, "", "given", f"{spec.flag} is required")
    try:
        return _build(cls, values)
    except SettingsError:
        raise
    except ValueError as exc:
        named = [s.where for s in all_specs if re.search(rf"\b{s.path[-1]}\b", str(exc))]
        raise ValueError(f"{exc} ({', '.join(named)})" if named else str(exc)) from exc


def from_environment(
    cls: type[T], command: str, environ: Mapping[str, str] | None = None, **defaults: Any
) -> T:
    """`command`'s options as its variables set them (`variables_for(command)`, read and
    checked as `from_arguments` reads them), with `defaults` (field name -> value: the
    caller's own, e.g. a faster checkpoint in process) for the fields none of whose
    variables is set, and the fields' defaults for the rest."""
    environ = os.environ if environ is None else environ
    variables = variables_for(command)
    chosen = from_arguments(cls, argparse.Namespace(), variables, environ)
    set_by = {s.path[0] for s in specs(cls, variables) if environ.get(s.variable or "", "") != ""}
    unknown = set(defaults) - {f.name for f in dataclasses.fields(cls)}  # type: ignore[arg-type]
    if unknown:
        raise TypeError(f"{cls.__name__} has no field {', '.join(sorted(unknown))}")
    return dataclasses.replace(  # type: ignore[type-var]
        chosen, **{name: value for name, value in defaults.items() if name not in set_by}
    )


def to_argv(options: Any) -> list[str]:
    """The arguments that `from_arguments` turns back into `options` (every field)."""
    argv: list[str] = []
    for spec in specs(type(options)):
        value = spec.value_in(options)
        if isinstance(value, bool):
            argv += [spec.flag if value else "--no-" + spec.flag[2:]]
        elif isinstance(value, float):
            argv += [spec.flag, repr(value)]
        elif spec.listed:
            argv += [spec.flag, *map(repr, value)]
        else:
            argv += [spec.flag, _shown(value)]
    return argv


@dataclasses.dataclass(frozen=True)
class LearnerHyperparameters:
    """The learners' hyper-parameters alone, for commands that take them among other
    options (`demo`, `replay --direct`)."""

    hyper: Mapping[str, float] = option(default_factory=dict, help="the hyper-parameters")

    def __post_init__(self) -> None:
        object.__setattr__(self, "hyper", learners.hyperparameters(self.hyper))


def add_hyperparameter_arguments(parser: argparse.ArgumentParser) -> None:
    """`--C`, `--eta`, `--r`, ...: one option per learner hyper-parameter."""
    add_arguments(parser, LearnerHyperparameters)


def hyperparameter_values(args: argparse.Namespace) -> dict[str, float]:
    """Every hyper-parameter: the ones given, checked, over the defaults."""
    return dict(from_arguments(LearnerHyperparameters, args).hyper)
