"""Wire schema: exact round trips of both triplet versions, and every way a message can be
refused (the whole message, or single triplets by their index in it)."""

from __future__ import annotations

import dataclasses
from dataclasses import replace

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from rankstream.harness.generator import TripletGenerator
from rankstream.ranking.triplets import TripletBlock
from rankstream.stream.schema import (
    MAX_MESSAGE_BYTES,
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
    queries_fields,
    schema_of,
)
from rankstream.stream.settings import DEFAULT_PHI_DIM
from rankstream.stream.transport import Message
from rankstream.stream.triplet_groups import MAX_GROUP_TRIPLETS

PHI_DIM = DEFAULT_PHI_DIM
FIELDS = ("seq", "query_id", "p1_id", "p2_id", "rel1", "rel2", "phi1", "phi2")


def _columns(n: int = 30, seed: int = 0) -> dict[str, np.ndarray]:
    cols = TripletGenerator(seed).block(n)
    return {name: getattr(cols, name) for name in FIELDS}


def _write(arrays: list[pa.Array], schema: pa.Schema) -> bytes:
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, schema) as writer:
        writer.write_batch(pa.RecordBatch.from_arrays(arrays, schema=schema))
    return sink.getvalue().to_pybytes()


def _raw(columns: dict[str, np.ndarray], schema: pa.Schema | None = None) -> bytes:
    """A version-1 message written without the producer-side checks, as a buggy or
    foreign producer might."""
    schema = schema or schema_of("triplets", version=1)
    arrays = []
    for f in schema:
        values = columns[f.name]
        if pa.types.is_fixed_size_list(f.type):
            width = f.type.list_size
            arrays.append(pa.FixedSizeListArray.from_arrays(pa.array(values.reshape(-1)), width))
        else:
            arrays.append(pa.array(values, f.type))
    return _write(arrays, schema)


def _raw_groups(groups: list[dict], schema: pa.Schema | None = None) -> bytes:
    """A version-2 message of the given groups (dicts of per-group values and lists),
    written without the producer-side checks."""
    schema = schema or schema_of("triplets")
    arrays = []
    for f in schema:
        values = [g[f.name] for g in groups]
        if f.name == "phi":
            width = f.type.value_type.list_size
            flat = np.concatenate([np.asarray(v, np.float32).reshape(-1) for v in values])
            offsets = np.cumsum([0] + [len(v) for v in values]).astype(np.int32)
            inner = pa.FixedSizeListArray.from_arrays(pa.array(flat, pa.float32()), width)
            arrays.append(pa.ListArray.from_arrays(pa.array(offsets), inner))
        else:
            arrays.append(pa.array([np.asarray(v).tolist() for v in values], f.type))
    return _write(arrays, schema)


def _group(n_images: int = 4, seed: int = 0, query_id: int = 7, first_seq: int = 100) -> dict:
    """One group: images 0..n-1, every pair (a, b) with a < b and different grades."""
    rng = np.random.default_rng(seed)
    grades = np.arange(n_images, dtype=np.int8) % 3
    p1, p2 = np.nonzero(grades[:, None] != grades[None, :])
    keep = p1 < p2
    p1, p2 = p1[keep].astype(np.int16), p2[keep].astype(np.int16)
    return {
        "query_id": query_id,
        "first_seq": first_seq,
        "image_id": rng.integers(0, 10**6, n_images),
        "phi": rng.random((n_images, PHI_DIM), dtype=np.float32),
        "p1": p1,
        "p2": p2,
        "rel1": grades[p1],
        "rel2": grades[p2],
    }


def _same_triplets(a: TripletBlock, b: TripletBlock) -> None:
    """Equal triplets in the pair layout (what every consumer learns from)."""
    for name in FIELDS:
        x, y = getattr(a, name), getattr(b, name)
        assert x.tobytes() == y.tobytes(), name


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
@given(triplet_columns(), st.sampled_from([1, 2]))
def test_any_valid_block_round_trips_exactly_in_both_versions(columns, version):
    block = decode_triplets(encode_triplets(TripletBlock.from_pairs(**columns), version=version))
    assert block.rejects == [] and len(block) == len(columns["seq"])
    for name in FIELDS:
        got = getattr(block, name)
        assert got.dtype == columns[name].dtype
        assert got.tobytes() == columns[name].tobytes()
    expected_x = columns["phi1"].astype(np.float64) - columns["phi2"].astype(np.float64)
    assert block.x().dtype == np.float64 and np.array_equal(block.x(), expected_x)
    assert np.array_equal(block.y(), np.sign(columns["rel1"].astype(int) - columns["rel2"]))


