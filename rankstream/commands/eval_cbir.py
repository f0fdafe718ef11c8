"""`rankstream eval cbir`: online rankers vs Uni-Con, Best-Fea and RankSVM (mAP, NDCG@50)."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from rankstream.evals.cbir_datasets import DATASETS


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--dataset", choices=list(DATASETS), default="digits")
    parser.add_argument("--seed", type=int, default=0, help="splits, sampling and stream order")
    parser.add_argument(
        "--train-rows", type=int, default=None, help="training triplet rows (default 200,000)"
    )
    parser.add_argument(
        "--max-queries", type=int, default=None, help="cap validation and test queries each"
    )
    parser.add_argument(
        "--large-scale",
        action="store_true",
        help="train on the 3,000,000 triplets of the paper's §5.4 (its Table 3 beside the times)",
    )
    parser.add_argument("--json", action="store_true", help="print one JSON object only")


def run_evaluation(args: argparse.Namespace) -> dict[str, Any]:
    """Run the evaluation with a spinner on stderr (shared with `rankstream demo`)."""
    from rich.console import Console

    from rankstream.evals.cbir import evaluate_cbir
    from rankstream.stream.settings import Settings

    console = Console(stderr=True, log_path=False)
    with console.status("evaluating") as status:

        def progress(message: str) -> None:
            status.update(message)
            console.log(message)

        return evaluate_cbir(
            args.dataset,
            seed=args.seed,
            train_rows=args.train_rows,
            max_queries=args.max_queries,
            progress=progress,
            large_scale=args.large_scale,
            cache_dir=Path(Settings.from_env().data_dir) / "collections",
        )


def _gain(value: float | None, baseline: float | None) -> str | None:
    if value is None or not baseline:
        return None
    return f"{(value / baseline - 1.0) * 100:+.1f}%"


def print_result(result: dict[str, Any], stderr: bool = False) -> None:
    """The result as a table: mAP, NDCG@50, relative mAP gains over Uni-Con and Best-Fea,
    training CPU seconds, and the paper's ImageCLEF mAP (Table 2) beside them; with
    3 million training rows also the paper's Table 3 seconds."""
    from rankstream.evals.cbir import LARGE_SCALE_ROWS
    from rankstream.tables import print_method_table

    maps, paper = result["map"], result["paper"]
    paper_map = paper["table2_imageclef_map"]
    large = result["train_rows"] >= LARGE_SCALE_ROWS
    rows = {}
    for method, value in maps.items():
        row: dict[str, Any] = {
            "mAP": value,
            "NDCG@50": result["ndcg_at_50"][method],
            "vs Uni-Con": _gain(value, maps["uni_con"]),
            "vs Best-Fea": _gain(value, maps["best_fea"]),
            "train CPU s": result["train_cpu_seconds"][method],
            "paper ImageCLEF mAP": paper_map[method],
            "paper vs Uni-Con": _gain(paper_map[method], paper_map["uni_con"]),
        }
        if large:
            row["paper Table 3 s"] = paper["table3_seconds"][method]
        row["params"] = ", ".join(f"{k}={v}" for k, v in result["params"][method].items())
        rows[method] = row
    queries = result["queries"]
    title = (
        f"CBIR on {result['dataset']}: {queries['train']} train / {queries['val']} val / "
        f"{queries['test']} test queries, {result['train_rows']:,} training rows"
    )
    formats = {"train CPU s": ".2f", "paper Table 3 s": ".0f"}
    print_method_table(title, rows, formats=formats, stderr=stderr)


def run(args: argparse.Namespace) -> int:
    result = run_evaluation(args)
    if args.json:
        sys.stdout.write(json.dumps(result) + "\n")
    else:
        print_result(result)
    return 0
