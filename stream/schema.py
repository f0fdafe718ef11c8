"""The wire schema: Arrow IPC stream messages for triplets, judged queries and dead letters.

Every message is one Arrow IPC *stream* (schema + record batches) whose schema metadata
names it (`rankstream.schema`), its version (`rankstream.version`) and, for messages
that carry phi, the feature width (`rankstream.phi_dim`), so any Arrow reader in any
language can decode it and an old reader refuses a newer version instead of misreading
it. Nothing is pickled. docs/reference/wire.md writes the layouts down for other producers.

Triplets, version 2 (what this code sends): one row per *group*, a run of one judged
query's triplets with consecutive seq (`stream.triplet_groups`): `query_id`,
`first_seq`, the group's distinct images (`image_id`, `phi`, each image's phi once) and
its triplets as int16 rows of that table (`p1`, `p2`) with their grades (`rel1`,
`rel2`); triplet i of a group has seq first_seq + i. A simulator block of ~280
triplets over 50 images is ~40 bytes a triplet instead of version 1's 326. Version 1
(one row per triplet with `phi1`, `phi2`) is still read.

Triplets, version 3: version 2's layout plus `weight` (list<float32>, one per triplet,
finite and > 0), each triplet's importance weight (the click join's inverse-propensity
weights, `workers.click_join`). A writer writes version 3 only when some weight is not
1, so judged feedback stays version 2, byte for byte, except the click join, which always
writes version 3 (a version-3 message is click triplets, weights of 1 included, and the
linear learners learn those in their regularized reading); a reader of versions 1-2 refuses
version 3 (`unknown_version`) instead of learning weighted pairs as unweighted ones. A
version 1 or 2 triplet has weight 1.

Decoding validates in two tiers. A problem with the whole message (not Arrow, truncated,
wrong name/version, wrong field types, wrong width, nulls, inconsistent groups, too
big) raises `SchemaError(reason, detail)`. A problem with single triplets (an image
with NaN/Inf features rejects every triplet that references it; tied relevance) keeps
the good triplets and lists the rejects by their index in the message, so a consumer
learns from the good ones and dead-letters the others.

Triplet blocks decode zero-copy where Arrow allows: `image_id`, `phi` (m, d) float32
and the grades are read-only numpy views of the Arrow buffers; p1/p2 (table rows of
the whole message), seq and query_id are computed (a few bytes a triplet). Only a
block with rejected triplets pays for a copy of its good rows.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from rankstream.ranking.triplets import UNJUDGED, TripletBlock
from rankstream.stream.arrow_views import numpy_view, offsets_view
from rankstream.stream.settings import DEFAULT_PHI_DIM
from rankstream.stream.transport import Message
from rankstream.stream.triplet_groups import TripletGroups, group_triplets

TRIPLETS_VERSION = 2  # what this code writes for unweighted triplets (3 when weighted)
WEIGHTED_TRIPLETS_VERSION = 3  # version 2 + a per-triplet weight
READ_VERSIONS = {"triplets": (1, 2, 3), "queries": (1, 2, 3), "dead-letter": (1,)}
QUERIES_VERSION = 2  # written unless the query carries the engine's scores (version 3)
# what `schema_of` stamps when no version is named: the version written by default
WRITE_VERSIONS: dict[str, int] = {"queries": QUERIES_VERSION}
MAX_MESSAGE_BYTES = 16 * 1024 * 1024  # the broker's message.max.bytes
_NAME_KEY, _VERSION_KEY = b"rankstream.schema", b"rankstream.version"
_WIDTH_KEY = b"rankstream.phi_dim"

# Machine-readable reasons (the `rankstream_dead_letters_total{reason}` label values).
BAD_BYTES = "bad_bytes"
BAD_SCHEMA = "bad_schema"
UNKNOWN_VERSION = "unknown_version"
WRONG_WIDTH = "wrong_width"
NON_FINITE = "non_finite"
TIED_RELEVANCE = "tied_relevance"
OVERSIZED = "oversized"
# A message that decoded but the consumer could not process (e.g. a corrupt stored model's
# scorer raised): dead-lettered so one poison message cannot stop a worker.
EVALUATION_FAILED = "evaluation_failed"
# The click join's (`stream.click_schema`): a click whose impression it never saw, one for
# a candidate its impression did not show, one after the join window closed.
UNKNOWN_IMPRESSION = "unknown_impression"
UNKNOWN_CANDIDATE = "unknown_candidate"
LATE = "late"
REASONS = (
    BAD_BYTES,
    BAD_SCHEMA,
    UNKNOWN_VERSION,
    WRONG_WIDTH,
    NON_FINITE,
    TIED_RELEVANCE,
    OVERSIZED,
    EVALUATION_FAILED,
    UNKNOWN_IMPRESSION,
    UNKNOWN_CANDIDATE,
    LATE,
)


def phi_type(width: int) -> pa.DataType:
    """One phi vector on the wire: fixed_size_list<float32>[width]."""
    return pa.list_(pa.float32(), width)


def triplets_fields(width: int, version: int = TRIPLETS_VERSION) -> pa.Schema:
    """The fields of a triplets message of `version` at feature width `width`."""
    if version == 1:
        return pa.schema(
            [
                ("seq", pa.int64()),
                ("query_id", pa.int64()),
                ("p1_id", pa.int64()),
                ("p2_id", pa.int64()),
                ("rel1", pa.int8()),
                ("rel2", pa.int8()),
                ("phi1", phi_type(width)),
                ("phi2", phi_type(width)),
            ]
        )
    if version in (2, 3):
        weight = [("weight", pa.list_(pa.float32()))] if version == 3 else []
        return pa.schema(
            [
                ("query_id", pa.int64()),
                ("first_seq", pa.int64()),
                ("image_id", pa.list_(pa.int64())),
                ("phi", pa.list_(phi_type(width))),
                ("p1", pa.list_(pa.int16())),
                ("p2", pa.list_(pa.int16())),
                ("rel1", pa.list_(pa.int8())),
                ("rel2", pa.list_(pa.int8())),
                *weight,
            ]
        )
    raise ValueError(f"triplets version {version} does not exist; versions are 1, 2 and 3")


def queries_fields(width: int, version: int = 2) -> pa.Schema:
    """The fields of a judged-query message of `version` at feature width `width`.

    Version 2 (what this code writes): a relevance entry may be null (that candidate was
    not judged and has no known grade) and `judged` flags, per candidate, the ones the
    user judged. Version 3 (written only for a query that carries the engine's own
    scores) adds `engine_scores`, one per candidate. Version 1 (`judged` = how many top
    candidates were judged, every relevance known) still decodes.
    """
    if version not in (1, 2, 3):
        raise ValueError(f"queries version {version} does not exist; versions are 1, 2, 3")
    judged = pa.int32() if version == 1 else pa.list_(pa.bool_())
    engine = [("engine_scores", pa.list_(pa.float64()))] if version == 3 else []
    return pa.schema(
        [
            ("seq", pa.int64()),
            ("query_id", pa.int64()),
            ("candidate_ids", pa.list_(pa.int64())),
            ("phi", pa.list_(phi_type(width))),
            ("relevance", pa.list_(pa.int8())),
            ("served_by", pa.string()),
            ("served_version", pa.int64()),
            ("model_versions", pa.map_(pa.string(), pa.int64())),
            ("judged", judged),
            *engine,
        ]
    )


DEAD_LETTER_FIELDS = pa.schema(
    [
        ("reason", pa.string()),
        ("detail", pa.string()),
        ("source_topic", pa.string()),
        ("source_partition", pa.int32()),
        ("source_offset", pa.int64()),
        ("rows", pa.list_(pa.int64())),
        ("original_size", pa.int64()),
        ("original", pa.large_binary()),
    ]
)


# Message kinds declared by other modules (`declare_kind`): name -> (width, version) -> fields
_DECLARED: dict[str, Callable[[int, int], pa.Schema]] = {}
_WIDTHLESS = {"dead-letter"}  # kinds without phi: no `rankstream.phi_dim` is written


def declare_kind(
    name: str,
    versions: tuple[int, ...],
    fields: Callable[[int, int], pa.Schema],
    *,
    width: bool,
    writes: int | None = None,
) -> None:
    """Put another message kind on this module's machinery (stamping, `_read`'s checks,
    the version rule): `stream.click_schema` declares impressions and clicks this way.
    `fields(width, version)` gives its layout; `width`: whether it carries phi; `writes`:
    the version written by default (the newest unless named)."""
    READ_VERSIONS[name] = tuple(versions)
    WRITE_VERSIONS[name] = versions[-1] if writes is None else writes
    _DECLARED[name] = fields
    if not width:
        _WIDTHLESS.add(name)
    fields_of.cache_clear()


@functools.lru_cache(maxsize=64)
def fields_of(name: str, version: int, width: int) -> pa.Schema:
    """The fields of message kind `name` at `version` and `width` (unstamped)."""
    if name == "triplets":
        return triplets_fields(width, version)
    if name == "queries":
        return queries_fields(width, version)
    if name == "dead-letter":
        return DEAD_LETTER_FIELDS
    if name in _DECLARED:
        return _DECLARED[name](width, version)
    raise ValueError(f"unknown message kind {name!r}")


class SchemaError(ValueError):
    """A whole message is unusable; `reason` is one of `REASONS`."""

    def __init__(self, reason: str, detail: str) -> None:
        super().__init__(f"{reason}: {detail}")
        self.reason, self.detail = reason, detail


# --- shared machinery ----------------------------------------------------------------
def schema_of(name: str, width: int = DEFAULT_PHI_DIM, version: int | None = None) -> pa.Schema:
    """The stamped Arrow schema of a message kind as this code writes it (or `version`)."""
    if version is None:
        version = (
            TRIPLETS_VERSION
            if name == "triplets"
            else WRITE_VERSIONS.get(name, READ_VERSIONS[name][-1])
        )
    metadata = {_NAME_KEY: name.encode(), _VERSION_KEY: b"%d" % version}
    if name not in _WIDTHLESS:
        metadata[_WIDTH_KEY] = b"%d" % width
    return fields_of(name, version, width).with_metadata(metadata)


def _write(schema: pa.Schema, columns: list[pa.Array]) -> bytes:
    batch = pa.RecordBatch.from_arrays(columns, schema=schema)
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, batch.schema) as writer:
        writer.write_batch(batch)
    return sink.getvalue().to_pybytes()


def _read(
    data: bytes | memoryview | pa.Buffer,
    name: str,
    width: int,
    max_bytes: int = MAX_MESSAGE_BYTES,
    nullable: frozenset[str] = frozenset(),
) -> tuple[pa.RecordBatch, int]:
    """Parse and check a whole message: size, Arrow framing, name, version, width, field
    types, nulls. Returns the batch and its version."""
    size = data.size if isinstance(data, pa.Buffer) else len(data)
    if size > max_bytes:
        raise SchemaError(OVERSIZED, f"{size} bytes exceeds the {max_bytes}-byte limit")
    try:
        reader = pa.ipc.open_stream(data if isinstance(data, pa.Buffer) else pa.py_buffer(data))
        schema = reader.schema
        batches = list(reader)
        for batch in batches:
            batch.validate(full=True)  # corrupt offsets/lengths must not reach numpy
    except (pa.ArrowException, OSError, ValueError) as exc:
        raise SchemaError(BAD_BYTES, f"not a complete Arrow IPC stream: {exc}") from None
    metadata = schema.metadata or {}
    found = metadata.get(_NAME_KEY)
    if found != name.encode():
        raise SchemaError(BAD_SCHEMA, f"expected a {name!r} message, schema name is {found!r}")
    version = _version(metadata.get(_VERSION_KEY), name)
    _check_width_metadata(metadata, name, version, width)
    expected = fields_of(name, version, width)
    try:
        _check_fields(schema.remove_metadata(), expected, width)
    except UnicodeDecodeError as exc:  # Arrow does not validate field names as UTF-8
        raise SchemaError(BAD_BYTES, f"a field name is not UTF-8: {exc}") from None
    if len(batches) == 1:
        batch = batches[0]
    else:
        batch = pa.Table.from_batches(batches, schema=schema).combine_chunks().to_batches()
        batch = batch[0] if batch else pa.RecordBatch.from_pylist([], schema=schema)
    for column, f in zip(batch.columns, expected, strict=True):
        if f.name not in nullable and _null_count(column):
            raise SchemaError(BAD_SCHEMA, f"field {f.name!r} contains nulls")
    return batch, version


def _version(raw: bytes | None, name: str) -> int:
    known = READ_VERSIONS[name]
    if raw is not None and raw.isdigit() and int(raw) in known:
        return int(raw)
    raise SchemaError(
        UNKNOWN_VERSION,
        f"{name} version {raw!r}; this reader knows version(s) {', '.join(map(str, known))}",
    )


def _check_width_metadata(metadata: dict, name: str, version: int, width: int) -> None:
    """`rankstream.phi_dim` must name this reader's width (required from triplets v2)."""
    raw = metadata.get(_WIDTH_KEY)
    if raw is None:
        if name == "triplets" and version >= 2:
            raise SchemaError(BAD_SCHEMA, f"no {_WIDTH_KEY.decode()} in the schema metadata")
        return  # older messages: the phi field's type carries the width (checked next)
    if not raw.isdigit():
        raise SchemaError(BAD_SCHEMA, f"{_WIDTH_KEY.decode()} is {raw!r}, not a width")
    if int(raw) != width:
        raise SchemaError(
            WRONG_WIDTH, f"message phi width is {int(raw)}, this deployment's width is {width}"
        )


