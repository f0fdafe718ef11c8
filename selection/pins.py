"""Model pins: serve a model at a fixed version while its workers and the evaluator move on.

`rankstream model pin NAME VERSION` stores the pin as its own small record in the model
store, `pin.NAME` (kind "pin"), written with `fenced_save` like every other save, so two
operators pinning at once cannot both win unseen. The record holds a copy of the pinned
version (its kind, meta and arrays): a pin keeps serving after the model's own history
has been trimmed past that version (the store keeps 50) and after a restart.
`model unpin NAME` saves a new version of the record that pins nothing; the record's
versions are the pin's history (`model history NAME`).

The serving side honours pins: `selection.what_serves.ServingModel` (the simulator) and the
HTTP API's registry (`serve.registry`) serve a pinned model at its pinned version
whenever that model is asked for, by name or as the champion. Nothing else changes: the
online and batch workers keep checkpointing, and the evaluator keeps scoring every new
version (the stamps carry the newest versions), so the rolling NDCG@50 shows whether
unpinning would help. The "pin" kind has no scorer, so a pin record is never served
or scored under its own name.
"""

from __future__ import annotations

import getpass
import socket
import time
from typing import Any

from rankstream.stream.store import Fence, ModelStore, StoredModel, check_name, fenced_save

PIN_PREFIX = "pin."
PIN_KIND = "pin"


def pin_record_name(name: str) -> str:
    """The store name of NAME's pin record."""
    return PIN_PREFIX + check_name(name)


def is_pin_record(name: str) -> bool:
    return name.startswith(PIN_PREFIX)


def pinned_model(record: StoredModel | None) -> StoredModel | None:
    """The pinned version held by a pin record; None when it pins nothing."""
    if record is None or record.kind != PIN_KIND or not record.meta.get("pinned"):
        return None
    meta = record.meta
    return StoredModel(
        name=str(meta["model"]),
        version=int(meta["version"]),
        kind=str(meta["model_kind"]),
        meta=dict(meta["model_meta"]),
        arrays=record.arrays,
        offsets={},
        created_ms=int(meta["model_created_ms"]),
        write_id=record.write_id,
    )


def _who() -> str:
    try:
        user = getpass.getuser()
    except (KeyError, OSError):  # no passwd entry in some containers
        user = "unknown"
    return f"{user}@{socket.gethostname()}"


def pin(store: ModelStore, name: str, version: int) -> StoredModel:
    """Pin NAME at VERSION; LookupError when the store no longer has that version.

    Returns the pinned model. FencingError if another pin or unpin landed in between.
    """
    stored = store.load_version(check_name(name), int(version))
    if stored is None:
        kept = store.versions(name)
        raise LookupError(
            f"model {name!r} has no stored version {version}"
            + (f" (kept: {kept[0]}..{kept[-1]})" if kept else " (no stored versions)")
        )
    meta: dict[str, Any] = {
        "pinned": True,
        "model": name,
        "version": stored.version,
        "model_kind": stored.kind,
        "model_meta": stored.meta,
        "model_created_ms": stored.created_ms,
        "at_ms": time.time_ns() // 1_000_000,
        "by": _who(),
    }
    _save(store, name, meta, stored.arrays)
    return stored


def unpin(store: ModelStore, name: str) -> int | None:
    """Unpin NAME; returns the version that was pinned, None when nothing was."""
    record = store.load(pin_record_name(name))
    held = pinned_model(record)
    if held is None:
        return None
    meta = {"pinned": False, "model": name, "at_ms": time.time_ns() // 1_000_000, "by": _who()}
    _save(store, name, meta, {}, Fence.of(record))
    return held.version


def _save(
    store: ModelStore, name: str, meta: dict, arrays: dict, fence: Fence | None = None
) -> int:
    record_name = pin_record_name(name)
    if fence is None:
        fence = Fence.of(store.load(record_name))
    return fenced_save(
        store, record_name, fence, kind=PIN_KIND, meta=meta, arrays=arrays, offsets={}
    )


def pins(store: ModelStore, latest: dict[str, int] | None = None) -> dict[str, StoredModel]:
    """Every pinned model by name (one load per pin record)."""
    names = latest if latest is not None else store.latest_versions()
    found = {}
    for record_name in sorted(n for n in names if is_pin_record(n)):
        held = pinned_model(store.load(record_name))
        if held is not None:
            found[held.name] = held
    return found


def pin_history(store: ModelStore, name: str) -> list[dict[str, Any]]:
    """Each kept pin/unpin of NAME, oldest first: {"record_version", "pinned", "version",
    "at_ms", "by"}."""
    record_name = pin_record_name(name)
    events = []
    for record_version in store.versions(record_name):
        record = store.load_version(record_name, record_version)
        if record is None:
            continue
        events.append(
            {
                "record_version": record_version,
                "pinned": bool(record.meta.get("pinned")),
                "version": record.meta.get("version"),
                "at_ms": record.meta.get("at_ms"),
                "by": record.meta.get("by"),
            }
        )
    return events


def model_history(store: ModelStore, name: str) -> dict[str, Any]:
    """NAME's kept versions (oldest first: version, created_ms, triplets_seen, writer)
    and its pin events (`pin_history`)."""
    versions = []
    for version in store.versions(check_name(name)):
        stored = store.load_version(name, version)
        if stored is None:  # trimmed while we read
            continue
        seen = stored.meta.get("triplets_seen")
        versions.append(
            {
                "version": version,
                "created_ms": stored.created_ms,
                "triplets_seen": seen,
                "writer": stored.meta.get("writer"),
            }
        )
    return {"name": name, "versions": versions, "pins": pin_history(store, name)}
