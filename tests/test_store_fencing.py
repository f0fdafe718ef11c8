"""Fencing on the identity of the previous save (write ids), on both stores.

The ABA case: writer A saves v+1, a machine crash loses it (the store comes back at v),
writer B loads v and saves its own v+1, and A, still alive, saves expecting v+1. Version
numbers alone would let A write on top of B's model; the write ids differ, so it must be
refused. On Redis the loss is made exactly as `rankstream chaos` makes it
(`forget_latest_checkpoints`); the embedded store is rolled back the same way.
"""

from __future__ import annotations

import numpy as np
import pytest

from rankstream.harness.chaos import forget_latest_checkpoints
from rankstream.stream.connect import open_store
from rankstream.stream.embedded_store import EmbeddedModelStore, reset_embedded_stores
from rankstream.stream.store import Fence, FencingError, ModelStore, fenced_save, new_write_id
from rankstream.workers.checkpoint import TrackedModel, load_or_create, save_checkpoint


@pytest.fixture(params=["embedded", pytest.param("redis", marks=pytest.mark.services)])
def store_and_lose(request):
    """A store and a function that drops a model's newest version (a lost AOF tail)."""
    if request.param == "embedded":
        reset_embedded_stores()
        settings = request.getfixturevalue("embedded_settings")
    else:
        settings = request.getfixturevalue("service_settings")
    store = open_store(settings)

    def lose_latest(name: str) -> None:
        before = store.latest_versions()[name]
        if isinstance(store, EmbeddedModelStore):
            _forget_latest_embedded(store, name)
        else:
            assert forget_latest_checkpoints(settings, [name]) == 1
        assert store.latest_versions()[name] == before - 1

    yield store, lose_latest
    store.close()


def _forget_latest_embedded(store: EmbeddedModelStore, name: str) -> None:
    """The embedded twin of chaos's Redis rollback: back to the previous snapshot."""
    with store._lock:
        latest = store._latest[name]
        del store._versions[name][latest]
        store._latest[name] = latest - 1


def _save(store: ModelStore, expected: tuple[int, str | None], write_id: str, value: float) -> int:
    version, expected_write_id = expected
    return store.save(
        "m",
        kind="online",
        meta={"value": value},
        arrays={"w": np.full(4, value)},
        offsets={"t": {0: int(value)}},
        expected_version=version,
        expected_write_id=expected_write_id,
        write_id=write_id,
    )


def test_a_writer_whose_version_was_lost_and_reused_is_refused(store_and_lose):
    store, lose_latest = store_and_lose
    first = new_write_id()
    assert _save(store, (0, None), first, 1.0) == 1
    v = store.load("m")
    assert (v.version, v.write_id) == (1, first)

    a_id = new_write_id()  # A saves v+1 ...
    assert _save(store, (v.version, v.write_id), a_id, 2.0) == 2
    lose_latest("m")  # ... and the crash loses it
    b_start = store.load("m")
    assert (b_start.version, b_start.write_id) == (1, first)
    b_id = new_write_id()  # B resumes from v and saves its own v+1
    assert _save(store, (b_start.version, b_start.write_id), b_id, 20.0) == 2

    with pytest.raises(FencingError) as refused:  # A, expecting its own v+1
        _save(store, (2, a_id), new_write_id(), 3.0)
    assert (refused.value.expected, refused.value.actual) == (2, 2)
    assert (refused.value.expected_write_id, refused.value.actual_write_id) == (a_id, b_id)
    assert b_id in str(refused.value)
    kept = store.load("m")
    assert (kept.version, kept.write_id, kept.meta) == (2, b_id, {"value": 20.0})
    assert store.versions("m") == [1, 2]
    assert _save(store, (2, b_id), new_write_id(), 21.0) == 3  # B carries on


def test_a_retried_save_adopts_its_own_write_but_not_anyone_elses(store_and_lose):
    store, _ = store_and_lose
    mine = new_write_id()
    assert _save(store, (0, None), mine, 1.0) == 1
    # The same save again (its first reply lost): the store already holds it.
    assert _save(store, (0, None), mine, 1.0) == 1
    assert store.versions("m") == [1] and store.load("m").write_id == mine
    with pytest.raises(FencingError):  # someone else's save at the same number
        _save(store, (0, None), new_write_id(), 1.0)
    other = new_write_id()
    assert _save(store, (1, mine), other, 2.0) == 2
    with pytest.raises(FencingError):  # our retry, but someone has written on top since
        _save(store, (0, None), mine, 1.0)
    assert store.versions("m") == [1, 2] and store.load("m").write_id == other


