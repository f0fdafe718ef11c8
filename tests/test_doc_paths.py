"""Every repository path a document or docstring cites exists.

The documents (docs/*.md, README.md) and the package's docstrings and comments cite files
as `dir/file.py` and modules as `selection.scoring`; a rename that leaves one behind sends a
newcomer to a file that is not there. A path out of the repository (`../shared/...`) is
refused too: what the code cites lives in the repository.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
# What runs write (gitignored): a document names the files a command will write there, and
# whether the folder exists depends on what ran before (a second `make test` in one clone).
GENERATED = {"report", "build"}
# the repository's folders, and ../shared's name (cited as shared/ once it is climbed to)
FOLDERS = {p.name for p in ROOT.iterdir() if p.is_dir() and p.name.isidentifier()}
TOP_LEVEL = (FOLDERS - GENERATED) | {"shared"}
DOCUMENTS = [*sorted(ROOT.glob("docs/**/*.md")), ROOT / "README.md", ROOT / "CHANGELOG.md"]
PACKAGE_DIRS = ("ranking", "stream", "workers", "serve", "simulators", "rankstream", "harness")
SOURCES = sorted(p for d in PACKAGE_DIRS for p in (ROOT / d).rglob("*.py"))

# `dir/sub/file.ext`, optionally climbing out with ../, not part of a longer path or URL
FILE_PATH = re.compile(
    r"(?<![\w./~:-])((?:\.\./)*)((?:[A-Za-z_][\w.-]*/)+[\w.-]+"
    r"\.(?:py|md|ya?ml|toml|json|sh|template|txt|cfg|ini))\b"
)
# `selection.scoring`, `rankstream.stream.settings`, `stream.recording_*`: a module of one of
# the packages (the sources' code has variables of those names: there, only in backquotes)
PACKAGES = "(ranking|stream|workers|serve|simulators|harness|evals|commands)"
MODULE = re.compile(r"(?<![\w./])(?:rankstream\.)?\b" + PACKAGES + r"\.([a-z_][a-z0-9_]*\*?)")
QUOTED_MODULE = re.compile(r"`(?:rankstream\.)?" + PACKAGES + r"\.([a-z_][a-z0-9_]*\*?)")
MODULE_HOME = {"evals": "rankstream/evals", "commands": "rankstream/commands"}


def cited_paths(text: str) -> list[tuple[int, str]]:
    """(line, path) of every cited path that climbs out or names a top-level folder."""
    found = []
    for number, line in enumerate(text.splitlines(), 1):
        for match in FILE_PATH.finditer(line):
            climb, path = match.groups()
            if climb or path.split("/")[0] in TOP_LEVEL:
                found.append((number, climb + path))
    return found


def missing_modules(text: str, pattern: re.Pattern[str] = MODULE) -> list[tuple[int, str]]:
    """(line, name) of every cited module of the packages that has no file or folder."""
    missing = []
    for number, line in enumerate(text.splitlines(), 1):
        for match in pattern.finditer(line):
            package, name = match.groups()
            if name in ("py", "md"):  # a file name such as `workers.py`, not a module
                continue
            home = ROOT / MODULE_HOME.get(package, package)
            if not any(home.glob(f"{name}.py")) and not (home / name).is_dir():
                missing.append((number, match.group(0).strip("`")))
    return missing


def _bad_paths(file: Path, text: str | None = None) -> list[str]:
    where = file.relative_to(ROOT)
    text = file.read_text(encoding="utf-8") if text is None else text
    return [
        f"{where}:{number}: {path}"
        for number, path in cited_paths(text)
        if path.startswith("../") or not (ROOT / path).exists()
    ]


# a Markdown link's target on a site page, `](../guide/connect.md)`: relative to the page,
# checked by the site's strict build (`make docs`), not here
SITE_LINK = re.compile(r"\]\([^)\s]*\)")


@pytest.mark.parametrize("document", DOCUMENTS, ids=lambda p: str(p.relative_to(ROOT)))
def test_a_document_cites_only_paths_and_modules_that_exist(document: Path) -> None:
    text = document.read_text(encoding="utf-8")
    if document.is_relative_to(ROOT / "docs"):
        text = SITE_LINK.sub("]", text)
    bad = _bad_paths(document, text) + [
        f"{document.relative_to(ROOT)}:{number}: module {name}"
        for number, name in missing_modules(text)
    ]
    assert not bad, "cited but not in the repository:\n" + "\n".join(bad)


def test_the_package_sources_cite_only_paths_and_modules_that_exist() -> None:
    bad = [line for source in SOURCES for line in _bad_paths(source)] + [
        f"{source.relative_to(ROOT)}:{number}: module {name}"
        for source in SOURCES
        for number, name in missing_modules(source.read_text(encoding="utf-8"), QUOTED_MODULE)
    ]
    assert not bad, "cited but not in the repository:\n" + "\n".join(bad)


def test_the_scan_finds_a_missing_path_and_module() -> None:
    text = (
        "`workers/serving.py` moved; so did `workers.ingest`; `selection/scoring.py` stays;\n"
        "../shared/DESIGN.md is outside; http://example.org/workers/a.py is not ours"
    )
    assert cited_paths(text) == [
        (1, "workers/serving.py"),
        (1, "selection/scoring.py"),
        (2, "../shared/DESIGN.md"),
    ]
    assert missing_modules(text) == [(1, "workers.ingest")]