def _check_fields(schema: pa.Schema, expected: pa.Schema, width: int) -> None:
    if schema.equals(expected):
        return
    if schema.names != expected.names:
        raise SchemaError(BAD_SCHEMA, f"fields {schema.names}, expected {expected.names}")
    for got, want in zip(schema, expected, strict=True):
        if got.type.equals(want.type):
            continue
        found = _fixed_width(got.type)
        if found is not None and _fixed_width(want.type) is not None and found != width:
            raise SchemaError(
                WRONG_WIDTH,
                f"field {got.name!r} has width {found}, this deployment's width is {width}",
            )
        raise SchemaError(BAD_SCHEMA, f"field {got.name!r} is {got.type}, expected {want.type}")


def _fixed_width(t: pa.DataType) -> int | None:
    """The list size of a (possibly list-of-) fixed-size float list, for width errors."""
    while pa.types.is_list(t) or pa.types.is_large_list(t):
        t = t.value_type
    if pa.types.is_fixed_size_list(t):
        return t.list_size
    return None


def _null_count(column: pa.Array) -> int:
    """Nulls in a column and every level of its nested values (a map: keys and items)."""
    count = column.null_count
    while column.type.num_fields:
        if isinstance(column, pa.MapArray):
            return count + column.keys.null_count + column.items.null_count
        column = column.values  # the whole child: stricter than the slice
        count += column.null_count
    return count


