"""`rankstream eval propensities`: impressions the online propensity estimate needs."""

from __future__ import annotations

import argparse
from typing import Any

from rankstream.commands._collection_args import add_collection_arguments, run_collection_eval
from rankstream.commands._json_output import add_json_argument
from rankstream.commands._shared_args import add_seeds_argument
from rankstream.ranking import INTERVENTIONS


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_collection_arguments(parser)
    parser.add_argument(
        "--click-model",
        nargs="+",
        default=["pbm:1"],
        metavar="pbm:ETA",
        help="position-based users, examination (1/rank)^ETA, one or more (default pbm:1)",
    )
    parser.add_argument(
        "--intervention",
        choices=INTERVENTIONS,
        default=INTERVENTIONS[0],
        help="serve's intervention into the click join's estimator: shuffle, the top 10 in "
        "a random order (RandTop-n, serve's default), or swap, ranks 1 and k",
    )
    parser.add_argument(
        "--share",
        "--swap-share",
        dest="share",
        type=float,
        default=None,
        metavar="S",
        help="share of the impressions randomized (default 0.05)",
    )
    parser.add_argument(
        "--impressions", type=int, default=1_000_000, help="per seed (default 1,000,000)"
    )
    parser.add_argument(
        "--check-every", type=int, default=10_000, help="impressions between checks (10,000)"
    )
    parser.add_argument(
        "--tolerance", type=float, default=0.10, help="relative error called close (0.10)"
    )
    add_seeds_argument(parser)
    parser.add_argument("--queries", type=int, default=500, help="the users' query pool (500)")
    parser.add_argument(
        "--plot", default=None, help="errors vs impressions (default report/propensities.png)"
    )
    add_json_argument(parser)


def _count(value: int | None) -> str:
    return "never" if value is None else f"{value:,}"


def print_summary(result: dict[str, Any]) -> None:
    """Per click model: impressions to within tolerance (slowest seed), errors at the end."""
    print(
        f"{result['intervention']} on {result['share']:.0%} of {result['impressions']:,} "
        f"impressions per seed, {result['collection']}; tolerance {result['tolerance']:.0%}"
    )
    for model, cell in result["click_models"].items():
        error = cell["max_relative_error"]
        print(
            f"{model}: every rank 1-{result['ranks']} first within at "
            f"{_count(cell['first_within_tolerance'])} impressions, stayed within from "
            f"{_count(cell['within_tolerance_from'])}; "
            f"worst error at the end {error['max']:.1%} (mean over seeds {error['mean']:.1%})"
        )


def run(args: argparse.Namespace) -> int:
    from rankstream.evals.propensities import DEFAULT_INTERVENTION_SHARE, evaluate_propensities

    return run_collection_eval(
        args,
        evaluate_propensities,
        print_summary,
        "report/propensities.png",
        models=args.click_model,
        seeds=args.seeds,
        intervention=args.intervention,
        impressions=args.impressions,
        share=DEFAULT_INTERVENTION_SHARE if args.share is None else args.share,
        check_every=args.check_every,
        tolerance=args.tolerance,
        pool_queries=args.queries,
    )
