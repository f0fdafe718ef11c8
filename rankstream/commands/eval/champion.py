"""`rankstream eval champion`: false switches and queries-to-switch, the race's test by
betting beside the mSPRT and the rolling-mean rule it replaced.

Runs `rankstream.evals.champion` over simulated score streams and the demo's real ones
(a demo run of `--demo-queries` queries first; `--no-real` skips it) and saves
DIR/champion.png (share switched within 500 queries per effect, every policy).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from rankstream.commands._json_output import add_json_argument, print_json


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--runs", type=int, default=1000, help="streams per case (default 1000)")
    parser.add_argument(
        "--horizon", type=int, default=2000, help="paired queries per stream (default 2000)"
    )
    parser.add_argument(
        "--effects",
        type=float,
        nargs="+",
        default=[0.005, 0.01, 0.02],
        help="challengers' true NDCG@50 gains (default 0.005 0.01 0.02)",
    )
    parser.add_argument(
        "--spreads",
        type=float,
        nargs="+",
        default=[0.03, 0.05, 0.1],
        help="simulated per-query spreads of the difference (default 0.03 0.05 0.1)",
    )
    parser.add_argument(
        "--confirm-runs",
        type=int,
        default=5000,
        help="fresh runs of each policy's worst real pair (default 5000)",
    )
    parser.add_argument(
        "--demo-queries", type=int, default=1000, help="queries of the demo run (default 1000)"
    )
    parser.add_argument(
        "--variance-prior",
        type=float,
        default=None,
        help="the mSPRT's variance prior (default: ranking.sequential.VARIANCE_PRIOR; 0: plain)",
    )
    parser.add_argument("--no-real", action="store_true", help="simulated streams only")
    parser.add_argument("--seed", type=int, default=0, help="seed (default 0)")
    parser.add_argument("--out", default="report", metavar="DIR", help="plot directory")
    add_json_argument(parser)


def run(args: argparse.Namespace) -> int:
    from rankstream.commands._usage import options_checked
    from rankstream.evals.champion import ChampionEvalOptions, evaluate_champion
    from rankstream.plots import plot_champion_race
    from rankstream.stream.settings import Settings

    settings = Settings.from_env()
    with options_checked():
        options = ChampionEvalOptions(
            runs=args.runs,
            horizon=args.horizon,
            effects=tuple(args.effects),
            spreads=tuple(args.spreads),
            alpha=settings.champion_alpha,
            delta=settings.champion_delta,
            **({} if args.variance_prior is None else {"variance_prior": args.variance_prior}),
            confirm_runs=args.confirm_runs,
            demo_queries=args.demo_queries,
            seed=args.seed,
            real=not args.no_real,
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
