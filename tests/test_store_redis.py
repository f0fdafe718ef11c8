"""Redis-only behaviour of the model store: key layout, lost replies, restarts."""

from __future__ import annotations

import numpy as np
import pytest
import redis
from redis.exceptions import ConnectionError as RedisConnectionError

from rankstream.stream.redis_store import RedisModelStore


def _save(store: RedisModelStore, expected: int, value: float = 1.0) -> int:
    return store.save(
        "m",
        kind="online",
        meta={"n_updates": int(value)},
        arrays={"w": np.full(36, value)},
        offsets={"t": {0: int(value)}},
        expected_version=expected,
    )


@pytest.mark.services
def test_keys_follow_the_documented_layout_and_trimmed_snapshots_are_deleted(service_settings):
    store = RedisModelStore(service_settings, keep_versions=2)
    for v in range(3):
        _save(store, v, value=v)
    client = redis.Redis.from_url(service_settings.redis_url)
    p = service_settings.topic_prefix
    latest = client.hgetall(f"{p}:model:m")
    assert set(latest) == {b"version", b"kind", b"meta", b"arrays", b"write_id"}
    assert latest[b"version"] == b"3" and latest[b"kind"] == b"online"
    assert client.smembers(f"{p}:models") == {b"m"}
    assert not client.exists(f"{p}:model:m:v:1")
    assert client.exists(f"{p}:model:m:v:2") and client.exists(f"{p}:model:m:v:3")
    client.close()
    store.close()


@pytest.mark.services
def test_a_save_whose_reply_was_lost_is_not_reported_as_fenced(service_settings):
    store = RedisModelStore(service_settings)
    real_script = store._save_script
    calls = []

    def lose_first_reply(*args, **kwargs):
        result = real_script(*args, **kwargs)
        calls.append(result)
        if len(calls) == 1:
            raise RedisConnectionError("connection reset after the write")
        return result

    store._save_script = lose_first_reply  # type: ignore[method-assign]
    assert _save(store, 0) == 1
    assert store.versions("m") == [1] and len(calls) == 1
    store.close()


@pytest.mark.services
def test_the_store_and_its_listeners_recover_after_a_redis_restart(services, service_settings):
    store = RedisModelStore(service_settings)
    _save(store, 0)
    services.manager.restart("redis")
    current = store.load("m")  # reads retry with back-off while Redis comes back
    expected = 0 if current is None else current.version  # data survives only with persistence
    updates = store.listen()
    assert _save(store, expected, value=5.0) == expected + 1
    assert updates.get(timeout=10) == ("m", expected + 1)
    updates.close()
    store.close()


def test_settings_password_overrides_the_urls():
    from rankstream.stream.redis_store import redis_client

    client = redis_client("redis://user:from-url@127.0.0.1:1/0", password="from-env")
    assert client.connection_pool.make_connection().password == "from-env"
    assert (
        redis_client("redis://user:from-url@127.0.0.1:1/0").connection_pool.connection_kwargs[
            "password"
        ]
        == "from-url"
    )
