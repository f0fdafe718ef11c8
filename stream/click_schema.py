"""Impressions and clicks on the wire: what an engine showed, and what its users clicked.

An *impression* is one served ranking as the user saw it: its id (the one `/v1/rank`
answers), when, which model and version served it, every stored model's version then,
the candidates in displayed order (top first) with their phi (each once, as the triplets
wire does), and, for a randomized logging policy or an interleaved list, the probability
of the order shown, the intervention made, and which team put each result there. A
*click* names an impression and one of its candidates (optionally its displayed rank,
when and how long the user dwelt). The click join (`workers/`) pairs them by impression
id into weighted triplets.

Both travel as Arrow IPC stream messages with the conventions of `stream.schema` (its
stamping, version rule, whole-message refusals and reasons are reused, not copied):
`rankstream.impressions` version 1 (version 2 when an impression carries the engine's own
scores, `engine_scores`), one row per impression, keyed by the impression id;
`rankstream.clicks` version 1, one row per click, keyed by its first row's impression
id, so an impression and its clicks land on the same partition number when both topics
have equally many partitions. docs/reference/wire.md writes the layouts down for other producers.

A clicks row with a null `candidate_id` says "shown, session over, nothing clicked"
(`Click.no_click`): the join can count such an impression at once instead of waiting out
its window.

Validation lives in one place, the records themselves: `Impression` and `Click` refuse
bad values when built (`InvalidRecordError`, naming the field and a dead-letter reason), so
the HTTP API, the Python producer and the decoder all refuse the same things. Decoding
has the two tiers of `stream.schema`: a whole-message problem raises `SchemaError`; a bad
row (NaN phi, a repeated candidate, a position below 1, ...) is left out and listed in
`Decoded.rejects` by its row number, so one bad record never costs its neighbours.
"""

from __future__ import annotations

import functools
import math
import re
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Generic, TypeVar

import numpy as np
import pyarrow as pa

from rankstream.stream.schema import (
    BAD_SCHEMA,
    LATE,
    MAX_MESSAGE_BYTES,
    NON_FINITE,
    UNKNOWN_CANDIDATE,
    UNKNOWN_IMPRESSION,
    SchemaError,
    _list_parts,
    _phi,
    _read,
    _write,
    declare_kind,
    phi_type,
    schema_of,
)
from rankstream.stream.settings import DEFAULT_PHI_DIM

__all__ = [
    "CLICKS_VERSION",
    "ENGINE_IMPRESSIONS_VERSION",
    "IMPRESSIONS_VERSION",
    "LATE",
    "UNKNOWN_CANDIDATE",
    "UNKNOWN_IMPRESSION",
    "Click",
    "Decoded",
    "Impression",
    "InvalidRecordError",
    "ServedImpression",
    "clicks_fields",
    "decode_clicks",
    "decode_impressions",
    "encode_clicks",
    "encode_impressions",
    "impression_key",
    "impressions_fields",
]

IMPRESSIONS_VERSION = 1  # written unless an impression carries engine_scores
ENGINE_IMPRESSIONS_VERSION = 2  # version 1 + engine_scores
CLICKS_VERSION = 1
MAX_ID_CHARS = 200  # an impression or request id: 1-200 visible ASCII characters
_VISIBLE = re.compile(r"[\x21-\x7e]{1,200}")
_INT32_MAX = 2**31 - 1


def impressions_fields(width: int, version: int = IMPRESSIONS_VERSION) -> pa.Schema:
    """The fields of an impressions message of `version` at feature width `width`:
    version 2 is version 1's and `engine_scores` (written only when an impression of the
    message carries the engine's own scores; every other message stays version 1)."""
    if version not in (1, 2):
        raise ValueError(f"impressions version {version} does not exist; versions are 1 and 2")
    engine = [("engine_scores", pa.list_(pa.float64()))] if version == 2 else []
    return pa.schema(
        [
            ("impression_id", pa.string()),
            ("time", pa.float64()),
            ("model", pa.string()),
            ("version", pa.int64()),
            ("model_versions", pa.map_(pa.string(), pa.int64())),
            ("candidate_ids", pa.list_(pa.int64())),
            ("phi", pa.list_(phi_type(width))),
            ("query_id", pa.int64()),
            ("request_id", pa.string()),
            ("shown_probability", pa.float64()),
            ("intervention", pa.string()),
            ("teams", pa.list_(pa.int8())),
            ("team_models", pa.list_(pa.string())),
            *engine,
        ]
    )


