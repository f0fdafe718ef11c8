"""Arguments several commands share, declared once: `--seed` (one run's seed), `--seeds`
(the evals' paired seeds), `--click-model` given as several simulated users, and
`--skip-bad` (reading a recording)."""

from __future__ import annotations

import argparse
from collections.abc import Sequence


def add_seed_argument(parser: argparse.ArgumentParser, help: str = "default 0") -> None:
    """`--seed`: the one run's seed (default 0); `help` says what it seeds."""
    parser.add_argument("--seed", type=int, default=0, help=help)


def add_seeds_argument(parser: argparse.ArgumentParser) -> None:
    """`--seeds`: the seeds every compared arm runs (default 0 1 2)."""
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2], help="default 0 1 2")


def add_click_models_argument(parser: argparse.ArgumentParser, help: str) -> None:
    """`--click-model M [M ...]`, repeatable, each space- or comma-separated (`click_models`
    reads it back); `help` names the models the command takes and its default."""
    parser.add_argument(
        "--click-model", nargs="+", action="extend", default=None, metavar="M", help=help
    )


def click_models(given: list[str] | None, default: Sequence[str]) -> list[str]:
    """The click models named, in order, once each: `--click-model a,b --click-model c`.

    >>> click_models(["informational,navigational", "pbm:1", "navigational"], ())
    ['informational', 'navigational', 'pbm:1']
    >>> click_models(None, ("informational", "navigational"))
    ['informational', 'navigational']
    """
    names = [n.strip() for given_one in given or default for n in given_one.split(",")]
    return list(dict.fromkeys(n for n in names if n))


def add_skip_bad_argument(parser: argparse.ArgumentParser) -> None:
    """`--skip-bad`: damaged files and rows of a recording are skipped and counted."""
    parser.add_argument(
        "--skip-bad",
        action="store_true",
        help="skip and count damaged files/rows instead of stopping",
    )
