"""TrackedModel and fenced checkpoints on the embedded store (no services)."""

from __future__ import annotations

import numpy as np
import pytest

from rankstream.ranking.online import OnlineRanker
from rankstream.ranking.scaling import Standardizer
from rankstream.stream.embedded_store import EmbeddedModelStore
from rankstream.stream.store import FencingError
from rankstream.workers.checkpoint import (
    TrackedModel,
    load_or_create,
    save_checkpoint,
    summarize,
    weights_sha256,
)

T = "t.triplets"
D = 36


def _rows(rng: np.random.Generator, n: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    phi1 = rng.normal(2.0, 3.0, (n, D)).astype(np.float32)
    phi2 = rng.normal(1.0, 0.5, (n, D)).astype(np.float32)
    y = np.where(rng.random(n) < 0.5, 1.0, -1.0)
    return phi1, phi2, y


def _model(scaler_rows: int = 500, algo: str = "opar1") -> TrackedModel:
    return TrackedModel(name=algo, algo=algo, params={"C": 0.1}, scaler_rows=scaler_rows)


def test_scaler_waits_for_enough_rows_then_learns_held_messages_in_order() -> None:
    rng = np.random.default_rng(0)
    a, b = _rows(rng, 300), _rows(rng, 300)
    model = _model(scaler_rows=500)
    model.learn(T, 0, 10, *a)
    assert model.ranker is None and not model.checkpointable
    assert model.next_offset(T, 0) is None and model.held_rows == 300
    model.skip(T, 0, 11)  # a dead letter between them keeps its place
    model.learn(T, 0, 12, *b)
    assert model.next_offset(T, 0) == 13 and model.triplets_seen == 600

    scaler = Standardizer().fit(np.vstack([a[0], b[0], a[1], b[1]]))
    reference = OnlineRanker("opar1", C=0.1, scaler=scaler)
    reference.learn_many(np.subtract(a[0], a[1], dtype=np.float64), a[2])
    reference.learn_many(np.subtract(b[0], b[1], dtype=np.float64), b[2])
    assert weights_sha256(model.weights) == weights_sha256(reference.weights)
    assert np.abs(model.weights).sum() > 0


def test_checkpoint_round_trip_resumes_bit_identically() -> None:
    rng = np.random.default_rng(1)
    store = EmbeddedModelStore()
    blocks = [_rows(rng, 400) for _ in range(4)]
    uninterrupted = _model(scaler_rows=300)
    for offset, block in enumerate(blocks):
        uninterrupted.learn(T, 0, offset, *block)

    first = _model(scaler_rows=300)
    for offset, block in enumerate(blocks[:2]):
        first.learn(T, 0, offset, *block)
    assert save_checkpoint(store, first, "w1") == 1
    resumed = load_or_create(store, "opar1", {"C": 0.1}, scaler_rows=300)
    assert resumed.version == 1 and resumed.next_offset(T, 0) == 2
    assert resumed.covers(T, 0, 1) and not resumed.covers(T, 0, 2)
    for offset, block in enumerate(blocks[2:], start=2):
        resumed.learn(T, 0, offset, *block)
    assert weights_sha256(resumed.weights) == weights_sha256(uninterrupted.weights)
    assert resumed.triplets_seen == uninterrupted.triplets_seen == 1600
    assert resumed.n_updates == uninterrupted.n_updates


def test_stale_writer_is_fenced_and_cannot_overwrite() -> None:
    rng = np.random.default_rng(2)
    store = EmbeddedModelStore()
    model = _model(scaler_rows=10)
    model.learn(T, 0, 0, *_rows(rng, 50))
    save_checkpoint(store, model, "old")
    stale = load_or_create(store, "opar1", {}, 10)
    fresh = load_or_create(store, "opar1", {}, 10)
    fresh.learn(T, 0, 1, *_rows(rng, 50))
    assert save_checkpoint(store, fresh, "new") == 2
    stale.learn(T, 0, 1, *_rows(rng, 50))
    with pytest.raises(FencingError):
        save_checkpoint(store, stale, "old")
    stored = store.load("opar1")
    assert stored is not None and stored.version == 2 and stored.meta["writer"] == "new"
    assert summarize(stored)["weights_sha256"] == weights_sha256(fresh.weights)


class _LostReplyStore(EmbeddedModelStore):
    """The first save is written but its reply is lost (the connection drops)."""

    lose_next = True

    def save(self, name, **kwargs):  # type: ignore[no-untyped-def]
        version = super().save(name, **kwargs)
        if self.lose_next:
            self.lose_next = False
            raise ConnectionError("reply lost")
        return version


def test_retry_after_a_lost_reply_adopts_its_own_write() -> None:
    rng = np.random.default_rng(3)
    store = _LostReplyStore()
    model = _model(scaler_rows=10)
    model.learn(T, 0, 0, *_rows(rng, 50))
    with pytest.raises(ConnectionError):
        save_checkpoint(store, model, "w")
    assert model.dirty and model.version == 0
    model.learn(T, 0, 1, *_rows(rng, 5))  # learning goes on before the next checkpoint
    # The next checkpoint finds its own unconfirmed save stored as v1 (not a fence) and
    # saves the current state on top of it.
    assert save_checkpoint(store, model, "w") == 2 and not model.dirty
    assert store.versions("opar1") == [1, 2]
    first, second = store.load_version("opar1", 1), store.load("opar1")
    assert first.meta["triplets_seen"] == 50 and first.offsets == {T: {0: 1}}
    assert second.meta["triplets_seen"] == 55 and second.offsets == {T: {0: 2}}
    assert model.fence.write_id == second.write_id != first.write_id


def test_summary_shape() -> None:
    rng = np.random.default_rng(4)
    store = EmbeddedModelStore()
    model = _model(scaler_rows=10, algo="opr")
    model.learn(T, 3, 7, *_rows(rng, 40))
    save_checkpoint(store, model, "w")
    stored = store.load("opr")
    assert stored is not None
    summary = summarize(stored)
    assert set(summary) == {
        "name",
        "version",
        "n_updates",
        "triplets_seen",
        "offsets",
        "weights_sha256",
    }
    assert summary["offsets"] == {T: {"3": 8}}
    assert summary["triplets_seen"] == 40 and summary["n_updates"] == model.n_updates > 0
    expected = weights_sha256(np.asarray(model.weights, dtype="<f8"))
    assert summary["weights_sha256"] == expected and len(expected) == 64
