"""Impressions and clicks on the wire: exact round trips, and every way a message or a
row is refused (bad bytes, wrong width, NaN phi, unknown version, bad values)."""

from __future__ import annotations

import dataclasses

import numpy as np
import pyarrow as pa
import pytest

from rankstream.stream.click_schema import (
    Click,
    Impression,
    InvalidRecordError,
    clicks_fields,
    decode_clicks,
    decode_impressions,
    encode_clicks,
    encode_impressions,
    impression_key,
    impressions_fields,
)
from rankstream.stream.schema import (
    REASONS,
    SchemaError,
    dead_letter,
    decode_dead_letter,
    decode_triplets,
    schema_of,
)
from rankstream.stream.transport import Message

WIDTH = 5


def _impression(n: int = 4, seed: int = 0, width: int = WIDTH, **changes) -> Impression:
    rng = np.random.default_rng(seed)
    values = dict(
        impression_id=f"imp{seed}",
        time=1_700_000_000.25,
        model="arow",
        version=7,
        model_versions={"arow": 7, "uni_con": 1},
        candidate_ids=rng.permutation(1000)[:n].astype(np.int64),
        phi=rng.random((n, width), dtype=np.float32),
    )
    return Impression(**{**values, **changes})


def _same(a: Impression, b: Impression) -> None:
    for f in dataclasses.fields(Impression):
        x, y = getattr(a, f.name), getattr(b, f.name)
        if isinstance(x, np.ndarray) or isinstance(y, np.ndarray):
            assert x is not None and y is not None and np.array_equal(x, y), f.name
            assert np.asarray(x).dtype == np.asarray(y).dtype, f.name
        else:
            assert x == y, f.name


def _write(arrays: list[pa.Array], schema: pa.Schema) -> bytes:
    """A message written without the producer-side checks, as a foreign producer might."""
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, schema) as writer:
        writer.write_batch(pa.RecordBatch.from_arrays(arrays, schema=schema))
    return sink.getvalue().to_pybytes()


def _impression_columns(imp: Impression, phi: list | None = None) -> list[pa.Array]:
    width = imp.width
    return [
        pa.array([imp.impression_id]),
        pa.array([imp.time]),
        pa.array([imp.model]),
        pa.array([imp.version], pa.int64()),
        pa.array([list(imp.model_versions.items())], pa.map_(pa.string(), pa.int64())),
        pa.array([imp.candidate_ids.tolist()], pa.list_(pa.int64())),
        pa.array(
            [imp.phi.tolist() if phi is None else phi], pa.list_(pa.list_(pa.float32(), width))
        ),
        pa.array([None], pa.int64()),
        pa.array([None], pa.string()),
        pa.array([None], pa.float64()),
        pa.array([None], pa.string()),
        pa.array([None], pa.list_(pa.int8())),
        pa.array([[]], pa.list_(pa.string())),
    ]


# --- round trips -------------------------------------------------------------------------
def test_an_impression_round_trips_exactly_with_every_optional_field():
    plain = _impression()
    full = _impression(
        seed=1,
        query_id=-42,
        request_id="req-1",
        shown_probability=0.125,
        intervention="swap:1-4",
        teams=np.array([0, 1, -1, 0], np.int8),
        team_models=("arow", "opar1"),
    )
    decoded = decode_impressions(encode_impressions([plain, full]), width=WIDTH)
    assert decoded.rejects == []
    assert len(decoded.records) == 2
    _same(decoded.records[0], plain)
    _same(decoded.records[1], full)
    assert decoded.records[0].teams is None and decoded.records[0].team_models == ()


def test_a_message_mixing_interleaved_and_plain_impressions_round_trips():
    """The teams column is built from the arrays: each row's teams or null, in order."""
    impressions = [
        _impression(seed=seed, n=3 + seed, teams=np.arange(3 + seed) % 2 - (seed == 2),
                    team_models=("arow", "opar1"))
        if seed % 3 else _impression(seed=seed, n=3 + seed)
        for seed in range(7)
    ]  # fmt: skip
    message = encode_impressions(impressions)
    teams = pa.ipc.open_stream(message).read_all().column("teams").to_pylist()
    assert teams == [None if i.teams is None else i.teams.tolist() for i in impressions]
    decoded = decode_impressions(message, width=WIDTH)
    assert decoded.rejects == []
    for got, sent in zip(decoded.records, impressions, strict=True):
        _same(got, sent)