def clicks_fields(width: int = 0, version: int = CLICKS_VERSION) -> pa.Schema:
    """The fields of a clicks message of `version` (no phi: `width` is unused)."""
    if version != 1:
        raise ValueError(f"clicks version {version} does not exist; the version is 1")
    return pa.schema(
        [
            ("impression_id", pa.string()),
            ("candidate_id", pa.int64()),
            ("position", pa.int32()),
            ("time", pa.float64()),
            ("dwell", pa.float64()),
        ]
    )


declare_kind(
    "impressions", (1, ENGINE_IMPRESSIONS_VERSION), impressions_fields, width=True,
    writes=IMPRESSIONS_VERSION,
)  # fmt: skip
declare_kind("clicks", (1,), clicks_fields, width=False)
_IMPRESSION_NULLABLE = frozenset(
    {"query_id", "request_id", "shown_probability", "intervention", "teams", "engine_scores"}
)
_CLICK_NULLABLE = frozenset({"candidate_id", "position", "time", "dwell"})


class InvalidRecordError(ValueError):
    """An impression or click with a bad value: `field` names it, `reason` is the
    dead-letter reason a decoder files it under (`non_finite` for NaN/Inf phi, else
    `bad_schema`)."""

    def __init__(self, field: str, message: str, reason: str = BAD_SCHEMA) -> None:
        super().__init__(f"{field}: {message}")
        self.field, self.message, self.reason = field, message, reason


def impression_key(impression_id: str) -> bytes:
    """The Kafka key of an impression and of a clicks message: the impression id, UTF-8."""
    return impression_id.encode()


def _check_id(value: object, name: str, required: bool = True) -> None:
    if value is None and not required:
        return
    if not isinstance(value, str) or not _VISIBLE.fullmatch(value):
        raise InvalidRecordError(name, f"must be 1-{MAX_ID_CHARS} visible ASCII characters")


def _check_int(value: object, name: str, low: int, high: int = 2**63 - 1) -> int:
    if isinstance(value, bool) or not isinstance(value, int | np.integer):
        raise InvalidRecordError(name, f"must be an integer, got {type(value).__name__}")
    if not low <= int(value) <= high:
        raise InvalidRecordError(name, f"{int(value)} is outside {low}..{high}")
    return int(value)


def _check_float(value: object, name: str, low: float = -math.inf) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float | np.integer | np.floating):
        raise InvalidRecordError(name, f"must be a number, got {type(value).__name__}")
    number = float(value)
    if not math.isfinite(number) or number < low:
        raise InvalidRecordError(name, f"{number!r} must be finite and >= {low:g}")
    return number


def _check_served_by(record: Impression | ServedImpression) -> None:
    """Check and normalize what an impression says about its serving (id, time, model,
    versions), in place: the first checks of both kinds of impression."""
    _check_id(record.impression_id, "impression_id")
    object.__setattr__(record, "time", _check_float(record.time, "time"))
    if not isinstance(record.model, str) or not record.model:
        raise InvalidRecordError("model", "must be a model name")
    object.__setattr__(record, "version", _check_int(record.version, "version", 0))
    if not isinstance(record.model_versions, Mapping):
        raise InvalidRecordError("model_versions", "must map model names to versions")
    versions = {}
    for name, version in record.model_versions.items():
        if not isinstance(name, str) or not name:
            raise InvalidRecordError("model_versions", f"{name!r} is not a model name")
        versions[name] = _check_int(version, "model_versions", 0)
    object.__setattr__(record, "model_versions", versions)


