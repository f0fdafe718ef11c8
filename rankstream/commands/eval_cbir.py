"""`rankstream eval cbir`: online rankers vs Uni-Con, Best-Fea and RankSVM (mAP, NDCG@50)."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

DATASET_CHOICES = ("digits", "synthetic")  # keep in step with rankstream.evals.cbir.DATASETS


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--dataset", choices=DATASET_CHOICES, default="digits")
    parser.add_argument("--seed", type=int, default=0, help="splits, sampling and stream order")
    parser.add_argument(
        "--train-rows", type=int, default=None, help="training triplet rows (default 200,000)"
    )
    parser.add_argument(
        "--max-queries", type=int, default=None, help="cap validation and test queries each"
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
            cache_dir=Path(Settings.from_env().data_dir) / "collections",
        )


def print_result(result: dict[str, Any], stderr: bool = False) -> None:
    """The result as a table: mAP, NDCG@50 and relative mAP gain over Uni-Con."""
    from rankstream.tables import print_method_table

    baseline = result["map"]["uni_con"]
    rows = {
        method: {
            "mAP": value,
            "NDCG@50": result["ndcg_at_50"][method],
            "mAP vs Uni-Con": f"{(value / baseline - 1.0) * 100:+.1f}%" if baseline else None,
            "params": ", ".join(f"{k}={v}" for k, v in result["params"][method].items()),
        }
        for method, value in result["map"].items()
    }
    queries = result["queries"]
    title = (
        f"CBIR on {result['dataset']}: {queries['train']} train / {queries['val']} val / "
        f"{queries['test']} test queries, {result['train_rows']:,} training rows"
    )
    print_method_table(title, rows, stderr=stderr)


def run(args: argparse.Namespace) -> int:
    result = run_evaluation(args)
    if args.json:
        sys.stdout.write(json.dumps(result) + "\n")
    else:
        print_result(result)
    return 0
