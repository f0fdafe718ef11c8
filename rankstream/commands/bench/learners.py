"""`rankstream bench learners`: sequential throughput of the online learners, against C
(the benchmark: `harness.learners_bench`)."""

from __future__ import annotations

import argparse
from typing import Any

from rankstream.commands._json_output import add_json_argument, print_json
from rankstream.commands._kernels import add_kernels_argument, use_kernels
from rankstream.commands._shared_args import add_seed_argument
from rankstream.ranking import DEFAULT_PHI_DIM


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--triplets", type=int, default=3_000_000, help="rows per pass")
    parser.add_argument("--repeats", type=int, default=3, help="timed passes per learner")
    add_seed_argument(parser, "seed of the random stream")
    add_kernels_argument(parser)
    add_json_argument(parser)


def run(args: argparse.Namespace) -> int:
    from rich.console import Console
    from rich.progress import Progress

    from rankstream.commands._usage import UsageError
    from rankstream.harness.learners_bench import c_reference, learners_report, make_stream
    from rankstream.ranking.learners import names

    if args.triplets < 1 or args.repeats < 1:
        raise UsageError("--triplets and --repeats must be >= 1")
    linear_kernel = use_kernels(args.kernels)
    err = Console(stderr=True)
    with err.status("compiling the C reference"):
        reference, c_note = c_reference()
    if reference is None:
        err.print(f"[yellow]{c_note}")
    with err.status(f"generating {args.triplets:,} triplets of {DEFAULT_PHI_DIM} features"):
        stream = make_stream(args.triplets, args.seed)
    with Progress(console=err, transient=True) as bar:
        task = bar.add_task("benchmarking", total=len(names()))

        def progress(algo: str) -> None:
            bar.update(task, description=f"benchmarking {algo}", completed=names().index(algo))

        report = learners_report(stream, reference, c_note, args.repeats, linear_kernel, progress)
    if args.json:
        print_json(report)
        return 0
    _print_table(report, args.repeats)
    return 0


def _print_table(report: dict[str, Any], repeats: int) -> None:
    from rich.console import Console
    from rich.table import Table

    table = Table(
        title=f"learn_many_together over {report['triplets']:,} triplets x {DEFAULT_PHI_DIM} "
        f"(median of {repeats}); C: {report['c_reference']}"
    )
    columns = ("algo", "seconds", "M triplets/s", "CPU M triplets/s", "C M triplets/s")
    for column in (*columns, "vs C", "compile s"):
        table.add_column(column, justify="left" if column == "algo" else "right")

    def rate(value: float | None) -> str:
        return "-" if value is None else f"{value / 1e6:.2f}"

    for algo, r in report["results"].items():
        table.add_row(
            algo,
            f"{r['seconds']:.3f}",
            rate(r["triplets_per_s"]),
            rate(r["cpu_triplets_per_s"]),
            rate(r["c_triplets_per_s"]),
            "-" if r["ratio_to_c"] is None else f"{r['ratio_to_c']:.2f}x",
            f"{r['compile_seconds']:.2f}",
        )
    Console().print(table)