def _check_shown(record: Impression | ServedImpression, n: int) -> None:
    """Check and normalize the caller's ids and how the list was made (`n` results shown),
    in place: the checks after the candidates', for both kinds of impression."""
    if record.query_id is not None:
        object.__setattr__(record, "query_id", _check_int(record.query_id, "query_id", -(2**63)))
    _check_id(record.request_id, "request_id", required=False)
    if record.shown_probability is not None:
        p = _check_float(record.shown_probability, "shown_probability", 0.0)
        if not 0.0 < p <= 1.0:
            raise InvalidRecordError("shown_probability", f"{p!r} must be in (0, 1]")
        object.__setattr__(record, "shown_probability", p)
    if record.intervention is not None and (
        not isinstance(record.intervention, str) or not 1 <= len(record.intervention) <= 200
    ):
        raise InvalidRecordError("intervention", "must be 1-200 characters, or None")
    teams = tuple(record.team_models)
    if not all(isinstance(name, str) and name for name in teams):
        raise InvalidRecordError("team_models", "must be model names")
    object.__setattr__(record, "team_models", teams)
    if record.teams is not None:
        team = _int_array(record.teams, "teams", np.int8)
        if team.shape != (n,):
            raise InvalidRecordError("teams", f"needs one entry per candidate ({n})")
        if ((team < -1) | (team >= len(teams))).any():
            raise InvalidRecordError("teams", f"entries index team_models (-1..{len(teams) - 1})")
        object.__setattr__(record, "teams", team)


@dataclass(frozen=True)
class Impression:
    """One served ranking as the user saw it (module docstring); checked when built."""

    impression_id: str  # server-made (uuid4 hex), unique
    time: float  # unix seconds when served
    model: str  # what served it (for an interleaved list: the champion)
    version: int  # its version
    model_versions: Mapping[str, int]  # every stored model's version at serving time
    candidate_ids: np.ndarray  # int64, in DISPLAYED order (what the user saw, top first)
    phi: np.ndarray  # float32 (n, d), row i = candidate_ids[i]; each once
    query_id: int | None = None  # echoed if the caller sent one
    request_id: str | None = None
    shown_probability: float | None = None  # P(this order) under a randomized logging policy
    intervention: str | None = None  # e.g. "swap:1-4" (1-based ranks), None if none
    teams: np.ndarray | None = None  # int8 per position: index into team_models, -1 none
    team_models: tuple[str, ...] = ()  # interleaving teams (issue 27), () if not interleaved
    engine_scores: np.ndarray | None = None  # float64, the engine's own scores, displayed order

    def __post_init__(self) -> None:
        _check_served_by(self)
        ids = _int_array(self.candidate_ids, "candidate_ids", np.int64)
        n = len(ids)
        if n < 1:
            raise InvalidRecordError("candidate_ids", "an impression shows at least one candidate")
        ordered = np.sort(ids)
        if (ordered[1:] == ordered[:-1]).any():
            raise InvalidRecordError("candidate_ids", "a candidate is shown once per impression")
        object.__setattr__(self, "candidate_ids", ids)
        object.__setattr__(self, "phi", _phi_matrix(self.phi, n))
        _check_shown(self, n)
        if self.engine_scores is not None:
            engine = np.asarray(self.engine_scores)
            if engine.dtype == object or engine.dtype.kind not in "iuf" or engine.shape != (n,):
                raise InvalidRecordError("engine_scores", f"needs one number per candidate ({n})")
            engine = engine.astype(np.float64)
            if not np.isfinite(engine).all():
                raise InvalidRecordError("engine_scores", "holds NaN or Inf", NON_FINITE)
            object.__setattr__(self, "engine_scores", engine)

    @property
    def shown(self) -> int:
        """How many candidates were shown (rows of the message's lists)."""
        return len(self.candidate_ids)

    @property
    def width(self) -> int:
        return int(self.phi.shape[1])


