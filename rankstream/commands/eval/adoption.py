"""`rankstream eval adoption`: shadow mode, racing the engine, counterfactual estimates."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from rankstream.commands._json_output import add_json_argument, print_json
from rankstream.commands._shared_args import add_seed_argument, click_models


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--engine-ranker",
        default="single-descriptor",
        help="the simulated engine's own ranker: single-descriptor[:J] or "
        "grades-noise[:SIGMA] (default single-descriptor)",
    )
    parser.add_argument(
        "--users",
        default="informational",
        help="the shadow run's users (a click model; default informational)",
    )
    parser.add_argument(
        "--race-users",
        action="append",
        default=None,
        help="the races' users, comma-separated, repeatable (default informational)",
    )
    parser.add_argument(
        "--shadow-impressions",
        type=int,
        default=20_000,
        help="impressions of the shadow run (default 20,000)",
    )
    parser.add_argument(
        "--checkpoint",
        type=int,
        default=1000,
        help="impressions between held-out scorings (default 1000)",
    )
    parser.add_argument("--held-out", type=int, default=200, help="held-out queries (200)")
    parser.add_argument("--runs", type=int, default=50, help="races per kind of user (50)")
    parser.add_argument("--horizon", type=int, default=5000, help="impressions per race (5000)")
    parser.add_argument("--share", type=float, default=0.2, help="interleaving share (0.2)")
    parser.add_argument("--queries", type=int, default=200, help="the races' query pool (200)")
    parser.add_argument(
        "--images", type=int, default=20_000, help="synthetic collection size (default 20,000)"
    )
    add_seed_argument(parser)
    parser.add_argument("--plot", default=None, help="the shadow learning curve PNG")
    parser.add_argument("--detail", action="store_true", help="every run in the JSON")
    add_json_argument(parser)


def print_summary(result: dict[str, Any]) -> None:
    shadow = result["shadow"]
    print(
        f"shadow {shadow['engine_ranker']} {shadow['users']}: {shadow['impressions']} "
        f"impressions, shown == engine order {shadow['shown_equals_engine_order']:.4f}"
    )
    for users, cell in result["race"]["users"].items():
        cf = cell["counterfactual"]
        print(
            f"race {users}: {cell['switched_runs']}/{cell['runs']} left the engine "
            f"(upper {cell['left_engine_upper_95']:.4f}, alpha {cell['alpha']}), median "
            f"{cell['median_impressions_to_switch']}; counterfactual decided {cf['decided']} "
            f"sign {cf['sign_agreement']} coverage {cf['coverage']}"
        )


def run(args: argparse.Namespace) -> int:
    from rankstream.demo_pipeline import DemoOptions
    from rankstream.evals.adoption import evaluate_adoption
    from rankstream.stream.settings import Settings
    from rankstream.telemetry.structured_log import configure_logging
    from rankstream.workers.simulator import load_collection

    if (
        min(
            args.shadow_impressions,
            args.checkpoint,
            args.runs,
            args.horizon,
            args.held_out,
            args.queries,
        )
        < 1
        or not 0 < args.share <= 1
    ):
        print("rankstream: sizes must be >= 1 and --share in (0, 1]", file=sys.stderr)
        return 2
    configure_logging("ERROR")  # stderr: progress lines (refusals are WARNING)
    settings = Settings.from_env()
    served = load_collection(settings, DemoOptions(images=args.images).simulate_options(), False)
    result = evaluate_adoption(
        args.engine_ranker,
        args.users,
        click_models(args.race_users, ("informational",)),
        args.shadow_impressions,
        args.checkpoint,
        args.runs,
        args.horizon,
        args.share,
        args.seed,
        args.held_out,
        args.queries,
        settings,
        served.collection,
        served.index,
        progress=lambda line: print(line, file=sys.stderr, flush=True),
        plot_path=args.plot,
        detail=args.detail,
    )
    if args.json:
        print_json(result)
    else:
        print_summary(result)
    return 0
