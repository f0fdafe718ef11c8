"""Judged queries in a recording, merged replay order, and recorded pace."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from rankstream.harness.generator import TripletGenerator
from rankstream.stream.embedded import EmbeddedTransport
from rankstream.stream.recording_files import RecordingError, log_paths
from rankstream.stream.recording_reader import iter_messages
from rankstream.stream.recording_replay import replay_log
from rankstream.stream.recording_writer import RecordingWriter
from rankstream.stream.schema import (
    JudgedQuery,
    block_key,
    decode_query,
    encode_query,
    encode_triplets,
)
from rankstream.stream.settings import DEFAULT_PHI_DIM as PHI_DIM
from rankstream.stream.transport import Message

T0 = 1_700_000_000_000


def _query(seq: int) -> bytes:
    rng = np.random.default_rng(seq)
    return encode_query(
        JudgedQuery(
            seq=seq,
            query_id=100 + seq,
            candidate_ids=rng.integers(0, 10**6, 8),
            phi=rng.random((8, PHI_DIM), dtype=np.float32),
            relevance=rng.integers(0, 5, 8).astype(np.int8),
            served_by="champion",
            served_version=1,
            model_versions={"opar1": 1},
            judged=5,
        )
    )


def _record(tmp_path):
    """4 triplet blocks at t0+0,200,400,600 ms and 3 queries at t0+100,300,500 ms."""
    triplets = RecordingWriter(tmp_path, "triplets", "rs.triplets")
    for i, block in enumerate(TripletGenerator(seed=1).blocks(400, 100)):
        triplets.add(
            Message("rs.triplets", 0, i, block_key(block), encode_triplets(block), T0 + 200 * i)
        )
    triplets.commit()
    queries = RecordingWriter(tmp_path, "queries", "rs.queries")
    for i in range(3):
        queries.add(Message("rs.queries", 0, i, b"q", _query(i), T0 + 100 + 200 * i))
    queries.add(Message("rs.queries", 0, 3, b"q", b"garbage", T0 + 700))  # left out
    queries.commit()
    assert queries.counts.skipped_messages == 1
    return tmp_path


def test_replay_merges_kinds_by_time_keeps_keys_and_paces(tmp_path):
    directory = _record(tmp_path)
    transport = EmbeddedTransport()
    now = [100.0]  # a fake clock that only the fake sleep advances
    sleeps: list[float] = []

    def sleep(seconds: float) -> None:
        sleeps.append(seconds)
        now[0] += seconds

    counts = replay_log(
        transport,
        directory,
        {"triplets": "a.t", "queries": "a.q"},
        speed=2.0,
        sleep=sleep,
        clock=lambda: now[0],
    )
    assert counts.messages == {"triplets": 4, "queries": 3} and counts.rows == 403
    # Merged by time, one message every 100 recorded ms, at 2x: a 50 ms wait before each
    # but the first, and the run lasts the recording's 600 ms / 2.
    assert sleeps == pytest.approx([0.05] * 6) and counts.seconds == pytest.approx(0.3)
    consumer = transport.consumer()
    consumer.assign([("a.t", 0), ("a.q", 0)])
    got = consumer.poll(timeout_ms=10, max_records=100)
    assert [m.key for m in got if m.topic == "a.q"] == [b"q"] * 3
    assert [decode_query(m.value).seq for m in got if m.topic == "a.q"] == [0, 1, 2]
    with pytest.raises(ValueError, match="speed"):
        replay_log(transport, directory, {"queries": "a.q"}, speed=0.0)


def test_bad_query_bytes_are_reported_with_file_and_row(tmp_path):
    directory = _record(tmp_path)
    path = log_paths(directory, "queries")[0]
    table = pq.read_table(path)
    values = table.column("value").to_pylist()
    values[1] = values[1][:-30]  # a truncated Arrow message
    table = table.set_column(
        table.schema.get_field_index("value"),
        table.schema.field("value"),
        pa.array(values, pa.binary()),
    )
    pq.write_table(table, path)
    with pytest.raises(RecordingError, match="row 1: bad query bytes") as caught:
        list(iter_messages(directory, "queries"))
    assert caught.value.path == path
    kept = list(iter_messages(directory, "queries", skip_bad=True))
    assert [decode_query(m.value).seq for m in kept] == [0, 2]
