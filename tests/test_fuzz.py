"""Hostile input: every decoder and every consumer fed mutated and malformed messages.

Cases are valid messages mutated at the byte level (bit flips, truncation, splices,
overwritten length fields, inserted/deleted bytes) and well-formed Arrow that breaks
the schema (wrong name/version metadata, wrong field types or widths, nulls, NaN/Inf,
ties, mismatched query lists, out-of-range values). The oracle: a decoder either
returns a value satisfying the schema's invariants or raises its documented error
(SchemaError with a known reason, ValueError, RecordingError); a consumer never
raises, dead-letters exactly the messages an independent decode says are bad (with
that reason and the rejected rows), and no model or reservoir ever holds NaN/Inf.

Every case runs under a hang guard (SIGALRM, `_CASE_SECONDS`): a decoder that loops
fails the case instead of stalling the suite. That is a liveness bound, not a timing
assertion. `RANKSTREAM_FUZZ_EXAMPLES` sets the examples per test (`make fuzz`: 20,000
each, >100,000 in total; `make test`: the small default). With `RANKSTREAM_FUZZ_REPORT`
set, the case and dead-letter counts are written there as JSON.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rankstream.ranking.baselines import UniCon
from rankstream.ranking.scaling import Standardizer
from rankstream.ranking.triplets import TripletBlock
from rankstream.stream import codec, recording_files, recording_reader, recording_writer
from rankstream.stream.embedded import EmbeddedTransport
from rankstream.stream.embedded_store import EmbeddedModelStore
from rankstream.stream.schema import (
    MAX_MESSAGE_BYTES,
    OVERSIZED,
    REASONS,
    UNJUDGED,
    JudgedQuery,
    SchemaError,
    dead_letter,
    decode_dead_letter,
    decode_query,
    decode_triplets,
    encode_query,
    encode_triplets,
    queries_fields,
    triplets_fields,
)
from rankstream.stream.settings import DEFAULT_PHI_DIM, Settings
from rankstream.stream.transport import Message

PHI_DIM = DEFAULT_PHI_DIM
PAIR_FIELDS = triplets_fields(PHI_DIM, 1)  # version 1: one row per triplet
GROUP_FIELDS = triplets_fields(PHI_DIM, 2)  # version 2: one row per group
QUERIES_FIELDS = queries_fields(PHI_DIM)  # version 2: null grades, judged flags
QUERIES_FIELDS_V1 = queries_fields(PHI_DIM, 1)  # version 1: a judged count

EXAMPLES = int(os.environ.get("RANKSTREAM_FUZZ_EXAMPLES", "300"))
_CASE_SECONDS = 30.0
FUZZ = settings(
    max_examples=EXAMPLES,
    deadline=None,
    derandomize=False,
    database=None,
    suppress_health_check=[
        HealthCheck.too_slow,
        HealthCheck.data_too_large,
        HealthCheck.function_scoped_fixture,
    ],
)
CASES: Counter[str] = Counter()  # test -> cases run
DEAD: Counter[str] = Counter()  # reason -> dead letters / rejects seen


@pytest.fixture(scope="module", autouse=True)
def _report() -> Iterator[None]:
    yield
    path = os.environ.get("RANKSTREAM_FUZZ_REPORT")
    if path:
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        Path(path).write_text(
            json.dumps(
                {
                    "examples_per_test": EXAMPLES,
                    "cases": dict(CASES),
                    "total": sum(CASES.values()),
                    "dead_letters_by_reason": dict(DEAD),
                },
                indent=1,
            )
        )


@contextlib.contextmanager
def case(name: str) -> Iterator[None]:
    """Count the case and fail it if it runs longer than `_CASE_SECONDS` (a hang)."""
    CASES[name] += 1

    def hung(*_: object) -> None:
        raise TimeoutError(f"{name}: one case ran over {_CASE_SECONDS}s (hang)")

    previous = signal.signal(signal.SIGALRM, hung)
    signal.setitimer(signal.ITIMER_REAL, _CASE_SECONDS)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


# --- valid seeds -----------------------------------------------------------------------
def _phi(rng: np.random.Generator, n: int) -> np.ndarray:
    return rng.random((n, PHI_DIM), dtype=np.float32)


def valid_triplets(seed: int, n: int, version: int = 2) -> bytes:
    rng = np.random.default_rng(seed)
    rel1 = rng.integers(1, 4, n).astype(np.int8)
    return encode_triplets(
        TripletBlock.from_pairs(
            seq=np.arange(n, dtype=np.int64),
            query_id=np.sort(rng.integers(0, 3, n)),
            p1_id=rng.integers(0, 10**6, n),
            p2_id=rng.integers(0, 10**6, n),
            rel1=rel1,
            rel2=(rel1 - rng.integers(1, 2, n)).astype(np.int8),
            phi1=_phi(rng, n),
            phi2=_phi(rng, n),
        ),
        version=version,
    )


def valid_query(seed: int, k: int, versions: dict[str, int] | None = None) -> bytes:
    rng = np.random.default_rng(seed)
    return encode_query(
        JudgedQuery(
            seq=seed,
            query_id=seed,
            candidate_ids=np.arange(k, dtype=np.int64),
            phi=_phi(rng, k),
            relevance=rng.integers(0, 3, k).astype(np.int8),
            served_by="uni-con",
            served_version=1,
            model_versions=versions if versions is not None else {"uni-con": 1},
            judged=min(k, 50),
        )
    )


SOURCE = Message("t.triplets", 0, 7, None, b"", 0)
SEEDS = {
    "triplets": [
        valid_triplets(s, n, v) for s, n, v in ((0, 1, 1), (1, 5, 1), (0, 1, 2), (2, 17, 2))
    ],
    "queries": [valid_query(s, k) for s, k in ((0, 1), (1, 8), (2, 60))],
    "dead-letter": [
        dead_letter(b"\x00\x01", "bad_bytes", "x", SOURCE),
        dead_letter(valid_triplets(3, 4), "non_finite", "2 rows", SOURCE, [0, 3]),
    ],
    "codec": [
        codec.encode_arrays({"w": np.arange(36.0), "n": np.array([3], np.int64)}),
        codec.encode_arrays({"sigma": np.eye(4, dtype=np.float32), "b": np.ones(2, bool)}),
    ],
}
ALL_SEEDS = [s for seeds in SEEDS.values() for s in seeds]


# --- byte-level mutation ---------------------------------------------------------------
_HUGE = [
    b"\xff\xff\xff\x7f",
    b"\xff\xff\xff\xff",
    b"\x00\x00\x00\x80",
    b"\xff\xff\xff\xff\xff\xff\xff\x7f",
    b"\x00\x00\x00\x00\x00\x00\x00\x80",
]


@st.composite
def mutated(draw: st.DrawFn, kind: str) -> bytes:
    """A valid `kind` seed with 1..4 byte-level mutations applied."""
    data = bytearray(draw(st.sampled_from(SEEDS[kind])))
    for _ in range(draw(st.integers(1, 4))):
        op = draw(
            st.sampled_from(
                ("flip", "flip", "truncate", "splice", "huge", "insert", "delete", "double")
            )
        )
        at = draw(st.integers(0, max(len(data) - 1, 0)))
        if op == "flip" and data:
            data[at] ^= 1 << draw(st.integers(0, 7))
        elif op == "truncate":
            del data[at:]
        elif op == "splice":
            other = draw(st.sampled_from(ALL_SEEDS))
            data = data[:at] + other[draw(st.integers(0, len(other))) :]
        elif op == "huge":
            field = draw(st.sampled_from(_HUGE))
            data[at : at + len(field)] = field
        elif op == "insert":
            data[at:at] = draw(st.binary(min_size=1, max_size=16))
        elif op == "delete":
            del data[at : at + draw(st.integers(1, 64))]
        else:
            data = data + data
    return bytes(data)


# --- well-formed Arrow that breaks the schema -------------------------------------------
def _arrow(
    fields: pa.Schema,
    columns: list[pa.Array],
    metadata: dict[bytes, bytes] | None,
    batches: int = 1,
) -> bytes:
    schema = fields.with_metadata(metadata) if metadata is not None else fields
    batch = pa.RecordBatch.from_arrays(columns, schema=schema)
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, schema) as writer:
        for _ in range(batches):
            writer.write_batch(batch)
    return sink.getvalue().to_pybytes()


def _meta(name: str, version: bytes = b"1", width: bytes | None = None) -> dict[bytes, bytes]:
    meta = {b"rankstream.schema": name.encode(), b"rankstream.version": version}
    if width is not None:
        meta[b"rankstream.phi_dim"] = width
    return meta


_SPECIAL = np.array([np.nan, np.inf, -np.inf], np.float32)
_EXTREME = np.array([3.4e38, -3.4e38, 1e-45, 0.0, -0.0, 1e30], np.float32)


def _phi_array(flat: np.ndarray, width: int) -> pa.Array:
    return pa.FixedSizeListArray.from_arrays(pa.array(flat.astype(np.float32)), width)


@st.composite
def triplet_columns(draw: st.DrawFn) -> tuple[list[pa.Array], set[int]]:
    """Columns of n rows with some NaN/Inf, tied and extreme rows; returns the bad rows."""
    n = draw(st.integers(0, 24))
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    phi = [_phi(rng, n), _phi(rng, n)]
    rel1 = rng.integers(-128, 128, n).astype(np.int8)
    rel2 = rng.integers(-128, 128, n).astype(np.int8)
    bad: set[int] = set(np.flatnonzero(rel1 == rel2).tolist())
    edits = [
        (row, draw(st.sampled_from(("nan", "tie", "extreme"))))
        for row in (draw(st.lists(st.integers(0, n - 1), max_size=4)) if n else [])
    ]
    for row, which in sorted(edits, key=lambda e: e[1] != "extreme"):  # extremes first
        if which == "nan":
            phi[row % 2][row, draw(st.integers(0, PHI_DIM - 1))] = draw(st.sampled_from(_SPECIAL))
            bad.add(row)
        elif which == "tie":
            rel2[row] = rel1[row]
            bad.add(row)
        else:
            phi[row % 2][row] = rng.choice(_EXTREME, PHI_DIM)
    ints = [pa.array(rng.integers(-(2**63), 2**63 - 1, n, dtype=np.int64)) for _ in range(4)]
    columns = [
        *ints,
        pa.array(rel1),
        pa.array(rel2),
        *(_phi_array(p.reshape(-1), PHI_DIM) for p in phi),
    ]
    return columns, bad


def _lists(offsets: np.ndarray, values: pa.Array) -> pa.Array:
    return pa.ListArray.from_arrays(pa.array(offsets.astype(np.int32)), values)


@st.composite
def group_columns(draw: st.DrawFn) -> tuple[list[pa.Array], set[int]]:
    """Version-2 columns: groups of images and triplets, some images NaN/Inf (rejecting
    the triplets that reference them), some ties; returns the bad triplets' indices."""
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    sizes = draw(st.lists(st.tuples(st.integers(1, 6), st.integers(0, 8)), max_size=4))
    images = np.array([m for m, _ in sizes], np.int64)
    counts = np.array([n for _, n in sizes], np.int64)
    m, n = int(images.sum()), int(counts.sum())
    phi = _phi(rng, m)
    for row in draw(st.lists(st.integers(0, max(m - 1, 0)), max_size=3)) if m else []:
        if draw(st.booleans()):
            phi[row, draw(st.integers(0, PHI_DIM - 1))] = draw(st.sampled_from(_SPECIAL))
        else:
            phi[row] = rng.choice(_EXTREME, PHI_DIM)
    in_group = np.repeat(images, counts)
    p1 = (rng.integers(0, 1 << 15, n) % np.maximum(in_group, 1)).astype(np.int16)
    p2 = (rng.integers(0, 1 << 15, n) % np.maximum(in_group, 1)).astype(np.int16)
    rel1 = rng.integers(-128, 128, n).astype(np.int8)
    rel2 = rng.integers(-128, 128, n).astype(np.int8)
    for t in draw(st.lists(st.integers(0, max(n - 1, 0)), max_size=2)) if n else []:
        rel2[t] = rel1[t]
    image_offsets = np.concatenate([[0], np.cumsum(images)]).astype(np.int64)
    triplet_offsets = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
    start = np.repeat(image_offsets[:-1], counts)
    finite = np.isfinite(phi).all(axis=1)
    ok = finite[start + p1] & finite[start + p2] & (rel1 != rel2)
    g = len(sizes)
    columns = [
        pa.array(rng.integers(-(2**62), 2**62, g, dtype=np.int64)),
        pa.array(rng.integers(-(2**62), 2**62, g, dtype=np.int64)),
        _lists(image_offsets, pa.array(rng.integers(0, 10**6, m, dtype=np.int64))),
        _lists(image_offsets, _phi_array(phi.reshape(-1), PHI_DIM)),
        *(_lists(triplet_offsets, pa.array(v)) for v in (p1, p2, rel1, rel2)),
    ]
    return columns, set(np.flatnonzero(~ok).tolist())


