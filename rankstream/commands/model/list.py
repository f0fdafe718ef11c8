"""`rankstream model list`: every stored model, its version, kind, NDCG@50, pin and race.

The race columns are each challenger's paired test against the champion on judged
queries (`selection.judged_race`), the click columns its interleaving race (wins/losses/ties
and the decision, `selection.click_race`); `--json` prints GET /v1/models' document.
"""

from __future__ import annotations

import argparse

from rankstream.commands._json_output import add_json_argument, print_json


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_json_argument(parser)


def run(args: argparse.Namespace) -> int:
    from rankstream.commands.model._store import configured_store
    from rankstream.serve.models_listing import models_listing
    from rankstream.serve.registry import ModelRegistry
    from rankstream.stream.settings import Settings

    with configured_store() as store:  # served at the deployment's width, as serve does
        registry = ModelRegistry(store, width=Settings.from_env().phi_dim)
        listing = models_listing(registry.refresh())
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
    race_columns = ("paired_queries", "mean_difference", "ci_low", "ci_high", "decision")
    for column in race_columns:
        table.add_column(column)
    table.add_column("clicks w/l/t")
    table.add_column("clicks decision")
    for entry in listing["models"]:
        race, clicks = entry["race"] or {}, entry["interleaving"]
        cells = [entry[c] for c in columns] + [race.get(c) for c in race_columns]
        cells += [None, None] if clicks is None else [
            f"{clicks['wins']}/{clicks['losses']}/{clicks['ties']}",
            clicks["decision"],
        ]  # fmt: skip
        table.add_row(*("" if v is None else f"{v:.4f}" if isinstance(v, float) else str(v)
                        for v in cells))  # fmt: skip
    Console().print(table)
    return 0
