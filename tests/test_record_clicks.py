"""Impressions and clicks in a recording: a run's streams recorded, replayed into fresh
topics, and joined again give the very same weighted triplets; another width is refused;
bad bytes are left out when recording and reported (or skipped and counted) when read."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from test_click_join import D, _output, _run, _send, _settings, _stream

from rankstream.stream.click_schema import decode_clicks, decode_impressions
from rankstream.stream.embedded import EmbeddedTransport
from rankstream.stream.embedded_store import EmbeddedModelStore
from rankstream.stream.recording_files import RecordingError, WidthMismatchError, log_paths
from rankstream.stream.recording_reader import ReadCounts, iter_messages
from rankstream.stream.recording_replay import replay_log
from rankstream.stream.settings import Settings
from rankstream.workers.click_join import JoinOptions
from rankstream.workers.recorder import Recorder, RecorderOptions

KINDS = ("impressions", "clicks")


def _topics(settings: Settings) -> dict[str, str]:
    return {kind: settings.topic(kind) for kind in KINDS}


def _recorded_run(tmp_path, transport: EmbeddedTransport) -> tuple[Settings, list]:
    """40 impressions and their clicks (late, unknown ones among them) plus one message of
    garbage on each topic, joined; then recorded into tmp_path. Returns the join's output."""
    settings = _settings()
    _send(transport, settings, _stream(40))
    producer = transport.producer()
    for topic in _topics(settings).values():
        producer.send(topic, b"not arrow")
    producer.flush()
    _run(settings, transport, EmbeddedModelStore(), JoinOptions())
    options = RecorderOptions(messages_per_file=16, exit_when_idle=0.3, poll_ms=20)
    recorder = Recorder(settings, tmp_path, _topics(settings), options, transport=transport)
    assert recorder.run() == 0
    counts = recorder.counts
    for topic in _topics(settings).values():
        assert counts[topic].skipped_messages == 1  # the garbage, counted, not recorded
    return settings, _output(transport, settings)


def test_replayed_impressions_and_clicks_join_to_the_same_triplets(tmp_path):
    transport = EmbeddedTransport()
    _, original = _recorded_run(tmp_path, transport)
    assert len(original) > 1  # the join emitted something to compare
    assert len(log_paths(tmp_path, "clicks")) > 1  # files rolled and were read in order
    fresh = _settings()
    counts = replay_log(transport, tmp_path, _topics(fresh), speed=None, width=D)
    assert counts.messages == {"impressions": 40, "clicks": 42}  # all but the garbage
    assert counts.read.bad_rows == 0
    _run(fresh, transport, EmbeddedModelStore(), JoinOptions())
    assert _output(transport, fresh) == original  # same keys, same bytes, same order


def test_each_impression_is_stored_once_at_its_width_and_another_width_is_refused(tmp_path):
    _recorded_run(tmp_path, EmbeddedTransport())
    impressions = [
        imp
        for m in iter_messages(tmp_path, "impressions", width=D)
        for imp in decode_impressions(m.value, width=D).records
    ]
    assert [imp.impression_id for imp in impressions] == [f"{i:032x}" for i in range(40)]
    assert all(imp.phi.shape == (6, D) for imp in impressions)  # each candidate's phi once
    for kind in KINDS:
        for skip_bad in (False, True):
            with pytest.raises(WidthMismatchError, match=rf"width {D}; .* width is 36"):
                list(iter_messages(tmp_path, kind, skip_bad=skip_bad))


def test_bad_click_bytes_in_a_file_are_reported_by_file_and_row_or_skipped(tmp_path):
    _recorded_run(tmp_path, EmbeddedTransport())
    path = log_paths(tmp_path, "clicks")[0]
    table = pq.read_table(path)
    values = table.column("value").to_pylist()
    values[2] = values[2][:-30]  # a truncated Arrow message
    column = table.schema.get_field_index("value")
    pq.write_table(
        table.set_column(column, table.schema.field("value"), pa.array(values, pa.binary())),
        path,
    )
    with pytest.raises(RecordingError, match="row 2: bad click bytes") as caught:
        list(iter_messages(tmp_path, "clicks", width=D))
    assert caught.value.path == path
    counts = ReadCounts()
    kept = list(iter_messages(tmp_path, "clicks", width=D, skip_bad=True, counts=counts))
    assert (counts.bad_rows, counts.rows, len(kept)) == (1, 41, 41)
    assert all(decode_clicks(m.value).records for m in kept)
