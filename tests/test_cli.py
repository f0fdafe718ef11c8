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


def test_design_md_commands_are_all_registered():
    """DESIGN.md's CLI contract names these command words."""
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
    assert "reservoir sampling seed (default: 0)" in text
    assert "(default 5000)" in text and "(default: 5000)" not in text  # never twice


def test_the_embedded_store_is_named_when_no_services_are_configured():
    env = {k: v for k, v in os.environ.items() if not k.startswith("RANKSTREAM_")}
    done = subprocess.run(
        [sys.executable, "-m", "rankstream", "model", "show", "opar1"],
        capture_output=True, text=True, env=env, timeout=120,
    )  # fmt: skip
    assert done.returncode == 1
    assert "RANKSTREAM_REDIS_URL is unset: using the embedded model store" in done.stderr
    assert "no stored model opar1" in done.stderr
