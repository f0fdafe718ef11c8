"""The documented names engines import from `rankstream.workers` (README, docs/) keep
working for one release after issue 39 moved them, and say where they went."""

from __future__ import annotations

import importlib
import sys

import pytest

MOVED = {
    "rankstream.workers.feedback_producer": (
        "rankstream.producers.feedback_producer",
        ("FeedbackProducer", "Feedback"),
    ),
    "rankstream.workers.click_producer": (
        "rankstream.producers.click_producer",
        ("ClickProducer",),
    ),
}


@pytest.mark.parametrize("old", sorted(MOVED))
def test_an_old_name_warns_and_is_the_new_object(old: str) -> None:
    new, names = MOVED[old]
    sys.modules.pop(old, None)
    with pytest.warns(DeprecationWarning, match=new):
        module = importlib.import_module(old)
    moved = importlib.import_module(new)
    for name in names:
        assert getattr(module, name) is getattr(moved, name)
    with pytest.raises(AttributeError):
        module.no_such_name  # noqa: B018
