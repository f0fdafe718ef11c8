"""`rankstream eval clicks`: learning from simulated clicks vs from judgments (NDCG@50 and
NDCG@10), the click arms learning through the product's click join and online worker."""

from __future__ import annotations

import argparse
from typing import Any

from rankstream.commands._collection_args import add_collection_arguments, run_collection_eval
from rankstream.commands._json_output import add_json_argument
from rankstream.commands._shared_args import add_seeds_argument


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_collection_arguments(parser)
    parser.add_argument(
        "--click-model",
        default="informational",
        metavar="M",
        help="perfect, navigational, informational, almost-random, or pbm:ETA "
        "(position-based, examination (1/rank)^ETA)",
    )
    parser.add_argument(
        "--impressions", type=int, default=20_000, help="impressions per seed (default 20,000)"
    )
    add_seeds_argument(parser)
    parser.add_argument(
        "--jobs",
        type=int,
        default=1,
        metavar="J",
        help="seeds run at once in worker processes (default 1)",
    )
    parser.add_argument(
        "--intervention-share",
        type=float,
        default=None,
        metavar="S",
        help="share of rankings serve randomizes for the join's propensity estimate "
        "(RANKSTREAM_INTERVENTION_SHARE of the deployments; default 0.05)",
    )
    parser.add_argument(
        "--plot", default=None, help="learning curves (default report/clicks_<collection>_<M>.png)"
    )
    add_json_argument(parser)


def _cell(cell: dict[str, Any]) -> str:
    std = "" if cell["std"] is None else f" ± {cell['std']:.4f}"
    return f"{cell['mean']:+.4f}{std}"


def print_summary(result: dict[str, Any]) -> None:
    """Per arm the NDCG@50 gain over Uni-Con (all impressions, and the last 10%)."""
    from rankstream.tables import print_method_table

    summary = result["summary"]
    rows = {
        name: {
            "NDCG@50 gain": _cell(cell["ndcg_gain"]),
            "final gain": _cell(cell["final_ndcg_gain"]),
        }
        for name, cell in summary["arms"].items()
    }
    seeds = ", ".join(map(str, summary["seeds"]))
    uni_con = summary["uni_con"]["ndcg_at_50"]["mean"]
    title = (
        f"{result['click_model']} clicks on {result['collection']}, {result['impressions']} "
        f"impressions, seeds {seeds} (Uni-Con NDCG@50 {uni_con:.4f}; mean ± std)"
    )
    print_method_table(title, rows)
    for learner, family in summary["families"].items():
        shares = []
        for key, label in (("ndcg_gain", "all impressions"), ("final_ndcg_gain", "final")):
            cell = family[key]["with_pdgd"]
            share = cell["best_click_share_of_judged_gain"]
            shares.append(
                f"{label}: {cell['best_click_arm']} "
                f"{'n/a' if share is None else f'{share:.0%}'} of the judged gain"
            )
        control = family.get("judged_at_click_depth")
        if control is not None:
            share = control["ndcg_gain"]["best_click_share_of_judged_gain"]
            shares.append(
                f"{control['arm']} (no clicks) {'n/a' if share is None else f'{share:.0%}'}"
            )
        print(
            f"{learner}: {'; '.join(shares)}; "
            f"final IPS - naive {_cell(family['final_ips_minus_naive'])}"
        )
    reading = summary["pdgd_against_perfect_clicks"]
    measured, reference = reading["arms"]
    for cutoff in ("ndcg_at_10", "ndcg_at_50"):
        cells = reading[cutoff]
        print(
            f"{cutoff.replace('ndcg_at_', 'final NDCG@')}: {measured} "
            f"{_interval(cells[measured])}, {reference} {_interval(cells[reference])}, "
            f"difference {_interval(cells['difference'])} (bootstrap 95%)"
        )


def _interval(cell: dict[str, Any]) -> str:
    if cell["low"] is None:
        return f"{cell['mean']:.4f}"
    return f"{cell['mean']:.4f} [{cell['low']:.4f}, {cell['high']:.4f}]"


def run(args: argparse.Namespace) -> int:
    from rankstream.evals.clicks import DEFAULT_INTERVENTION_SHARE, evaluate_clicks

    model = args.click_model.replace(":", "-")
    return run_collection_eval(
        args,
        evaluate_clicks,
        print_summary,
        f"report/clicks_{args.collection}_{model}.png",
        model=args.click_model,
        seeds=args.seeds,
        impressions=args.impressions,
        jobs=args.jobs,
        intervention_share=DEFAULT_INTERVENTION_SHARE
        if args.intervention_share is None
        else args.intervention_share,
    )