def _ints(column: pa.Array) -> np.ndarray:
    return numpy_view(column)


def _phi(column: pa.FixedSizeListArray, n: int, width: int) -> np.ndarray:
    """(n, width) float32 view of a fixed_size_list<float32>[width] column."""
    values = column.values.slice(column.offset * width, n * width)
    return numpy_view(values).reshape(n, width)


def _list_parts(column: pa.ListArray) -> tuple[np.ndarray, pa.Array]:
    """A list column's offsets (from 0; a view unless sliced) and the values they cover.

    `.values` with offsets is what `flatten()` computes, without a compute-kernel call
    per column (measured: ~7 us each, a third of decoding a one-query message).
    """
    offsets = offsets_view(column)
    if len(offsets) == 0:
        return np.zeros(1, np.int32), column.values.slice(0, 0)
    first, last = int(offsets[0]), int(offsets[-1])
    values = column.values
    if first or last != len(values):
        values = values.slice(first, last - first)
    return (offsets - first if first else offsets), values


def _checked_ints(values: np.ndarray, dtype: type, name: str, n: int) -> np.ndarray:
    arr = np.asarray(values)
    if arr.shape != (n,):
        raise ValueError(f"{name} must have shape ({n},), got {arr.shape}")
    if arr.dtype.kind not in "iu":
        raise ValueError(f"{name} must be integers, got dtype {arr.dtype}")
    cast = arr.astype(dtype, copy=False)
    if not np.array_equal(cast, arr):
        raise ValueError(f"{name} has values outside {np.dtype(dtype).name}")
    return cast


