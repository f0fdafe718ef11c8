"""The model-store contract, run against the embedded store and (marked services) real Redis."""

from __future__ import annotations

import threading

import numpy as np
import pytest

from rankstream.stream.connect import open_store
from rankstream.stream.embedded_store import reset_embedded_stores
from rankstream.stream.store import FencingError, ModelStore

KEEP = 5


@pytest.fixture(params=["embedded", pytest.param("redis", marks=pytest.mark.services)])
def store(request):
    if request.param == "embedded":
        reset_embedded_stores()
        settings = request.getfixturevalue("embedded_settings")
    else:
        settings = request.getfixturevalue("service_settings")
        assert settings.redis_url
    s = open_store(settings, keep_versions=KEEP)
    yield s
    s.close()


def _weights(seed: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {
        "w": rng.standard_normal(36),
        "scale": rng.standard_normal((2, 36)).astype(np.float32),
        "counts": rng.integers(-(2**62), 2**62, size=7, dtype=np.int64),
        "mask": rng.random(5) > 0.5,
    }


def _save(store: ModelStore, name: str, expected: int, seed: int = 0, **extra) -> int:
    return store.save(
        name,
        kind="online",
        meta={"algo": "opar1", "C": 0.1, "n_updates": seed, **extra},
        arrays=_weights(seed),
        offsets={"rs.triplets": {0: 10 * seed, 1: 3}},
        expected_version=expected,
    )


def test_empty_store_has_nothing(store):
    assert store.load("m") is None
    assert store.load_version("m", 1) is None
    assert store.versions("m") == []
    assert store.names() == [] and store.latest_versions() == {}


def test_save_then_load_round_trips_everything_bit_exactly(store):
    assert _save(store, "m", 0, seed=3) == 1
    model = store.load("m")
    assert model is not None
    assert (model.name, model.version, model.kind) == ("m", 1, "online")
    assert model.meta == {"algo": "opar1", "C": 0.1, "n_updates": 3}
    assert model.offsets == {"rs.triplets": {0: 30, 1: 3}}
    assert model.created_ms > 0
    expected = _weights(3)
    assert set(model.arrays) == set(expected)
    for key, array in expected.items():
        got = model.arrays[key]
        assert got.dtype == array.dtype and got.shape == array.shape
        assert got.tobytes() == array.tobytes()


def test_versions_increase_and_every_model_is_listed(store):
    for v in range(3):
        assert _save(store, "a", v, seed=v) == v + 1
    assert _save(store, "b", 0) == 1
    assert store.versions("a") == [1, 2, 3]
    assert store.latest_versions() == {"a": 3, "b": 1}
    assert store.names() == ["a", "b"]
    old = store.load_version("a", 2)
    assert old is not None and old.meta["n_updates"] == 1
    assert old.arrays["w"].tobytes() == _weights(1)["w"].tobytes()


def test_stale_expected_version_raises_and_leaves_the_store_unchanged(store):
    _save(store, "m", 0, seed=1)
    _save(store, "m", 1, seed=2)
    with pytest.raises(FencingError) as info:
        _save(store, "m", 1, seed=99)
    assert (info.value.expected, info.value.actual) == (1, 2)
    with pytest.raises(FencingError):
        _save(store, "new", 4)
    model = store.load("m")
    assert model is not None and model.version == 2 and model.meta["n_updates"] == 2
    assert store.versions("m") == [1, 2] and "new" not in store.names()


def test_only_the_most_recent_versions_are_kept(store):
    for v in range(KEEP + 3):
        _save(store, "m", v, seed=v)
    assert store.versions("m") == list(range(4, KEEP + 4))
    assert store.load_version("m", 3) is None
    kept = store.load_version("m", 4)
    assert kept is not None and kept.meta["n_updates"] == 3


def test_a_save_can_keep_fewer_versions_than_the_store_default(store):
    for v in range(3):
        _save(store, "big", v, seed=v)
    store.save(
        "big",
        kind="reservoir",
        meta={},
        arrays={"x": np.zeros(2)},
        offsets={},
        expected_version=3,
        keep_versions=1,
    )
    assert store.versions("big") == [4]
    assert store.load_version("big", 3) is None
    with pytest.raises(ValueError, match="keep_versions"):
        _save_keep(store, 0)


def _save_keep(store: ModelStore, keep: int) -> int:
    return store.save(
        "other",
        kind="online",
        meta={},
        arrays={},
        offsets={},
        expected_version=0,
        keep_versions=keep,
    )


def test_announcements_arrive_for_every_save(store):
    updates = store.listen()
    _save(store, "a", 0)
    _save(store, "b", 0)
    _save(store, "a", 1)
    received = [updates.get(timeout=10) for _ in range(3)]
    assert received == [("a", 1), ("b", 1), ("a", 2)]
    assert updates.get(timeout=0.2) is None
    updates.close()


def test_closing_a_listener_ends_a_blocked_iteration(store):
    updates = store.listen()
    seen: list = []
    thread = threading.Thread(target=lambda: seen.extend(updates))
    thread.start()
    _save(store, "m", 0)
    for _ in range(100):
        if seen:
            break
        thread.join(0.05)
    updates.close()
    thread.join(10)
    assert not thread.is_alive()
    assert seen == [("m", 1)]


def test_concurrent_writers_with_the_same_expected_version_only_one_wins(store):
    _save(store, "m", 0)
    outcomes: list[str] = []

    def write(seed: int) -> None:
        try:
            _save(store, "m", 1, seed=seed)
            outcomes.append("ok")
        except FencingError:
            outcomes.append("fenced")

    threads = [threading.Thread(target=write, args=(s,)) for s in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(outcomes) == ["fenced"] * 5 + ["ok"]
    assert store.versions("m") == [1, 2]


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"arrays": {"w": np.array([1.0, np.nan])}}, "NaN or Inf"),
        ({"arrays": {"w": np.array([np.inf])}}, "NaN or Inf"),
        ({"arrays": {"o": np.array(["x"], dtype=object)}}, "not numeric"),
        ({"meta": {"x": float("nan")}}, "JSON"),
        ({"meta": {"x": object()}}, "JSON"),
        ({"offsets": {"t": {0: -1}}}, ">= 0"),
        ({"kind": ""}, "kind"),
        ({"expected_version": -1}, "expected_version"),
    ],
)
def test_bad_saves_raise_value_errors_and_write_nothing(store, kwargs, match):
    args = {
        "kind": "online",
        "meta": {},
        "arrays": {"w": np.zeros(3)},
        "offsets": {},
        "expected_version": 0,
    }
    args.update(kwargs)
    with pytest.raises(ValueError, match=match):
        store.save("m", **args)
    assert store.load("m") is None


