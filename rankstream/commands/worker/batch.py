"""`rankstream worker batch`: keep a reservoir of the triplet stream; refit cMDS-DML and RankMKL."""

from __future__ import annotations

import argparse

from rankstream.commands._json_output import add_json_argument

DEFAULT_MODELS = "cmds_dml,rankmkl"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--reservoir",
        type=int,
        default=5000,
        metavar="N",
        help="triplets kept in the uniform reservoir sample (default 5000)",
    )
    parser.add_argument(
        "--refit-seconds",
        type=float,
        default=60.0,
        metavar="T",
        help="refit at least this often when new triplets arrived (default 60 s)",
    )
    parser.add_argument(
        "--refit-records",
        type=int,
        default=5000,
        metavar="R",
        help="refit after this many new triplets (default 5000)",
    )
    parser.add_argument(
        "--exit-when-idle",
        type=float,
        default=None,
        metavar="S",
        help="persist the reservoir and exit when no record arrived for S s",
    )
    parser.add_argument(
        "--models",
        default=DEFAULT_MODELS,
        help=f"comma-separated models to refit (default {DEFAULT_MODELS})",
    )
    parser.add_argument("--seed", type=int, default=0, help="reservoir sampling seed")
    parser.add_argument(
        "--mkl-kernel",
        choices=("linear", "chi2"),
        default="linear",
        help="RankMKL base kernel per descriptor group (default linear)",
    )
    parser.add_argument(
        "--mkl-pairs",
        type=int,
        default=1500,
        metavar="P",
        help="RankMKL trains on at most P reservoir pairs (default 1500)",
    )
    parser.add_argument(
        "--partitions",
        type=int,
        default=1,
        help="partitions of the triplets topic if it must be created",
    )
    add_json_argument(parser, "at exit: the reservoir and the refits")


def run(args: argparse.Namespace) -> int:
    from rankstream.commands._choices import parse_choices
    from rankstream.commands._usage import options_checked
    from rankstream.commands.worker._launch import launch_worker
    from rankstream.workers.batch_models import BATCH_KINDS, RankMKLParams
    from rankstream.workers.batch_worker import BatchOptions, BatchWorker
    from rankstream.workers.structured_log import configure_logging

    configure_logging()
    models = parse_choices(args.models, BATCH_KINDS, "--models")
    with options_checked():
        options = BatchOptions(
            reservoir=args.reservoir,
            refit_seconds=args.refit_seconds,
            refit_records=args.refit_records,
            exit_when_idle=args.exit_when_idle,
            models=models,
            seed=args.seed,
            partitions=args.partitions,
            rankmkl=RankMKLParams(kernel=args.mkl_kernel, max_pairs=args.mkl_pairs, seed=args.seed),
        )
        if args.mkl_pairs < 1:
            raise ValueError(f"--mkl-pairs must be >= 1, got {args.mkl_pairs}")
    return launch_worker(
        "batch",
        args,
        lambda settings: BatchWorker(settings, options),
        models=list(models),
        reservoir=args.reservoir,
    )
