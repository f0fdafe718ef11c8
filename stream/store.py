"""The one model-store interface both Redis and the embedded in-memory store implement.

A stored model is a version number, a kind, JSON meta, numeric arrays (see
`stream.codec`, never pickle) and the stream offsets its state covers. Writes are
fenced: `save` succeeds only when the stored model is the one the writer last read or
wrote, so two workers that both think they own a model cannot interleave checkpoints.

"The one" means its identity, not just its number: every save carries a fresh random
`write_id` and the store keeps it with the version. A writer fences on both
(`expected_version`, `expected_write_id`). Numbers alone have an ABA gap: if a machine
crash loses writer A's version v+1 and writer B then loads v and saves its own v+1,
A's next save (expecting v+1) would land on top of B's and count B's work twice; the
write ids differ, so it is refused. The same id makes a retried save whose reply was
lost recognisable: finding exactly its own write stored, it adopts that version.

Both stores persist the same two blobs per version — a JSON *envelope*
(`{"meta", "offsets", "created_ms"}`) and the codec bytes — built and checked here, so
validation and round-tripping are written once.
"""

from __future__ import annotations

import json
import math
import re
import secrets
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Protocol

import numpy as np

from rankstream.ranking import DEFAULT_PHI_DIM, WIDTH_KEY
from rankstream.stream.codec import decode_arrays, encode_arrays

DEFAULT_KEEP_VERSIONS = 50
# WIDTH_KEY (`rankstream.ranking`): the meta key of the feature width a model was trained on
LEGACY_WIDTH = DEFAULT_PHI_DIM  # models stored before widths were configurable are the paper's
_NAME = re.compile(r"^[A-Za-z0-9_.\-]{1,200}$")
_WRITE_ID = re.compile(r"^[A-Za-z0-9_\-]{8,64}$")


@dataclass(frozen=True)
class StoredModel:
    name: str
    version: int
    kind: str  # "online" | "cmds_dml" | "rankmkl" | "reservoir" | ...
    meta: dict
    arrays: dict[str, np.ndarray]
    offsets: dict[str, dict[int, int]]  # topic -> partition -> next offset covered
    created_ms: int
    write_id: str = ""  # the identity of the save that wrote it; "" = never stored


class WrongWidthError(ValueError):
    """A stored model was trained on another feature width than the deployment's."""

    def __init__(self, name: str, found: int, width: int) -> None:
        super().__init__(
            f"model {name!r} was trained on {found}-wide phi; this deployment's width "
            f"(RANKSTREAM_PHI_DIM) is {width}"
        )
        self.name, self.found, self.width = name, found, width


def stored_width(stored: StoredModel) -> int:
    """The feature width a stored model was trained on.

    meta `phi_dim` (`WIDTH_KEY`) where the writer stamped it (batch models, the
    reservoir, Uni-Con); an online ranker's own state names it `dim`
    (`OnlineRanker.to_state`); a model without either predates configurable widths and
    is `LEGACY_WIDTH` wide.
    """
    meta = stored.meta
    width = meta.get(WIDTH_KEY)
    if width is None and meta.get("kind") == "online_ranker":
        width = meta.get("dim")
    return LEGACY_WIDTH if width is None else int(width)


def check_width(stored: StoredModel, width: int) -> StoredModel:
    """`stored` if it was trained on `width`-wide phi, else WrongWidthError."""
    found = stored_width(stored)
    if found != width:
        raise WrongWidthError(stored.name, found, width)
    return stored


def check_kind(stored: StoredModel, kind: str) -> StoredModel:
    """The record itself, if it holds what its reader expects (a name holds one kind)."""
    if stored.kind != kind:
        raise ValueError(f"model {stored.name!r} has kind {stored.kind!r}, not {kind!r}")
    return stored


class FencingError(RuntimeError):
    """The stored model is not the one the writer expected: someone else wrote first."""

    def __init__(
        self,
        name: str,
        expected: int,
        actual: int,
        expected_write_id: str | None = None,
        actual_write_id: str | None = None,
    ) -> None:
        detail = (
            f" (write {actual_write_id}, not {expected_write_id})"
            if expected == actual and expected_write_id is not None
            else ""
        )
        super().__init__(
            f"model {name!r}: expected stored version {expected}, found {actual}{detail} "
            "(another writer got there first)"
        )
        self.name, self.expected, self.actual = name, expected, actual
        self.expected_write_id, self.actual_write_id = expected_write_id, actual_write_id


