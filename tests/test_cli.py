"""The command registry: every command exists, parses, and keeps --help cheap."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from rankstream.cli import COMMANDS, build_parser


def test_every_registered_command_has_its_module_functions():
    for words, (module_name, _help) in COMMANDS.items():
        module = __import__(f"rankstream.commands.{module_name}", fromlist=["run"])
        assert callable(module.add_arguments), words
        assert callable(module.run), words


@pytest.mark.parametrize("words", sorted(COMMANDS), ids=lambda w: " ".join(w))
def test_every_command_prints_help(words, capsys):
    with pytest.raises(SystemExit) as exit_info:
        build_parser().parse_args([*words, "--help"])
    assert exit_info.value.code == 0
    assert "usage: rankstream " + " ".join(words) in capsys.readouterr().out


def test_the_module_docstring_lists_the_commands_as_they_are():
    """Every command of `COMMANDS`, and no other, in the docstring's list: a word, or a
    group's word followed by its sub-commands joined by "|" (or ", " for siblings)."""
    import re

    import rankstream.cli as cli

    listing = cli.__doc__.split("\n\n")[2]  # the indented block after "Its commands"
    listed: set[tuple[str, ...]] = set()
    for line in listing.splitlines():
        first = line.strip().split("  ")[0]
        if not line.startswith("    ") or line.startswith("      ") or not first:
            continue  # a wrapped description
        for entry in re.split(r",\s*", first):
            head, _, rest = entry.partition(" ")
            listed |= {(head, sub) for sub in rest.split("|")} if rest else {(head,)}
    assert listed == set(COMMANDS)


def test_design_md_commands_are_all_registered():
    """docs/architecture.md's CLI contract names these command words."""
    contract = {
        ("demo",),
        ("eval", "cbir"),
        ("eval", "dml"),
        ("eval", "mkl"),
        ("bench", "learners"),
        ("bench", "pipeline"),
        ("simulate",),
        ("worker", "online"),
        ("worker", "batch"),
        ("worker", "evaluator"),
        ("record",),
        ("replay",),
        ("model", "show"),
        ("services", "up"),
        ("services", "down"),
    }
    assert contract <= set(COMMANDS)


