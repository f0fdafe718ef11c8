"""`rankstream eval champion`: false switches and queries-to-switch, the race's test by
betting beside the mSPRT and the rolling-mean rule it replaced.

Runs `rankstream.evals.champion_eval` over simulated score streams and the demo's real ones
(a demo run of `--demo-queries` queries first; `--no-real` skips it) and saves
DIR/champion.png (share switched within 500 queries per effect, every policy).
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import replace
from pathlib import Path

from rankstream.commands._json_output import print_json
from rankstream.commands._options import add_options, chosen
from rankstream.evals.champion_eval_options import ChampionEvalOptions


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_options(parser, ChampionEvalOptions)
    parser.add_argument("--out", default="report", metavar="DIR", help="plot directory")


def run(args: argparse.Namespace) -> int:
    from rankstream.evals.champion_eval import evaluate_champion
    from rankstream.plots import plot_champion_race
    from rankstream.stream.settings import Settings

    settings = Settings.from_env()
    options = replace(
        chosen(ChampionEvalOptions, args),
        alpha=settings.champion_alpha,
        delta=settings.champion_delta,
    )
    report = evaluate_champion(options, progress=not args.json)
    report["plot"] = str(plot_champion_race(report, Path(args.out) / "champion.png"))
    if args.json:
        print_json(report)
        return 0
    for stream, result in [*report["simulated"].items(), *(
        [("real " + report["real"]["pair"], report["real"]["result"])] if "real" in report else []
    )]:  # fmt: skip
        print(f"{stream}:")
        for case, policies in result.items():
            cells = "  ".join(f"{p}: {v}" for p, v in policies.items())
            print(f"  {case:>6}  {cells}")
    print(f"targets: {report['targets']}; plot {report['plot']}", file=sys.stderr)
    return 0
