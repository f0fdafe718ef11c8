"""`rankstream eval mkl --dataset pubfig`: RankMKL vs concatenation vs single features."""

from __future__ import annotations

import argparse

from rankstream.commands._json_output import print_report
from rankstream.commands._options import add_options, chosen
from rankstream.evals.mkl_options import MKLEvalConfig


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--dataset",
        choices=["pubfig"],
        default="pubfig",
        help="relative attributes: pubfig (Parikh & Grauman's split)",
    )
    add_options(parser, MKLEvalConfig)


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

    from rankstream.commands._usage import UsageError
    from rankstream.evals.mkl import evaluate_pubfig
    from rankstream.stream.settings import Settings

    config = chosen(MKLEvalConfig, args)
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