class ModelStore(Protocol):
    """What every model store offers; Redis and the embedded store subclass it to share
    `save`'s checks and encoding (a protocol's default implementation, PEP 544), each
    writing the encoded version its own way (`_save_encoded`)."""

    keep_versions: int  # versions kept per model unless a save says otherwise

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
        expected_write_id: str | None = None,
        write_id: str | None = None,
        keep_versions: int | None = None,
    ) -> int:
        """Write version expected_version + 1 atomically and announce it.

        Fenced: FencingError unless the stored version is `expected_version` (0 = no
        model) and, when `expected_write_id` is given, the stored `write_id` is that
        one. `write_id` names this save (fresh from `new_write_id()`, which is the
        default); a writer keeps it to fence its next save. If the store already holds
        version expected_version + 1 written with this very `write_id` (a retry after
        a lost reply), that version is returned instead of raising.
        """
        check_name(name)
        expected = check_expected_version(expected_version)
        check_write_id(expected_write_id, "expected_write_id")
        keep = check_keep_versions(keep_versions, self.keep_versions)
        encoded = encode_model(
            kind=kind, meta=meta, arrays=arrays, offsets=offsets, write_id=write_id
        )
        return self._save_encoded(name, encoded, Fence(expected, expected_write_id), keep)

    def _save_encoded(self, name: str, encoded: EncodedModel, fence: Fence, keep: int) -> int:
        """`save` once its arguments are checked and encoded: check `fence` (the stored
        model `save` expects), write, trim to the newest `keep` versions, announce; the
        version now stored."""
        ...

    def delete(self, name: str) -> bool:
        """Remove the model and every kept version; True if it existed.

        Not fenced: for clean-up of models nobody writes any more (benchmark runs).
        A later save of the name starts again at version 1 (`expected_version=0`).
        """
        ...

    def listen(self) -> Announcements: ...

    def close(self) -> None: ...

    # --- idempotency keys (POST /v1/feedback's `Idempotency-Key`) -------------------------
    def claim_key(self, key: str, token: bytes, ttl_s: float) -> bytes | None:
        """Set `key` to `token` for `ttl_s` seconds unless it is held: None when this call
        claimed it, else what it holds (another claim's token, or a settled answer).
        Atomic: of two callers, exactly one gets None."""
        ...

    def settle_key(self, key: str, answer: bytes, ttl_s: float) -> None:
        """Replace the claim on `key` by its answer, kept `ttl_s` seconds."""
        ...

    def release_key(self, key: str, token: bytes) -> None:
        """Drop the claim on `key` if it is still `token` (a failed attempt)."""
        ...

    def ping(self) -> None:
        """Return promptly if the store answers; raise StoreUnavailableError otherwise."""
        ...


class Announcements(Protocol):
    """A blocking iterator of (name, version); `get(timeout)` for a bounded wait.

    Both stores' announcements subclass it: iteration is `get()` until it gives None."""

    def __iter__(self) -> Iterator[tuple[str, int]]:
        return self

    def __next__(self) -> tuple[str, int]:
        item = self.get()
        if item is None:
            raise StopIteration
        return item

    def get(self, timeout: float | None = None) -> tuple[str, int] | None:
        """Next announcement, or None after `timeout` seconds or once closed."""
        ...

    def close(self) -> None: ...


@dataclass(frozen=True)
class EncodedModel:
    """What a store persists for one version: kind, JSON envelope, array bytes."""

    kind: str
    envelope: str
    arrays: bytes
    write_id: str


def check_keep_versions(keep_versions: int | None, default: int) -> int:
    """Per-save override of how many versions to keep (big reservoirs keep few)."""
    if keep_versions is None:
        return default
    if isinstance(keep_versions, bool) or not isinstance(keep_versions, int) or keep_versions < 1:
        raise ValueError(f"keep_versions must be an int >= 1, got {keep_versions!r}")
    return keep_versions