@dataclass(frozen=True, slots=True)
class ServedImpression:
    """An impression as a serving process holds it until it is logged: the request's
    arrays and the displayed order as indices into them (`order`, top first), gathered
    only when encoded, straight into the message's columns (`encode_impressions`: the
    same bytes as the `Impression` of `impression()`, one copy of the rows fewer).

    Built by `rankstream serve` only (`producers.impression_producer`), which is why its
    arrays are not checked again here: `request_ids` (int64, distinct) and `request_phi`
    (float32, C-contiguous, finite, the deployment's width) passed
    `producers.candidate_checks.check_candidates`, `request_engine_scores` (float64,
    finite, one per candidate) the request's checks, and `order` comes from the ranking (a
    permutation of the candidates' indices, or a team draft of them, each drafted once:
    `ranking.interleaving`), so the shown ids are distinct. `order`'s bounds and every
    other field are checked as an `Impression`'s (`InvalidRecordError`); anything else
    builds an `Impression`."""

    impression_id: str
    time: float
    model: str
    version: int
    model_versions: Mapping[str, int]
    request_ids: np.ndarray  # int64 (k,), the request's order
    request_phi: np.ndarray  # float32 (k, d), the request's order
    order: np.ndarray  # indices into the request's candidates, top first
    query_id: int | None = None
    request_id: str | None = None
    shown_probability: float | None = None
    intervention: str | None = None
    teams: np.ndarray | None = None  # int8 per DISPLAYED position
    team_models: tuple[str, ...] = ()
    request_engine_scores: np.ndarray | None = None  # float64 (k,), the request's order

    def __post_init__(self) -> None:
        _check_served_by(self)
        order, k = np.asarray(self.order), len(self.request_ids)
        if order.ndim != 1 or order.dtype.kind not in "iu" or not 1 <= len(order) <= k:
            raise InvalidRecordError("candidate_ids", f"order must index 1..{k} candidates")
        if order.min() < 0 or order.max() >= k:
            raise InvalidRecordError("candidate_ids", f"order must index candidates 0..{k - 1}")
        _check_shown(self, len(order))

    @property
    def shown(self) -> int:
        """How many candidates were shown (rows of the message's lists)."""
        return len(self.order)

    @property
    def width(self) -> int:
        return int(self.request_phi.shape[1])

    def impression(self) -> Impression:
        """The same impression gathered and checked in full (what the log's bytes say)."""
        engine = self.request_engine_scores
        return Impression(
            self.impression_id, self.time, self.model, self.version, self.model_versions,
            self.request_ids[self.order], self.request_phi[self.order], self.query_id,
            self.request_id, self.shown_probability, self.intervention, self.teams,
            self.team_models, None if engine is None else engine[self.order],
        )  # fmt: skip


@dataclass(frozen=True)
class Click:
    """A click on one candidate of an impression; `candidate_id` None is the "shown,
    nothing clicked" row (`no_click`). Checked when built."""

    impression_id: str
    candidate_id: int | None
    position: int | None = None  # 1-based displayed rank, if the engine knows it
    time: float | None = None
    dwell: float | None = None  # seconds

    def __post_init__(self) -> None:
        _check_id(self.impression_id, "impression_id")
        if self.candidate_id is None:
            if self.position is not None or self.dwell is not None:
                raise InvalidRecordError("candidate_id", "a no-click row has no position or dwell")
        else:
            cid = _check_int(self.candidate_id, "candidate_id", -(2**63))
            object.__setattr__(self, "candidate_id", cid)
        if self.position is not None:
            position = _check_int(self.position, "position", 1, _INT32_MAX)
            object.__setattr__(self, "position", position)
        if self.time is not None:
            object.__setattr__(self, "time", _check_float(self.time, "time"))
        if self.dwell is not None:
            object.__setattr__(self, "dwell", _check_float(self.dwell, "dwell", 0.0))

    @classmethod
    def no_click(cls, impression_id: str, time: float | None = None) -> Click:
        """The row that says: `impression_id` was shown and its session ended unclicked."""
        return cls(impression_id, None, time=time)

    @property
    def clicked(self) -> bool:
        return self.candidate_id is not None


def _int_array(values: object, name: str, dtype: type) -> np.ndarray:
    arr = np.asarray(values)
    if arr.ndim != 1 or arr.dtype == object or arr.dtype.kind not in "iu":
        raise InvalidRecordError(name, "must be a list of integers")
    cast = arr.astype(dtype)
    if not np.array_equal(cast, arr):
        raise InvalidRecordError(name, f"has values outside {np.dtype(dtype).name}")
    return cast


