"""The wire schema: Arrow IPC stream messages for triplets, judged queries and dead letters.

Every message is one Arrow IPC *stream* (schema + record batches) whose schema metadata
names it (`rankstream.schema`) and its version (`rankstream.version`), so any Arrow
reader in any language can decode it and an old reader refuses a newer version instead
of misreading it. Nothing is pickled.

Decoding validates in two tiers. A problem with the whole message (not Arrow, truncated,
wrong name/version, wrong field types, wrong phi width, nulls, too big) raises
`SchemaError(reason, detail)`. A problem with single triplet rows (NaN/Inf features,
tied relevance) keeps the good rows and lists the rejects, so a consumer learns from
the good rows and dead-letters the bad ones.

Triplet blocks decode zero-copy: the id, relevance and phi arrays are read-only numpy
views of the Arrow buffers (phi1/phi2 as (n, 36) float32); only a block with rejected
rows pays for a copy of its good rows.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from rankstream.ranking.triplets import TripletBlock
from rankstream.stream.transport import Message

PHI_DIM = 36
SCHEMA_VERSION = 1
MAX_MESSAGE_BYTES = 16 * 1024 * 1024  # the broker's message.max.bytes
_NAME_KEY, _VERSION_KEY = b"rankstream.schema", b"rankstream.version"

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
REASONS = (
    BAD_BYTES,
    BAD_SCHEMA,
    UNKNOWN_VERSION,
    WRONG_WIDTH,
    NON_FINITE,
    TIED_RELEVANCE,
    OVERSIZED,
    EVALUATION_FAILED,
)

_PHI_TYPE = pa.list_(pa.float32(), PHI_DIM)

TRIPLETS_FIELDS = pa.schema(
    [
        ("seq", pa.int64()),
        ("query_id", pa.int64()),
        ("p1_id", pa.int64()),
        ("p2_id", pa.int64()),
        ("rel1", pa.int8()),
        ("rel2", pa.int8()),
        ("phi1", _PHI_TYPE),
        ("phi2", _PHI_TYPE),
    ]
)
# Judged queries, version 2 (see `encode_query`): a relevance entry may be null (that
# candidate was not judged and has no known grade) and `judged` marks, per candidate, the
# ones the user judged. Version 1 (`judged` = how many top candidates were judged, every
# relevance known) still decodes.
QUERIES_VERSION = 2
QUERIES_FIELDS = pa.schema(
    [
        ("seq", pa.int64()),
        ("query_id", pa.int64()),
        ("candidate_ids", pa.list_(pa.int64())),
        ("phi", pa.list_(_PHI_TYPE)),
        ("relevance", pa.list_(pa.int8())),
        ("served_by", pa.string()),
        ("served_version", pa.int64()),
        ("model_versions", pa.map_(pa.string(), pa.int64())),
        ("judged", pa.list_(pa.bool_())),
    ]
)
QUERIES_FIELDS_V1 = QUERIES_FIELDS.set(8, pa.field("judged", pa.int32()))
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
_SCHEMAS = {
    "triplets": TRIPLETS_FIELDS,
    "queries": QUERIES_FIELDS,
    "dead-letter": DEAD_LETTER_FIELDS,
}


class SchemaError(ValueError):
    """A whole message is unusable; `reason` is one of `REASONS`."""

    def __init__(self, reason: str, detail: str) -> None:
        super().__init__(f"{reason}: {detail}")
        self.reason, self.detail = reason, detail


# --- shared machinery ----------------------------------------------------------------
def _stamp(fields: pa.Schema, name: str) -> pa.Schema:
    version = QUERIES_VERSION if name == "queries" else SCHEMA_VERSION
    return fields.with_metadata({_NAME_KEY: name.encode(), _VERSION_KEY: b"%d" % version})


def _write(name: str, columns: list[pa.Array]) -> bytes:
    batch = pa.RecordBatch.from_arrays(columns, schema=_stamp(_SCHEMAS[name], name))
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, batch.schema) as writer:
        writer.write_batch(batch)
    return sink.getvalue().to_pybytes()


def _read(
    data: bytes | memoryview | pa.Buffer,
    name: str,
    max_bytes: int = MAX_MESSAGE_BYTES,
    nullable: frozenset[str] = frozenset(),
    versions: dict[int, pa.Schema] | None = None,
) -> pa.RecordBatch:
    """Parse and check a whole message: size, Arrow framing, name, version, field types.

    `versions` maps each version this reader knows to its fields (default: the current
    `SCHEMA_VERSION` only); the batch's schema metadata tells which one it is.
    """
    known = versions or {SCHEMA_VERSION: _SCHEMAS[name]}
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
    version = metadata.get(_VERSION_KEY)
    expected = next((f for v, f in known.items() if version == b"%d" % v), None)
    if expected is None:
        raise SchemaError(
            UNKNOWN_VERSION,
            f"{name} version {version!r}; this reader knows version(s) {sorted(known)}",
        )
    try:
        _check_fields(schema.remove_metadata(), expected)
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
    return batch


def _check_fields(schema: pa.Schema, expected: pa.Schema) -> None:
    if schema.names != expected.names:
        raise SchemaError(BAD_SCHEMA, f"fields {schema.names}, expected {expected.names}")
    for got, want in zip(schema, expected, strict=True):
        if got.type.equals(want.type):
            continue
        width = _fixed_width(got.type)
        if width is not None and width != _fixed_width(want.type):
            raise SchemaError(
                WRONG_WIDTH, f"field {got.name!r} has width {width}, expected {PHI_DIM}"
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
    count = column.null_count
    if isinstance(column, pa.MapArray):
        count += column.keys.null_count + column.items.null_count
    elif isinstance(column, pa.ListArray | pa.FixedSizeListArray | pa.LargeListArray):
        count += _null_count(column.flatten())
    return count


def _ints(column: pa.Array) -> np.ndarray:
    return column.to_numpy(zero_copy_only=True)


def _phi(column: pa.Array, n: int) -> np.ndarray:
    """(n, 36) float32 view of a fixed_size_list<float32>[36] column."""
    return column.flatten().to_numpy(zero_copy_only=True).reshape(n, PHI_DIM)


def _int_column(values: np.ndarray, dtype: type, name: str, n: int) -> pa.Array:
    arr = np.asarray(values)
    if arr.shape != (n,):
        raise ValueError(f"{name} must have shape ({n},), got {arr.shape}")
    if arr.dtype.kind not in "iu":
        raise ValueError(f"{name} must be integers, got dtype {arr.dtype}")
    cast = arr.astype(dtype, copy=False)
    if not np.array_equal(cast, arr):
        raise ValueError(f"{name} has values outside {np.dtype(dtype).name}")
    return pa.array(cast)


def _phi_column(values: np.ndarray, name: str, n: int) -> pa.Array:
    arr = np.asarray(values)
    if arr.ndim != 2 or arr.shape != (n, PHI_DIM):
        raise ValueError(f"{name} must have shape ({n}, {PHI_DIM}), got {arr.shape}")
    if arr.dtype.kind not in "iuf":
        raise ValueError(f"{name} must be numeric, got dtype {arr.dtype}")
    flat = np.ascontiguousarray(arr, dtype=np.float32).reshape(-1)
    if not np.isfinite(flat).all():
        raise ValueError(f"{name} contains NaN or Inf")
    return pa.FixedSizeListArray.from_arrays(pa.array(flat), PHI_DIM)


# --- triplets --------------------------------------------------------------------------
def triplet_key(query_id: int) -> bytes:
    """The message key: the block's query id in ASCII decimal (readable in any client)."""
    return str(int(query_id)).encode()