def _int_column(values: np.ndarray, dtype: type, name: str, n: int) -> pa.Array:
    return pa.array(_checked_ints(values, dtype, name, n))


def _checked_phi(values: np.ndarray, name: str, n: int) -> np.ndarray:
    """(n, d) finite float32, C-contiguous; ValueError naming `name` otherwise."""
    arr = np.asarray(values)
    if arr.ndim != 2 or arr.shape[0] != n or arr.shape[1] < 1:
        raise ValueError(f"{name} must have shape ({n}, d) with d >= 1, got {arr.shape}")
    if arr.dtype.kind not in "iuf":
        raise ValueError(f"{name} must be numeric, got dtype {arr.dtype}")
    flat = np.ascontiguousarray(arr, dtype=np.float32)
    if not np.isfinite(flat).all():
        raise ValueError(f"{name} contains NaN or Inf")
    return flat


def _phi_column(values: np.ndarray, name: str, n: int) -> pa.Array:
    flat = _checked_phi(values, name, n)
    return pa.FixedSizeListArray.from_arrays(pa.array(flat.reshape(-1)), flat.shape[1])


def _list_column(offsets: np.ndarray, values: pa.Array) -> pa.Array:
    return pa.ListArray.from_arrays(pa.array(np.asarray(offsets, np.int32)), values)


# --- triplets --------------------------------------------------------------------------
def triplet_key(query_id: int) -> bytes:
    """The message key: the block's query id in ASCII decimal (readable in any client)."""
    return str(int(query_id)).encode()


def block_key(block: TripletBlock) -> bytes:
    """A block's message key: the query id of its first row (a message may hold several
    judged queries, `producers.feedback_producer.FeedbackProducer`; it is keyed by the first)."""
    return triplet_key(int(block.query_id[0]) if len(block) else 0)


