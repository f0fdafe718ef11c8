"""Replay of recorded logs: the same weights through the transport + worker and direct.

A stream (messages of both wire versions, with a garbage message and a NaN row the
worker must drop) is learned by the online worker, recorded, replayed into a fresh topic
and learned again, and trained straight from the files: every model's weights_sha256
must agree, on the embedded transport and on the real Kafka/Redis. A recording in the
old format (one row per triplet) gives the same weights as the current one. Damaged
logs are reported with file and row.
"""

from __future__ import annotations

import dataclasses
import json
import uuid
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from rankstream.cli import main
from rankstream.harness.generator import TripletGenerator
from rankstream.stream.connect import open_store, open_transport
from rankstream.stream.recording_files import (
    RecordingError,
    log_paths,
    read_log_file,
    triplet_log_schema,
)
from rankstream.stream.recording_reader import iter_messages
from rankstream.stream.schema import block_key, decode_triplets, encode_triplets, schema_of
from rankstream.stream.settings import Settings
from rankstream.workers.checkpoint import weights_sha256
from rankstream.workers.direct_replay import DirectOptions, train_from_log
from rankstream.workers.online_worker import LINEAR_ALGOS, OnlineWorker, WorkerOptions
from rankstream.workers.runtime import EXIT_OK

N_BLOCKS, BLOCK, SCALER_ROWS = 12, 250, 600


def _nan_row_message(block, row: int) -> bytes:
    """A valid triplets message except one NaN feature: the worker drops that row."""
    phi1 = block.phi1.copy()
    phi1[row, 3] = np.nan
    arrays = [
        pa.array(getattr(block, name))
        for name in ("seq", "query_id", "p1_id", "p2_id", "rel1", "rel2")
    ]
    arrays += [
        pa.FixedSizeListArray.from_arrays(pa.array(p.ravel()), 36) for p in (phi1, block.phi2)
    ]
    batch = pa.RecordBatch.from_arrays(arrays, schema=schema_of("triplets", version=1))
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, batch.schema) as writer:
        writer.write_batch(batch)
    return sink.getvalue().to_pybytes()


def _stream() -> list[tuple[bytes, bytes]]:
    """Simulator-shaped blocks, every other one in wire version 1 (a producer that has
    not upgraded yet), a version-1 block with a NaN row, and junk."""
    blocks = list(TripletGenerator(seed=5).query_blocks(N_BLOCKS * BLOCK))
    values = [(block_key(b), encode_triplets(b, version=1 + i % 2)) for i, b in enumerate(blocks)]
    values[4] = (block_key(blocks[4]), _nan_row_message(blocks[4], 17))
    values.insert(7, (b"junk", b"not an arrow message"))
    return values


def _produce(settings: Settings, values: list[tuple[bytes, bytes]]) -> None:
    transport = open_transport(settings)
    transport.ensure_topics({settings.triplets_topic: 1, settings.dead_letter_topic: 1})
    producer = transport.producer()
    for key, value in values:
        producer.send(settings.triplets_topic, value, key=key)
    producer.flush()
    producer.close()
    transport.close()


def _learn_with_worker(settings: Settings, idle: float) -> dict[str, tuple[str, int]]:
    options = WorkerOptions(
        scaler_rows=SCALER_ROWS,
        checkpoint_records=1000,
        exit_when_idle=idle,
        poll_ms=50,
        max_poll_records=3,
    )
    transport = open_transport(settings)
    try:
        assert OnlineWorker(settings, options, transport=transport).run() == EXIT_OK
    finally:
        transport.close()  # no client left polling a broker after the session ends
    store = open_store(settings)
    out = {}
    for name in LINEAR_ALGOS:
        stored = store.load(name)
        assert stored is not None, name
        out[name] = (weights_sha256(stored.arrays["weights"]), stored.meta["triplets_seen"])
    store.close()
    return out


def _use(monkeypatch: pytest.MonkeyPatch, settings: Settings) -> None:
    """Point the CLI (Settings.from_env) at these settings."""
    for var, value in (
        ("KAFKA_BOOTSTRAP", settings.kafka_bootstrap),
        ("REDIS_URL", settings.redis_url),
        ("TOPIC_PREFIX", settings.topic_prefix),
    ):
        monkeypatch.setenv(f"RANKSTREAM_{var}", value or "")


def _record(out: Path, *, idle: float, messages_per_file: int) -> int:
    """`rankstream record` of the triplets topic into `out`, until idle."""
    return main(
        ["record", "--out", str(out), "--topics", "triplets", "--exit-when-idle", str(idle),
         "--messages-per-file", str(messages_per_file)]
    )  # fmt: skip


