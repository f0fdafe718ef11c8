"""The runnable examples in the online-core docstrings stay true."""

from __future__ import annotations

import doctest
import importlib

import pytest

MODULES = ["ranking.online", "ranking.scaling", "ranking.metrics", "ranking.reservoir"]
MODULES += [
    "rankstream.ranking.pairs",
    "rankstream.ranking.mkl.model",
    "rankstream.ranking.dml.cmds_dml",
    "rankstream.ranking.dml.cmds_dml_cv",
]


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples(name):
    result = doctest.testmod(importlib.import_module(name), optionflags=doctest.ELLIPSIS)
    assert result.attempted > 0
    assert result.failed == 0
