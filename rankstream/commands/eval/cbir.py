"""`rankstream eval cbir`: online rankers vs Uni-Con, Best-Fea and RankSVM (mAP, NDCG@50)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from rankstream.commands._json_output import add_json_argument, print_json
from rankstream.commands._shared_args import add_seed_argument
from rankstream.evals.cbir_datasets import DATASETS


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--dataset",
        choices=list(DATASETS),
        default="digits",
        help=f"the test bed: {', '.join(DATASETS)}",
    )
    add_seed_argument(parser, "splits, sampling and stream order")
    parser.add_argument(
        "--seeds",
        type=int,
        nargs="+",
        default=None,
        help="run each of these seeds (instead of --seed) and summarise the gains over them",
    )
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
    parser.add_argument(
        "--plot",
        default=None,
        help="figure path (default report/cbir_<dataset>.png): test mAP per method and seed, "
        "the paper's ImageCLEF mAP beside it",
    )
    add_json_argument(parser)


def run_evaluation(args: argparse.Namespace, seed: int) -> dict[str, Any]:
    """Run the evaluation for one seed with a spinner on stderr."""
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
            seed=seed,
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


def print_summary(summary: dict[str, Any]) -> None:
    """Test mAP over the seeds and each learned method's paired gains, mean ± std."""
    from rankstream.tables import print_method_table

    def spread(cell: dict[str, float | None], unit: str = "") -> str:
        std = "" if cell["std"] is None else f" ± {cell['std']:.{2 if unit else 4}f}"
        return f"{cell['mean']:+.2f}{unit}{std}" if unit else f"{cell['mean']:.4f}{std}"

    rows = {}
    for method, cell in summary["map"].items():
        rows[method] = {"test mAP": spread(cell), "NDCG@50": spread(summary["ndcg_at_50"][method])}
        if method in summary["gain_over_uni_con_percent"]:
            rows[method]["vs Uni-Con"] = spread(summary["gain_over_uni_con_percent"][method], "%")
            rows[method]["vs Best-Fea"] = spread(summary["gain_over_best_fea_percent"][method], "%")
            rows[method]["above both, every seed"] = str(
                summary["above_uni_con_and_best_fea_every_seed"][method]
            )
    seeds = ", ".join(map(str, summary["seeds"]))
    print_method_table(f"CBIR on {summary['dataset']}, seeds {seeds} (mean ± std)", rows)


def run(args: argparse.Namespace) -> int:
    from rankstream.evals.cbir import paper_table2_imageclef, summarise_seeds
    from rankstream.plots import plot_method_scores
    from rankstream.simulators.fashion_mnist import FashionMNISTMissingError

    seeds = args.seeds if args.seeds else [args.seed]
    try:
        results = [run_evaluation(args, seed) for seed in seeds]
    except FashionMNISTMissingError as error:  # names the Debian package to install
        print(f"error: {error}", file=sys.stderr)
        return 2
    summary = summarise_seeds(results)
    plot = plot_method_scores(
        {m: [r["map"][m] for r in results] for m in results[0]["map"]},
        args.plot or f"report/cbir_{args.dataset}.png",
        reference=paper_table2_imageclef(),
        reference_label="paper, ImageCLEF (Table 2)",
        title=f"{args.dataset}: test mAP, seeds {', '.join(map(str, seeds))}",
    )
    if args.json:
        output = results[0] if args.seeds is None else {"runs": results, "summary": summary}
        print_json({**output, "plot": str(plot)})
    else:
        for result in results:
            print_result(result)
        if args.seeds is not None:
            print_summary(summary)
        print(f"wrote {plot}")
    return 0
