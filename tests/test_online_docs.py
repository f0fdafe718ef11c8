"""The runnable examples in the online-core docstrings stay true."""

from __future__ import annotations

import doctest
import importlib

import pytest

MODULES = [
    f"rankstream.ranking.{name}"
    for name in (
        "online", "scaling", "metrics", "reservoir", "pairs", "mkl.model", "dml.cmds_dml",
        "dml.cmds_dml_cv", "click_pairs", "propensity", "pdgd",
    )
]  # fmt: skip


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples(name):
    result = doctest.testmod(importlib.import_module(name), optionflags=doctest.ELLIPSIS)
    assert result.attempted > 0
    assert result.failed == 0