def check_name(name: str) -> str:
    if not isinstance(name, str) or not _NAME.fullmatch(name):
        raise ValueError(f"model name must match {_NAME.pattern}, got {name!r}")
    return name


def new_write_id() -> str:
    """A fresh random identity for one save (128 bits: never repeats in practice)."""
    return secrets.token_hex(16)


def check_write_id(write_id: str | None, what: str = "write_id") -> str | None:
    if write_id is not None and (not isinstance(write_id, str) or not _WRITE_ID.match(write_id)):
        raise ValueError(f"{what} must match {_WRITE_ID.pattern}, got {write_id!r}")
    return write_id


def check_fence(
    name: str, fence: Fence, *, stored_version: int, stored_write_id: str | None, write_id: str
) -> bool:
    """The fencing rule, shared by both stores (Redis runs it again inside its script).

    True: the stored model is the expected one (`fence`), write on top of it. False: the
    store already holds exactly this save (same write_id, one version ahead), so a retry
    whose first reply was lost adopts it. Anything else raises FencingError.
    """
    expected_version, expected_write_id = fence.version, fence.write_id
    if stored_version == expected_version and (
        expected_write_id is None or stored_write_id == expected_write_id
    ):
        return True
    if stored_version == expected_version + 1 and stored_write_id == write_id:
        return False
    raise FencingError(name, expected_version, stored_version, expected_write_id, stored_write_id)


@dataclass
class Fence:
    """A writer's hold on one stored model: the save it last loaded or made (version and
    write id), and the ids of its own saves whose outcome it never learnt (they raised,
    e.g. a connection error after the store's retries, yet may have landed)."""

    version: int = 0  # 0 = no stored model
    write_id: str | None = None
    unconfirmed: list[str] = field(default_factory=list)

    @classmethod
    def of(cls, stored: StoredModel | None) -> Fence:
        """The fence of a writer that has just loaded `stored` (None: nothing stored)."""
        if stored is None:
            return cls()
        return cls(stored.version, stored.write_id or None)

    def moved_to(self, version: int, write_id: str) -> None:
        self.version, self.write_id, self.unconfirmed = version, write_id, []


def fenced_save(
    store: ModelStore,
    name: str,
    fence: Fence,
    *,
    kind: str,
    meta: dict,
    arrays: Mapping[str, np.ndarray],
    offsets: Mapping[str, Mapping[int, int]],
    keep_versions: int | None = None,
) -> int:
    """Save on top of the model `fence` holds and move the fence there; the one way every
    worker writes (online checkpoints, batch reservoir and models, evaluator record).

    FencingError when the stored model is someone else's. One exception: the stored model
    is one of this writer's own unconfirmed saves, exactly one version ahead. Then an
    earlier attempt landed after all; its state is an earlier state of this writer, so
    the fence moves onto it and the current state is saved on top.
    """
    while True:
        write_id = new_write_id()
        fence.unconfirmed.append(write_id)
        try:
            version = store.save(
                name,
                kind=kind,
                meta=meta,
                arrays=arrays,
                offsets=offsets,
                expected_version=fence.version,
                expected_write_id=fence.write_id,
                write_id=write_id,
                keep_versions=keep_versions,
            )
        except FencingError as exc:
            fence.unconfirmed.remove(write_id)  # refused: it did not land
            if exc.actual != fence.version + 1 or exc.actual_write_id not in fence.unconfirmed:
                raise
            fence.moved_to(exc.actual, exc.actual_write_id)
            continue
        fence.moved_to(version, write_id)
        return version


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
    write_id: str | None = None,
) -> EncodedModel:
    """Validate a save's arguments and encode them; ValueError names what is wrong.

    `write_id` None draws a fresh one (`new_write_id`).
    """
    write_id = check_write_id(write_id) or new_write_id()
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
    return EncodedModel(
        kind=kind, envelope=envelope, arrays=encode_arrays(arrays), write_id=write_id
    )


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
        write_id=encoded.write_id,
    )


def finite_or_none(value: float | None) -> float | None:
    """Timeouts: None or a finite non-negative number of seconds."""
    if value is None:
        return None
    if not math.isfinite(value) or value < 0:
        raise ValueError(f"timeout must be a finite number >= 0, got {value}")
    return float(value)