def test_help_does_not_import_the_heavy_stack():
    """`rankstream --help` must stay fast: no numba, pyarrow or kafka at parse time."""
    code = (
        "import sys; from rankstream.cli import build_parser; build_parser(); "
        "names = ('numba', 'pyarrow', 'kafka', 'sklearn', 'redis'); "
        "heavy = [m for m in names if m in sys.modules]; "
        "print(','.join(heavy))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == ""


def test_version_prints_the_package_version(capsys):
    from rankstream import __version__

    with pytest.raises(SystemExit) as exit_info:
        build_parser().parse_args(["--version"])
    assert exit_info.value.code == 0
    assert capsys.readouterr().out.strip() == f"rankstream {__version__}"


def test_every_default_is_shown_in_help(capsys):
    """Defaults appear in --help, written by the option or added by the formatter."""
    with pytest.raises(SystemExit):
        build_parser().parse_args(["worker", "batch", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "reservoir sampling seed (RankMKL's pair sampling too) (default 0;" in text
    assert "(default 5000;" in text and "(default: 5000)" not in text  # never twice
    assert "$RANKSTREAM_BATCH_RESERVOIR" in text  # and the variable that sets it


def test_the_embedded_store_is_named_when_no_services_are_configured():
    env = {k: v for k, v in os.environ.items() if not k.startswith("RANKSTREAM_")}
    done = subprocess.run(
        [sys.executable, "-m", "rankstream", "model", "show", "opar1"],
        capture_output=True, text=True, env=env, timeout=120,
    )  # fmt: skip
    assert done.returncode == 1
    assert "RANKSTREAM_REDIS_URL is unset: using the embedded model store" in done.stderr
    assert "no stored model opar1" in done.stderr


def _leaf_parsers(parser, words=()):
    """(command words, parser) of every command under `parser`, walking the subparsers."""
    import argparse

    subparsers = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    if not subparsers:
        yield words, parser
    for action in subparsers:
        for word, child in action.choices.items():
            yield from _leaf_parsers(child, (*words, word))


def _shown(value) -> list[str]:
    """The ways help may spell a default: 2000, 2,000, 0.0001, 1e-04, a,b or a b."""
    if isinstance(value, (list, tuple)):
        return [",".join(map(str, value)), " ".join(map(str, value))]
    spellings = [str(value)]
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        spellings += [f"{value:g}", f"{value:,}", f"{value:,g}"]
    return spellings


def _option_problems(words, parser) -> list[str]:
    """Options of one command without help, without their default, or hiding their choices."""
    import argparse

    problems = []
    for action in parser._actions:
        name = " ".join([*words, "/".join(action.option_strings) or action.dest])
        if not action.help or action.help == argparse.SUPPRESS:
            problems.append(f"{name}: no help text")
            continue
        formatter = parser._get_formatter()
        shown = " ".join(formatter._format_action(action).split())
        default = action.default
        quiet = default is None or default is False or default == argparse.SUPPRESS
        if not quiet and not any(s in shown for s in _shown(default)):
            problems.append(f"{name}: default {default!r} not in its help: {shown!r}")
        if not quiet and "default" not in shown.lower():
            problems.append(f"{name}: its help never says 'default': {shown!r}")
        missing = [str(c) for c in action.choices or () if str(c) not in shown]
        if missing and not isinstance(action, argparse._SubParsersAction):
            problems.append(f"{name}: choices {missing} not in its help: {shown!r}")
    return problems


def test_every_option_of_every_command_has_help_its_default_and_its_choices(monkeypatch):
    """Walk the whole parser tree: help text on every option and argument, the default of
    every option that has one, and every choice, in what `--help` prints for it."""
    monkeypatch.setenv("COLUMNS", "1000")  # no wrapping: a value is never cut at a hyphen
    leaves = list(_leaf_parsers(build_parser()))
    assert {words for words, _ in leaves} == set(COMMANDS)
    problems = [p for words, parser in leaves for p in _option_problems(words, parser)]
    assert not problems, "\n".join(problems)


def test_the_help_walk_catches_each_kind_of_gap(monkeypatch):
    """The walk above fails on a missing help, a wrong or missing default, a hidden choice."""
    import argparse

    from rankstream.cli import DefaultsFormatter

    monkeypatch.setenv("COLUMNS", "1000")
    parser = argparse.ArgumentParser(formatter_class=DefaultsFormatter)
    parser.add_argument("--bare", type=int, default=3)
    parser.add_argument("--stale", type=int, default=2000, help="rows (default 500)")
    parser.add_argument("--hidden", choices=["a", "b"], metavar="X", default="a", help="x")
    parser.add_argument("--fine", type=float, default=1e-4, help="a rate")
    problems = _option_problems(("t",), parser)
    assert [p.split(":")[0] for p in problems] == ["t --bare", "t --stale", "t --hidden"]


# Arguments a command cannot parse without (the settings are checked after parsing).
REQUIRED_ARGUMENTS = {
    ("record",): ["--out", "unused"],
    ("replay",): ["unused"],
    ("eval", "counterfactual"): ["unused"],
    ("model", "show"): ["opr"],
    ("model", "pin"): ["opr", "1"],
    ("model", "unpin"): ["opr"],
    ("model", "history"): ["opr"],
}


@pytest.mark.parametrize("words", sorted(COMMANDS), ids=lambda w: " ".join(w))
def test_every_command_refuses_a_bad_setting_in_one_line_with_exit_2(words, monkeypatch, capsys):
    from rankstream.cli import main

    monkeypatch.setenv("RANKSTREAM_METRICS_PORT", "abc")
    assert main([*words, *REQUIRED_ARGUMENTS.get(words, [])]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err == (
        "rankstream: RANKSTREAM_METRICS_PORT must be an integer port 0-65535 "
        "(0: any free port), got 'abc'\n"
    )


def test_the_program_prints_one_line_and_exits_2_on_a_bad_setting():
    env = {**os.environ, "RANKSTREAM_METRICS_PORT": "abc"}
    done = subprocess.run(
        [sys.executable, "-m", "rankstream", "worker", "online"],
        capture_output=True, text=True, env=env, timeout=120,
    )  # fmt: skip
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr.splitlines() == [
        "rankstream: RANKSTREAM_METRICS_PORT must be an integer port 0-65535 "
        "(0: any free port), got 'abc'"
    ]


@pytest.mark.parametrize(
    "argv, message",
    [
        (["worker", "online", "--C", "nan"], "rankstream: bad option: "),
        (["worker", "batch", "--models", "cmds_dml,nope"], "rankstream: unknown --models nope"),
        (["bench", "learners", "--repeats", "0"], "rankstream: --triplets and --repeats must"),
    ],
)
def test_a_refused_option_takes_the_same_one_line_path(argv, message, capsys):
    from rankstream.cli import main

    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith(message) and err.count("\n") == 1, err