def encode_triplets(block: TripletBlock, *, version: int | None = None) -> bytes:
    """One `rankstream.triplets` message at the block's width; ValueError for shapes,
    NaN/Inf, ties, rows outside the table or weights that are not finite and > 0.

    The version is 3 when some weight is not 1, else 2 (judged feedback: byte for byte
    what it was before weights existed). `version=1` writes the pair layout (for tests
    and the benchmark's comparison; readers of both exist); an explicit version that
    cannot carry the block's weights is refused."""
    n = len(np.asarray(block.seq))
    rel1 = _checked_ints(block.rel1, np.int8, "rel1", n)
    rel2 = _checked_ints(block.rel2, np.int8, "rel2", n)
    ties = np.flatnonzero(rel1 == rel2)
    if ties.size:
        raise ValueError(f"rel1 == rel2 (a tie, never sent) in rows {ties[:10].tolist()}")
    m = len(np.asarray(block.image_id))
    phi = _checked_phi(block.phi, "phi", m)
    for name in ("p1", "p2"):
        rows = _checked_ints(getattr(block, name), np.int64, name, n)
        if n and (rows.min() < 0 or rows.max() >= m):
            raise ValueError(f"{name} must index the {m} rows of the image table")
    weight = _checked_weights(block.weight, n)
    weighted = weight is not None and bool((weight != 1).any())
    if version is None:
        version = WEIGHTED_TRIPLETS_VERSION if weighted else TRIPLETS_VERSION
    if version not in (1, 2, 3):
        raise ValueError(f"cannot write triplets version {version}; versions are 1, 2 and 3")
    if weighted and version != WEIGHTED_TRIPLETS_VERSION:
        raise ValueError(f"triplets version {version} has no weights; weighted ones are version 3")
    checked = TripletBlock(
        _checked_ints(block.seq, np.int64, "seq", n),
        _checked_ints(block.query_id, np.int64, "query_id", n),
        np.asarray(block.p1),
        np.asarray(block.p2),
        rel1,
        rel2,
        _checked_ints(block.image_id, np.int64, "image_id", m),
        phi,
        weight=np.ones(n, np.float32) if version == 3 and weight is None else weight,
    )
    if version == 1:
        return _encode_pairs(checked)
    groups = group_triplets(checked)
    width = phi.shape[1]
    weights = []
    if version == WEIGHTED_TRIPLETS_VERSION:
        weights = [_list_column(groups.triplet_offsets, pa.array(groups.weight, pa.float32()))]
    return _write(
        schema_of("triplets", width, version),
        [
            pa.array(groups.query_id),
            pa.array(groups.first_seq),
            _list_column(groups.image_offsets, pa.array(groups.image_id)),
            _list_column(
                groups.image_offsets,
                pa.FixedSizeListArray.from_arrays(pa.array(groups.phi.reshape(-1)), width),
            ),
            *(
                _list_column(groups.triplet_offsets, pa.array(getattr(groups, name)))
                for name in ("p1", "p2", "rel1", "rel2")
            ),
            *weights,
        ],
    )


def _checked_weights(weight: np.ndarray | None, n: int) -> np.ndarray | None:
    """float32 (n,) weights, finite and > 0 (as float32: a float64 that rounds to 0 or
    overflows is refused too), or None."""
    if weight is None:
        return None
    w = np.asarray(weight)
    if w.shape != (n,) or w.dtype.kind not in "fiu":
        raise ValueError(f"weight must be ({n},) numbers, got {w.dtype} {w.shape}")
    with np.errstate(over="ignore"):  # an overflow is refused just below, as inf
        w32 = w.astype(np.float32)
    bad = np.flatnonzero(~(np.isfinite(w32) & (w32 > 0)))
    if bad.size:
        raise ValueError(f"weight[{bad[0]}] = {w[bad[0]]}; weights must be finite and > 0")
    return w32


def _encode_pairs(block: TripletBlock) -> bytes:
    """Version 1: one row per triplet, both phi vectors in every row."""
    n, width = len(block), block.dim
    return _write(
        schema_of("triplets", width, 1),
        [
            pa.array(block.seq),
            pa.array(block.query_id),
            pa.array(np.ascontiguousarray(block.p1_id)),
            pa.array(np.ascontiguousarray(block.p2_id)),
            pa.array(block.rel1),
            pa.array(block.rel2),
            _phi_column(block.phi1, "phi1", n),
            _phi_column(block.phi2, "phi2", n),
        ],
    )