def _phi_matrix(values: object, n: int) -> np.ndarray:
    arr = np.asarray(values)
    if arr.dtype == object or arr.dtype.kind not in "iuf" or arr.ndim != 2:
        raise InvalidRecordError("phi", "must be a matrix of numbers, one row per candidate")
    if arr.shape[0] != n or arr.shape[1] < 1:
        raise InvalidRecordError("phi", f"must have {n} rows of width >= 1, got {arr.shape}")
    with np.errstate(over="ignore"):  # beyond float32's range becomes Inf: refused
        phi = np.ascontiguousarray(arr, dtype=np.float32)
    if not np.isfinite(phi).all():
        bad = int(np.flatnonzero(~np.isfinite(phi).all(axis=1))[0])
        raise InvalidRecordError("phi", f"row {bad} holds NaN or Inf", NON_FINITE)
    return phi


# --- encoding ------------------------------------------------------------------------
def encode_impressions(impressions: Sequence[Impression | ServedImpression]) -> bytes:
    """One `rankstream.impressions` message, a row per impression (all of one width).
    The API sends the impressions queued at once that share a partition in one message,
    keyed by the first one's `impression_key` (`producers.impression_producer`).

    Written for the serving path's budget (one message a ranking): the stream's schema
    message is cached per width and the record batch appended to it (the bytes pyarrow's
    stream writer writes), the columns that are nearly always alike (no teams, the
    same model versions) are cached arrays, and a `ServedImpression`'s rows are gathered
    straight into the message's columns."""
    if not impressions:
        raise ValueError("an impressions message holds at least one impression")
    width = impressions[0].width
    if any(imp.width != width for imp in impressions):
        raise ValueError("the impressions of one message share one phi width")
    engine = [_shown_engine_scores(imp) for imp in impressions]
    carried = any(scores is not None for scores in engine)
    schema, head = _impressions_head(width, ENGINE_IMPRESSIONS_VERSION if carried else 1)
    n = len(impressions)
    ids, phi, offsets = _shown_rows(impressions, width)
    rows = pa.FixedSizeListArray.from_arrays(pa.array(phi.reshape(-1)), width)

    def column(name: str, kind: pa.DataType) -> pa.Array:
        values = [getattr(imp, name) for imp in impressions]
        if all(value is None for value in values):
            return _nulls(n, kind)
        return pa.array(values, kind)

    teams = [imp.teams for imp in impressions]
    team_models = [imp.team_models for imp in impressions]
    batch = pa.RecordBatch.from_arrays(
        [
            column("impression_id", pa.string()),
            column("time", pa.float64()),
            column("model", pa.string()),
            column("version", pa.int64()),
            _versions([tuple(imp.model_versions.items()) for imp in impressions]),
            pa.ListArray.from_arrays(offsets, pa.array(ids)),
            pa.ListArray.from_arrays(offsets, rows),
            column("query_id", pa.int64()),
            column("request_id", pa.string()),
            column("shown_probability", pa.float64()),
            column("intervention", pa.string()),
            _teams(teams),
            _no_teams(n)
            if not any(team_models)
            else pa.array([list(names) for names in team_models], _TEAM_MODELS),
            *([pa.array(engine, _ENGINE_SCORES)] if carried else []),
        ],
        schema=schema,
    )
    return b"".join((head, batch.serialize(), _END_OF_STREAM))  # one copy of the rows


