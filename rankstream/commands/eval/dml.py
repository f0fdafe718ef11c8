"""`rankstream eval dml`: cMDS-DML vs LDMLR vs Euclidean kNN, ordinal MAE (paper Tables 3-7)."""

from __future__ import annotations

import argparse

from rankstream.commands._json_output import add_json_argument, print_report
from rankstream.commands._options import add_options, chosen
from rankstream.evals.dml_options import DmlEvalConfig


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_options(parser, DmlEvalConfig, json_when=None)
    parser.add_argument(
        "--plot",
        default=None,
        help="figure path (default report/dml_<dataset>.png): MAE per K, cMDS-DML embedding",
    )
    add_json_argument(parser)


def _print_table(report: dict) -> None:
    from rich.console import Console
    from rich.table import Table

    from rankstream.evals.dml import METHODS

    for result in report.get("by_K", [report]):
        table = Table(
            title=f"{report['description']}: n_train={report['n_train']}, K={result['K']}, "
            f"s={report['s']}, {report['repeats']} splits"
        )
        for column in ("method", "MAE", "std", "fit s", "chosen"):
            table.add_column(column, justify="left" if column in ("method", "chosen") else "right")
        best = min(result[m]["mae"] for m in METHODS)
        for method in METHODS:
            row = result[method]
            mae = f"{row['mae']:.4f}"
            table.add_row(
                method,
                f"[bold]{mae}[/bold]" if row["mae"] == best else mae,
                f"±{row['std']:.4f}",
                f"{row['seconds']:.3f}",
                ", ".join(f"{k}={v:g}" for k, v in row["params"].items()),
            )
        Console().print(table)
        paired = result["paired_cmds_minus_ldmlr"]
        Console().print(
            f"cMDS-DML - LDMLR on the same splits: {paired['mean']:+.4f} "
            f"± {paired['sem'] or float('nan'):.4f} (s.e.), cMDS-DML lower on "
            f"{paired['cmds_dml_wins']} "
            f"of {paired['splits']}"
        )


def run(args: argparse.Namespace) -> int:
    from rich.progress import Progress

    from rankstream.evals.dml import run_dml_eval

    config = chosen(DmlEvalConfig, args)
    with Progress(transient=True, console=_stderr_console()) as progress:
        task = progress.add_task("eval dml", total=config.repeats * len(config.ks))
        report = run_dml_eval(
            config,
            progress=lambda: progress.advance(task),
            plot_path=args.plot or f"report/dml_{config.dataset}.png",
        )
    print_report(args, report, _print_table)
    _stderr_console().print(f"wrote {report['plot']}")
    return 0


def _stderr_console():
    from rich.console import Console

    return Console(stderr=True)
