"""MkDocs hook: the reference sections generated from the code at build time.

A page asks for one with a marker line (`<!-- generated: NAME -->`); the hook replaces it
with Markdown built from the code, so these sections follow the code (a new command,
option, per-command variable or route appears without anyone editing a page):

* `cli`: every command's `--help`, from `rankstream.cli.build_parser` (each option's
  default and its `RANKSTREAM_<CMD>_*` variable included);
* `routes`: every route and method of the OpenAPI document `GET /openapi.json` serves,
  with its summary (`rankstream.serve.openapi.openapi_document`);

The settings page is written by hand (each setting's meaning needs words);
tests/test_reference_docs.py checks it against `rankstream.stream.settings` (every variable,
its default), so a new setting cannot go undocumented.

A marker with an unknown name fails the build.

The Python API page (mkdocstrings) reads the sources statically: loading this hook lays out
`build/api-src/rankstream/` as symlinks to the repository's folders, the way
pyproject.toml maps them (`ranking/` is `rankstream.ranking`, ...), so nothing is imported
to document it.
"""

from __future__ import annotations

import argparse
import os
import re
from collections.abc import Callable, Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
API_SOURCES = ROOT / "build" / "api-src"
MARKER = re.compile(r"^<!-- generated: ([a-z-]+) -->$", re.M)


def _leaves(
    parser: argparse.ArgumentParser, words: tuple[str, ...] = ()
) -> Iterator[tuple[tuple[str, ...], argparse.ArgumentParser]]:
    """(command words, parser) of every command, in the CLI's order."""
    subcommands = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    if not subcommands:
        yield words, parser
        return
    for name, child in subcommands[0].choices.items():
        yield from _leaves(child, (*words, name))


def cli() -> str:
    from rankstream.cli import build_parser

    os.environ["COLUMNS"] = "100"  # argparse wraps help at the terminal's width
    parts = []
    for words, parser in _leaves(build_parser()):
        parser.prog = "rankstream " + " ".join(words)
        parts.append(f"### rankstream {' '.join(words)}\n\n```text\n{parser.format_help()}```\n")
    return "\n".join(parts)


def routes() -> str:
    from rankstream.serve.openapi import openapi_document
    from rankstream.stream.settings import Settings

    document = openapi_document(Settings().phi_dim, token=True)  # `public`: open even then
    rows = ["| method | route | what it does |", "|---|---|---|"]
    for path, operations in document["paths"].items():
        for method, operation in operations.items():
            public = " (public)" if operation.get("security") == [] else ""
            rows.append(f"| `{method.upper()}` | `{path}` | {operation['summary']}{public} |")
    return "\n".join(rows) + "\n"


GENERATORS: dict[str, Callable[[], str]] = {
    "cli": cli,
    "routes": routes,
}


def package_dirs() -> dict[str, str]:
    """pyproject.toml's package-dir: import name -> folder."""
    import tomllib

    with (ROOT / "pyproject.toml").open("rb") as file:
        return tomllib.load(file)["tool"]["setuptools"]["package-dir"]


def lay_out_api_sources() -> None:
    """The installed package's layout as symlinks, for mkdocstrings to read statically."""
    package = API_SOURCES / "rankstream"
    if package.exists():
        for link in package.iterdir():
            link.unlink()
    package.mkdir(parents=True, exist_ok=True)
    for path in (ROOT / "rankstream").iterdir():
        (package / path.name).symlink_to(path)
    for name, folder in package_dirs().items():
        if name != "rankstream":
            (package / name.removeprefix("rankstream.")).symlink_to(ROOT / folder)


# Laid out when MkDocs loads this hook, before any plugin is configured: mkdocstrings keeps
# only the search paths that exist when it reads its configuration.
lay_out_api_sources()


def on_page_markdown(markdown: str, page, config, files) -> str:
    def replace(match: re.Match[str]) -> str:
        name = match.group(1)
        if name not in GENERATORS:
            raise ValueError(f"{page.file.src_path}: no generator named {name!r}")
        return GENERATORS[name]()

    return MARKER.sub(replace, markdown)
