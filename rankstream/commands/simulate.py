"""`rankstream simulate`: the CBIR engine and its users, producing triplets and judged queries
(or, with `--feedback clicks:MODEL`, impressions and clicks)."""

from __future__ import annotations

import argparse
import sys

from rankstream.commands._collection_args import add_collection_arguments, collection_fields
from rankstream.commands._json_output import add_json_argument, print_json
from rankstream.workers.feedback_batching import DEFAULT_LINGER_S, QUERIES_PER_MESSAGE


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--feedback",
        default=None,
        metavar="judged|clicks:MODEL",
        help="judged: grade the top 50 and send triplets (default); clicks:MODEL: users of "
        "click model MODEL (perfect, navigational, informational, almost-random, pbm:ETA) "
        "click on the top 50, sent as impressions and clicks for the click join",
    )
    parser.add_argument(
        "--triplets",
        type=int,
        default=None,
        metavar="N",
        help="judged: stop after at least N triplets (default 100000 unless --queries)",
    )
    parser.add_argument(
        "--queries",
        type=int,
        default=None,
        metavar="Q",
        help="stop after Q queries (impressions); needed with --feedback clicks:MODEL",
    )
    parser.add_argument("--seed", type=int, default=0, help="query stream seed (default 0)")
    add_collection_arguments(parser)
    parser.add_argument(
        "--rate",
        type=float,
        default=None,
        metavar="R",
        help="limit to R triplets/s, with clicks R clicks/s (token bucket; default unlimited)",
    )
    parser.add_argument(
        "--serving",
        default="champion",
        metavar="champion|NAME",
        help="rank with the evaluator's champion (default) or a named model",
    )
    parser.add_argument(
        "--candidates",
        type=int,
        default=300,
        metavar="K",
        help="candidates retrieved per query (default 300)",
    )
    parser.add_argument(
        "--partitions", type=int, default=1, help="partitions of the topics if they must be created"
    )
    parser.add_argument(
        "--queries-per-message",
        type=int,
        default=QUERIES_PER_MESSAGE,
        metavar="Q",
        help=f"judged queries packed into one triplets message (default {QUERIES_PER_MESSAGE}; "
        f"a query waits at most {DEFAULT_LINGER_S} s for the others)",
    )
    add_json_argument(parser, "at exit: triplets, queries, clicks, seconds, models served")


DEFAULT_TRIPLETS = 100_000


def stop_after(judged: bool, triplets: int | None, queries: int | None) -> int | None:
    """The triplets target: as given, else 100,000 for judged feedback without --queries
    (clicks produce no triplets: they stop after --queries)."""
    if triplets is None and queries is None and judged:
        return DEFAULT_TRIPLETS
    return triplets


def run(args: argparse.Namespace) -> int:
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn

    from rankstream.commands._usage import options_checked
    from rankstream.simulators.fashion_mnist import FashionMNISTMissingError
    from rankstream.stream.settings import Settings
    from rankstream.workers.clicking_users import JUDGED
    from rankstream.workers.metrics import start_metrics_server
    from rankstream.workers.simulator import SimulateOptions, Simulation, StepResult
    from rankstream.workers.structured_log import configure_logging

    configure_logging()
    feedback = args.feedback or JUDGED
    with options_checked():
        options = SimulateOptions(
            triplets=stop_after(feedback == JUDGED, args.triplets, args.queries),
            queries=args.queries,
            feedback=feedback,
            seed=args.seed,
            rate=args.rate,
            serving=args.serving,
            candidates=args.candidates,
            partitions=args.partitions,
            queries_per_message=args.queries_per_message,
            **collection_fields(args),
        )
    settings = Settings.from_env()
    start_metrics_server(settings)
    try:
        with options_checked():
            simulation = Simulation(settings, options, progress=True)
    except FashionMNISTMissingError as exc:  # names the Debian package to install
        print(f"error: {exc}", file=sys.stderr)
        return 2
    columns = (TextColumn("simulate [dim]{task.fields[model]}"), BarColumn(), MofNCompleteColumn())
    with Progress(*columns, console=Console(file=sys.stderr), transient=True) as bar:
        by_queries = options.triplets is None
        total = options.queries if by_queries else options.triplets
        task = bar.add_task("simulate", total=total, model="")

        def advance(result: StepResult) -> None:
            bar.update(
                task,
                advance=1 if by_queries else result.triplets,
                model=f"{result.served.name} v{result.served.version}",
            )

        try:
            summary = simulation.run(on_step=advance)
        except LookupError as exc:
            print(f"serving model unavailable: {exc}", file=sys.stderr)
            return 1
    if args.json:
        print_json(summary)
    else:
        produced = (
            f"{summary['triplets']} triplets"
            if options.feedback == JUDGED
            else f"{summary['clicks']} clicks ({options.feedback})"
        )
        print(
            f"produced {produced} from {summary['queries']} queries "
            f"in {summary['seconds']} s; served by {summary['served_by']}",
            file=sys.stderr,
        )
    return 0