def decode_triplets(
    data: bytes | memoryview | pa.Buffer,
    *,
    width: int = DEFAULT_PHI_DIM,
    max_bytes: int = MAX_MESSAGE_BYTES,
) -> TripletBlock:
    """Decode and validate one triplets message of version 1, 2 or 3 at `width` (the
    deployment's, `Settings.phi_dim`); bad triplets are dropped into `rejects`. A weight
    that is not finite and > 0 refuses the whole message (`non_finite` / `bad_schema`):
    it is the producer's arithmetic that failed, not one image."""
    batch, version = _read(data, "triplets", width, max_bytes)
    if version == 1:
        return _decode_pairs(batch, width)
    groups = _groups(batch, width)
    problem = groups.problem()
    if problem is not None:
        raise SchemaError(BAD_SCHEMA, problem)
    if groups.weight is not None:
        _check_decoded_weights(groups.weight)
    block = groups.to_block()
    finite = np.isfinite(block.phi).all(axis=1)
    if finite.all():
        return _reject_rows(block, None, all_finite=True)
    return _reject_rows(block, finite[block.p1] & finite[block.p2], all_finite=False)


def _groups(batch: pa.RecordBatch, width: int) -> TripletGroups:
    column = dict(zip(batch.schema.names, batch.columns, strict=True))
    image_offsets, image_id = _list_parts(column["image_id"])
    phi_offsets, phi = _list_parts(column["phi"])
    if not _same_offsets(image_offsets, phi_offsets):
        raise SchemaError(BAD_SCHEMA, "image_id and phi lists differ in length")
    triplet_offsets, p1 = _list_parts(column["p1"])
    rest = {}
    for name in ("p2", "rel1", "rel2"):
        offsets, rest[name] = _list_parts(column[name])
        if not _same_offsets(triplet_offsets, offsets):
            raise SchemaError(BAD_SCHEMA, f"p1 and {name} lists differ in length")
    weight = None
    if "weight" in column:
        offsets, weight = _list_parts(column["weight"])
        if not _same_offsets(triplet_offsets, offsets):
            raise SchemaError(BAD_SCHEMA, "p1 and weight lists differ in length")
        weight = numpy_view(weight)
    return TripletGroups(
        query_id=_ints(column["query_id"]),
        first_seq=_ints(column["first_seq"]),
        image_offsets=image_offsets,
        image_id=_ints(image_id),
        phi=_phi(phi, len(phi), width),
        triplet_offsets=triplet_offsets,
        p1=_ints(p1),
        p2=_ints(rest["p2"]),
        rel1=_ints(rest["rel1"]),
        rel2=_ints(rest["rel2"]),
        weight=weight,
    )


def _check_decoded_weights(weight: np.ndarray) -> None:
    finite = np.isfinite(weight)
    if not finite.all():
        t = int(np.flatnonzero(~finite)[0])
        raise SchemaError(NON_FINITE, f"triplet {t} has weight {float(weight[t])}")
    if (weight <= 0).any():
        t = int(np.flatnonzero(weight <= 0)[0])
        raise SchemaError(BAD_SCHEMA, f"triplet {t} has weight {float(weight[t])}; must be > 0")


def _same_offsets(a: np.ndarray, b: np.ndarray) -> bool:
    """Equal offset arrays (one group: two numbers, compared without numpy's overhead)."""
    if len(a) != len(b):
        return False
    if len(a) <= 2:
        return int(a[-1]) == int(b[-1])
    return bool((a == b).all())


def _decode_pairs(batch: pa.RecordBatch, width: int) -> TripletBlock:
    n = batch.num_rows
    cols = [_ints(batch.column(i)) for i in range(6)]
    phi1, phi2 = _phi(batch.column(6), n, width), _phi(batch.column(7), n, width)
    block = TripletBlock.from_pairs(*cols, phi1, phi2)
    finite = np.isfinite(phi1).all(axis=1) & np.isfinite(phi2).all(axis=1)
    return _reject_rows(block, None if finite.all() else finite, all_finite=True)


def _reject_rows(block: TripletBlock, finite: np.ndarray | None, all_finite: bool) -> TripletBlock:
    """Drop (and list) triplets over non-finite images (`finite` False; None: all finite)
    or with tied grades. A table row with NaN/Inf that no kept triplet references is
    dropped too, so a decoded block's table is always finite."""
    ok = block.rel1 != block.rel2
    if finite is not None:
        ok &= finite
    if ok.all():
        return block if all_finite else block.compact()
    rejects = [
        (int(i), NON_FINITE if finite is not None and not finite[i] else TIED_RELEVANCE)
        for i in np.flatnonzero(~ok)
    ]
    return dataclasses.replace(block.select(ok).compact(), rejects=rejects)


# --- judged queries ---------------------------------------------------------------------