@st.composite
def group_breaking(draw: st.DrawFn) -> bytes:
    """Well-formed Arrow IPC that violates the version-2 triplets schema in one way."""
    columns, _ = draw(group_columns())
    fields, meta = GROUP_FIELDS, _meta("triplets", b"2", b"%d" % PHI_DIM)
    how = draw(st.sampled_from(("no_width", "width", "meta_width", "index", "lengths", "type")))
    g = len(columns[0])
    if how == "no_width":
        meta = _meta("triplets", b"2")
    elif how == "meta_width":
        meta = _meta("triplets", b"2", draw(st.sampled_from((b"8", b"", b"-1", b"x"))))
    elif how == "width":
        width = draw(st.sampled_from((1, 35, 128)))
        m = len(columns[3].values)
        columns[3] = _lists(
            columns[3].offsets.to_numpy(), _phi_array(np.zeros(m * width, np.float32), width)
        )
        fields = fields.set(3, pa.field("phi", columns[3].type))
    elif how == "index" and len(columns[4].values):
        p1 = columns[4].values.to_numpy().copy()
        p1[draw(st.integers(0, len(p1) - 1))] = draw(st.sampled_from((-1, 6, 32767)))
        columns[4] = _lists(columns[4].offsets.to_numpy(), pa.array(p1))
    elif how == "lengths" and g:  # one list column one value longer than its partners
        i = draw(st.sampled_from((2, 5, 7)))
        offsets = columns[i].offsets.to_numpy().copy()
        offsets[1:] += 1
        values = columns[i].values
        columns[i] = _lists(offsets, pa.concat_arrays([values, pa.array([0], values.type)]))
    elif how == "type":
        i = draw(st.integers(0, 1))
        columns[i] = pa.array(columns[i].to_numpy().astype(np.float64))
        fields = fields.set(i, pa.field(fields[i].name, pa.float64()))
    return _arrow(fields, columns, meta)