@settings(max_examples=30, deadline=None)
@given(
    st.integers(0, 40),
    st.integers(1, 6),
    st.lists(st.integers(0, 39), max_size=4),
    st.lists(st.integers(0, 39), max_size=3),
    st.integers(0, 2**31),
)
def test_version_2_keeps_every_triplet_and_sends_each_distinct_image_once(
    n, n_queries, gaps, duplicates, seed
):
    """Groups split at a new query or a gap in seq; bit-identical table rows merge."""
    rng = np.random.default_rng(seed)
    m = 12
    image_id = rng.integers(0, 5, m)  # few ids: repeated ids with different phi stay apart
    phi = rng.random((m, PHI_DIM), dtype=np.float32)
    for d in duplicates:  # row d copies row 0 exactly: merged on the wire
        image_id[d % m], phi[d % m] = image_id[0], phi[0]
    seq = np.arange(n, dtype=np.int64) + np.isin(np.arange(n), gaps).cumsum() * 10
    rel1 = rng.integers(0, 3, n).astype(np.int8)
    block = TripletBlock(
        seq=seq,
        query_id=np.sort(rng.integers(0, n_queries, n)),
        p1=rng.integers(0, m, n).astype(np.int32),
        p2=rng.integers(0, m, n).astype(np.int32),
        rel1=rel1,
        rel2=(rel1 + 1).astype(np.int8),
        image_id=image_id,
        phi=phi,
    )
    decoded = decode_triplets(encode_triplets(block))
    _same_triplets(decoded, block)
    groups = pa.ipc.open_stream(encode_triplets(block)).read_all()
    breaks = (np.diff(seq) != 1) | (np.diff(block.query_id) != 0)
    assert groups.num_rows == (1 + int(breaks.sum()) if n else 0)
    for row in groups.to_pylist():  # within a group, no two images are bit-identical
        rows = {
            (i, np.asarray(p, np.float32).tobytes())
            for i, p in zip(row["image_id"], row["phi"], strict=True)
        }
        assert len(rows) == len(row["image_id"])


def test_simulator_shaped_blocks_take_a_quarter_of_version_1s_bytes_or_less():
    blocks = [TripletGenerator(seed=3).query_block() for _ in range(40)]
    n = sum(len(b) for b in blocks)
    v1 = sum(len(encode_triplets(b, version=1)) for b in blocks) / n
    v2 = sum(len(encode_triplets(b)) for b in blocks) / n
    assert v1 > 322 and v2 <= v1 / 4
    for b in blocks:  # one group per judged query, its 50 images once
        table = pa.ipc.open_stream(encode_triplets(b)).read_all()
        assert table.num_rows == 1 and len(table.column("image_id")[0]) == len(b.image_id) == 50


def test_a_long_run_of_one_query_is_cut_into_groups_that_fit_int16_rows():
    n = MAX_GROUP_TRIPLETS + 5
    block = TripletGenerator(seed=2).block(n, query_ids=np.zeros(n, np.int64))
    table = pa.ipc.open_stream(encode_triplets(block)).read_all()
    assert table.num_rows == 2 and table.column("first_seq").to_pylist() == [0, n - 5]
    _same_triplets(decode_triplets(encode_triplets(block)), block)


def test_decoded_version_2_columns_are_zero_copy_read_only_views():
    block = TripletGenerator(seed=4).query_block()
    data = encode_triplets(block)
    decoded = decode_triplets(data)
    for name in ("image_id", "phi", "rel1", "rel2"):
        array = getattr(decoded, name)
        assert not array.flags.writeable and not array.flags.owndata, name
    assert decoded.phi.shape == (50, PHI_DIM) and decoded.phi.dtype == np.float32
    assert np.shares_memory(decoded.phi, np.frombuffer(data, np.uint8))


def test_version_1_phi_becomes_one_read_only_table():
    """A version-1 message's ids are views of its buffers; its phi1 and phi2 become one
    read-only image table (one copy: the normalized form every consumer reads)."""
    block = decode_triplets(encode_triplets(TripletBlock.from_pairs(**_columns(5)), version=1))
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


def test_version_1_rows_with_non_finite_features_or_ties_are_rejected_individually():
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
    assert np.isfinite(block.phi).all()