def block_key(block: TripletBlock) -> bytes:
    """A block's message key: the query id of its first row (blocks are per query)."""
    return triplet_key(int(block.query_id[0]) if len(block) else 0)


def encode_triplets(block: TripletBlock) -> bytes:
    """One `rankstream.triplets` message; ValueError for shapes, NaN/Inf or ties.

    int64/float32 C-contiguous inputs are wrapped without copying; the only copy is
    into the IPC output buffer.
    """
    n = len(np.asarray(block.seq))
    rel1_col = _int_column(block.rel1, np.int8, "rel1", n)
    rel2_col = _int_column(block.rel2, np.int8, "rel2", n)
    ties = np.flatnonzero(np.asarray(block.rel1) == np.asarray(block.rel2))
    if ties.size:
        raise ValueError(f"rel1 == rel2 (a tie, never sent) in rows {ties[:10].tolist()}")
    return _write(
        "triplets",
        [
            _int_column(block.seq, np.int64, "seq", n),
            _int_column(block.query_id, np.int64, "query_id", n),
            _int_column(block.p1_id, np.int64, "p1_id", n),
            _int_column(block.p2_id, np.int64, "p2_id", n),
            rel1_col,
            rel2_col,
            _phi_column(block.phi1, "phi1", n),
            _phi_column(block.phi2, "phi2", n),
        ],
    )