@st.composite
def schema_breaking(draw: st.DrawFn, kind: str) -> bytes:
    """Well-formed Arrow IPC that violates the `kind` schema in one seeded way."""
    name = {"triplets": "triplets", "queries": "queries"}[kind]
    fields, version = PAIR_FIELDS, b"1"
    if kind == "triplets":
        columns, _ = draw(triplet_columns())
    else:
        columns, fields, version = _query_columns(draw)
    how = draw(
        st.sampled_from(("name", "version", "no_meta", "width", "type", "drop", "nulls", "batches"))
    )
    meta = _meta(name, version)
    if how == "name":
        meta = _meta(draw(st.sampled_from(("queries", "triplets", "dead-letter", "", "x"))))
    elif how == "version":
        meta = _meta(
            name, draw(st.sampled_from((b"0", b"2", b"999999999999", b"", b"1.0", b"\xff")))
        )
    elif how == "no_meta":
        meta = None
    elif how == "width" and kind == "triplets":
        width = draw(st.sampled_from((1, 35, 37, 72)))
        n = len(columns[0])
        flat = np.zeros(n * width, np.float32)
        columns[6] = columns[7] = _phi_array(flat, width)
        fields = pa.schema(
            [*list(fields)[:6], ("phi1", columns[6].type), ("phi2", columns[7].type)]
        )
    elif how == "type":
        i = draw(st.integers(0, len(columns) - 1))
        columns[i] = pa.array([str(v) for v in columns[i].to_pylist()], pa.string())
        fields = fields.set(i, pa.field(fields[i].name, pa.string()))
    elif how == "drop":
        i = draw(st.integers(0, len(columns) - 1))
        del columns[i]
        fields = fields.remove(i)
    elif how == "nulls":
        i = draw(st.integers(0, len(columns) - 1))
        n = len(columns[i])
        if n:
            mask = np.zeros(n, bool)
            mask[draw(st.integers(0, n - 1))] = True
            columns[i] = pa.array(columns[i].to_pylist(), columns[i].type, mask=mask)
    batches = draw(st.integers(2, 3)) if how == "batches" else 1
    return _arrow(fields, columns, meta, batches)