def test_a_non_finite_image_rejects_every_triplet_that_references_it():
    """Rejects name triplets by their position in the whole message (all groups)."""
    first, second = _group(4, seed=1), _group(5, seed=2, query_id=8, first_seq=500)
    second["phi"] = second["phi"].copy()
    second["phi"][3, 0] = np.nan  # image 3 of the second group
    second["rel2"] = second["rel2"].copy()
    tie = int(np.flatnonzero((second["p1"] != 3) & (second["p2"] != 3))[0])
    second["rel2"][tie] = second["rel1"][tie]
    block = decode_triplets(_raw_groups([first, second]))
    n1 = len(first["p1"])
    uses_3 = (second["p1"] == 3) | (second["p2"] == 3)
    expected = sorted(
        [(n1 + int(i), "non_finite") for i in np.flatnonzero(uses_3)]
        + [(n1 + tie, "tied_relevance")]
    )
    assert block.rejects == expected
    kept = ~uses_3
    kept[tie] = False
    assert np.array_equal(
        block.seq, np.concatenate([100 + np.arange(n1), 500 + np.flatnonzero(kept)])
    )
    assert np.isfinite(block.phi).all() and len(block.image_id) == 4 + 4  # image 3 dropped


def _expect(reason: str, data: bytes, decode=decode_triplets, **kwargs) -> SchemaError:
    with pytest.raises(SchemaError) as info:
        decode(data, **kwargs)
    assert info.value.reason == reason
    assert isinstance(info.value, ValueError) and info.value.detail
    return info.value


