"""`rankstream eval http-engine`: an outside engine's clicks through `serve`'s HTTP API.

Its own collection, per-query min-max features, its own width and position- and
trust-biased users (`harness.http_click_engine`); a fresh embedded `rankstream serve` per
run, or, with RANKSTREAM_KAFKA_BOOTSTRAP and RANKSTREAM_REDIS_URL set (`eval "$(rankstream
services up --env)"`), serve and its workers on the real services. No RANKSTREAM_*
setting reaches the deployment but its width and `--env` (default settings otherwise).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path
from typing import Any

from rankstream.commands._json_output import add_json_argument, print_json
from rankstream.commands._shared_args import (
    add_click_models_argument,
    add_seeds_argument,
    click_models,
)
from rankstream.commands._usage import UsageError

DEFAULT_USERS = ("informational", "navigational", "almost-random")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_click_models_argument(
        parser,
        "informational, navigational, almost-random or pbm:ETA:C0,C1,C2[:S0,S1,S2] "
        "(examine rank k with (1/k)^ETA, click grade g with Cg, stop after it with Sg); "
        "space- or comma-separated (default all three named)",
    )
    add_seeds_argument(parser)
    parser.add_argument("--impressions", type=int, default=6_000, help="per run (6,000)")
    parser.add_argument(
        "--checkpoints",
        type=int,
        nargs="*",
        default=[],
        help="impressions at which fresh queries are also measured (the end always is)",
    )
    parser.add_argument("--width", type=int, default=36, help="the engine's phi width (36)")
    parser.add_argument("--fresh", type=int, default=300, help="held-out queries (300)")
    parser.add_argument(
        "--reference-every",
        type=int,
        default=1,
        metavar="N",
        help="rank every Nth user query with Uni-Con too, for the users' figures paired "
        "with Uni-Con's (0: none; default 1)",
    )
    parser.add_argument(
        "--env",
        action="append",
        default=[],
        metavar="RANKSTREAM_NAME=VALUE",
        help="a setting for the deployment beyond its width (repeatable; default none)",
    )
    parser.add_argument(
        "--workdir", default=None, help="logs and data of each run (default a temporary dir)"
    )
    add_json_argument(parser)


def _env(given: list[str]) -> dict[str, str]:
    env = {}
    for item in given:
        name, _, value = item.partition("=")
        if not name.startswith("RANKSTREAM_") or not _:
            raise UsageError(f"--env {item!r}: RANKSTREAM_NAME=VALUE")
        env[name] = value
    return env


def print_summary(report: dict[str, Any]) -> None:
    print(f"{report['deployment']}, width {report['width']}, env {report['env'] or 'none'}")
    for name, result in report["click_models"].items():
        summary = result["summary"]
        print(f"{name}: median switch {summary['median_switch']}, "
              f"champions {summary['final_champions']}")  # fmt: skip
        for mark, models in summary["checkpoints"].items():
            cells = "  ".join(f"{m} {v['worst']:+.3f}" for m, v in models.items())
            print(f"  {mark:>6} worst vs Uni-Con: {cells}")
        print(f"  users vs Uni-Con, whole run {summary['users_whole_run_vs_uni_con']}, "
              f"last 5000 {summary['users_last_5000_vs_uni_con']}")  # fmt: skip


def run(args: argparse.Namespace) -> int:
    from rankstream.evals.http_engine import evaluate_http_engine
    from rankstream.harness.http_click_engine import ClickModel, EngineOptions
    from rankstream.stream.settings import Settings

    names = click_models(args.click_model, DEFAULT_USERS)
    try:
        for name in names:
            ClickModel.parse(name)
        options = EngineOptions(
            width=args.width,
            impressions=args.impressions,
            checkpoints=tuple(args.checkpoints),
            fresh=args.fresh,
            reference_every=args.reference_every,
        )
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    env = _env(args.env)
    with tempfile.TemporaryDirectory(prefix="http-engine-") as scratch:
        report = evaluate_http_engine(
            Settings.from_env(),
            names,
            args.seeds,
            options,
            Path(args.workdir or scratch),
            env,
            progress=lambda line: print(line, file=sys.stderr, flush=True),
        )
    if args.json:
        print_json(report)
    else:
        print_summary(report)
    return 0