def _query_columns(draw: st.DrawFn) -> tuple[list[pa.Array], pa.Schema, bytes]:
    """One queries row whose lists may disagree, hold NaN, or have odd relevance/judged;
    in version 1's layout (a judged count) or version 2's (null grades, judged flags)."""
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    k = draw(st.integers(0, 12))
    k_rel = draw(st.sampled_from((k, k, k, max(k - 1, 0), k + 1)))
    k_phi = draw(st.sampled_from((k, k, k, k + 2)))
    phi = _phi(rng, k_phi)
    if k_phi and draw(st.booleans()):
        phi[draw(st.integers(0, k_phi - 1)), 0] = draw(st.sampled_from(_SPECIAL))
    if k_phi and draw(st.booleans()):
        phi[0] = rng.choice(_EXTREME, PHI_DIM)
    relevance = rng.integers(draw(st.sampled_from((-128, 0))), 128, k_rel).astype(np.int8)
    judged = draw(st.sampled_from((0, k, k + 1, -1, 2**31 - 1)))
    versions = draw(
        st.dictionaries(
            st.sampled_from(("uni-con", "opr", "", "x" * 300)),
            st.integers(-(2**63), 2**63 - 1),
            max_size=3,
        )
    )
    offsets = lambda m: np.array([0, m], np.int32)  # noqa: E731
    v2 = draw(st.booleans())
    grades = pa.array(relevance, mask=(rng.random(k_rel) < 0.3) if v2 else None)
    if v2:
        k_judged = draw(st.sampled_from((k, k, k + 1, max(k - 1, 0))))
        flags = pa.array(rng.random(k_judged) < 0.5)
        judged_column = pa.ListArray.from_arrays(offsets(k_judged), flags)
    else:
        judged_column = pa.array([judged], pa.int32())
    columns = [
        pa.array([1], pa.int64()),
        pa.array([2], pa.int64()),
        pa.ListArray.from_arrays(offsets(k), pa.array(np.arange(k, dtype=np.int64))),
        pa.ListArray.from_arrays(offsets(k_phi), _phi_array(phi.reshape(-1), PHI_DIM)),
        pa.ListArray.from_arrays(offsets(k_rel), grades),
        pa.array([draw(st.sampled_from(("uni-con", "", "opr\x00")))], pa.string()),
        pa.array([draw(st.integers(-(2**63), 2**63 - 1))], pa.int64()),
        pa.array([list(versions.items())], pa.map_(pa.string(), pa.int64())),
        judged_column,
    ]
    return columns, (QUERIES_FIELDS if v2 else QUERIES_FIELDS_V1), (b"2" if v2 else b"1")