@pytest.mark.parametrize("count", [0, 2])
def test_the_fast_impression_writer_writes_what_pyarrows_stream_writer_writes(count):
    """encode_impressions appends a record batch to a cached schema message: the bytes
    must be exactly a standard IPC stream of the same table."""
    impressions = [
        _impression(seed=seed, teams=np.array([0, -1, 0, 0]), team_models=("a",))
        for seed in range(count)
    ] + [_impression(seed=9)]
    message = encode_impressions(impressions)
    table = pa.ipc.open_stream(message).read_all()
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema) as writer:
        writer.write_table(table)
    assert message == sink.getvalue().to_pybytes()


def test_the_wire_layout_is_the_documented_one():
    message = encode_impressions([_impression()])
    schema = pa.ipc.open_stream(message).schema
    assert schema.remove_metadata().equals(impressions_fields(WIDTH))
    assert schema.metadata == {
        b"rankstream.schema": b"impressions",
        b"rankstream.version": b"1",
        b"rankstream.phi_dim": str(WIDTH).encode(),
    }
    clicks = pa.ipc.open_stream(encode_clicks([Click("a", 3)])).schema
    assert clicks.remove_metadata().equals(clicks_fields())
    assert clicks.metadata == {b"rankstream.schema": b"clicks", b"rankstream.version": b"1"}
    assert impression_key("abc") == b"abc"


def test_clicks_round_trip_including_the_no_click_row():
    clicks = [
        Click("imp0", 17, position=2, time=1.5, dwell=3.25),
        Click("imp0", 4),
        Click.no_click("imp1", time=9.0),
    ]
    decoded = decode_clicks(encode_clicks(clicks))
    assert decoded.rejects == [] and decoded.records == clicks
    assert [c.clicked for c in decoded.records] == [True, True, False]
    assert decoded.records[2].candidate_id is None and decoded.records[2].position is None


# --- the records refuse bad values (the one place of validation) ---------------------------
@pytest.mark.parametrize(
    ("changes", "field", "reason"),
    [
        ({"impression_id": ""}, "impression_id", "bad_schema"),
        ({"impression_id": "a b"}, "impression_id", "bad_schema"),
        ({"time": float("nan")}, "time", "bad_schema"),
        ({"model": ""}, "model", "bad_schema"),
        ({"version": -1}, "version", "bad_schema"),
        ({"version": True}, "version", "bad_schema"),
        ({"model_versions": {"arow": -3}}, "model_versions", "bad_schema"),
        ({"candidate_ids": np.array([1, 1, 2, 3])}, "candidate_ids", "bad_schema"),
        ({"candidate_ids": np.array([1.5, 2, 3, 4])}, "candidate_ids", "bad_schema"),
        ({"phi": np.full((4, WIDTH), np.nan, np.float32)}, "phi", "non_finite"),
        ({"phi": np.full((4, WIDTH), 1e39)}, "phi", "non_finite"),
        ({"phi": np.zeros((3, WIDTH))}, "phi", "bad_schema"),
        ({"shown_probability": 0.0}, "shown_probability", "bad_schema"),
        ({"shown_probability": 1.5}, "shown_probability", "bad_schema"),
        ({"teams": np.array([0, 0, 0])}, "teams", "bad_schema"),
        ({"teams": np.array([0, 1, 0, 0]), "team_models": ("arow",)}, "teams", "bad_schema"),
        ({"request_id": "x" * 201}, "request_id", "bad_schema"),
    ],
)
def test_an_impression_with_a_bad_value_is_refused_naming_the_field(changes, field, reason):
    with pytest.raises(InvalidRecordError) as caught:
        _impression(**changes)
    assert caught.value.field == field and caught.value.reason == reason


@pytest.mark.parametrize(
    ("args", "field"),
    [
        (("", 1), "impression_id"),
        (("a", True), "candidate_id"),
        (("a", 1, 0), "position"),
        (("a", 1, 2**31), "position"),
        (("a", 1, 1, float("inf")), "time"),
        (("a", 1, 1, 1.0, -0.5), "dwell"),
        (("a", None, 3), "candidate_id"),  # a no-click row has no position
    ],
)
def test_a_click_with_a_bad_value_is_refused_naming_the_field(args, field):
    with pytest.raises(InvalidRecordError) as caught:
        Click(*args)
    assert caught.value.field == field


