"""Triplets wire version 3: a per-triplet importance weight (the click join's output).

Version 3 is written only when some weight is not 1, so judged feedback stays version 2
byte for byte; a reader that knows versions 1-2 refuses version 3 (`unknown_version`)."""

from __future__ import annotations

import dataclasses

import numpy as np
import pyarrow as pa
import pytest

from rankstream.ranking import learners
from rankstream.ranking.triplets import TripletBlock
from rankstream.stream import schema
from rankstream.stream.schema import SchemaError, decode_triplets, encode_triplets

D = 6


def _block(n: int = 5, weight: np.ndarray | None = None, seed: int = 0) -> TripletBlock:
    rng = np.random.default_rng(seed)
    phi = rng.standard_normal((4, D)).astype(np.float32)
    p1 = np.array([0, 0, 1, 2, 3][:n], np.int32)
    p2 = np.array([1, 2, 3, 3, 0][:n], np.int32)
    return TripletBlock(
        seq=np.arange(10, 10 + n, dtype=np.int64),
        query_id=np.full(n, 7, np.int64),
        p1=p1,
        p2=p2,
        rel1=np.ones(n, np.int8),
        rel2=np.zeros(n, np.int8),
        image_id=np.array([100, 101, 102, 103], np.int64),
        phi=phi,
        weight=weight,
    )


def _version(data: bytes) -> bytes:
    return pa.ipc.open_stream(data).schema.metadata[b"rankstream.version"]


def test_weights_round_trip_in_version_3() -> None:
    w = np.array([1.0, 2.5, 0.125, 10.0, 1.0], np.float32)
    data = encode_triplets(_block(weight=w))
    assert _version(data) == b"3"
    back = decode_triplets(data, width=D)
    assert back.weight is not None and back.weight.dtype == np.float32
    np.testing.assert_array_equal(back.weight, w)
    assert back.seq.tolist() == list(range(10, 15))
    assert back.p1_id.tolist() == [100, 100, 101, 102, 103]


def test_unit_weights_are_version_2_byte_for_byte() -> None:
    plain = encode_triplets(_block())
    assert _version(plain) == b"2"
    assert encode_triplets(_block(weight=np.ones(5, np.float32))) == plain
    assert decode_triplets(plain, width=D).weight is None  # a v2 triplet weighs 1


def test_an_old_reader_refuses_version_3(monkeypatch: pytest.MonkeyPatch) -> None:
    data = encode_triplets(_block(weight=np.full(5, 2.0, np.float32)))
    monkeypatch.setitem(schema.READ_VERSIONS, "triplets", (1, 2))  # the reader before v3
    with pytest.raises(SchemaError) as refused:
        decode_triplets(data, width=D)
    assert refused.value.reason == schema.UNKNOWN_VERSION


@pytest.mark.parametrize("bad", [0.0, -1.0, np.nan, np.inf, 1e39])
def test_the_writer_refuses_weights_that_are_not_finite_and_positive(bad: float) -> None:
    w = np.ones(5)
    w[2] = bad
    with pytest.raises(ValueError, match="weight"):
        encode_triplets(_block(weight=w))


def _with_value(data: bytes, field: str, index: int, value: float) -> bytes:
    """`data` with one float of list column `field` (weight or phi, flattened) set."""
    table = pa.ipc.open_stream(data).read_all()
    column = table.column(field).combine_chunks()
    leaf = column.values
    if pa.types.is_fixed_size_list(leaf.type):
        floats = leaf.values.to_numpy().copy()
        floats[index] = value
        leaf = pa.FixedSizeListArray.from_arrays(pa.array(floats), leaf.type.list_size)
    else:
        floats = leaf.to_numpy().copy()
        floats[index] = value
        leaf = pa.array(floats, pa.float32())
    column = pa.ListArray.from_arrays(column.offsets, leaf)
    table = table.set_column(table.schema.get_field_index(field), field, column)
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema) as writer:
        writer.write_table(table)
    return sink.getvalue().to_pybytes()


@pytest.mark.parametrize(("bad", "reason"), [(0.0, "bad_schema"), (np.nan, "non_finite")])
def test_the_reader_refuses_a_message_with_a_bad_weight(bad: float, reason: str) -> None:
    good = encode_triplets(_block(weight=np.full(5, 2.0, np.float32)))
    with pytest.raises(SchemaError) as refused:
        decode_triplets(_with_value(good, "weight", 1, bad), width=D)
    assert refused.value.reason == reason