@st.composite
def triplet_rows_message(draw: st.DrawFn) -> tuple[bytes, set[int]]:
    """A well-formed triplets message (either version) with some bad triplets, and
    which triplets (by index in the message) are bad."""
    if draw(st.booleans()):
        columns, bad = draw(triplet_columns())
        return _arrow(PAIR_FIELDS, columns, _meta("triplets")), bad
    columns, bad = draw(group_columns())
    return _arrow(GROUP_FIELDS, columns, _meta("triplets", b"2", b"%d" % PHI_DIM)), bad


def hostile(kind: str) -> st.SearchStrategy[bytes]:
    """Anything a hostile producer could put on a `kind` topic."""
    options = [mutated(kind), st.binary(max_size=64), st.sampled_from(ALL_SEEDS)]
    if kind in ("triplets", "queries"):
        options.append(schema_breaking(kind))
    if kind == "triplets":
        options.append(triplet_rows_message().map(lambda pair: pair[0]))
        options.append(group_breaking())
    return st.one_of(*options)


# --- decoder invariants ------------------------------------------------------------------
def expected_triplets(value: bytes) -> tuple[str | None, list[int]]:
    """(whole-message reason or None, rejected rows) by decoding, checking invariants."""
    try:
        block = decode_triplets(value)
    except SchemaError as exc:
        assert exc.reason in REASONS
        return exc.reason, []
    n, m = len(block), len(block.image_id)
    for name in ("seq", "query_id", "p1", "p2", "rel1", "rel2"):
        assert getattr(block, name).shape == (n,)
    assert block.phi.shape == (m, PHI_DIM) and block.phi.dtype == np.float32
    assert np.isfinite(block.phi).all()  # the table, not just the rows used
    if n:
        assert min(block.p1.min(), block.p2.min()) >= 0 and max(block.p1.max(), block.p2.max()) < m
    assert block.phi1.shape == block.phi2.shape == (n, PHI_DIM)
    assert (block.rel1 != block.rel2).all()
    assert set(np.unique(block.y())) <= {-1.0, 1.0}
    rows = [row for row, _ in block.rejects]
    assert rows == sorted(set(rows)) and all(r >= 0 for r in rows)
    assert {reason for _, reason in block.rejects} <= set(REASONS)
    return None, rows


@FUZZ
@given(value=hostile("triplets"))
def test_fuzz_decode_triplets(value: bytes) -> None:
    with case("decode_triplets"):
        reason, rows = expected_triplets(value)
        DEAD[reason or ("rows" if rows else "ok")] += 1


