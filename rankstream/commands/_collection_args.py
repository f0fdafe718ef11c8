"""`--collection`, `--images`, `--collection-seed`: which collection a command serves, where
collections are cached, and the refusal of one that cannot be had."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from rankstream.commands._json_output import print_report
from rankstream.commands._usage import UsageError, options_checked
from rankstream.simulators.catalog import COLLECTIONS
from rankstream.stream.settings import Settings


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


def collections_cache() -> Path:
    """Where the collections are cached: $RANKSTREAM_DATA_DIR/collections."""
    return Path(Settings.from_env().data_dir) / "collections"


@contextmanager
def collection_checked() -> Iterator[None]:
    """`options_checked`, and a collection whose data is missing refused the same way (one
    line, exit 2), its message naming the Debian package to install."""
    from rankstream.simulators.fashion_mnist import FashionMNISTMissingError

    try:
        with options_checked():
            yield
    except FashionMNISTMissingError as error:
        raise UsageError(str(error)) from error


def run_collection_eval(
    args: argparse.Namespace,
    evaluate: Callable[..., dict[str, Any]],
    summary: Callable[[dict[str, Any]], None],
    plot_path: str,
    **arguments: Any,
) -> int:
    """An eval over `--collection`, one way for each: `evaluate(collection, cache_dir=,
    options=, progress=True, plot_path=, **arguments)` gets where collections are cached,
    the given collection options (`loader_options`), progress bars on stderr (so `--json`
    keeps stdout to the object) and `--plot`, else `plot_path`; a collection whose data is
    missing is refused in one line; the report is printed as JSON or by `summary`, and the
    plot it names is announced on stderr."""
    with collection_checked():
        result = evaluate(
            args.collection,
            cache_dir=collections_cache(),
            options=loader_options(args),
            progress=True,
            plot_path=args.plot or plot_path,
            **arguments,
        )
    code = print_report(args, result, summary)
    if "plot" in result:
        print(f"wrote {result['plot']}", file=sys.stderr)
    return code
