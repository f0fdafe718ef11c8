"""The `rankstream` command line.

Its commands (`COMMANDS`, the one list; tests/test_cli.py checks this one against it):

    demo                      the embedded pipeline, no services
    simulate                  the CBIR engine and its users, producing feedback
    serve                     the HTTP API: rank, take feedback
    worker online|batch|evaluator|click-join
                              the long-running workers
    record, replay            logged streams to Parquet and back (or trained from)
    model show|list|pin|unpin|history
                              the stored models
    eval cbir|dml|mkl|stream|clicks|propensities|champion|interleaving
    eval http-engine|counterfactual|adoption
                              the papers' experiments, learning from clicks, propensity
                              estimates, the champion test, interleaving vs A/B on clicks,
                              an outside engine's clicks over HTTP, stored models'
                              click-DCG estimated from a recording, an engine's own
                              ranking as the incumbent (shadow, race, estimates)
    bench learners|pipeline|scaleout|replay|serve|ingest|clicks
                              the benchmarks (one JSON object each)
    services up|down|status   local Kafka, Redis and Prometheus
    chaos                     faults on the real pipeline, exactly-once checked

Each command lives in its own module under `rankstream.commands`, a group's commands in
the group's subpackage (`eval cbir` is `rankstream.commands.eval.cbir`), and exposes two
functions: `add_arguments(parser)` (cheap: no heavy imports) and `run(args) -> int`.
This file only maps command words to modules, so adding a command never touches the
others. Heavy imports (numba, pyarrow, kafka) happen inside `run`, which keeps
`rankstream --help` fast. When the command line names a command, only that command's
module is imported (its `add_arguments` fills its parser; the others keep their help
line), so a command's start-up does not pay for the other modules.
"""

from __future__ import annotations

import argparse
import atexit
import gc
import importlib
import os
import sys
from collections.abc import Sequence
from typing import NoReturn

from rankstream import __version__

# (command words) -> one-line help; the module is the words under rankstream.commands
_HELP: dict[tuple[str, ...], str] = {
    ("demo",): "embedded pipeline, no services; writes DIR/report.json and plots",
    ("eval", "cbir"): "online rankers vs baselines on a CBIR test bed",
    ("eval", "dml"): "cMDS-DML vs LDMLR vs Euclidean kNN (ordinal MAE)",
    ("eval", "mkl"): "RankMKL vs single features and concatenation (PubFig)",
    ("eval", "stream"): "§5.5 loop per learner, per collection (--grid)",
    ("eval", "clicks"): "learning from simulated clicks vs judgments (naive, IPS, PDGD)",
    ("eval", "propensities"): (
        "impressions the online propensity estimate needs (position-based users)"
    ),
    ("eval", "champion"): (
        "champion policy: A/A false switches, queries to switch (new test vs old)"
    ),
    ("eval", "interleaving"): (
        "impressions to a correct decision: interleaving vs A/B click-through rate"
    ),
    ("eval", "http-engine"): (
        "an outside engine's clicks through serve's HTTP API (own collection and users)"
    ),
    ("eval", "counterfactual"): (
        "stored models' click-DCG@k from a recording's impressions and clicks (IPS, SNIPS)"
    ),
    ("eval", "adoption"): (
        "an engine's own ranking as the incumbent: shadow, race, counterfactual estimates"
    ),
    ("bench", "learners"): "sequential throughput of the online learners",
    ("bench", "pipeline"): "produce -> Kafka -> learn -> checkpoint throughput",
    ("bench", "scaleout"): "throughput of 1/2/4 per-partition online workers",
    ("bench", "replay"): "train the four linear learners from a recorded log",
    ("bench", "serve"): "latency and requests/s of /v1/rank while models reload",
    ("bench", "ingest"): "judged queries/s through /v1/feedback into Kafka",
    ("bench", "clicks"): "click events/s through /v1/clicks to the click join",
    ("simulate",): "run the CBIR engine and its users; produce triplets",
    ("worker", "online"): "consume triplets, update online rankers",
    ("worker", "batch"): "reservoir sample; refit cMDS-DML and RankMKL",
    ("worker", "evaluator"): "score judged queries; export NDCG@50",
    ("worker", "click-join"): "join impressions and clicks into IPS-weighted triplets",
    ("record",): "write the triplet and query streams to Parquet",
    ("replay",): "feed a recorded log back into Kafka or train from it",
    ("model", "show"): "print a stored model's summary",
    ("model", "list"): "list every stored model: version, kind, NDCG@50, pin",
    ("model", "pin"): "serve a model at a fixed version (the evaluator goes on)",
    ("model", "unpin"): "serve a pinned model's newest version again",
    ("model", "history"): "a model's kept versions and its pins",
    ("serve",): "HTTP API: rank with the learned models, ingest feedback",
    ("services", "up"): "start local Kafka, Redis and Prometheus",
    ("services", "down"): "stop the local services",
    ("services", "status"): "print where the local services listen",
    ("chaos",): "kill/restart the online worker or the click join; check exactly-once",
}


