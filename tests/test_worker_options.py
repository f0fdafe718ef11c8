"""One options declaration per long-running command: flags and RANKSTREAM_* variables from it.

Flag beats variable beats default; a bad value, whichever way it came, is one line naming
the flag and the variable (exit 2); and a new worker is a dataclass, a start function and
one `long_running` line (the toy worker below is declared in this file alone).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
from dataclasses import dataclass

import pytest

from rankstream.cli import COMMANDS, build_parser, main
from rankstream.commands._launch import Launch, long_running, variables_for
from rankstream.commands.record import RecordOptions
from rankstream.commands.serve import ServeOptions
from rankstream.stream.settings import ENV_PREFIX, VARIABLES
from rankstream.workers.batch_worker_options import BatchOptions
from rankstream.workers.evaluator_options import EvaluatorOptions
from rankstream.workers.online_worker_options import WorkerOptions
from rankstream.workers.options import from_arguments, option, specs, to_argv
from rankstream.workers.simulator_options import SimulateOptions

LONG_RUNNING = {
    ("worker", "online"): WorkerOptions,
    ("worker", "batch"): BatchOptions,
    ("worker", "evaluator"): EvaluatorOptions,
    ("serve",): ServeOptions,
    ("simulate",): SimulateOptions,
    ("record",): RecordOptions,
}


def test_every_long_running_command_starts_through_the_launcher():
    for words in LONG_RUNNING:
        module = __import__(f"rankstream.commands.{COMMANDS[words][0]}", fromlist=["run"])
        assert module.run.__qualname__ == "long_running.<locals>.run", words


def _batch(argv: list[str]) -> BatchOptions:
    args = build_parser(("worker", "batch")).parse_args(["worker", "batch", *argv])
    return from_arguments(BatchOptions, args, variables_for("worker batch"))


def test_a_flag_beats_its_variable_which_beats_the_default(monkeypatch):
    assert _batch([]).reservoir == 5000
    monkeypatch.setenv("RANKSTREAM_BATCH_RESERVOIR", "700")
    monkeypatch.setenv("RANKSTREAM_BATCH_MODELS", "rankmkl")
    monkeypatch.setenv("RANKSTREAM_BATCH_MKL_KERNEL", "chi2")
    assert (_batch([]).reservoir, _batch([]).models, _batch([]).rankmkl.kernel) == (
        700, ("rankmkl",), "chi2",
    )  # fmt: skip
    assert _batch(["--reservoir", "900", "--mkl-kernel", "linear"]).reservoir == 900
    assert _batch(["--mkl-kernel", "linear"]).rankmkl.kernel == "linear"
    monkeypatch.setenv("RANKSTREAM_BATCH_REFIT_SECONDS", "none")
    assert _batch([]).refit_seconds is None and _batch(["--refit-seconds", "3"]).refit_seconds == 3


@pytest.mark.parametrize(
    "variable, value, message",
    [
        (
            "RANKSTREAM_BATCH_RESERVOIR", "many",
            "rankstream: --reservoir / RANKSTREAM_BATCH_RESERVOIR must be an integer, "
            "got 'many'",
        ),
        (
            "RANKSTREAM_BATCH_RESERVOIR", "0",
            "rankstream: bad option: reservoir must be >= 1, got 0 "
            "(--reservoir / RANKSTREAM_BATCH_RESERVOIR)",
        ),
        (
            "RANKSTREAM_BATCH_MODELS", "rankmkl,nope",
            "rankstream: unknown --models nope; choose from cmds_dml, rankmkl "
            "(--models / RANKSTREAM_BATCH_MODELS)",
        ),
        (
            "RANKSTREAM_BATCH_MKL_KERNEL", "rbf",
            "rankstream: --mkl-kernel / RANKSTREAM_BATCH_MKL_KERNEL must be one of linear, "
            "chi2, got 'rbf'",
        ),
    ],
)  # fmt: skip
def test_a_bad_variable_is_one_line_naming_the_flag_and_the_variable(
    variable, value, message, monkeypatch, capsys
):
    monkeypatch.setenv(variable, value)
    assert main(["worker", "batch"]) == 2
    captured = capsys.readouterr()
    assert captured.out == "" and captured.err == message + "\n"


def test_a_bad_flag_takes_the_same_path(capsys):
    assert main(["worker", "online", "--poll-ms", "soon"]) == 2
    assert capsys.readouterr().err == (
        "rankstream: --poll-ms / RANKSTREAM_ONLINE_POLL_MS must be an integer, got 'soon'\n"
    )


def test_a_bool_option_is_set_either_way(monkeypatch):
    def online(argv: list[str]) -> WorkerOptions:
        args = build_parser(("worker", "online")).parse_args(["worker", "online", *argv])
        return from_arguments(WorkerOptions, args, variables_for("worker online"))

    monkeypatch.setenv("RANKSTREAM_ONLINE_GROUP", "g")
    monkeypatch.setenv("RANKSTREAM_ONLINE_PER_PARTITION", "yes")
    assert online([]).per_partition and online([]).group == "g"
    assert not online(["--no-per-partition"]).per_partition
    monkeypatch.setenv("RANKSTREAM_ONLINE_PER_PARTITION", "maybe")
    with pytest.raises(ValueError, match="--per-partition / RANKSTREAM_ONLINE_PER_PARTITION"):
        online([])


def test_a_required_option_may_come_from_its_variable(monkeypatch, tmp_path, capsys):
    args = build_parser(("record",)).parse_args(["record"])
    with pytest.raises(ValueError, match=r"--out is required \(--out / RANKSTREAM_RECORD_OUT\)"):
        from_arguments(RecordOptions, args, variables_for("record"))
    monkeypatch.setenv("RANKSTREAM_RECORD_OUT", str(tmp_path))
    monkeypatch.setenv("RANKSTREAM_RECORD_MESSAGES_PER_FILE", "7")
    options = from_arguments(RecordOptions, args, variables_for("record"))
    assert options.out == str(tmp_path) and options.recorder.messages_per_file == 7


def test_serve_listens_where_the_deployment_settings_say_unless_told(monkeypatch):
    def serve(argv: list[str]) -> ServeOptions:
        args = build_parser(("serve",)).parse_args(["serve", *argv])
        return from_arguments(ServeOptions, args, variables_for("serve"))

    assert (serve([]).host, serve([]).port) == ("127.0.0.1", 8000)
    monkeypatch.setenv("RANKSTREAM_API_PORT", "8123")
    monkeypatch.setenv("RANKSTREAM_SERVE_POLL_SECONDS", "0.5")
    assert (serve([]).port, serve([]).poll_seconds) == (8123, 0.5)
    assert serve(["--port", "0"]).port == 0


@pytest.mark.parametrize("words", sorted(LONG_RUNNING), ids=" ".join)
def test_every_option_round_trips_through_its_flags(words):
    """`to_argv` spells every option (of the defaults: harness.chaos's round trip of a
    worker's non-default options is in tests/test_chaos.py); parsing it back gives them."""
    cls = LONG_RUNNING[words]
    required = {"out": "/tmp/unused"}
    options = cls(
        **{f.name: required[f.name] for f in dataclasses.fields(cls) if f.name in required}
    )
    args = build_parser(words).parse_args([*words, *to_argv(options)])
    assert from_arguments(cls, args) == options


def test_no_command_variable_shadows_a_deployment_setting():
    """A command's variables are its own, but for those declared as a setting's (serve's
    RANKSTREAM_API_HOST/PORT); and no two long-running commands share a prefix."""
    settings = {ENV_PREFIX + name for name, _check in VARIABLES.values()}
    shared = set()
    for words in LONG_RUNNING:
        for spec in specs(LONG_RUNNING[words], variables_for(" ".join(words))):
            if spec.variable in settings:
                shared.add(spec.variable)
    assert shared == {"RANKSTREAM_API_HOST", "RANKSTREAM_API_PORT"}
    prefixes = [variables_for(" ".join(words)) for words in LONG_RUNNING]
    assert len(set(prefixes)) == len(prefixes)


# -- a new worker: a dataclass, a start function and one line -------------------------------
@dataclass(frozen=True)
class EchoOptions:
    """A toy worker's options."""

    times: int = option(2, "how many echoes", metavar="N")
    word: str = option("hello", "what to echo")

    def __post_init__(self) -> None:
        if self.times < 1:
            raise ValueError(f"times must be >= 1, got {self.times}")


class Echo:
    """The toy worker: says its word `times` times."""

    def __init__(self, launch: Launch) -> None:
        self.options, self.signals, self.said = launch.options, False, []

    def install_signal_handlers(self) -> None:
        self.signals = True

    def run(self) -> int:
        assert self.signals  # the launcher installs them before it runs the worker
        self.said = [self.options.word] * self.options.times
        return 0

    def report(self) -> dict:
        return {"said": self.said}


add_echo_arguments, run_echo = long_running("worker echo", EchoOptions, Echo, "at exit: echoes")


def test_a_new_worker_is_a_dataclass_a_start_and_one_line(monkeypatch, capsys, caplog):
    parser = argparse.ArgumentParser()
    add_echo_arguments(parser)
    help_text = " ".join(parser.format_help().split())
    assert "how many echoes (default 2; $RANKSTREAM_ECHO_TIMES)" in help_text
    monkeypatch.setenv("RANKSTREAM_ECHO_WORD", "hi")
    monkeypatch.setenv("RANKSTREAM_ECHO_TIMES", "3")
    with caplog.at_level("INFO", logger="rankstream.worker.echo"):
        assert run_echo(parser.parse_args(["--times", "1", "--json"])) == 0
    assert json.loads(capsys.readouterr().out) == {"said": ["hi"]}
    (starting,) = [r for r in caplog.records if r.getMessage() == "starting"]
    fields = starting._rankstream_fields  # what the JSON line carries (telemetry.structured_log)
    assert fields["options"] == {"times": 1, "word": "hi"} and fields["kafka"] == "embedded"
