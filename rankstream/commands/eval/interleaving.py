"""`rankstream eval interleaving`: impressions to a correct decision, interleaving vs A/B."""

from __future__ import annotations

import argparse
from typing import Any

from rankstream.commands._collection_args import add_collection_arguments, run_collection_eval
from rankstream.commands._json_output import add_json_argument
from rankstream.commands._shared_args import (
    add_click_models_argument,
    add_seed_argument,
    click_models,
)

DEFAULT_CLICK_MODELS = ("informational", "navigational")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_collection_arguments(parser)
    add_click_models_argument(
        parser,
        "one or more of perfect, navigational, informational, almost-random, pbm:ETA, "
        "space- or comma-separated, repeatable (default informational,navigational)",
    )
    parser.add_argument("--runs", type=int, default=100, help="runs per case (default 100)")
    parser.add_argument(
        "--aa-runs",
        type=int,
        default=None,
        help="runs of the A/A case (default --runs): a false-decision rate is told from "
        "alpha only over many runs",
    )
    parser.add_argument(
        "--differences",
        type=float,
        nargs="+",
        default=[0.005, 0.01, 0.02],
        help="target true NDCG@50 differences (default 0.005 0.01 0.02)",
    )
    parser.add_argument(
        "--interleaving-horizon",
        type=int,
        default=None,
        help="impressions per interleaving run at most (default 50,000)",
    )
    parser.add_argument(
        "--ab-horizon",
        type=int,
        default=None,
        help="impressions per A/B run at most, both arms (default 1,000,000)",
    )
    parser.add_argument("--queries", type=int, default=500, help="the users' query pool (500)")
    add_seed_argument(parser)
    parser.add_argument(
        "--plot", default=None, help="the plot (default report/interleaving_<collection>.png)"
    )
    add_json_argument(parser)


def print_summary(result: dict[str, Any]) -> None:
    """Per click model and difference: median / p90 impressions, errors; A/A."""
    test = result["test"]
    print(f"{result['collection']}: {result['runs']} runs per case, alpha {test['alpha']}")
    for name, cases in result["click_models"].items():
        for key, pair in result["pairs"].items():
            cells = cases[key]
            row = "  ".join(
                f"{m} median {c['median_impressions']} p90 {c['p90_impressions']} "
                f"errors {c['error_rate']:.2f}"
                for m, c in cells.items()
            )
            print(f"{name} dNDCG {pair['ndcg_difference']:.4f}: {row}")
        for key, ratio in cases["ab_over_interleaving"].items():
            if ratio is not None:
                bound = ">= " if ratio["lower_bound"] else ""
                print(
                    f"{name} dNDCG {result['pairs'][key]['ndcg_difference']:.4f}: "
                    f"A/B / interleaving impressions {bound}{ratio['ratio']:.1f}x"
                )
        aa = cases["aa"]
        print(
            f"{name} A/A false decisions ({aa['interleaving']['runs']} runs): interleaving "
            f"{aa['interleaving']['false_decisions']:.3f} (95% upper "
            f"{aa['interleaving']['false_decision_bound']['upper']:.4f}), A/B "
            f"{aa['ab']['false_decisions']:.3f}"
        )


def run(args: argparse.Namespace) -> int:
    from rankstream.evals.interleaving_eval import evaluate_interleaving
    from rankstream.selection.judged_race import ChampionPolicy
    from rankstream.stream.settings import Settings

    return run_collection_eval(
        args,
        evaluate_interleaving,
        print_summary,
        f"report/interleaving_{args.collection}.png",
        models=click_models(args.click_model, DEFAULT_CLICK_MODELS),
        test=ChampionPolicy.from_settings(Settings.from_env()).test,
        runs=args.runs,
        aa_runs=args.aa_runs,
        targets=args.differences,
        horizons={
            method: limit
            for method, limit in (
                ("interleaving", args.interleaving_horizon),
                ("ab", args.ab_horizon),
            )
            if limit is not None
        },
        seed=args.seed,
        pool_queries=args.queries,
    )
