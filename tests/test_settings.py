"""Deployment settings: the feature width (RANKSTREAM_PHI_DIM) and its checks."""

from __future__ import annotations

import pytest

from rankstream.stream.settings import DEFAULT_PHI_DIM, Settings


def test_the_width_defaults_to_the_papers_36_and_is_read_from_the_environment(monkeypatch):
    monkeypatch.delenv("RANKSTREAM_PHI_DIM", raising=False)
    assert Settings.from_env().phi_dim == DEFAULT_PHI_DIM == 36
    monkeypatch.setenv("RANKSTREAM_PHI_DIM", "128")
    assert Settings.from_env().phi_dim == 128


@pytest.mark.parametrize("value", ["0", "-3", "wide", "8.5"])
def test_a_bad_width_is_refused_naming_the_variable(monkeypatch, value):
    monkeypatch.setenv("RANKSTREAM_PHI_DIM", value)
    with pytest.raises(ValueError, match="RANKSTREAM_PHI_DIM must be an integer >= 1"):
        Settings.from_env()


def test_settings_refuse_a_width_below_one():
    with pytest.raises(ValueError, match="phi_dim"):
        Settings(phi_dim=0)