@dataclass(frozen=True)
class JudgedQuery:
    """One served and judged query: every candidate's phi, its grade where known, and
    which candidates the user judged (their pairs are the query's triplets).

    An engine's user judges some candidates: those carry a grade and `judged` is True;
    the others have relevance `UNJUDGED`. The simulator knows every candidate's ground
    truth, so all its grades are known while only its served top 50 are `judged`.
    `judged` may be given as an int n: the first n candidates (version 1's meaning).
    """

    seq: int
    query_id: int
    candidate_ids: np.ndarray  # int64 (K,)
    phi: np.ndarray  # float32 (K, d)
    relevance: np.ndarray  # int8 (K,), UNJUDGED where no grade is known
    served_by: str
    served_version: int
    model_versions: dict[str, int]  # model name -> version current when served
    judged: np.ndarray  # bool (K,): the candidates the user judged
    engine_scores: np.ndarray | None = None  # float64 (K,): the engine's own, if it sent them

    def __post_init__(self) -> None:
        if isinstance(self.judged, int | np.integer):
            k = len(np.asarray(self.candidate_ids))
            if not 0 <= int(self.judged) <= k:
                raise ValueError(f"judged={self.judged} must be within 0..{k} candidates")
            object.__setattr__(self, "judged", np.arange(k) < int(self.judged))

    @property
    def graded(self) -> np.ndarray:
        """bool (K,): the candidates whose grade is known (what the evaluator scores on)."""
        return np.asarray(self.relevance) != UNJUDGED

    @property
    def n_judged(self) -> int:
        return int(np.count_nonzero(self.judged))


def encode_query(query: JudgedQuery) -> bytes:
    """One `rankstream.queries` message, version 2 (a single Arrow row with list columns),
    or 3 when the query carries the engine's scores, at the width of its phi."""
    k = len(np.asarray(query.candidate_ids))
    if k < 1:
        raise ValueError("a judged query needs at least one candidate")
    ids = _int_column(query.candidate_ids, np.int64, "candidate_ids", k)
    rel = np.asarray(query.relevance)
    relevance = _int_column(rel, np.int8, "relevance", k)
    if (rel < UNJUDGED).any():
        raise ValueError(f"relevance must be >= 0, or {UNJUDGED} for no grade")
    judged = np.asarray(query.judged)
    if judged.shape != (k,) or judged.dtype != np.bool_:
        raise ValueError(f"judged must be {k} booleans, got {judged.dtype} {judged.shape}")
    if (rel[judged] == UNJUDGED).any():
        raise ValueError("judged candidates must have a grade (relevance >= 0)")
    relevance = pa.array(rel.astype(np.int8), mask=rel == UNJUDGED)
    phi = _phi_column(query.phi, "phi", k)
    versions = {str(name): int(v) for name, v in query.model_versions.items()}
    one = np.array([0, k], dtype=np.int32)
    engine = []
    if query.engine_scores is not None:
        scores = np.asarray(query.engine_scores, dtype=np.float64)
        if scores.shape != (k,) or not np.isfinite(scores).all():
            raise ValueError(f"engine_scores must be {k} finite numbers, got {scores.shape}")
        engine = [pa.ListArray.from_arrays(one, pa.array(scores))]
    return _write(
        schema_of("queries", phi.type.list_size, 3 if engine else QUERIES_VERSION),
        [
            pa.array([int(query.seq)], pa.int64()),
            pa.array([int(query.query_id)], pa.int64()),
            pa.ListArray.from_arrays(one, ids),
            pa.ListArray.from_arrays(one, phi),
            pa.ListArray.from_arrays(one, relevance),
            pa.array([str(query.served_by)], pa.string()),
            pa.array([int(query.served_version)], pa.int64()),
            pa.array([list(versions.items())], pa.map_(pa.string(), pa.int64())),
            pa.ListArray.from_arrays(one, pa.array(judged)),
            *engine,
        ],
    )


