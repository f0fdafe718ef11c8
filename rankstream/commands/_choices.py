"""Comma-separated options (`--algo opr,opar1`, `--topics triplets,queries`, ...)."""

from __future__ import annotations

from collections.abc import Iterable

from rankstream.commands._usage import UsageError


def comma_list(text: str) -> tuple[str, ...]:
    """`"a, b,,c"` -> ("a", "b", "c"): the non-empty items of a comma-separated option."""
    return tuple(item.strip() for item in text.split(",") if item.strip())


def parse_choices(text: str, choices: Iterable[str], option: str) -> tuple[str, ...]:
    """The items of `option`'s value; a UsageError names the ones not in `choices`.

    No item at all is refused the same way: every such option needs at least one.
    """
    allowed = list(choices)
    items = comma_list(text)
    unknown = [item for item in items if item not in allowed]
    if not items or unknown:
        raise UsageError(
            f"unknown {option} {', '.join(unknown) or '(none)'}; choose from {', '.join(allowed)}"
        )
    return items
