"""`--collection`, `--images`, `--collection-seed`: which collection `demo` and `simulate` serve."""

from __future__ import annotations

import argparse
from typing import Any

from rankstream.simulators.catalog import COLLECTIONS


def add_collection_arguments(parser: argparse.ArgumentParser) -> None:
    """The collection options (choices from `simulators.catalog.COLLECTIONS`)."""
    parser.add_argument(
        "--collection",
        choices=list(COLLECTIONS),
        default="synthetic",
        help="the image collection served (default synthetic; fashion-mnist needs Debian's "
        "dataset-fashion-mnist: `make datasets`)",
    )
    parser.add_argument(
        "--images",
        type=int,
        default=None,
        metavar="M",
        help="synthetic only: collection size (default: the paper's 1,007,157)",
    )
    parser.add_argument(
        "--collection-seed",
        type=int,
        default=None,
        metavar="S",
        help="synthetic only: its seed (cached per size and seed; default 0)",
    )


def collection_fields(args: argparse.Namespace) -> dict[str, Any]:
    """The options' collection fields (`SimulateOptions`, `DemoOptions`) as given."""
    return {
        "collection": args.collection,
        "images": args.images,
        "collection_seed": args.collection_seed,
    }


def loader_options(args: argparse.Namespace) -> dict[str, Any]:
    """The given collection options as the loader's keywords (`simulators.catalog`), for a
    command that loads the collection itself; the loader refuses one it does not take."""
    given = {"n_images": args.images, "collection_seed": args.collection_seed}
    return {name: value for name, value in given.items() if value is not None}