# --- whole messages refused --------------------------------------------------------------
@pytest.mark.parametrize("data", [b"", b"not arrow at all", None])
def test_bad_bytes_are_refused(data):
    good = encode_impressions([_impression()])
    data = good[: len(good) // 2] if data is None else data
    for decode in (lambda d: decode_impressions(d, width=WIDTH), decode_clicks):
        with pytest.raises(SchemaError) as caught:
            decode(data)
        assert caught.value.reason == "bad_bytes"


def test_a_message_of_another_width_is_refused_as_wrong_width():
    message = encode_impressions([_impression(width=WIDTH + 1)])
    with pytest.raises(SchemaError) as caught:
        decode_impressions(message, width=WIDTH)
    assert caught.value.reason == "wrong_width"
    # the metadata agrees with the reader but the phi field does not: wrong width too
    schema = impressions_fields(WIDTH + 1).with_metadata(
        {"rankstream.schema": "impressions", "rankstream.version": "1",
         "rankstream.phi_dim": str(WIDTH)}
    )  # fmt: skip
    data = _write(_impression_columns(_impression(width=WIDTH + 1)), schema)
    with pytest.raises(SchemaError) as caught:
        decode_impressions(data, width=WIDTH)
    assert caught.value.reason == "wrong_width"


@pytest.mark.parametrize("version", [b"0", b"2", b"x", None])
def test_an_unknown_version_is_refused(version):
    metadata = {b"rankstream.schema": b"clicks"}
    if version is not None:
        metadata[b"rankstream.version"] = version
    schema = clicks_fields().with_metadata(metadata)
    columns = [pa.array(["a"]), pa.array([1], pa.int64()), pa.array([1], pa.int32()),
               pa.array([1.0]), pa.array([1.0])]  # fmt: skip
    with pytest.raises(SchemaError) as caught:
        decode_clicks(_write(columns, schema))
    assert caught.value.reason == "unknown_version"


def test_another_kind_or_other_fields_are_bad_schema():
    with pytest.raises(SchemaError) as caught:
        decode_clicks(encode_impressions([_impression()]))
    assert caught.value.reason == "bad_schema"
    with pytest.raises(SchemaError) as caught:
        decode_triplets(encode_clicks([Click("a", 1)]))
    assert caught.value.reason == "bad_schema"
    schema = pa.schema([("impression_id", pa.string()), ("candidate_id", pa.int32())])
    schema = schema.with_metadata({"rankstream.schema": "clicks", "rankstream.version": "1"})
    with pytest.raises(SchemaError) as caught:
        decode_clicks(_write([pa.array(["a"]), pa.array([1], pa.int32())], schema))
    assert caught.value.reason == "bad_schema"


def test_a_null_impression_id_is_bad_schema():
    schema = schema_of("clicks")
    columns = [pa.array([None], pa.string()), pa.array([1], pa.int64()),
               pa.array([None], pa.int32()), pa.array([None], pa.float64()),
               pa.array([None], pa.float64())]  # fmt: skip
    with pytest.raises(SchemaError) as caught:
        decode_clicks(_write(columns, schema))
    assert caught.value.reason == "bad_schema"


# --- bad rows: left out by their row number, the others kept ---------------------------------
def test_an_impression_with_nan_phi_is_rejected_and_its_neighbours_kept():
    good = _impression(seed=1)
    bad = _impression(seed=2)
    phi = bad.phi.tolist()
    phi[1][0] = float("nan")
    schema = schema_of("impressions", WIDTH)
    columns = [
        pa.concat_arrays([a, b])
        for a, b in zip(_impression_columns(good), _impression_columns(bad, phi=phi), strict=True)
    ]
    decoded = decode_impressions(_write(columns, schema), width=WIDTH)
    assert [imp.impression_id for imp in decoded.records] == ["imp1"]
    assert [(row, reason) for row, reason, _ in decoded.rejects] == [(1, "non_finite")]


def test_click_rows_with_bad_values_are_rejected_by_row():
    schema = schema_of("clicks")
    columns = [
        pa.array(["a", "b", "c", "d"]),
        pa.array([1, 2, None, 4], pa.int64()),
        pa.array([1, 0, 2, None], pa.int32()),
        pa.array([None, None, None, float("nan")]),
        pa.array([0.5, None, None, None]),
    ]
    decoded = decode_clicks(_write(columns, schema))
    assert decoded.records == [Click("a", 1, 1, None, 0.5)]
    assert [(row, reason) for row, reason, _ in decoded.rejects] == [
        (1, "bad_schema"), (2, "bad_schema"), (3, "bad_schema"),
    ]  # fmt: skip


def test_the_joins_reasons_are_dead_letter_reasons():
    assert {"unknown_impression", "unknown_candidate", "late"} <= set(REASONS)
    source = Message("rankstream.clicks", 0, 12, b"a", b"x", 0)
    letter = decode_dead_letter(dead_letter(b"x", "late", "after the window", source))
    assert letter.reason == "late" and letter.source_offset == 12
