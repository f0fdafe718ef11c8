"""`rankstream model show NAME [--json]`: shape and values, embedded store (in process)."""

from __future__ import annotations

import json

import numpy as np
import pytest

from rankstream.cli import main
from rankstream.stream.connect import open_store
from rankstream.stream.settings import Settings
from rankstream.workers.checkpoint import TrackedModel, save_checkpoint, weights_sha256


@pytest.fixture
def stored_opr(embedded_settings: Settings, monkeypatch: pytest.MonkeyPatch) -> TrackedModel:
    monkeypatch.setenv("RANKSTREAM_TOPIC_PREFIX", embedded_settings.topic_prefix)
    monkeypatch.delenv("RANKSTREAM_KAFKA_BOOTSTRAP", raising=False)
    monkeypatch.delenv("RANKSTREAM_REDIS_URL", raising=False)
    rng = np.random.default_rng(5)
    model = TrackedModel(name="opr", algo="opr", scaler_rows=10)
    phi = rng.normal(size=(2, 30, 36)).astype(np.float32)
    model.learn("x.triplets", 2, 41, phi[0], phi[1], np.where(rng.random(30) < 0.5, 1.0, -1.0))
    save_checkpoint(open_store(embedded_settings), model, "test")
    return model


def test_model_show_json(stored_opr: TrackedModel, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["model", "show", "opr", "--json"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary == {
        "name": "opr",
        "version": 1,
        "n_updates": stored_opr.n_updates,
        "triplets_seen": 30,
        "offsets": {"x.triplets": {"2": 42}},
        "weights_sha256": weights_sha256(stored_opr.weights),
    }
    assert stored_opr.n_updates > 0


def test_model_show_table_and_missing(
    stored_opr: TrackedModel, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["model", "show", "opr"]) == 0
    out = capsys.readouterr().out
    assert "weights_sha256" in out and weights_sha256(stored_opr.weights)[:16] in out
    assert main(["model", "show", "opar2", "--json"]) == 1
    captured = capsys.readouterr()
    assert captured.out == "" and "no stored model opar2" in captured.err