@FUZZ
@given(pair=triplet_rows_message())
def test_fuzz_triplet_row_rejects_are_exactly_the_bad_rows(pair: tuple[bytes, set[int]]) -> None:
    value, bad = pair
    with case("triplet_rows"):
        reason, rows = expected_triplets(value)
        assert reason is None and set(rows) == bad


@FUZZ
@given(value=hostile("queries"))
def test_fuzz_decode_query(value: bytes) -> None:
    with case("decode_query"):
        try:
            query = decode_query(value)
        except SchemaError as exc:
            assert exc.reason in REASONS
            DEAD[exc.reason] += 1
            return
        k = len(query.candidate_ids)
        assert k >= 1 and query.phi.shape == (k, PHI_DIM) and query.relevance.shape == (k,)
        assert np.isfinite(query.phi).all() and query.judged.shape == (k,)
        assert query.judged.dtype == np.bool_ and (query.relevance >= UNJUDGED).all()
        assert (query.relevance[query.judged] >= 0).all()
        assert all(
            isinstance(n, str) and isinstance(v, int) for n, v in query.model_versions.items()
        )


@FUZZ
@given(value=st.one_of(mutated("dead-letter"), st.binary(max_size=64), st.sampled_from(ALL_SEEDS)))
def test_fuzz_decode_dead_letter(value: bytes) -> None:
    with case("decode_dead_letter"):
        try:
            letter = decode_dead_letter(value)
        except SchemaError as exc:
            assert exc.reason in REASONS
            return
        assert isinstance(letter.original, bytes) and isinstance(letter.reason, str)
        assert letter.rows is None or all(isinstance(r, int) for r in letter.rows)


@FUZZ
@given(
    value=st.one_of(
        mutated("codec"),
        st.binary(max_size=64),
        st.sampled_from(ALL_SEEDS),
        st.builds(
            lambda h: codec.MAGIC + len(h).to_bytes(4, "little") + h,
            st.sampled_from(
                [
                    b'[{"name":"a","dtype":"|O","shape":[1],"offset":0,"nbytes":8}]',
                    b'[{"name":"a","dtype":"<f8","shape":[-1],"offset":0,"nbytes":8}]',
                    b'[{"name":"a","dtype":"<f8","shape":[4611686018427387904,'
                    b'4],"offset":0,"nbytes":0}]',
                    b'[{"name":"a","dtype":",","shape":[1],"offset":0,'
                    b'"nbytes":8}]',  # found: np.dtype raised SyntaxError
                    b'[{"name":"a","dtype":"(4,)f8","shape":[1],"offset":0,"nbytes":32}]',
                    b'{"not":"a list"}',
                    b"[1, 2]",
                    b"\xff\xfe",
                ]
            ),
        ),
    )
)
def test_fuzz_codec_arrays(value: bytes) -> None:
    with case("codec"):
        try:
            arrays = codec.decode_arrays(value)
        except ValueError:
            return
        for array in arrays.values():
            assert isinstance(array, np.ndarray) and array.dtype.kind in "biufc"
            assert not array.dtype.hasobject


@pytest.mark.parametrize("kind", ["triplets", "queries", "dead-letter"])
def test_a_field_name_that_is_not_utf8_is_bad_bytes(kind: str) -> None:
    """Found by the fuzzer: Arrow accepts such a schema and `Schema.names` then raised
    UnicodeDecodeError, which no consumer caught (a poison message crashed the worker)."""
    CASES["regression"] += 1
    value = bytearray(SEEDS[kind][-1])
    value[value.find(b"query_id" if kind != "dead-letter" else b"reason")] = 0x80
    decode = {
        "triplets": decode_triplets,
        "queries": decode_query,
        "dead-letter": decode_dead_letter,
    }[kind]
    with pytest.raises(SchemaError) as info:
        decode(bytes(value))
    assert info.value.reason == "bad_bytes"


def test_oversized_messages_are_refused_before_parsing() -> None:
    """One byte over the broker's limit is refused by size alone, for every kind."""
    CASES["oversized"] += 3
    big = b"\x00" * (MAX_MESSAGE_BYTES + 1)
    for decode in (decode_triplets, decode_query):
        with pytest.raises(SchemaError) as info:
            decode(big)
        assert info.value.reason == OVERSIZED
    letter = decode_dead_letter(dead_letter(big, OVERSIZED, "big", SOURCE))
    assert letter.original_size == len(big) and len(letter.original) == MAX_MESSAGE_BYTES // 2