def _round_trip(
    settings: Settings,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    idle: float,
) -> None:
    _produce(settings, _stream())
    original = _learn_with_worker(settings, idle)
    expected_rows = N_BLOCKS * BLOCK - 1  # the NaN row is dropped
    assert {seen for _, seen in original.values()} == {expected_rows}

    out = tmp_path / "log"
    _use(monkeypatch, settings)
    assert _record(out, idle=idle, messages_per_file=5) == 0
    messages = len(_stream())
    assert len(log_paths(out, "triplets")) == -(-messages // 5)  # 5 messages per file

    replayed = dataclasses.replace(settings, topic_prefix=f"r{uuid.uuid4().hex[:10]}")
    _use(monkeypatch, replayed)
    assert main(["replay", str(out), "--topics", "triplets", "--as-fast-as-possible"]) == 0
    assert _learn_with_worker(replayed, idle) == original

    capsys.readouterr()
    assert main(["replay", str(out), "--direct", "--scaler-rows", str(SCALER_ROWS), "--json"]) == 0
    direct = json.loads(capsys.readouterr().out)
    assert {
        name: (m["weights_sha256"], m["triplets_seen"]) for name, m in direct.items()
    } == original
    assert direct["opr"]["offsets"] == {settings.triplets_topic: {"0": messages}}

    old = tmp_path / "old-format"  # the same stream as a format-1 recording would hold it
    _write_format_1(old, settings.triplets_topic, list(iter_messages(out, "triplets")))
    capsys.readouterr()
    assert main(["replay", str(old), "--direct", "--scaler-rows", str(SCALER_ROWS), "--json"]) == 0
    from_old = json.loads(capsys.readouterr().out)
    assert {n: (m["weights_sha256"], m["triplets_seen"]) for n, m in from_old.items()} == original
    again = dataclasses.replace(settings, topic_prefix=f"r{uuid.uuid4().hex[:10]}")
    _use(monkeypatch, again)
    assert main(["replay", str(old), "--topics", "triplets", "--as-fast-as-possible"]) == 0
    assert _learn_with_worker(again, idle) == original


def _write_format_1(directory: Path, topic: str, messages: list) -> None:
    """A triplet log as the format-1 recorder wrote it: one row per triplet, phi1/phi2
    per row, no width in the footer (so format-1 readers are exercised, not assumed)."""
    folder = directory / "triplets"
    folder.mkdir(parents=True)
    rows = []
    for m in messages:
        block = decode_triplets(m.value)
        n = len(block)
        source = {
            "partition": np.full(n, m.partition, np.int32),
            "offset": np.full(n, m.offset, np.int64),
            "key": [m.key] * n,
            "timestamp_ms": np.full(n, m.timestamp_ms, np.int64),
        }
        columns = {**source, **block.pair_columns()}
        for name in ("phi1", "phi2"):
            phi = np.ascontiguousarray(columns[name], "<f4")
            columns[name] = pa.FixedSizeBinaryArray.from_buffers(
                pa.binary(144), n, [None, pa.py_buffer(phi)]
            )
        rows.append(pa.table(columns, schema=triplet_log_schema(36, 1)))
    footer = {
        "version": 1,
        "kind": "triplets",
        "topic": topic,
        "messages": len(messages),
        "from_offsets": {"0": messages[0].offset},
        "next_offsets": {"0": messages[-1].offset + 1},
    }
    schema = triplet_log_schema(36, 1).with_metadata(
        {b"rankstream.recording": json.dumps(footer).encode()}
    )
    path = folder / "00000000.parquet"
    with pq.ParquetWriter(path, schema, compression="none") as writer:
        for i in range(0, len(rows), 3):  # whole messages per row group, as it wrote them
            group = pa.concat_tables(rows[i : i + 3])
            writer.write_table(group, row_group_size=group.num_rows)
    info = read_log_file(path, "triplets")
    assert (info.version, info.phi_dim, info.records) == (1, None, sum(t.num_rows for t in rows))


def test_direct_and_replayed_runs_match_the_original_embedded(tmp_path, monkeypatch, capsys):
    settings = Settings(topic_prefix=f"t{uuid.uuid4().hex[:10]}")
    _round_trip(settings, tmp_path, monkeypatch, capsys, idle=0.3)


def test_direct_and_replayed_runs_match_the_original_on_kafka(
    service_settings, tmp_path, monkeypatch, capsys
):
    _round_trip(service_settings, tmp_path, monkeypatch, capsys, idle=3.0)


# --- damaged logs ----------------------------------------------------------------------
def _recorded(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    settings = Settings(topic_prefix=f"t{uuid.uuid4().hex[:10]}")
    _produce(
        settings,
        [(block_key(b), encode_triplets(b)) for b in TripletGenerator(seed=2).blocks(3000, 250)],
    )  # random pairs, one query each: every group holds one triplet over images 2t, 2t + 1
    out = tmp_path / "log"
    _use(monkeypatch, settings)
    assert _record(out, idle=0.2, messages_per_file=4) == 0
    return out


def _rewrite(path: Path, change) -> None:
    """Rewrite a log file with `change(table) -> table`, keeping its footer metadata."""
    table = pq.read_table(path)
    pq.write_table(
        change(table).replace_schema_metadata(table.schema.metadata), path, compression="none"
    )


def test_truncated_file_is_reported_by_name_or_skipped(tmp_path, monkeypatch, capsys):
    out = _recorded(tmp_path, monkeypatch)
    second = log_paths(out, "triplets")[1]
    second.write_bytes(second.read_bytes()[: second.stat().st_size // 2])
    capsys.readouterr()
    assert main(["replay", str(out), "--direct", "--json"]) == 1
    err = capsys.readouterr().err
    assert str(second) in err and "not a complete Parquet file" in err
    assert main(["replay", str(out), "--direct", "--json", "--skip-bad"]) == 0
    models = json.loads(capsys.readouterr().out)
    assert {m["triplets_seen"] for m in models.values()} == {2000}  # 1,000 rows lost


def test_nan_and_tied_rows_are_reported_with_file_and_row(tmp_path, monkeypatch):
    out = _recorded(tmp_path, monkeypatch)
    path = log_paths(out, "triplets")[2]

    def poison(table: pa.Table) -> pa.Table:  # triplet 123's first image
        lists = table.column("phi").combine_chunks()
        phi = np.frombuffer(lists.values.buffers()[1], np.float32).copy().reshape(-1, 36)
        phi[2 * 123, 5] = np.inf
        values = pa.FixedSizeBinaryArray.from_buffers(
            pa.binary(144), len(phi), [None, pa.py_buffer(phi)]
        )
        column = pa.ListArray.from_arrays(lists.offsets, values, type=lists.type)
        return table.set_column(
            table.schema.get_field_index("phi"), table.schema.field("phi"), column
        )

    _rewrite(path, poison)
    with pytest.raises(RecordingError, match="row 123: phi holds NaN or Inf") as caught:
        train_from_log(out)
    assert caught.value.path == path and caught.value.row == 123
    with pytest.raises(RecordingError, match="row 123"):
        list(iter_messages(out, "triplets"))
    result = train_from_log(out, DirectOptions(skip_bad=True))
    assert result.counts.bad_rows == 1
    assert {m.triplets_seen for m in result.models} == {2999}

    def tie(table: pa.Table) -> pa.Table:
        rel2 = table.column("rel2").combine_chunks()
        values = rel2.values.to_numpy().copy()
        values[7] = table.column("rel1").combine_chunks().values.to_numpy()[7]
        column = pa.ListArray.from_arrays(rel2.offsets, pa.array(values))
        return table.set_column(
            table.schema.get_field_index("rel2"), table.schema.field("rel2"), column
        )

    _rewrite(path, tie)
    with pytest.raises(RecordingError, match=r"row 7: tied relevance"):
        train_from_log(out)


def test_the_program_prints_and_exits_as_main_does(tmp_path, monkeypatch, capsys):
    """`python -m rankstream replay --direct` runs without cyclic GC and skips Python's
    teardown at exit: its output and exit status must still be those of `main` (flushed,
    code kept), and an in-process `main` must leave the collector alone."""
    import gc
    import subprocess
    import sys

    out = _recorded(tmp_path, monkeypatch)
    capsys.readouterr()
    assert main(["replay", str(out), "--direct", "--json"]) == 0
    assert gc.isenabled()
    expected = json.loads(capsys.readouterr().out)
    command = [sys.executable, "-m", "rankstream", "replay", str(out), "--direct", "--json"]
    done = subprocess.run(command, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == expected

    second = log_paths(out, "triplets")[1]
    second.write_bytes(second.read_bytes()[: second.stat().st_size // 2])
    done = subprocess.run(command, capture_output=True, text=True, timeout=300)
    assert done.returncode == 1
    assert str(second) in done.stderr and "not a complete Parquet file" in done.stderr