def test_bad_names_are_rejected(store):
    for name in ["", "a:b", "a b", "x" * 201, "arow\n"]:
        with pytest.raises(ValueError, match="model name"):
            _save(store, name, 0)


def test_delete_removes_every_version_and_the_name(store):
    for v in range(3):
        _save(store, "gone", v, seed=v)
    _save(store, "kept", 0)
    assert store.delete("gone") is True
    assert store.load("gone") is None and store.versions("gone") == []
    assert all(store.load_version("gone", v) is None for v in (1, 2, 3))
    assert store.names() == ["kept"] and store.latest_versions() == {"kept": 1}
    assert store.delete("gone") is False  # nothing left to delete
    assert _save(store, "gone", 0) == 1  # the name starts over
    with pytest.raises(ValueError, match="model name"):
        store.delete("bad name")


def test_an_idempotency_key_is_claimed_once_settled_released_and_expires(store):
    """`claim_key` is SET NX: one claimant wins; others see its token, then its answer."""
    import time

    assert store.claim_key("k1", b"pending:a", 30) is None
    assert store.claim_key("k1", b"pending:b", 30) == b"pending:a"
    store.release_key("k1", b"pending:b")  # not its claim: kept
    assert store.claim_key("k1", b"pending:c", 30) == b"pending:a"
    store.settle_key("k1", b'{"answer": 1}', 30)
    assert store.claim_key("k1", b"pending:d", 30) == b'{"answer": 1}'
    assert store.claim_key("k2", b"pending:e", 30) is None
    store.release_key("k2", b"pending:e")
    assert store.claim_key("k2", b"pending:f", 0.2) is None  # free again
    time.sleep(0.4)
    assert store.claim_key("k2", b"pending:g", 30) is None  # expired
    store.ping()