def test_version_2_cannot_carry_weights() -> None:
    with pytest.raises(ValueError, match="version 3"):
        encode_triplets(_block(weight=np.full(5, 2.0)), version=2)


def test_rejected_rows_keep_the_weights_of_the_others() -> None:
    data = encode_triplets(_block(weight=np.arange(1, 6, dtype=np.float32)))
    data = _with_value(data, "phi", 3 * D, np.nan)  # image 103: triplets 2, 3, 4 use it
    back = decode_triplets(data, width=D)
    assert [r for r, _ in back.rejects] == [2, 3, 4]
    assert back.weight.tolist() == [1.0, 2.0]


def test_every_learner_that_takes_weights_names_its_weighted_form() -> None:
    for spec in map(learners.learner, learners.names()):  # the triplet learners
        assert learners.takes_weights(spec)
        assert spec.weighted_update, spec.name


@pytest.mark.parametrize("algo", ["opr", "opar1", "opar2", "ogdr", "arow"])
def test_the_worker_learns_version_3_as_click_triplets(algo: str) -> None:
    """Through the wire and `learn_together` (the online worker's pass): a version-3
    message (weights 2, or all 1 as the click join writes a session clicked only at rank
    1) is click triplets, learned bit for bit as `learn_many_together(..., clicks=True)`
    (the linear rules' regularized reading, ranking/online.py); a version-2 one as the
    papers' rule."""
    from rankstream.ranking.online import OnlineRanker, learn_many_together, uni_con_direction
    from rankstream.workers.checkpoint import TrackedModel, learn_together

    params = {"C": 0.05, "eta": 0.01, "r": 2.0}
    rng = np.random.default_rng(5)
    blocks = [_block(seed=int(s)) for s in rng.integers(0, 1000, 30)]
    for weight in (2.0, 1.0):
        worker = TrackedModel("w", algo, dict(params), scaler_rows=1)
        judged = TrackedModel("j", algo, dict(params), scaler_rows=1)
        direct: OnlineRanker | None = None
        for offset, block in enumerate(blocks):
            data = encode_triplets(dataclasses.replace(block, weight=np.full(5, weight)), version=3)
            clicks = decode_triplets(data, width=D)
            plain = decode_triplets(encode_triplets(block), width=D)
            assert clicks.weight is not None and plain.weight is None
            assert learn_together([worker], "t", 0, offset, clicks)[0] >= 0
            assert learn_together([judged], "t", 0, offset, plain)[0] >= 0
            if direct is None:  # the worker's ranker starts on the first block's scaler,
                assert worker.ranker is not None  # anchored at Uni-Con over its candidates
                scaler = worker.ranker.scaler
                direct = OnlineRanker(algo=algo, scaler=scaler, **params)
                direct.anchor_towards(uni_con_direction(scaler, clicks.phi))
            learn_many_together(
                [direct], clicks.phi, clicks.p1, clicks.p2, clicks.y(), clicks.weight,
                clicks=True,
            )  # fmt: skip
        assert direct is not None and worker.n_updates > 0
        assert worker.weights.tobytes() == direct.weights.tobytes()
        assert worker.offsets == {"t": {0: len(blocks)}}
        if algo != "arow":  # AROW has no regularized reading: the same either way at weight 1
            assert worker.weights.tobytes() != judged.weights.tobytes()


def test_a_recording_leaves_weighted_triplets_out_and_counts_them(tmp_path) -> None:
    """Recordings (format 2) have no weight column: a weighted message is skipped and
    counted, never recorded to be replayed as unweighted pairs."""
    from rankstream.stream.recording_writer import RecordingWriter
    from rankstream.stream.transport import Message

    writer = RecordingWriter(tmp_path, "triplets", "t.triplets", width=D)
    plain = encode_triplets(_block())
    weighted = encode_triplets(_block(weight=np.full(5, 3.0, np.float32)))
    for offset, value in enumerate([plain, weighted]):
        writer.add(Message("t.triplets", 0, offset, b"7", value, 0))
    assert (writer.counts.messages, writer.counts.skipped_messages) == (1, 1)
    assert writer.counts.rows == 5
