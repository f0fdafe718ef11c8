"""`rankstream eval stream`: the §5.5 loop per learner on each collection (NDCG@50, mAP gains)."""

from __future__ import annotations

import argparse
from typing import Any

from rankstream.commands._collection_args import collection_checked, collections_cache
from rankstream.commands._json_output import add_json_argument, print_report
from rankstream.simulators.catalog import COLLECTIONS


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--collections",
        nargs="+",
        choices=list(COLLECTIONS),
        default=list(COLLECTIONS),
        metavar="NAME",
        help=f"collections to stream (default all: {' '.join(COLLECTIONS)})",
    )
    parser.add_argument(
        "--seeds",
        type=int,
        nargs="+",
        default=None,
        help="query-stream seeds (default 0 1 2; with --grid the validation seeds 100 101)",
    )
    parser.add_argument(
        "--queries", type=int, default=2000, help="queries per stream (default 2000, as in §5.5)"
    )
    parser.add_argument(
        "--grid",
        action="store_true",
        help="every point of eval cbir's validation grids, and the value each "
        "hyper-parameter would default to (the mean gain over collections and seeds)",
    )
    add_json_argument(parser)


def _cell(cell: dict[str, float | None], signed: bool = True, unit: str = "") -> str:
    """ "+0.0123 ± 0.0010" (a gain), "0.8010 ± 0.0040" (a score), "+1.5% ± 0.1"."""
    digits = 1 if unit else 4
    std = "" if cell["std"] is None else f" ± {cell['std']:.{digits}f}"
    return f"{cell['mean']:{'+' if signed else ''}.{digits}f}{unit}{std}"


def print_summary(result: dict[str, Any]) -> None:
    """Per collection: Uni-Con, then each learner's NDCG@50 and mAP gain (mean ± std)."""
    from rankstream.tables import print_method_table

    for collection, summary in result["summary"].items():
        rows: dict[str, dict[str, Any]] = {
            "Uni-Con": {
                "NDCG@50": _cell(summary["uni_con"]["ndcg_at_50"], signed=False),
                "mAP": _cell(summary["uni_con"]["map"], signed=False),
            }
        }
        for name, cell in summary["variants"].items():
            rows[name] = {
                "NDCG@50 gain": _cell(cell["ndcg_gain"]),
                "NDCG@50 %": _cell(cell["ndcg_gain_percent"], unit="%"),
                "mAP gain": _cell(cell["map_gain"]),
                "mAP %": _cell(cell["map_gain_percent"], unit="%"),
            }
        seeds = ", ".join(map(str, summary["seeds"]))
        print_method_table(f"§5.5 stream on {collection}, seeds {seeds} (mean ± std)", rows)
    for name, choice in result.get("chosen", {}).items():
        means = ", ".join(f"{v:g}: {g:+.4f}" for v, g in sorted(choice["mean_gain"].items()))
        print(f"{name} = {choice['value']:g} (mean NDCG@50 gain per value: {means})")


def run(args: argparse.Namespace) -> int:
    from rankstream.evals.stream import VALIDATION_SEEDS, evaluate_stream

    seeds = args.seeds or (list(VALIDATION_SEEDS) if args.grid else [0, 1, 2])
    with collection_checked():
        result = evaluate_stream(
            args.collections,
            seeds,
            collections_cache(),
            grid=args.grid,
            queries=args.queries,
            progress=not args.json,
        )
    return print_report(args, result, print_summary)