def _module_of(words: tuple[str, ...]) -> str:
    """The module of a command, under `rankstream.commands`: `eval http-engine` is
    `eval.http_engine`."""
    return ".".join(word.replace("-", "_") for word in words)


# (command words) -> (module under rankstream.commands, one-line help)
COMMANDS: dict[tuple[str, ...], tuple[str, str]] = {
    words: (_module_of(words), text) for words, text in _HELP.items()
}


class DefaultsFormatter(argparse.HelpFormatter):
    """Every option's help ends with its default, unless the text already names one."""

    def _get_help_string(self, action: argparse.Action) -> str | None:
        text = action.help or ""
        default = action.default
        if "default" in text.lower() or any(default is v for v in (None, False, argparse.SUPPRESS)):
            return text
        if not action.option_strings and action.nargs is None:
            return text  # a required positional argument has no default to show
        return f"{text} (default: %(default)s)"


def build_parser(only: tuple[str, ...] | None = None) -> argparse.ArgumentParser:
    """The full parser; with `only` (a command's words) just that command gets its arguments."""
    parser = argparse.ArgumentParser(
        prog="rankstream", description="Learn image rankings from a stream of feedback."
    )
    parser.add_argument("--version", action="version", version=f"rankstream {__version__}")
    groups: dict[tuple[str, ...], argparse._SubParsersAction] = {
        (): parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    }
    for words, (module_name, help_text) in sorted(COMMANDS.items()):
        for depth in range(1, len(words)):
            prefix = words[:depth]
            if prefix not in groups:
                sub = groups[prefix[:-1]].add_parser(prefix[-1], help=f"{prefix[-1]} commands")
                groups[prefix] = sub.add_subparsers(
                    dest=f"command_{depth}", metavar="COMMAND", required=True
                )
        leaf = groups[words[:-1]].add_parser(
            words[-1],
            help=help_text,
            description=help_text,
            formatter_class=DefaultsFormatter,
        )
        if only is None or words == only:
            module = importlib.import_module(f"rankstream.commands.{module_name}")
            module.add_arguments(leaf)
        leaf.set_defaults(_module=module_name)
    return parser


def command_words(argv: Sequence[str]) -> tuple[str, ...] | None:
    """The registered command `argv` starts with (longest match), or None."""
    for depth in range(min(len(argv), max(map(len, COMMANDS))), 0, -1):
        if tuple(argv[:depth]) in COMMANDS:
            return tuple(argv[:depth])
    return None


def main(argv: Sequence[str] | None = None) -> int:
    """Parse, check the `RANKSTREAM_*` settings, run the command; its exit code.

    A bad setting or a refused option (`SettingsError`, `UsageError`), whenever it
    surfaces, is one line `rankstream: ...` on stderr and exit code 2; a command that
    could not be done (`CommandError`), one line and exit code 1.
    """
    from rankstream.commands._usage import CommandError, UsageError
    from rankstream.stream.settings import Settings, SettingsError

    argv = sys.argv[1:] if argv is None else list(argv)
    args = build_parser(command_words(argv)).parse_args(argv)
    try:
        Settings.from_env()  # every command refuses a bad setting before it starts work
        module = importlib.import_module(f"rankstream.commands.{args._module}")
        return int(module.run(args) or 0)
    except (SettingsError, UsageError, CommandError) as exc:
        print(f"rankstream: {exc}", file=sys.stderr)
        return 1 if isinstance(exc, CommandError) else 2


_program = False  # this process runs `program` (not `main` called in-process)
_teardown = True


def batch_job() -> bool:
    """A command that runs one batch job to completion calls this; True if it applied.

    Only when rankstream is the program itself (`python -m rankstream`), never for
    in-process callers of `main` (tests): the rest of the process runs without the
    cyclic garbage collector (start-up builds ~100k long-lived objects, numba's
    registries, that it would walk again and again to free almost nothing: ~0.1 s),
    and `program` exits without Python's module-by-module teardown (~0.15 s once numba
    is loaded; the OS frees it all at once). So the command must hold nothing whose
    finalizer matters at exit: no producer to flush, no socket or file to close.
    """
    global _teardown
    if not _program:
        return False
    gc.disable()
    _teardown = False
    return True


def program() -> NoReturn:
    """`python -m rankstream`: run `main`, then exit (at once after a batch job)."""
    global _program
    _program = True
    code = main()
    if _teardown:
        sys.exit(code)
    atexit._run_exitfuncs()  # what a normal exit runs first: logging.shutdown, finalizers
    try:
        sys.stdout.flush()
        sys.stderr.flush()
    except (OSError, ValueError):  # e.g. a closed pipe: Python's own exit status for it
        code = code or 120
    os._exit(code)


if __name__ == "__main__":
    program()
