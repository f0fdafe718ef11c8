"""README's "Python quickstart" runs: every python code block of that section, as written."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

README = Path(__file__).resolve().parents[1] / "README.md"


def quickstart_blocks() -> list[str]:
    """The ```python blocks between "## Python quickstart" and the next "## " heading."""
    text = README.read_text(encoding="utf-8")
    match = re.search(r"^## Python quickstart\n(.*?)(?=^## )", text, flags=re.M | re.S)
    assert match, 'README.md has no "## Python quickstart" section'
    return re.findall(r"^```python\n(.*?)^```", match.group(1), flags=re.M | re.S)


def test_the_quickstart_has_code():
    assert quickstart_blocks()


@pytest.mark.parametrize("index", range(len(quickstart_blocks())))
def test_quickstart_block_runs(index, capsys):
    namespace: dict[str, object] = {"__name__": "__readme__"}
    exec(compile(quickstart_blocks()[index], f"README.md quickstart block {index}", "exec"),
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
