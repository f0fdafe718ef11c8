"""The Python library's code runs as written: every python code block of the README's "Python
quickstart" section and of docs/guide/python.md."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
LIBRARY_PAGE = ROOT / "docs" / "guide" / "python.md"


def quickstart_blocks() -> list[str]:
    """The ```python blocks between the README's "## Python quickstart" and the next "## "
    heading, then every ```python block of the Python library's page."""
    text = README.read_text(encoding="utf-8")
    match = re.search(r"^## Python quickstart\n(.*?)(?=^## )", text, flags=re.M | re.S)
    assert match, 'README.md has no "## Python quickstart" section'
    page = LIBRARY_PAGE.read_text(encoding="utf-8")
    return [
        *re.findall(r"^```python\n(.*?)^```", match.group(1), flags=re.M | re.S),
        *re.findall(r"^```python\n(.*?)^```", page, flags=re.M | re.S),
    ]


def test_both_places_hold_code() -> None:
    text = README.read_text(encoding="utf-8")
    assert "OnlineRanker" in quickstart_blocks()[0] and "## Python quickstart" in text
    assert any("CMDSDMLCV" in block for block in quickstart_blocks())


def test_the_quickstart_has_code():
    assert quickstart_blocks()


@pytest.mark.parametrize("index", range(len(quickstart_blocks())))
def test_quickstart_block_runs(index, capsys):
    namespace: dict[str, object] = {"__name__": "__readme__"}
    exec(compile(quickstart_blocks()[index], f"quickstart block {index}", "exec"),
         namespace)  # fmt: skip
    printed = capsys.readouterr().out
    assert printed.strip(), "a quickstart block should show its results"
    if "ordinal" in namespace:  # the batch learners' block: the claims its text makes
        assert namespace["mae"] < namespace["euclidean_mae"]
        assert namespace["accuracy"] > 0.9
        assert set(namespace["search"].best_params_) == {"rankmkl__C", "rankmkl__gamma_scale"}
    if "progressive" in namespace:  # the online rankers' block
        assert namespace["progressive"].get() > 0.85  # the majority class is 0.56
        assert namespace["pair_accuracy"] > 0.95
