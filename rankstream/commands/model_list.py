"""`rankstream model list`: every stored model, its version, kind, NDCG@50 and pin."""

from __future__ import annotations

import argparse

from rankstream.commands._json_output import add_json_argument, print_json


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_json_argument(parser)


def run(args: argparse.Namespace) -> int:
    from rankstream.commands._model_store import configured_store
    from rankstream.workers.serve_models import models_listing
    from rankstream.workers.serve_registry import ModelRegistry

    with configured_store() as store:
        listing = models_listing(ModelRegistry(store).refresh())
    if args.json:
        print_json(listing)
        return 0
    from rich.console import Console
    from rich.table import Table

    table = Table(title=f"models (champion: {listing['champion']})")
    columns = ("name", "kind", "version", "served_version", "pinned", "triplets_seen",
               "rolling_ndcg_at_50", "scored_queries")  # fmt: skip
    for column in columns:
        table.add_column(column)
    for entry in listing["models"]:
        table.add_row(*("" if entry[c] is None else str(entry[c]) for c in columns))
    Console().print(table)
    return 0
