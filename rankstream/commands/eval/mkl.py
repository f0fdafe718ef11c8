"""`rankstream eval mkl --dataset pubfig`: RankMKL vs concatenation vs single features."""

from __future__ import annotations

import argparse

from rankstream.commands._json_output import add_json_argument, print_report


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--dataset",
        choices=["pubfig"],
        default="pubfig",
        help="relative attributes: pubfig (Parikh & Grauman's split)",
    )
    parser.add_argument(
        "--attributes", default=None, help="comma-separated attribute names (default: all 11)"
    )
    parser.add_argument(
        "--max-train-pairs",
        type=int,
        default=20_000,
        help="category-level training pairs per attribute, sampled down to this many",
    )
    parser.add_argument(
        "--max-test-pairs", type=int, default=None, help="subsample test pairs (default: all)"
    )
    parser.add_argument(
        "--cv-folds",
        type=int,
        default=3,
        help="folds (stratified by category) that choose C, the bandwidth and lam",
    )
    parser.add_argument(
        "--cv-max-pairs",
        type=int,
        default=5_000,
        help="training pairs per cross-validation fit (keeps the grid affordable)",
    )
    parser.add_argument("--seed", type=int, default=0, help="seed of the pair sampling and folds")
    add_json_argument(parser)


def _config(args: argparse.Namespace):
    from rankstream.evals.mkl import MKLEvalConfig

    attributes = None
    if args.attributes:
        attributes = tuple(a.strip() for a in args.attributes.split(",") if a.strip())
    for name in ("max_train_pairs", "cv_folds", "cv_max_pairs"):
        if getattr(args, name) < (2 if name == "cv_folds" else 1):
            raise ValueError(f"--{name.replace('_', '-')} is too small: {getattr(args, name)}")
    return MKLEvalConfig(
        attributes=attributes,
        max_train_pairs=args.max_train_pairs,
        max_test_pairs=args.max_test_pairs,
        cv_folds=args.cv_folds,
        cv_max_pairs=args.cv_max_pairs,
        seed=args.seed,
    )


def _print_table(report: dict) -> None:
    from rich.console import Console
    from rich.table import Table

    from rankstream.evals.mkl import METHODS, paper_accuracy

    table = Table(title="PubFig relative attributes: pairwise accuracy % (ours / paper)")
    table.add_column("attribute")
    for method in METHODS:
        table.add_column(method, justify="right")
    for attribute, row in report["attributes"].items():
        best = max(row.values())
        cells = []
        for method in METHODS:
            paper = paper_accuracy(method, attribute)
            ours = (
                f"[bold]{row[method]:.2f}[/bold]" if row[method] == best else f"{row[method]:.2f}"
            )
            cells.append(ours + (f" / {paper:.2f}" if paper is not None else ""))
        table.add_row(attribute, *cells)
    table.add_row("mean", *(f"{report['mean'][m]:.2f}" for m in METHODS), style="italic")
    console = Console()
    console.print(table)
    console.print(
        f"RankMKL fit {report['fit_seconds']:.2f} s (median per attribute); "
        f"{report['predict_pairs_per_s']:,} test pairs/s; total {report['total_seconds']} s"
    )


def run(args: argparse.Namespace) -> int:
    from rich.progress import Progress

    from rankstream.commands._usage import UsageError, options_checked
    from rankstream.evals.mkl import evaluate_pubfig
    from rankstream.stream.settings import Settings

    with options_checked():
        config = _config(args)
    with Progress(transient=True, console=_stderr_console()) as bar:
        task = bar.add_task("PubFig", total=None)

        def progress(what: str, done: int, total: int) -> None:
            bar.update(task, description=what, completed=done, total=total)

        try:
            report = evaluate_pubfig(config, Settings.from_env().data_dir, progress)
        except ValueError as error:  # the data cannot be had, or not for these options
            raise UsageError(str(error)) from error
    return print_report(args, report, _print_table)


def _stderr_console():
    from rich.console import Console

    return Console(stderr=True)