def decode_query(
    data: bytes | memoryview | pa.Buffer,
    *,
    width: int = DEFAULT_PHI_DIM,
    max_bytes: int = MAX_MESSAGE_BYTES,
) -> JudgedQuery:
    """Decode and validate one judged query (version 1, 2 or 3) at `width` (the
    deployment's); any bad value rejects the whole message."""
    batch, version = _read(data, "queries", width, max_bytes, nullable=frozenset({"relevance"}))
    if batch.num_rows != 1:
        raise SchemaError(BAD_SCHEMA, f"a queries message holds one row, got {batch.num_rows}")
    row = {name: batch.column(name) for name in batch.schema.names}
    ids = _ints(_list_parts(row["candidate_ids"])[1])
    graded = _list_parts(row["relevance"])[1]
    v1 = version == 1
    if row["relevance"].null_count or (v1 and graded.null_count):
        raise SchemaError(BAD_SCHEMA, "field 'relevance' contains nulls")
    known = graded.is_valid().to_numpy(zero_copy_only=False)
    values = graded.fill_null(0).to_numpy(zero_copy_only=False)
    if (values[known] < 0).any():  # graded gains 2^rel - 1: the metrics refuse negative grades
        raise SchemaError(BAD_SCHEMA, f"relevance {int(values[known].min())} is negative")
    relevance = np.where(known, values, UNJUDGED).astype(np.int8)
    phi_lists = _list_parts(row["phi"])[1]
    k = len(ids)
    if len(relevance) != k or len(phi_lists) != k or k == 0:
        raise SchemaError(
            BAD_SCHEMA,
            f"{k} candidate ids, {len(relevance)} relevances and "
            f"{len(phi_lists)} phi rows must match and be > 0",
        )
    phi = _phi(phi_lists, k, width)
    if not np.isfinite(phi).all():
        raise SchemaError(NON_FINITE, "candidate features contain NaN or Inf")
    judged = _judged_mask(row["judged"], k, v1)
    if (relevance[judged] == UNJUDGED).any():
        raise SchemaError(BAD_SCHEMA, "a judged candidate has a null relevance")
    engine = None
    if "engine_scores" in row:  # version 3
        engine = _list_parts(row["engine_scores"])[1].to_numpy(zero_copy_only=False)
        if engine.shape != (k,):
            raise SchemaError(BAD_SCHEMA, f"{len(engine)} engine_scores for {k} candidates")
        if not np.isfinite(engine).all():
            raise SchemaError(NON_FINITE, "engine_scores contain NaN or Inf")
    return JudgedQuery(
        seq=row["seq"][0].as_py(),
        query_id=row["query_id"][0].as_py(),
        candidate_ids=ids,
        phi=phi,
        relevance=relevance,
        served_by=row["served_by"][0].as_py(),
        served_version=row["served_version"][0].as_py(),
        model_versions=dict(row["model_versions"][0].as_py()),
        judged=judged,
        engine_scores=engine,
    )


def _judged_mask(column: pa.Array, k: int, v1: bool) -> np.ndarray:
    """Version 2: the per-candidate flags; version 1: the first `judged` candidates."""
    if v1:
        n = column[0].as_py()
        if not 0 <= n <= k:
            raise SchemaError(BAD_SCHEMA, f"judged={n} outside 0..{k}")
        return np.arange(k) < n
    flags = column.flatten().to_numpy(zero_copy_only=False)
    if flags.shape != (k,):
        raise SchemaError(BAD_SCHEMA, f"{len(flags)} judged flags for {k} candidates")
    return flags.astype(bool)


# --- dead letters -----------------------------------------------------------------------
@dataclass(frozen=True)
class DeadLetter:
    """A message (or some of its rows) that could not be used, and where it came from."""

    original: bytes  # at most MAX_MESSAGE_BYTES // 2 kept; `original_size` is the full size
    original_size: int
    reason: str
    detail: str
    source_topic: str
    source_partition: int
    source_offset: int
    rows: list[int] | None  # the rejected rows when only some were bad


def dead_letter(
    original: bytes, reason: str, detail: str, source: Message, rows: list[int] | None = None
) -> bytes:
    """One `rankstream.dead-letter` message carrying the original bytes and their origin.

    Originals larger than half the message limit (only `oversized` ones can be) are
    cut to that size so the dead letter itself always fits; `original_size` keeps the
    true length.
    """
    if reason not in REASONS:
        raise ValueError(f"unknown dead-letter reason {reason!r}; expected one of {REASONS}")
    keep = bytes(original[: MAX_MESSAGE_BYTES // 2])
    return _write(
        schema_of("dead-letter"),
        [
            pa.array([reason], pa.string()),
            pa.array([str(detail)[:2000]], pa.string()),
            pa.array([source.topic], pa.string()),
            pa.array([int(source.partition)], pa.int32()),
            pa.array([int(source.offset)], pa.int64()),
            pa.array([None if rows is None else [int(r) for r in rows]], pa.list_(pa.int64())),
            pa.array([len(original)], pa.int64()),
            pa.array([keep], pa.large_binary()),
        ],
    )


def decode_dead_letter(data: bytes | memoryview | pa.Buffer) -> DeadLetter:
    """Decode a dead letter (only `rows` may be null: a whole-message reject)."""
    batch, _ = _read(data, "dead-letter", DEFAULT_PHI_DIM, nullable=frozenset({"rows"}))
    if batch.num_rows != 1:
        raise SchemaError(BAD_SCHEMA, f"a dead letter holds one row, got {batch.num_rows}")
    return DeadLetter(**batch.to_pylist()[0])