# --- recorded Parquet logs ---------------------------------------------------------------
@pytest.fixture(scope="module")
def recorded(tmp_path_factory: pytest.TempPathFactory) -> dict[str, bytes]:
    """One valid log file of each kind (bytes), to be damaged by the fuzzer."""
    out = {}
    for kind, seeds in (("triplets", SEEDS["triplets"]), ("queries", SEEDS["queries"])):
        directory = tmp_path_factory.mktemp(f"rec-{kind}")
        writer = recording_writer.RecordingWriter(directory, kind, f"t.{kind}")
        for offset, value in enumerate(seeds):
            writer.add(Message(f"t.{kind}", 0, offset, b"k", value, 0))
        out[kind] = writer.commit().read_bytes()  # type: ignore[union-attr]
    return out


@FUZZ
@given(kind=st.sampled_from(("triplets", "queries")), data=st.data())
def test_fuzz_recorded_logs(
    recorded: dict[str, bytes],
    kind: str,
    data: st.DataObject,
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    with case("recorded_logs"):
        original = bytearray(recorded[kind])
        for _ in range(data.draw(st.integers(1, 3))):
            at = data.draw(st.integers(0, len(original) - 1))
            if data.draw(st.booleans()):
                original[at] ^= 1 << data.draw(st.integers(0, 7))
            else:
                original[at : at + 8] = data.draw(st.sampled_from(_HUGE))
        directory = tmp_path_factory.mktemp("log", numbered=True)
        (directory / kind).mkdir()
        (directory / kind / "00000000.parquet").write_bytes(bytes(original))
        try:
            messages = list(recording_reader.iter_messages(directory, kind))
        except recording_files.RecordingError:
            messages = []
        for m in messages:  # whatever a damaged log still yields is a valid message
            (decode_triplets if kind == "triplets" else decode_query)(m.value)
        counts = recording_reader.ReadCounts()
        kept = list(recording_reader.iter_messages(directory, kind, skip_bad=True, counts=counts))
        assert counts.bad_files + counts.bad_rows > 0 or len(kept) >= len(messages)


# --- consumers, in process on the embedded transport and store --------------------------
def _settings(tmp_path: Path) -> Settings:
    return Settings(topic_prefix="fuzz", data_dir=str(tmp_path))


def _dead_letters(transport: EmbeddedTransport, topic: str, start: int) -> list:
    """Dead letters from `start` (the topic's end offset before the case) to the end."""
    consumer = transport.consumer(None)
    consumer.assign([(topic, 0)])
    consumer.seek(topic, 0, start)
    letters = [decode_dead_letter(m.value) for m in consumer.poll(timeout_ms=0, max_records=10_000)]
    consumer.close()
    return letters


class _Feed:
    """Numbers messages on one partition (offsets keep rising across cases)."""

    def __init__(self, topic: str) -> None:
        self.topic, self.offset = topic, 0

    def messages(self, values: list[bytes]) -> list[Message]:
        out = [Message(self.topic, 0, self.offset + i, None, v, 0) for i, v in enumerate(values)]
        self.offset += len(values)
        return out


@pytest.fixture(scope="module")
def online(tmp_path_factory: pytest.TempPathFactory):
    from rankstream.workers.online_worker import OnlineWorker, WorkerOptions

    settings = _settings(tmp_path_factory.mktemp("online"))
    transport = EmbeddedTransport()
    worker = OnlineWorker(
        settings, WorkerOptions(scaler_rows=8), transport=transport, store=EmbeddedModelStore()
    )
    worker.start()
    return worker, transport, _Feed(settings.triplets_topic)


@FUZZ
@given(values=st.lists(hostile("triplets"), min_size=1, max_size=4))
def test_fuzz_online_worker(online, values: list[bytes]) -> None:
    worker, transport, feed = online
    with case("online_worker"):
        messages = feed.messages(values)
        start = transport.end_offsets(worker.settings.dead_letter_topic).get(0, 0)
        worker.process(messages)
        letters = _dead_letters(transport, worker.settings.dead_letter_topic, start)
        expected = []
        for message in messages:
            reason, rows = expected_triplets(message.value)
            if reason is not None:
                expected.append((message.offset, reason, None))
            elif rows:
                expected.append((message.offset, None, rows))
        got = [(d.source_offset, None if d.rows else d.reason, d.rows or None) for d in letters]
        assert got == expected
        for d in letters:
            assert d.reason in REASONS and d.source_topic == worker.settings.triplets_topic
            assert d.original == messages[d.source_offset - messages[0].offset].value
            DEAD[d.reason] += 1
        for model in worker.models:
            if model.ranker is not None:  # until its scaler is fitted a model holds rows
                assert model.covers(feed.topic, 0, messages[-1].offset)
                assert np.isfinite(model.ranker.weights).all(), model.name
                _check_finite_state(model.ranker)


def _check_finite_state(ranker: object) -> None:
    _meta, arrays = ranker.to_state()  # type: ignore[attr-defined]
    for name, array in arrays.items():
        assert np.isfinite(array).all(), name


@pytest.fixture(scope="module")
def evaluator(tmp_path_factory: pytest.TempPathFactory):
    from rankstream.ranking.online import OnlineRanker
    from rankstream.workers.evaluator import Evaluator, EvaluatorOptions

    settings = _settings(tmp_path_factory.mktemp("evaluator"))
    transport, store = EmbeddedTransport(), EmbeddedModelStore()
    scaler = Standardizer().fit(np.random.default_rng(0).random((64, PHI_DIM)))
    for name, model, kind in (
        ("uni-con", UniCon(scaler=scaler), "linear"),
        ("opr", OnlineRanker(algo="opr", scaler=scaler, warm_start=np.ones(PHI_DIM)), "online"),
    ):
        meta, arrays = model.to_state()
        store.save(name, kind=kind, meta=meta, arrays=arrays, offsets={}, expected_version=0)
    worker = Evaluator(settings, EvaluatorOptions(window=20), transport=transport, store=store)
    worker.start()
    return worker, transport, _Feed(settings.queries_topic)


@FUZZ
@given(
    values=st.lists(
        st.one_of(
            hostile("queries"),
            st.integers(0, 99).map(lambda s: valid_query(s, 30, {"uni-con": 1, "opr": 1})),
        ),
        min_size=1,
        max_size=4,
    )
)
def test_fuzz_evaluator(evaluator, values: list[bytes]) -> None:
    worker, transport, feed = evaluator
    with case("evaluator"):
        messages = feed.messages(values)
        before = worker.dead_letters
        start = transport.end_offsets(worker.settings.dead_letter_topic).get(0, 0)
        evaluated = worker.process(messages)
        letters = _dead_letters(transport, worker.settings.dead_letter_topic, start)
        expected = []
        for message in messages:
            try:
                decode_query(message.value)
            except SchemaError as exc:
                expected.append((message.offset, exc.reason))
        assert [(d.source_offset, d.reason) for d in letters] == expected
        assert worker.dead_letters - before == len(expected)
        assert evaluated == len(messages) - len(expected)
        for d in letters:
            DEAD[d.reason] += 1
        ndcg, ap = worker.rolling.means()
        for value in [*ndcg.values(), *ap.values()]:
            assert np.isfinite(value) and 0.0 <= value <= 1.0 + 1e-9


@pytest.fixture(scope="module")
def batch(tmp_path_factory: pytest.TempPathFactory):
    from rankstream.workers.batch_worker import BatchOptions, BatchWorker

    settings = _settings(tmp_path_factory.mktemp("batch"))
    worker = BatchWorker(
        settings,
        BatchOptions(reservoir=500),
        transport=EmbeddedTransport(),
        store=EmbeddedModelStore(),
    )
    worker.start()
    return worker, _Feed(settings.triplets_topic)


@FUZZ
@given(values=st.lists(hostile("triplets"), min_size=1, max_size=4))
def test_fuzz_batch_worker(batch, values: list[bytes]) -> None:
    worker, feed = batch
    with case("batch_worker"):
        messages = feed.messages(values)
        skipped, rejected = worker.counters.skipped_messages, worker.counters.rejected_rows
        seen = worker.reservoir.n_seen
        worker.process(messages)
        outcomes = [expected_triplets(m.value) for m in messages]
        bad_messages = sum(reason is not None for reason, _ in outcomes)
        good_rows = sum(
            len(decode_triplets(m.value))
            for m, (reason, _) in zip(messages, outcomes, strict=True)
            if reason is None
        )
        assert worker.counters.skipped_messages - skipped == bad_messages
        assert worker.counters.rejected_rows - rejected == sum(len(r) for _, r in outcomes)
        assert worker.reservoir.n_seen - seen == good_rows
        assert worker.covers(feed.topic, 0, messages[-1].offset)
        assert np.isfinite(worker.reservoir.sample().phi).all()
