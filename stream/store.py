"""The one model-store interface both Redis and the embedded in-memory store implement.

A stored model is a version number, a kind, JSON meta, numeric arrays (see
`stream.codec`, never pickle) and the stream offsets its state covers. Writes are
fenced: `save` succeeds only when the stored version is the one the writer last read,
so two workers that both think they own a model cannot interleave checkpoints.

Both stores persist the same two blobs per version — a JSON *envelope*
(`{"meta", "offsets", "created_ms"}`) and the codec bytes — built and checked here, so
validation and round-tripping are written once.
"""

from __future__ import annotations

import json
import math
import re
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

import numpy as np

from stream.codec import decode_arrays, encode_arrays

if TYPE_CHECKING:
    from rankstream.config import Settings

DEFAULT_KEEP_VERSIONS = 50
_NAME = re.compile(r"^[A-Za-z0-9_.\-]{1,200}$")


@dataclass(frozen=True)
class StoredModel:
    name: str
    version: int
    kind: str  # "online" | "cmds_dml" | "rankmkl" | "reservoir" | ...
    meta: dict
    arrays: dict[str, np.ndarray]
    offsets: dict[str, dict[int, int]]  # topic -> partition -> next offset covered
    created_ms: int


class FencingError(RuntimeError):
    """The stored version is not the one the writer expected: someone else wrote first."""

    def __init__(self, name: str, expected: int, actual: int) -> None:
        super().__init__(
            f"model {name!r}: expected stored version {expected}, found {actual} "
            "(another writer got there first)"
        )
        self.name, self.expected, self.actual = name, expected, actual


class ModelStore(Protocol):
    def load(self, name: str) -> StoredModel | None: ...

    def load_version(self, name: str, version: int) -> StoredModel | None: ...

    def versions(self, name: str) -> list[int]: ...

    def latest_versions(self) -> dict[str, int]: ...

    def names(self) -> list[str]: ...

    def save(
        self,
        name: str,
        *,
        kind: str,
        meta: dict,
        arrays: Mapping[str, np.ndarray],
        offsets: Mapping[str, Mapping[int, int]],
        expected_version: int,
        keep_versions: int | None = None,
    ) -> int: ...

    def delete(self, name: str) -> bool:
        """Remove the model and every kept version; True if it existed.

        Not fenced: for clean-up of models nobody writes any more (benchmark runs).
        A later save of the name starts again at version 1 (`expected_version=0`).
        """
        ...

    def listen(self) -> Announcements: ...

    def close(self) -> None: ...


class Announcements(Protocol):
    """A blocking iterator of (name, version); `get(timeout)` for a bounded wait."""

    def __iter__(self) -> Iterator[tuple[str, int]]: ...

    def __next__(self) -> tuple[str, int]: ...

    def get(self, timeout: float | None = None) -> tuple[str, int] | None: ...

    def close(self) -> None: ...


@dataclass(frozen=True)
class EncodedModel:
    """What a store persists for one version: kind, JSON envelope, array bytes."""

    kind: str
    envelope: str
    arrays: bytes


def check_keep_versions(keep_versions: int | None, default: int) -> int:
    """Per-save override of how many versions to keep (big reservoirs keep few)."""
    if keep_versions is None:
        return default
    if isinstance(keep_versions, bool) or not isinstance(keep_versions, int) or keep_versions < 1:
        raise ValueError(f"keep_versions must be an int >= 1, got {keep_versions!r}")
    return keep_versions


def check_name(name: str) -> str:
    if not isinstance(name, str) or not _NAME.match(name):
        raise ValueError(f"model name must match {_NAME.pattern}, got {name!r}")
    return name


def check_expected_version(expected_version: int) -> int:
    if (
        isinstance(expected_version, bool)
        or not isinstance(expected_version, int | np.integer)
        or expected_version < 0
    ):
        raise ValueError(f"expected_version must be an int >= 0, got {expected_version!r}")
    return int(expected_version)


def _check_offsets(offsets: Mapping[str, Mapping[int, int]]) -> dict[str, dict[str, int]]:
    out: dict[str, dict[str, int]] = {}
    for topic, parts in offsets.items():
        if not isinstance(topic, str) or not topic:
            raise ValueError(f"offsets: topic must be a non-empty string, got {topic!r}")
        out[topic] = {}
        for partition, offset in parts.items():
            p, o = int(partition), int(offset)
            if p < 0 or o < 0:
                raise ValueError(f"offsets[{topic!r}][{partition}] = {offset}: must be >= 0")
            out[topic][str(p)] = o
    return out


def _check_arrays(arrays: Mapping[str, np.ndarray]) -> None:
    for key, array in arrays.items():
        a = np.asarray(array)
        if a.dtype.kind in "fc" and not np.isfinite(a).all():
            raise ValueError(f"array {key!r} contains NaN or Inf; a model never holds one")


def encode_model(
    *,
    kind: str,
    meta: dict,
    arrays: Mapping[str, np.ndarray],
    offsets: Mapping[str, Mapping[int, int]],
) -> EncodedModel:
    """Validate a save's arguments and encode them; ValueError names what is wrong."""
    if not isinstance(kind, str) or not kind:
        raise ValueError(f"kind must be a non-empty string, got {kind!r}")
    if not isinstance(meta, dict):
        raise ValueError(f"meta must be a dict, got {type(meta).__name__}")
    _check_arrays(arrays)
    document = {
        "meta": meta,
        "offsets": _check_offsets(offsets),
        "created_ms": time.time_ns() // 1_000_000,
    }
    try:
        envelope = json.dumps(document, allow_nan=False, separators=(",", ":"))
    except (TypeError, ValueError) as exc:
        raise ValueError(f"meta is not plain finite JSON: {exc}") from None
    return EncodedModel(kind=kind, envelope=envelope, arrays=encode_arrays(arrays))


def decode_model(name: str, version: int, encoded: EncodedModel) -> StoredModel:
    document = json.loads(encoded.envelope)
    offsets = {
        topic: {int(p): int(o) for p, o in parts.items()}
        for topic, parts in document["offsets"].items()
    }
    return StoredModel(
        name=name,
        version=int(version),
        kind=encoded.kind,
        meta=document["meta"],
        arrays=decode_arrays(encoded.arrays),
        offsets=offsets,
        created_ms=int(document["created_ms"]),
    )


def finite_or_none(value: float | None) -> float | None:
    """Timeouts: None or a finite non-negative number of seconds."""
    if value is None:
        return None
    if not math.isfinite(value) or value < 0:
        raise ValueError(f"timeout must be a finite number >= 0, got {value}")
    return float(value)


def open_store(settings: Settings, keep_versions: int = DEFAULT_KEEP_VERSIONS) -> ModelStore:
    """Redis when `settings.redis_url` is set, else the process-wide embedded store."""
    if settings.redis_url:
        from stream.redis_store import RedisModelStore

        return RedisModelStore(settings, keep_versions=keep_versions)
    from stream.embedded_store import embedded_store

    return embedded_store(settings.topic_prefix, keep_versions=keep_versions)
