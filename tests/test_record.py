"""`rankstream record`: rolling atomic files that resume without gaps or duplicates.

In process on the embedded transport (a recorder that dies with messages buffered),
and as a subprocess on the real Kafka killed with SIGKILL mid-stream and restarted.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import numpy as np
import pytest

from rankstream.harness.generator import TripletGenerator
from rankstream.ranking.triplets import TripletBlock
from rankstream.stream.connect import open_transport
from rankstream.stream.recording_files import (
    WidthMismatchError,
    committed_positions,
    log_paths,
    read_log_file,
)
from rankstream.stream.recording_reader import iter_messages, iter_triplet_chunks
from rankstream.stream.recording_writer import RecordingWriter
from rankstream.stream.schema import block_key, decode_triplets, encode_triplets
from rankstream.stream.settings import Settings
from rankstream.stream.transport import Message
from rankstream.workers.recorder import Recorder, RecorderOptions

BLOCK = 100


def _produce(settings: Settings, first_block: int, n_blocks: int) -> None:
    blocks = list(TripletGenerator(seed=9).blocks((first_block + n_blocks) * BLOCK, BLOCK))
    transport = open_transport(settings)
    transport.ensure_topics({settings.triplets_topic: 1})
    producer = transport.producer()
    for block in blocks[first_block:]:
        producer.send(settings.triplets_topic, encode_triplets(block), key=block_key(block))
    producer.flush()
    producer.close()
    transport.close()


def _recorded_seq(directory: Path) -> np.ndarray:
    """Every recorded seq, in order (iter_messages also checks file continuity)."""
    seqs = [decode_triplets(m.value).seq for m in iter_messages(directory, "triplets")]
    return np.concatenate(seqs) if seqs else np.zeros(0, np.int64)


def test_restart_after_a_crash_with_buffered_messages_has_no_gap_or_duplicate(tmp_path):
    settings = Settings(topic_prefix=f"t{uuid.uuid4().hex[:10]}")
    _produce(settings, 0, 10)
    topic = settings.triplets_topic
    consumer = open_transport(settings).consumer()
    consumer.assign([(topic, 0)])
    crashed = RecordingWriter(tmp_path, "triplets", topic)
    for message in consumer.poll(timeout_ms=100, max_records=4):
        crashed.add(message)
    assert crashed.commit() is not None
    for message in consumer.poll(timeout_ms=100, max_records=3):
        crashed.add(message)  # buffered, never committed: lost with the process
    assert committed_positions(tmp_path, "triplets") == {0: 4}
    assert not list(tmp_path.glob("triplets/.*.tmp"))

    _produce(settings, 10, 5)
    options = RecorderOptions(messages_per_file=4, exit_when_idle=0.3, poll_ms=50)
    recorder = Recorder(settings, tmp_path, {"triplets": topic}, options)
    assert recorder.run() == 0
    counts = recorder.counts
    assert counts[topic].messages == 11 and counts[topic].files == 3  # 4 + 4 + 3
    assert np.array_equal(_recorded_seq(tmp_path), np.arange(15 * BLOCK))
    assert sum(len(c) for c in iter_triplet_chunks(tmp_path)) == 15 * BLOCK


def _recorder_process(settings: Settings, out: Path, *extra: str) -> subprocess.Popen[bytes]:
    env = dict(
        os.environ,
        RANKSTREAM_KAFKA_BOOTSTRAP=settings.kafka_bootstrap or "",
        RANKSTREAM_TOPIC_PREFIX=settings.topic_prefix,
    )
    command = [
        sys.executable,
        "-m",
        "rankstream",
        "record",
        "--out",
        str(out),
        "--topics",
        "triplets",
        "--messages-per-file",
        "3",
        "--roll-seconds",
        "0.2",
        *extra,
    ]
    return subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def test_sigkill_mid_stream_then_restart_on_kafka(service_settings, tmp_path):
    out = tmp_path / "log"
    _produce(service_settings, 0, 20)
    recorder = _recorder_process(service_settings, out)
    try:
        deadline = time.monotonic() + 60
        while len(log_paths(out, "triplets")) < 2 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert len(log_paths(out, "triplets")) >= 2, "the recorder never committed a file"
        _produce(service_settings, 20, 10)  # more arrives while it runs...
    finally:
        recorder.send_signal(signal.SIGKILL)  # ...and it dies without a chance to commit
        recorder.wait(timeout=30)
    before = committed_positions(out, "triplets")[0]
    _produce(service_settings, 30, 10)

    restarted = _recorder_process(service_settings, out, "--exit-when-idle", "3")
    assert restarted.wait(timeout=120) == 0
    assert committed_positions(out, "triplets") == {0: 40}
    assert before < 40
    assert np.array_equal(_recorded_seq(out), np.arange(40 * BLOCK))


def _record_blocks(directory: Path, blocks, width: int = 36, version: int = 2) -> None:
    writer = RecordingWriter(directory, "triplets", "t", width=width)
    for i, block in enumerate(blocks):
        value = encode_triplets(block, version=version)
        writer.add(Message("t", 0, i, block_key(block), value, 1000 + i))
    writer.commit()


def test_simulator_shaped_logs_store_each_image_once_and_read_back_exactly(tmp_path):
    blocks = list(TripletGenerator(seed=4).messages(20_000, queries_per_message=2))
    _record_blocks(tmp_path / "new", blocks)
    chunks = list(iter_triplet_chunks(tmp_path / "new"))
    got = TripletBlock.concatenate([c.block for c in chunks])
    expected = TripletBlock.concatenate(blocks)
    for name in ("seq", "query_id", "p1_id", "p2_id", "rel1", "rel2", "phi1", "phi2"):
        assert np.array_equal(getattr(got, name), getattr(expected, name)), name
    assert len(got.image_id) == len(expected.image_id)  # each judged image once
    assert chunks[0].first_row == 0 and sum(len(c) for c in chunks) == 20_000
    (path,) = log_paths(tmp_path / "new", "triplets")
    info = read_log_file(path, "triplets")
    assert (info.version, info.phi_dim, info.records, info.messages) == (2, 36, 20_000, len(blocks))
    assert info.rows == sum(len(set(b.query_id.tolist())) for b in blocks)  # one row a query
    assert path.stat().st_size / 20_000 < 322 / 4


def test_a_log_of_another_width_is_refused_even_when_skipping_damage(tmp_path):
    _record_blocks(tmp_path, list(TripletGenerator(seed=1, width=8).query_blocks(2000)), width=8)
    assert sum(len(c) for c in iter_triplet_chunks(tmp_path, width=8)) == 2000
    for skip_bad in (False, True):
        with pytest.raises(WidthMismatchError, match=r"recorded at feature width 8.* is 36"):
            list(iter_triplet_chunks(tmp_path, skip_bad=skip_bad))
    with pytest.raises(WidthMismatchError, match="width 8"):
        RecordingWriter(tmp_path, "triplets", "t")  # appending 36-wide files to it
    writer = RecordingWriter(tmp_path / "other", "triplets", "t", width=8)
    block = TripletGenerator(seed=2).query_block()  # 36 wide: left out, like a bad message
    assert writer.add(Message("t", 0, 0, b"k", encode_triplets(block), 0)) == 0
    assert writer.counts.skipped_messages == 1
