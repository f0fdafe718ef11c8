"""Every runnable example in a docstring stays true: each module whose source holds one
is found (no list to forget) and its doctests run here, in `make test`."""

from __future__ import annotations

import doctest
import importlib

import pytest
from test_architecture import module_files

# Modules whose examples need what a unit test may not have, and where they run instead.
ELSEWHERE = {
    "rankstream.simulators.fashion_mnist": "reads the real files: tests/test_fashion_mnist.py",
    "rankstream.client": "talks to a running serve: tests/test_client.py",
}
MODULES = sorted(
    name for _, name, path in module_files() if ">>> " in path.read_text() and name not in ELSEWHERE
)


def test_the_examples_are_found() -> None:
    """The finder sees the modules known to hold examples (a broken finder runs none)."""
    assert {"rankstream.ranking.online", "rankstream.simulators.judged_feedback"} <= set(MODULES)
    assert len(MODULES) >= 14


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples(name: str) -> None:
    result = doctest.testmod(importlib.import_module(name), optionflags=doctest.ELLIPSIS)
    assert result.attempted > 0
    assert result.failed == 0