def test_every_version_keeps_the_id_it_was_written_with(store_and_lose):
    store, _ = store_and_lose
    generated = []
    for v in range(3):  # no write_id given: the store draws a fresh one per save
        store.save(
            "m", kind="online", meta={}, arrays={"w": np.zeros(2)}, offsets={}, expected_version=v
        )
        generated.append(store.load("m").write_id)
    assert len(set(generated)) == 3
    assert [store.load_version("m", v).write_id for v in (1, 2, 3)] == generated


@pytest.mark.parametrize(
    "kwargs",
    [
        {"write_id": "short"},
        {"write_id": "has space 123"},
        {"expected_write_id": 12345678},
        {"expected_write_id": ""},
    ],
)
def test_malformed_write_ids_raise_value_errors_and_write_nothing(store_and_lose, kwargs):
    store, _ = store_and_lose
    with pytest.raises(ValueError, match="write_id"):
        store.save(
            "m",
            kind="online",
            meta={},
            arrays={"w": np.zeros(2)},
            offsets={},
            expected_version=0,
            **kwargs,
        )
    assert store.load("m") is None


def _trained_model(store: ModelStore, seed: int) -> TrackedModel:
    """`opr` from the store (or new), one message of 8 rows learnt on top."""
    rng = np.random.default_rng(seed)
    model = load_or_create(store, "opr", {}, scaler_rows=4)
    offset = model.next_offset("t", 0) or 0
    model.learn(
        "t",
        0,
        offset,
        rng.standard_normal((8, 3)),
        rng.standard_normal((8, 3)),
        rng.choice([-1.0, 1.0], size=8),
    )
    return model


def test_online_checkpoints_are_fenced_on_the_identity_of_the_last_save(store_and_lose):
    store, lose_latest = store_and_lose
    assert save_checkpoint(store, _trained_model(store, 0), "setup") == 1
    a = _trained_model(store, 1)  # A loads v1 and checkpoints v2 ...
    assert save_checkpoint(store, a, "A") == 2
    lose_latest("opr")  # ... the crash loses v2
    b = _trained_model(store, 2)  # B resumes from v1 and checkpoints its own v2
    assert (b.version, save_checkpoint(store, b, "B")) == (1, 2)
    a.learn("t", 0, 2, np.ones((1, 3)), np.zeros((1, 3)), np.ones(1))
    with pytest.raises(FencingError):
        save_checkpoint(store, a, "A")
    stored = store.load("opr")
    assert (stored.version, stored.meta["writer"], stored.write_id) == (2, "B", b.fence.write_id)
    assert stored.meta["triplets_seen"] == 16  # setup's 8 and B's 8: nothing of A's


class _ReplyLostOnce:
    """Wraps a store: the next save is written, then raises as if its reply were lost."""

    def __init__(self, store: ModelStore) -> None:
        self.store, self.lose_next = store, True

    def save(self, name: str, **kwargs) -> int:  # type: ignore[no-untyped-def]
        version = self.store.save(name, **kwargs)
        if self.lose_next:
            self.lose_next = False
            raise ConnectionError("reply lost")
        return version


def _fenced(store, fence: Fence, value: float) -> int:
    return fenced_save(
        store,
        "m",
        fence,
        kind="online",
        meta={"value": value},
        arrays={"w": np.full(4, value)},
        offsets={"t": {0: int(value)}},
    )


def test_fenced_save_builds_on_its_own_save_that_raised_but_landed(store_and_lose):
    store, _ = store_and_lose
    fence = Fence()
    with pytest.raises(ConnectionError):
        _fenced(_ReplyLostOnce(store), fence, 1.0)
    assert fence.version == 0 and len(fence.unconfirmed) == 1
    assert _fenced(store, fence, 2.0) == 2  # v1 is ours: adopted, v2 written on top
    assert (fence.version, fence.unconfirmed) == (2, [])
    assert [store.load_version("m", v).meta["value"] for v in (1, 2)] == [1.0, 2.0]


def test_fenced_save_refuses_when_another_writer_built_on_the_landed_save(store_and_lose):
    store, _ = store_and_lose
    mine = Fence()
    with pytest.raises(ConnectionError):
        _fenced(_ReplyLostOnce(store), mine, 1.0)
    theirs = Fence.of(store.load("m"))  # a successor loads our landed v1 and saves v2
    assert _fenced(store, theirs, 10.0) == 2
    with pytest.raises(FencingError):
        _fenced(store, mine, 2.0)
    assert store.load("m").meta == {"value": 10.0} and store.versions("m") == [1, 2]