def decode_triplets(
    data: bytes | memoryview | pa.Buffer, max_bytes: int = MAX_MESSAGE_BYTES
) -> TripletBlock:
    """Decode and validate one triplets message; bad rows are dropped into `rejects`."""
    batch = _read(data, "triplets", max_bytes)
    n = batch.num_rows
    cols = [_ints(batch.column(i)) for i in range(6)]
    phi1, phi2 = _phi(batch.column(6), n), _phi(batch.column(7), n)
    finite = np.isfinite(phi1).all(axis=1) & np.isfinite(phi2).all(axis=1)
    untied = cols[4] != cols[5]
    ok = finite & untied
    if ok.all():
        return TripletBlock.from_pairs(*cols, phi1, phi2)
    rejects = [
        (int(i), NON_FINITE if not finite[i] else TIED_RELEVANCE) for i in np.flatnonzero(~ok)
    ]
    kept = [c[ok] for c in cols]
    block = TripletBlock.from_pairs(*kept, phi1[ok], phi2[ok])
    return dataclasses.replace(block, rejects=rejects)


# --- judged queries ---------------------------------------------------------------------
UNJUDGED = -1  # JudgedQuery.relevance of a candidate with no known grade (null on the wire)


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
    phi: np.ndarray  # float32 (K, 36)
    relevance: np.ndarray  # int8 (K,), UNJUDGED where no grade is known
    served_by: str
    served_version: int
    model_versions: dict[str, int]  # model name -> version current when served
    judged: np.ndarray  # bool (K,): the candidates the user judged

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
    """One `rankstream.queries` message, version 2 (a single Arrow row with list columns)."""
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
    return _write(
        "queries",
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
        ],
    )


def decode_query(
    data: bytes | memoryview | pa.Buffer, max_bytes: int = MAX_MESSAGE_BYTES
) -> JudgedQuery:
    """Decode and validate one judged query (version 1 or 2); any bad value rejects it."""
    batch = _read(
        data,
        "queries",
        max_bytes,
        nullable=frozenset({"relevance"}),
        versions={1: QUERIES_FIELDS_V1, QUERIES_VERSION: QUERIES_FIELDS},
    )
    if batch.num_rows != 1:
        raise SchemaError(BAD_SCHEMA, f"a queries message holds one row, got {batch.num_rows}")
    row = {name: batch.column(name) for name in QUERIES_FIELDS.names}
    ids = _ints(row["candidate_ids"].flatten())
    graded = row["relevance"].flatten()
    v1 = batch.schema.field("judged").type == pa.int32()
    if row["relevance"].null_count or (v1 and graded.null_count):
        raise SchemaError(BAD_SCHEMA, "field 'relevance' contains nulls")
    known = graded.is_valid().to_numpy(zero_copy_only=False)
    values = graded.fill_null(0).to_numpy(zero_copy_only=False)
    if (values[known] < 0).any():  # graded gains 2^rel - 1: the metrics refuse negative grades
        raise SchemaError(BAD_SCHEMA, f"relevance {int(values[known].min())} is negative")
    relevance = np.where(known, values, UNJUDGED).astype(np.int8)
    phi_lists = row["phi"].flatten()
    k = len(ids)
    if len(relevance) != k or len(phi_lists) != k or k == 0:
        raise SchemaError(
            BAD_SCHEMA,
            f"{k} candidate ids, {len(relevance)} relevances and "
            f"{len(phi_lists)} phi rows must match and be > 0",
        )
    phi = _phi(phi_lists, k)
    if not np.isfinite(phi).all():
        raise SchemaError(NON_FINITE, "candidate features contain NaN or Inf")
    judged = _judged_mask(row["judged"], k, v1)
    if (relevance[judged] == UNJUDGED).any():
        raise SchemaError(BAD_SCHEMA, "a judged candidate has a null relevance")
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
        "dead-letter",
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
    batch = _read(data, "dead-letter", nullable=frozenset({"rows"}))
    if batch.num_rows != 1:
        raise SchemaError(BAD_SCHEMA, f"a dead letter holds one row, got {batch.num_rows}")
    return DeadLetter(**batch.to_pylist()[0])


def schema_of(name: str) -> pa.Schema:
    """The stamped Arrow schema of a message kind (for recorders writing Parquet)."""
    return _stamp(_SCHEMAS[name], name)