def test_bad_and_truncated_bytes_are_refused():
    good = encode_triplets(TripletBlock.from_pairs(**_columns(20)))
    for data in [b"", b"\x00" * 7, b"hello world" * 10, good[: len(good) // 2], good[:-9]]:
        _expect("bad_bytes", data)


def test_unknown_version_and_foreign_schemas_are_refused():
    v1 = schema_of("triplets", version=1)
    v4 = v1.with_metadata({**v1.metadata, b"rankstream.version": b"4"})
    assert "knows version(s) 1, 2, 3" in str(_expect("unknown_version", _raw(_columns(), v4)))
    v2 = schema_of("triplets")
    as_v4 = v2.with_metadata({**v2.metadata, b"rankstream.version": b"4"})
    _expect("unknown_version", _raw_groups([_group()], as_v4))
    as_v3 = v2.with_metadata({**v2.metadata, b"rankstream.version": b"3"})
    _expect("bad_schema", _raw_groups([_group()], as_v3))  # v3 without its weight column
    _expect("bad_schema", _raw(_columns(), v1.remove_metadata()))
    _expect("bad_schema", _raw_groups([_group()], v2.remove_metadata()))
    query = encode_query(_query())
    _expect("bad_schema", query)  # a queries message on the triplets topic
    renamed = pa.schema(
        [f.with_name("s" if f.name == "seq" else f.name) for f in v1], metadata=v1.metadata
    )
    cols = _columns()
    _expect("bad_schema", _raw({**cols, "s": cols["seq"]}, renamed))
    as_float = v1.set(4, pa.field("rel1", pa.float32()))
    _expect("bad_schema", _raw({**cols, "rel1": cols["rel1"].astype(np.float32)}, as_float))
    as_pairs = v2.with_metadata({**v2.metadata, b"rankstream.version": b"1"})
    _expect("bad_schema", _raw_groups([_group()], as_pairs))  # v2 fields, v1 stamp


def test_version_2_groups_that_contradict_themselves_are_refused():
    outside = _group(4)
    outside["p2"] = outside["p2"].copy()
    outside["p2"][0] = 4  # only images 0..3
    _expect("bad_schema", _raw_groups([outside]))
    negative = {**_group(4), "p1": -_group(4)["p1"] - 1}
    _expect("bad_schema", _raw_groups([negative]))
    short = {**_group(4), "rel2": _group(4)["rel2"][:-1]}
    _expect("bad_schema", _raw_groups([short]))
    fewer_phi = {**_group(4), "phi": _group(4)["phi"][:3]}
    _expect("bad_schema", _raw_groups([fewer_phi]))
    overflow = {**_group(4), "first_seq": 2**63 - 3}
    _expect("bad_schema", _raw_groups([overflow]))
    schema = schema_of("triplets")
    no_width = schema.with_metadata(
        {k: v for k, v in schema.metadata.items() if k != b"rankstream.phi_dim"}
    )
    _expect("bad_schema", _raw_groups([_group()], no_width))
    not_a_width = schema.with_metadata({**schema.metadata, b"rankstream.phi_dim": b"wide"})
    _expect("bad_schema", _raw_groups([_group()], not_a_width))


def test_messages_of_another_width_are_refused_as_wrong_width():
    narrow_v1 = schema_of("triplets", width=35, version=1)
    cols = _columns(4)
    narrow = {**cols, "phi1": cols["phi1"][:, :35].copy(), "phi2": cols["phi2"][:, :35].copy()}
    _expect("wrong_width", _raw(narrow, narrow_v1))
    block = TripletGenerator(seed=5, width=8).query_block()
    assert decode_triplets(encode_triplets(block), width=8).dim == 8
    error = _expect("wrong_width", encode_triplets(block))  # an 8-wide message, a 36 reader
    assert "8" in error.detail and "36" in error.detail
    _expect("wrong_width", encode_triplets(TripletBlock.from_pairs(**cols)), width=8)
    _expect("wrong_width", encode_triplets(block, version=1))
    schema = schema_of("triplets")
    lying = schema.with_metadata({**schema.metadata, b"rankstream.phi_dim": b"8"})
    _expect("wrong_width", _raw_groups([_group()], lying))


def test_nulls_are_refused():
    schema = schema_of("triplets", version=1)
    cols = _columns(3)
    arrays = [
        pa.array(cols[f.name])
        if not pa.types.is_fixed_size_list(f.type)
        else pa.FixedSizeListArray.from_arrays(pa.array(cols[f.name].reshape(-1)), PHI_DIM)
        for f in schema
    ]
    arrays[2] = pa.array([1, None, 3], pa.int64())
    _expect("bad_schema", _write(arrays, schema))
    group = _group()
    v2 = schema_of("triplets")
    arrays = [
        pa.array([group["query_id"]], pa.int64()),
        pa.array([None], pa.int64()),
        *(pa.array([np.asarray(group[f.name]).tolist()], f.type) for f in list(v2)[2:3]),
    ]
    phi = pa.FixedSizeListArray.from_arrays(pa.array(group["phi"].reshape(-1)), PHI_DIM)
    arrays.append(pa.ListArray.from_arrays(pa.array([0, 4], pa.int32()), phi))
    arrays += [pa.array([np.asarray(group[f.name]).tolist()], f.type) for f in list(v2)[4:]]
    _expect("bad_schema", _write(arrays, v2))


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
    for version in (1, 2):
        for change, match in cases:
            with pytest.raises(ValueError, match=match):
                encode_triplets(TripletBlock.from_pairs(**{**cols, **change}), version=version)
    block = TripletBlock.from_pairs(**cols)
    with pytest.raises(ValueError, match="index the 8 rows"):
        encode_triplets(dataclasses.replace(block, p2=block.p2 + 1))
    with pytest.raises(ValueError, match="version 4"):
        encode_triplets(block, version=4)


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
    schema = queries_fields(PHI_DIM, 1).with_metadata(
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


def test_judged_queries_carry_their_width_and_are_refused_at_another():
    q = dataclasses.replace(_query(), phi=np.random.default_rng(1).random((8, 8), np.float32))
    data = encode_query(q)
    metadata = pa.ipc.open_stream(data).schema.metadata
    assert metadata[b"rankstream.phi_dim"] == b"8" and metadata[b"rankstream.version"] == b"2"
    assert np.array_equal(decode_query(data, width=8).phi, q.phi)
    assert "36" in _expect("wrong_width", data, decode_query).detail
    _expect("wrong_width", encode_query(_query()), decode_query, width=8)


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


def test_decoding_never_imports_pandas(tmp_path):
    """pyarrow's to_numpy imports pandas when it is installed (~0.5 s of a process's
    start); decoding uses buffer views instead (encoding is the producers' cost)."""
    import subprocess
    import sys

    message = tmp_path / "message.arrow"
    message.write_bytes(encode_triplets(TripletGenerator(seed=0).query_block()))
    code = (
        "import sys\n"
        "from pathlib import Path\n"
        "from rankstream.stream.schema import decode_triplets\n"
        f"block = decode_triplets(Path({str(message)!r}).read_bytes())\n"
        "assert len(block) > 0 and block.phi.shape[0] > 0\n"
        "print('pandas' in sys.modules)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "False"
