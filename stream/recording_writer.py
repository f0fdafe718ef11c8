"""Writing a recording: `RecordingWriter` commits buffered messages as numbered files.

Each file is written to a temporary name, fsynced and renamed, so a file that exists is
complete (its layout and footer: `stream.recording_files`). Only what a worker would
learn from is recorded: a triplet message that fails to decode (at the recorder's
width), or one of weighted triplets (version 3: recordings carry no weights), is counted
and left out, and rejected triplets (NaN/Inf, ties) are dropped,
exactly as `workers.online_worker` dead-letters them; replaying the log therefore trains the
same weights as the original stream.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from rankstream.stream.recording_files import (
    DEFAULT_ROW_GROUP_ROWS,
    FILE_NAME,
    FORMAT_VERSION,
    MESSAGE_KINDS,
    MESSAGE_LOG_SCHEMA,
    META_KEY,
    check_width,
    committed_positions,
    kind_dir,
    log_paths,
    log_schema,
    phi_to_arrow,
    read_log_file,
)
from rankstream.stream.schema import (
    UNKNOWN_VERSION,
    SchemaError,
    decode_triplets,
)
from rankstream.stream.settings import DEFAULT_PHI_DIM
from rankstream.stream.transport import Message
from rankstream.stream.triplet_groups import group_triplets


@dataclass
class WriterCounts:
    messages: int = 0
    rows: int = 0
    rejected_rows: int = 0
    skipped_messages: int = 0
    files: int = 0


@dataclass
class RecordingWriter:
    """Buffers decoded messages of one topic and commits them as numbered files.

    `add` never writes; `commit` writes whatever is buffered as the next file. The
    caller decides when to roll (every N messages, every T seconds, at exit).
    """

    directory: Path
    kind: str
    topic: str
    row_group_rows: int = DEFAULT_ROW_GROUP_ROWS  # triplets (or queries) per row group
    width: int = DEFAULT_PHI_DIM  # messages of another width are left out, like bad ones
    counts: WriterCounts = field(default_factory=WriterCounts)

    def __post_init__(self) -> None:
        self.directory = Path(self.directory)
        self._folder = kind_dir(self.directory, self.kind)
        self._folder.mkdir(parents=True, exist_ok=True)
        existing = log_paths(self.directory, self.kind)
        if existing:  # one recording, one width: appending another would strand a reader
            info = read_log_file(existing[-1], self.kind)
            check_width(info, pq.ParquetFile(existing[-1]), self.width)
        self._next_number = int(FILE_NAME.match(existing[-1].name).group(1)) + 1 if existing else 0
        self._positions = committed_positions(self.directory, self.kind)
        self._from: dict[int, int] = {}
        self._pending: list[tuple[pa.RecordBatch, int]] = []  # (rows, triplets in them)
        self._pending_messages = 0
        self._file_meta: dict[bytes, bytes] = {}
        self._schema = log_schema(self.kind, self.width)

    @property
    def positions(self) -> dict[int, int]:
        """partition -> next offset, counting buffered messages (where to seek)."""
        return dict(self._positions)

    @property
    def pending_messages(self) -> int:
        return self._pending_messages

    def add(self, message: Message) -> int:
        """Buffer one message; returns the rows kept (0 for a message left out)."""
        if message.topic != self.topic:
            raise ValueError(f"message from topic {message.topic!r}, recorder is {self.topic!r}")
        self._from.setdefault(message.partition, message.offset)
        self._positions[message.partition] = message.offset + 1
        self._pending_messages += 1
        try:
            batch, rows = (self._triplet_rows if self.kind == "triplets" else self._message_row)(
                message
            )
        except SchemaError:
            self.counts.skipped_messages += 1
            return 0
        if rows:
            self._pending.append((batch, rows))
            self.counts.messages += 1
            self.counts.rows += rows
        return rows

    def commit(self) -> Path | None:
        """Write the buffered messages as the next file (tmp + fsync + rename)."""
        if not self._pending_messages:
            return None
        meta = {
            "version": FORMAT_VERSION,
            "kind": self.kind,
            "topic": self.topic,
            "phi_dim": self.width,
            "messages": self._pending_messages,
            "records": sum(n for _, n in self._pending),
            "from_offsets": {str(p): o for p, o in sorted(self._from.items())},
            "next_offsets": {str(p): self._positions[p] for p in sorted(self._from)},
        }
        self._file_meta = {META_KEY: json.dumps(meta).encode()}
        path = self._folder / f"{self._next_number:08d}.parquet"
        tmp = path.with_name(f".{path.name}.tmp")
        with pq.ParquetWriter(
            tmp,
            self._schema.with_metadata(self._file_meta),
            compression="none",  # float features barely compress; reading speed matters
            use_dictionary=["key"],
            write_statistics=["partition", "offset", "timestamp_ms"],
        ) as writer:
            for group in self._row_groups():
                writer.write_table(group, row_group_size=max(group.num_rows, 1))
        with open(tmp, "rb+") as handle:
            os.fsync(handle.fileno())
        os.replace(tmp, path)
        _fsync_dir(self._folder)
        self._next_number += 1
        self._pending, self._pending_messages, self._from = [], 0, {}
        self.counts.files += 1
        return path

    def _row_groups(self) -> Iterator[pa.Table]:
        """Whole messages per row group (~row_group_rows triplets), so no message is split."""
        schema = self._schema.with_metadata(self._file_meta)
        group: list[pa.RecordBatch] = []
        rows = 0
        for batch, n in self._pending:
            group.append(batch)
            rows += n
            if rows >= self.row_group_rows:
                yield pa.Table.from_batches(group, schema=schema)
                group, rows = [], 0
        if group or not self._pending:
            yield pa.Table.from_batches(group, schema=schema)

    def _source_columns(self, message: Message, n: int) -> list[pa.Array]:
        return [
            pa.array(np.full(n, message.partition, np.int32)),
            pa.array(np.full(n, message.offset, np.int64)),
            pa.array([message.key] * n, pa.binary()),
            pa.array(np.full(n, message.timestamp_ms, np.int64)),
        ]

    def _triplet_rows(self, message: Message) -> tuple[pa.RecordBatch, int]:
        """One row per group of the message's good triplets (format 2)."""
        block = decode_triplets(message.value, width=self.width)
        if block.weighted:  # format 2 has no weight column: never replay them unweighted
            raise SchemaError(UNKNOWN_VERSION, "weighted triplets (version 3) are not recorded")
        self.counts.rejected_rows += len(block.rejects)
        groups = group_triplets(block)
        columns = [
            pa.array(groups.query_id),
            pa.array(groups.first_seq),
            _list(groups.image_offsets, pa.array(groups.image_id)),
            _list(groups.image_offsets, phi_to_arrow(groups.phi)),
            *(
                _list(groups.triplet_offsets, pa.array(getattr(groups, name)))
                for name in ("p1", "p2", "rel1", "rel2")
            ),
        ]
        batch = pa.RecordBatch.from_arrays(
            self._source_columns(message, len(groups)) + columns, schema=self._schema
        )
        return batch, len(block)

    def _message_row(self, message: Message) -> tuple[pa.RecordBatch, int]:
        """One row holding the message's bytes, once they decode at the recording's width."""
        MESSAGE_KINDS[self.kind].check(message.value, self.width)  # only usable messages
        batch = pa.RecordBatch.from_arrays(
            [*self._source_columns(message, 1), pa.array([message.value], pa.binary())],
            schema=MESSAGE_LOG_SCHEMA,
        )
        return batch, 1


def _list(offsets: np.ndarray, values: pa.Array) -> pa.Array:
    return pa.ListArray.from_arrays(pa.array(np.asarray(offsets, np.int32)), values)


def _fsync_dir(folder: Path) -> None:
    fd = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
