"""Wire schema: exact round trips, and every way a message can be refused."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from rankstream.ranking.triplets import TripletBlock
from rankstream.stream.generator import TripletGenerator
from rankstream.stream.schema import (
    MAX_MESSAGE_BYTES,
    PHI_DIM,
    QUERIES_FIELDS_V1,
    UNJUDGED,
    JudgedQuery,
    SchemaError,
    block_key,
    dead_letter,
    decode_dead_letter,
    decode_query,
    decode_triplets,
    encode_query,
    encode_triplets,
    schema_of,
)
from rankstream.stream.transport import Message

FIELDS = ("seq", "query_id", "p1_id", "p2_id", "rel1", "rel2", "phi1", "phi2")


def _columns(n: int = 30, seed: int = 0) -> dict[str, np.ndarray]:
    cols = TripletGenerator(seed).block(n)
    return {name: getattr(cols, name) for name in FIELDS}


def _raw(columns: dict[str, np.ndarray], schema: pa.Schema | None = None) -> bytes:
    """Encode without the producer-side checks, as a buggy or foreign producer might."""
    schema = schema or schema_of("triplets")
    arrays = []
    for f in schema:
        values = columns[f.name]
        if pa.types.is_fixed_size_list(f.type):
            width = f.type.list_size
            arrays.append(pa.FixedSizeListArray.from_arrays(pa.array(values.reshape(-1)), width))
        else:
            arrays.append(pa.array(values, f.type))
    batch = pa.RecordBatch.from_arrays(arrays, schema=schema)
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, schema) as writer:
        writer.write_batch(batch)
    return sink.getvalue().to_pybytes()


_finite32 = st.floats(-1e6, 1e6, width=32, allow_nan=False)


@st.composite
def triplet_columns(draw):
    n = draw(st.integers(0, 12))
    ints = hnp.arrays(np.int64, n, elements=st.integers(-(2**63), 2**63 - 1))
    rel1 = draw(hnp.arrays(np.int8, n))
    delta = draw(hnp.arrays(np.int16, n, elements=st.integers(1, 255)))
    rel2 = ((rel1.astype(np.int16) + delta + 128) % 256 - 128).astype(np.int8)  # never == rel1
    phi = hnp.arrays(np.float32, (n, PHI_DIM), elements=_finite32)
    return {
        "seq": draw(ints),
        "query_id": draw(ints),
        "p1_id": draw(ints),
        "p2_id": draw(ints),
        "rel1": rel1,
        "rel2": rel2,
        "phi1": draw(phi),
        "phi2": draw(phi),
    }


@settings(max_examples=40, deadline=None)
@given(triplet_columns())
def test_any_valid_block_round_trips_exactly(columns):
    block = decode_triplets(encode_triplets(TripletBlock.from_pairs(**columns)))
    assert block.rejects == [] and len(block) == len(columns["seq"])
    for name in FIELDS:
        got = getattr(block, name)
        assert got.dtype == columns[name].dtype
        assert got.tobytes() == columns[name].tobytes()
    expected_x = columns["phi1"].astype(np.float64) - columns["phi2"].astype(np.float64)
    assert block.x().dtype == np.float64 and np.array_equal(block.x(), expected_x)
    assert np.array_equal(block.y(), np.sign(columns["rel1"].astype(int) - columns["rel2"]))


def test_decoded_columns_are_zero_copy_views_and_the_table_is_read_only():
    """A version-1 message's ids are views of its buffers; its phi1 and phi2 become one
    read-only image table (one copy: the normalized form every consumer reads)."""
    block = decode_triplets(encode_triplets(TripletBlock.from_pairs(**_columns(5))))
    assert block.phi.shape == (10, PHI_DIM) and block.phi.dtype == np.float32
    assert not block.phi.flags.writeable
    assert not block.seq.flags.writeable and not block.seq.flags.owndata


def test_generator_blocks_are_learnable_deterministic_and_tie_free():
    a, b = TripletGenerator(7), TripletGenerator(7)
    for _ in range(3):
        x, y = a.query_block(), b.query_block()
        assert encode_triplets(x) == encode_triplets(y)
        assert len(set(x.query_id.tolist())) == 1 and block_key(x) == str(x.query_id[0]).encode()
    block = decode_triplets(encode_triplets(a.block(500)))
    assert (block.rel1 != block.rel2).all()
    agree = np.sign(block.x() @ a.true_weights) == block.y()
    assert agree.all()
    sizes = [len(c) for c in TripletGenerator(1).blocks(4500, block_size=2000)]
    assert sizes == [2000, 2000, 500]


def test_rows_with_non_finite_features_or_ties_are_rejected_individually():
    cols = _columns(10)
    cols["phi1"] = cols["phi1"].copy()
    cols["phi1"][2, 5] = np.nan
    cols["phi2"] = cols["phi2"].copy()
    cols["phi2"][7, 0] = np.inf
    cols["rel2"] = cols["rel2"].copy()
    cols["rel2"][4] = cols["rel1"][4]
    block = decode_triplets(_raw(cols))
    assert block.rejects == [(2, "non_finite"), (4, "tied_relevance"), (7, "non_finite")]
    keep = [i for i in range(10) if i not in (2, 4, 7)]
    assert np.array_equal(block.seq, cols["seq"][keep])
    assert np.array_equal(block.phi2, cols["phi2"][keep])
    assert np.isfinite(block.x()).all()


def _expect(reason: str, data: bytes, decode=decode_triplets) -> SchemaError:
    with pytest.raises(SchemaError) as info:
        decode(data)
    assert info.value.reason == reason
    assert isinstance(info.value, ValueError) and info.value.detail
    return info.value


def test_bad_and_truncated_bytes_are_refused():
    good = encode_triplets(TripletBlock.from_pairs(**_columns(20)))
    for data in [b"", b"\x00" * 7, b"hello world" * 10, good[: len(good) // 2], good[:-9]]:
        _expect("bad_bytes", data)


def test_unknown_version_and_foreign_schemas_are_refused():
    schema = schema_of("triplets")
    v2 = schema.with_metadata({**schema.metadata, b"rankstream.version": b"2"})
    _expect("unknown_version", _raw(_columns(), v2))
    _expect("bad_schema", _raw(_columns(), schema.remove_metadata()))
    query = encode_query(_query())
    _expect("bad_schema", query)  # a queries message on the triplets topic
    renamed = pa.schema(
        [f.with_name("s" if f.name == "seq" else f.name) for f in schema], metadata=schema.metadata
    )
    cols = _columns()
    _expect("bad_schema", _raw({**cols, "s": cols["seq"]}, renamed))
    as_float = schema.set(4, pa.field("rel1", pa.float32()))
    _expect("bad_schema", _raw({**cols, "rel1": cols["rel1"].astype(np.float32)}, as_float))


def test_wrong_phi_width_is_refused():
    schema = schema_of("triplets")
    narrow = schema.set(6, pa.field("phi1", pa.list_(pa.float32(), 35)))
    cols = _columns(4)
    _expect("wrong_width", _raw({**cols, "phi1": cols["phi1"][:, :35].copy()}, narrow))


def test_nulls_are_refused():
    schema = schema_of("triplets")
    cols = _columns(3)
    arrays = [
        pa.array(cols[f.name])
        if not pa.types.is_fixed_size_list(f.type)
        else pa.FixedSizeListArray.from_arrays(pa.array(cols[f.name].reshape(-1)), PHI_DIM)
        for f in schema
    ]
    arrays[2] = pa.array([1, None, 3], pa.int64())
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, schema) as writer:
        writer.write_batch(pa.RecordBatch.from_arrays(arrays, schema=schema))
    _expect("bad_schema", sink.getvalue().to_pybytes())


def test_oversized_messages_are_refused_before_parsing():
    data = encode_triplets(TripletBlock.from_pairs(**_columns(50)))
    with pytest.raises(SchemaError) as info:
        decode_triplets(data, max_bytes=len(data) - 1)
    assert info.value.reason == "oversized"
    _expect("oversized", b"\x00" * (MAX_MESSAGE_BYTES + 1))


def test_the_encoder_refuses_bad_input_with_value_errors():
    cols = _columns(4)
    cases = [
        ({"phi1": cols["phi1"][:, :35]}, "shape"),
        ({"phi2": np.full((4, PHI_DIM), np.nan, np.float32)}, "NaN"),
        ({"rel2": cols["rel1"]}, "tie"),
        ({"rel1": np.array([1, 2, 300, 4])}, "outside int8"),
        ({"seq": np.arange(3)}, "shape"),
        ({"p1_id": np.array([0.5, 1, 2, 3])}, "integers"),
    ]
    for change, match in cases:
        with pytest.raises(ValueError, match=match):
            encode_triplets(TripletBlock.from_pairs(**{**cols, **change}))


def _query(k: int = 8) -> JudgedQuery:
    rng = np.random.default_rng(k)
    return JudgedQuery(
        seq=11,
        query_id=4242,
        candidate_ids=rng.integers(0, 10**6, k),
        phi=rng.random((k, PHI_DIM), dtype=np.float32),
        relevance=rng.integers(0, 5, k).astype(np.int8),
        served_by="champion",
        served_version=3,
        model_versions={"opar1": 3, "uni-con": 0},
        judged=min(k, 5),
    )


def test_judged_queries_round_trip():
    q = _query()
    got = decode_query(encode_query(q))
    assert (got.seq, got.query_id, got.served_by, got.served_version, got.n_judged) == (
        11,
        4242,
        "champion",
        3,
        5,
    )
    assert got.judged.tolist() == [True] * 5 + [False] * 3  # an int n means the first n
    assert got.model_versions == {"opar1": 3, "uni-con": 0}
    assert np.array_equal(got.candidate_ids, q.candidate_ids)
    assert got.phi.dtype == np.float32 and np.array_equal(got.phi, q.phi)
    assert got.relevance.dtype == np.int8 and np.array_equal(got.relevance, q.relevance)


def test_partial_judgments_travel_as_nulls_and_flags():
    q = _query()
    relevance = np.array([2, UNJUDGED, 0, UNJUDGED, 1, 3, UNJUDGED, 0], np.int8)
    judged = relevance != UNJUDGED
    judged[5] = False  # a known grade the user did not judge (a simulator's ground truth)
    got = decode_query(encode_query(replace(q, relevance=relevance, judged=judged)))
    assert got.relevance.tolist() == relevance.tolist() and got.judged.tolist() == judged.tolist()
    assert got.graded.tolist() == (relevance != UNJUDGED).tolist() and got.n_judged == 4
    batch = pa.ipc.open_stream(encode_query(replace(q, relevance=relevance, judged=judged)))
    assert batch.schema.metadata[b"rankstream.version"] == b"2"
    column = batch.read_next_batch().column("relevance").flatten()
    assert column.null_count == 3  # on the wire an unjudged candidate is a null grade


def _query_v1(q: JudgedQuery, judged: int) -> bytes:
    """A version-1 message, as the simulator wrote them before partial judgments."""
    one = np.array([0, len(q.candidate_ids)], np.int32)
    columns = [
        pa.array([q.seq], pa.int64()),
        pa.array([q.query_id], pa.int64()),
        pa.ListArray.from_arrays(one, pa.array(q.candidate_ids)),
        pa.ListArray.from_arrays(
            one, pa.FixedSizeListArray.from_arrays(pa.array(q.phi.reshape(-1)), PHI_DIM)
        ),
        pa.ListArray.from_arrays(one, pa.array(q.relevance)),
        pa.array([q.served_by]),
        pa.array([q.served_version], pa.int64()),
        pa.array([list(q.model_versions.items())], pa.map_(pa.string(), pa.int64())),
        pa.array([judged], pa.int32()),
    ]
    schema = QUERIES_FIELDS_V1.with_metadata(
        {b"rankstream.schema": b"queries", b"rankstream.version": b"1"}
    )
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, schema) as writer:
        writer.write_batch(pa.RecordBatch.from_arrays(columns, schema=schema))
    return sink.getvalue().to_pybytes()


def test_version_1_judged_queries_still_decode():
    q = _query()
    got = decode_query(_query_v1(q, 5))
    assert got.judged.tolist() == [True] * 5 + [False] * 3 and got.graded.all()
    assert np.array_equal(got.relevance, q.relevance) and np.array_equal(got.phi, q.phi)
    _expect("bad_schema", _query_v1(q, 9), decode_query)  # judged beyond the candidates


def test_bad_judged_queries_are_refused():
    q = _query()
    with pytest.raises(ValueError, match="judged"):
        encode_query(JudgedQuery(**{**q.__dict__, "judged": 99}))
    with pytest.raises(ValueError, match="shape"):
        encode_query(JudgedQuery(**{**q.__dict__, "relevance": q.relevance[:3]}))
    with pytest.raises(ValueError, match="NaN"):
        encode_query(JudgedQuery(**{**q.__dict__, "phi": q.phi * np.nan}))
    unjudged = np.full(8, UNJUDGED, np.int8)
    with pytest.raises(ValueError, match="judged candidates must have a grade"):
        encode_query(replace(q, relevance=unjudged))
    with pytest.raises(ValueError, match="relevance must be >= 0"):
        encode_query(replace(q, relevance=np.full(8, -3, np.int8), judged=np.zeros(8, bool)))
    _expect("bad_schema", encode_triplets(TripletBlock.from_pairs(**_columns(3))), decode_query)
    _expect("bad_bytes", encode_query(q)[:-20], decode_query)


def test_dead_letters_carry_the_original_bytes_reason_and_source():
    source = Message("rs.triplets", 2, 77, b"5", b"\x01\x02garbage", 1_700_000_000_000)
    letter = decode_dead_letter(dead_letter(source.value, "bad_bytes", "not arrow", source))
    assert letter.original == source.value and letter.original_size == len(source.value)
    assert (letter.reason, letter.detail) == ("bad_bytes", "not arrow")
    assert (letter.source_topic, letter.source_partition, letter.source_offset) == (
        "rs.triplets",
        2,
        77,
    )
    assert letter.rows is None
    rows = decode_dead_letter(dead_letter(b"x", "non_finite", "2 rows", source, rows=[3, 9]))
    assert rows.rows == [3, 9]
    with pytest.raises(ValueError, match="reason"):
        dead_letter(b"x", "made_up", "", source)
    _expect(
        "bad_schema", encode_triplets(TripletBlock.from_pairs(**_columns(3))), decode_dead_letter
    )
