"""In-memory model store with the Redis store's semantics (fencing, versions, announcements).

One store per key prefix per process (like a Redis namespace), shared by every
`open_store` caller, so a worker thread and an evaluator thread see the same models.
Versions are kept encoded (`stream.store.encode_model`), so a loaded model never
aliases the arrays a writer passed in, exactly as with Redis.
"""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Callable

from rankstream.stream.store import (
    DEFAULT_KEEP_VERSIONS,
    Announcements,
    EncodedModel,
    Fence,
    ModelStore,
    StoredModel,
    check_fence,
    check_name,
    decode_model,
    finite_or_none,
)

_CLOSED = object()


class QueueAnnouncements(Announcements):
    """Announcements delivered through a queue; `close` ends iteration."""

    def __init__(self, on_close: Callable[[QueueAnnouncements], None]) -> None:
        self._queue: queue.Queue = queue.Queue()
        self._on_close = on_close
        self._closed = False

    def put(self, item: tuple[str, int]) -> None:
        self._queue.put(item)

    def get(self, timeout: float | None = None) -> tuple[str, int] | None:
        """Next announcement, or None after `timeout` seconds or once closed."""
        if self._closed and self._queue.empty():
            return None
        try:
            item = self._queue.get(timeout=finite_or_none(timeout))
        except queue.Empty:
            return None
        if item is _CLOSED:
            self._queue.put(_CLOSED)  # keep later calls from blocking
            return None
        return item

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            self._on_close(self)
            self._queue.put(_CLOSED)


class EmbeddedModelStore(ModelStore):
    """Thread-safe dict of name -> {version: EncodedModel}, trimmed to the newest N."""

    def __init__(self, keep_versions: int = DEFAULT_KEEP_VERSIONS) -> None:
        if keep_versions < 1:
            raise ValueError(f"keep_versions must be >= 1, got {keep_versions}")
        self.keep_versions = keep_versions
        self._lock = threading.Lock()
        self._latest: dict[str, int] = {}
        self._versions: dict[str, dict[int, EncodedModel]] = {}
        self._listeners: list[QueueAnnouncements] = []
        self._keys: dict[str, tuple[bytes, float]] = {}  # idempotency key -> (value, expiry)
        self._next_purge = 0.0

    def load(self, name: str) -> StoredModel | None:
        with self._lock:
            version = self._latest.get(check_name(name))
            encoded = None if version is None else self._versions[name][version]
        return None if encoded is None else decode_model(name, version, encoded)

    def load_version(self, name: str, version: int) -> StoredModel | None:
        with self._lock:
            encoded = self._versions.get(check_name(name), {}).get(int(version))
        return None if encoded is None else decode_model(name, int(version), encoded)

    def versions(self, name: str) -> list[int]:
        with self._lock:
            return sorted(self._versions.get(check_name(name), {}))

    def latest_versions(self) -> dict[str, int]:
        with self._lock:
            return dict(self._latest)

    def names(self) -> list[str]:
        with self._lock:
            return sorted(self._latest)

    def _save_encoded(self, name: str, encoded: EncodedModel, fence: Fence, keep: int) -> int:
        """Fenced (version and write id), atomic write of the next version; announces it."""
        with self._lock:
            actual = self._latest.get(name, 0)
            stored_write_id = self._versions[name][actual].write_id if actual else None
            if not check_fence(
                name,
                fence,
                stored_version=actual,
                stored_write_id=stored_write_id,
                write_id=encoded.write_id,
            ):
                return actual  # this very save is already stored
            version = actual + 1
            kept = self._versions.setdefault(name, {})
            kept[version] = encoded
            for old in [v for v in kept if v <= version - keep]:
                del kept[old]
            self._latest[name] = version
            listeners = list(self._listeners)
        for listener in listeners:
            listener.put((name, version))
        return version

    def delete(self, name: str) -> bool:
        """Forget the model and all its versions (see `ModelStore.delete`)."""
        with self._lock:
            existed = self._latest.pop(check_name(name), None) is not None
            self._versions.pop(name, None)
        return existed

    def listen(self) -> QueueAnnouncements:
        """Subscribes now: every save after this call is delivered."""
        listener = QueueAnnouncements(self._remove_listener)
        with self._lock:
            self._listeners.append(listener)
        return listener

    def claim_key(self, key: str, token: bytes, ttl_s: float) -> bytes | None:
        now = time.monotonic()
        with self._lock:
            if now >= self._next_purge:  # expired keys go at most once a second
                self._keys = {k: v for k, v in self._keys.items() if v[1] > now}
                self._next_purge = now + 1.0
            held = self._keys.get(key)
            if held is not None and held[1] > now:
                return held[0]
            self._keys[key] = (token, now + ttl_s)
            return None

    def settle_key(self, key: str, answer: bytes, ttl_s: float) -> None:
        with self._lock:
            self._keys[key] = (answer, time.monotonic() + ttl_s)

    def release_key(self, key: str, token: bytes) -> None:
        with self._lock:
            held = self._keys.get(key)
            if held is not None and held[0] == token:
                del self._keys[key]

    def ping(self) -> None:
        """In memory: always answers."""

    def close(self) -> None:
        """The shared store outlives any one user; `reset_embedded_stores` clears it."""

    def _remove_listener(self, listener: QueueAnnouncements) -> None:
        with self._lock:
            if listener in self._listeners:
                self._listeners.remove(listener)


_registry_lock = threading.Lock()
_registry: dict[str, EmbeddedModelStore] = {}


def embedded_store(
    prefix: str = "rankstream", keep_versions: int = DEFAULT_KEEP_VERSIONS
) -> EmbeddedModelStore:
    """The process-wide store for a key prefix (created on first use)."""
    with _registry_lock:
        store = _registry.get(prefix)
        if store is None:
            store = _registry[prefix] = EmbeddedModelStore(keep_versions)
        return store


def reset_embedded_stores() -> None:
    """Forget every embedded model (tests)."""
    with _registry_lock:
        _registry.clear()