def _shown_rows(
    impressions: Sequence[Impression | ServedImpression], width: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(ids, phi, offsets) of the message's candidate_ids and phi lists, displayed order:
    one impression's checked arrays as they are; else every row copied once, into
    arrays of the whole message (a `ServedImpression`'s gathered by its order; the
    order's bounds were checked, so `clip` never clips)."""
    first = impressions[0]
    if len(impressions) == 1 and isinstance(first, Impression):
        return first.candidate_ids, first.phi, np.array([0, len(first.candidate_ids)], np.int32)
    offsets = np.zeros(len(impressions) + 1, np.int32)
    np.cumsum([imp.shown for imp in impressions], out=offsets[1:])
    ids, phi = _scratch(int(offsets[-1]), width)
    for imp, start, stop in zip(impressions, offsets[:-1], offsets[1:], strict=True):
        if isinstance(imp, Impression):
            ids[start:stop], phi[start:stop] = imp.candidate_ids, imp.phi
        else:
            np.take(imp.request_ids, imp.order, out=ids[start:stop], mode="clip")
            np.take(imp.request_phi, imp.order, axis=0, out=phi[start:stop], mode="clip")
    return ids, phi, offsets


_SCRATCH = threading.local()  # per thread: the arrays a message's rows are gathered into
_SCRATCH_ROWS = 4096  # kept between messages up to this many rows (~600 KB at width 36)


def _scratch(rows: int, width: int) -> tuple[np.ndarray, np.ndarray]:
    """Arrays of `rows` ids and phi rows to gather a message into, reused by this thread's
    next message: they live only until the message is serialized (a copy), and a
    buffer fresh from the OS costs a page fault per 4 KB on every message."""
    kept = getattr(_SCRATCH, "arrays", None)
    if kept is None or kept[1].shape[1] != width or len(kept[0]) < rows:
        kept = np.empty(rows, np.int64), np.empty((rows, width), np.float32)
        if rows <= _SCRATCH_ROWS:
            _SCRATCH.arrays = kept
    return kept[0][:rows], kept[1][:rows]


def _shown_engine_scores(imp: Impression | ServedImpression) -> np.ndarray | None:
    if isinstance(imp, Impression):
        return imp.engine_scores
    engine = imp.request_engine_scores
    return None if engine is None else engine[imp.order]


_END_OF_STREAM = b"\xff\xff\xff\xff\x00\x00\x00\x00"  # the IPC stream format's end marker
_VERSIONS = pa.map_(pa.string(), pa.int64())
_TEAMS = pa.list_(pa.int8())
_TEAM_MODELS = pa.list_(pa.string())
_ENGINE_SCORES = pa.list_(pa.float64())


@functools.lru_cache(maxsize=16)
def _impressions_head(width: int, version: int = IMPRESSIONS_VERSION) -> tuple[pa.Schema, bytes]:
    """The stamped schema of impressions at `width` and its IPC schema message."""
    schema = schema_of("impressions", width, version)
    return schema, schema.serialize().to_pybytes()


@functools.lru_cache(maxsize=64)
def _nulls(n: int, kind: pa.DataType) -> pa.Array:
    return pa.nulls(n, kind)


def _teams(teams: list[np.ndarray | None]) -> pa.Array:
    """The teams column from the arrays (None: a row without teams) and their offsets
    and validity bits, without a Python int per entry (the writer thread's time: 16
    interleaved impressions of 300 results ~15 us this way, ~175 us through lists)."""
    n = len(teams)
    present = [team is not None for team in teams]
    if not any(present):
        return _nulls(n, _TEAMS)
    offsets = np.zeros(n + 1, dtype=np.int32)
    np.cumsum([0 if team is None else len(team) for team in teams], out=offsets[1:])
    values = np.concatenate([team for team in teams if team is not None])
    nulls = n - sum(present)
    validity = pa.py_buffer(np.packbits(present, bitorder="little")) if nulls else None
    return pa.Array.from_buffers(
        _TEAMS,
        n,
        [validity, pa.py_buffer(offsets)],
        null_count=nulls,
        children=[pa.array(values.astype(np.int8, copy=False))],
    )


@functools.lru_cache(maxsize=16)
def _no_teams(n: int) -> pa.Array:
    return pa.array([[]] * n, _TEAM_MODELS)


def _versions(rows: list[tuple[tuple[str, int], ...]]) -> pa.Array:
    first = rows[0]
    if all(row == first for row in rows):
        return _versions_rows(first, len(rows))
    return pa.array(rows, _VERSIONS)


@functools.lru_cache(maxsize=256)
def _versions_rows(items: tuple[tuple[str, int], ...], n: int) -> pa.Array:
    """`n` rows of the same model versions (they change only when a model is saved, so a
    message's rows are nearly always alike: cached)."""
    return pa.array([items] * n, _VERSIONS)


def encode_clicks(clicks: Sequence[Click]) -> bytes:
    """One `rankstream.clicks` message, a row per click (any impressions); key it
    `impression_key(clicks[0].impression_id)`."""
    if not clicks:
        raise ValueError("a clicks message holds at least one click")

    def column(name: str, kind: pa.DataType) -> pa.Array:
        return pa.array([getattr(click, name) for click in clicks], kind)

    return _write(
        schema_of("clicks", DEFAULT_PHI_DIM, CLICKS_VERSION),
        [
            column("impression_id", pa.string()),
            column("candidate_id", pa.int64()),
            column("position", pa.int32()),
            column("time", pa.float64()),
            column("dwell", pa.float64()),
        ],
    )


# --- decoding ------------------------------------------------------------------------
T = TypeVar("T")


@dataclass(frozen=True)
class Decoded(Generic[T]):
    """The good records of a message, and the rows left out: (row, reason, detail)."""

    records: list[T]
    rejects: list[tuple[int, str, str]] = field(default_factory=list)


def decode_impressions(
    data: bytes | memoryview | pa.Buffer,
    *,
    width: int = DEFAULT_PHI_DIM,
    max_bytes: int = MAX_MESSAGE_BYTES,
) -> Decoded[Impression]:
    """Decode and validate an impressions message at `width` (the deployment's,
    `Settings.phi_dim`): `SchemaError` for the whole message, bad rows in `rejects`."""
    batch, _ = _read(data, "impressions", width, max_bytes, nullable=_IMPRESSION_NULLABLE)
    column = dict(zip(batch.schema.names, batch.columns, strict=True))
    id_offsets, ids = _list_parts(column["candidate_ids"])
    phi_offsets, phi_rows = _list_parts(column["phi"])
    if not np.array_equal(id_offsets, phi_offsets):
        raise SchemaError(BAD_SCHEMA, "candidate_ids and phi lists differ in length")
    all_ids = ids.to_numpy(zero_copy_only=False)
    all_phi = _phi(phi_rows, len(phi_rows), width)
    teams = column["teams"]
    if teams.values.null_count:
        raise SchemaError(BAD_SCHEMA, "field 'teams' holds null entries")
    scalars = {
        name: column[name].to_pylist()
        for name in ("impression_id", "time", "model", "version", "model_versions", "query_id",
                     "request_id", "shown_probability", "intervention", "team_models")
    }  # fmt: skip
    engine = column.get("engine_scores")  # version 2 only
    if engine is not None and engine.values.null_count:
        raise SchemaError(BAD_SCHEMA, "field 'engine_scores' holds null entries")
    records, rejects = [], []
    for row in range(batch.num_rows):
        start, stop = int(id_offsets[row]), int(id_offsets[row + 1])
        team = teams[row]
        scores = None if engine is None else engine[row]
        try:
            records.append(
                Impression(
                    candidate_ids=all_ids[start:stop],
                    phi=all_phi[start:stop],
                    teams=None if not team.is_valid else team.values.to_numpy(False),
                    engine_scores=None
                    if scores is None or not scores.is_valid
                    else scores.values.to_numpy(False),
                    **{
                        name: _mapping(values[row]) if name == "model_versions" else values[row]
                        for name, values in scalars.items()
                    },
                )
            )
        except InvalidRecordError as exc:
            rejects.append((row, exc.reason, str(exc)))
    return Decoded(records, rejects)


def _mapping(value: object) -> object:
    """A decoded map<utf8, int64> (a list of pairs) as a dict; repeated keys refused."""
    pairs = list(value)  # type: ignore[call-overload]
    mapping = dict(pairs)
    if len(mapping) != len(pairs):
        raise InvalidRecordError("model_versions", "a model is named twice")
    return mapping


def decode_clicks(
    data: bytes | memoryview | pa.Buffer, *, max_bytes: int = MAX_MESSAGE_BYTES
) -> Decoded[Click]:
    """Decode and validate a clicks message: `SchemaError` for the whole message, bad
    rows (a position below 1, a negative dwell, ...) in `rejects`."""
    batch, _ = _read(data, "clicks", DEFAULT_PHI_DIM, max_bytes, nullable=_CLICK_NULLABLE)
    rows = zip(*(batch.column(i).to_pylist() for i in range(batch.num_columns)), strict=True)
    records, rejects = [], []
    for row, values in enumerate(rows):
        try:
            records.append(Click(*values))
        except InvalidRecordError as exc:
            rejects.append((row, exc.reason, str(exc)))
    return Decoded(records, rejects)
