"""Logged streams on disk: rolling Parquet files of triplets and judged queries.

A recording directory holds one folder per stream kind (`triplets/`, `queries/`), each
a run of numbered Parquet files. Every file is written to a temporary name, fsynced and
renamed, so a file that exists is complete; its footer metadata names the format
version, the source topic, the feature width (`phi_dim`), the consumer position per
partition when the file's first message was read (`from_offsets`) and after its last
(`next_offsets`). A restarted recorder seeks every partition to the largest
`next_offsets` on disk, so nothing is recorded twice and, because each file starts
where the previous one ended, a gap would be visible.

Layouts (each measured on this project's replay benchmark):

* triplets, format 2 (written now): one row per *group* (`stream.triplet_groups`: a run
  of one query's triplets with consecutive seq, as on the wire since version 2) with
  the record's source `partition`, `offset`, `key`, `timestamp_ms`, then `query_id`,
  `first_seq`, the group's distinct images (`image_id` list<int64>, `phi`
  list<FIXED_LEN_BYTE_ARRAY(4d)>) and its triplets (`p1`, `p2` list<int16> rows of the
  group's images, `rel1`, `rel2` list<int8>). Each image's phi is stored once: a
  simulator stream takes ~1/8 of format 1's bytes.
* triplets, format 1 (read, no longer written): one row per triplet, the pair layout
  (`seq`, `query_id`, `p1_id`, `p2_id`, `rel1`, `rel2`, `phi1`, `phi2`).
* phi is always FIXED_LEN_BYTE_ARRAY(4d), the very little-endian float32 bytes of the
  wire: Parquet has no fixed-size list type, and pyarrow stores
  fixed_size_list<float32>[d] as a repeated field with a level per float, which read
  ~10x slower. Readers hand phi back as zero-copy (m, d) float32 views.
* queries: one row per message holding the original Arrow IPC bytes (`value`),
  validated with `decode_query` when recorded and again when read.

Readers of either triplet format yield `TripletChunk`s whose `block` is normalized
(triplets indexing an image table; format-1 files give the pair layout's table); row
numbers in errors count triplets within the file.

The long-running recorder that fills a recording from the topics is
`workers.recorder`; this module holds the files' format, the writer and the readers.

Only what a worker would learn from is recorded: a triplet message that fails to
decode (at the recorder's width) is counted and left out, and rejected triplets
(NaN/Inf, ties) are dropped, exactly as `workers.online` dead-letters them; replaying
the log therefore trains the same weights as the original stream.

A damaged file raises `RecordingError` naming the file and, where it can be known, the
row; readers given `skip_bad=True` count and skip the damage instead. A file of another
feature width is never skipped: it raises, whatever `skip_bad` says.
"""

from __future__ import annotations

import heapq
import itertools
import json
import mmap
import os
import re
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from rankstream.ranking.triplets import TripletBlock
from rankstream.stream.arrow_views import numpy_view, offsets_view
from rankstream.stream.schema import (
    SchemaError,
    decode_query,
    decode_triplets,
    encode_triplets,
    triplets_fields,
)
from rankstream.stream.settings import DEFAULT_PHI_DIM
from rankstream.stream.transport import Message, Transport
from rankstream.stream.triplet_groups import TripletGroups, group_triplets

KINDS = ("triplets", "queries")
FORMAT_VERSION = 2  # written; READ_FORMATS are read
READ_FORMATS = (1, 2)
_FILE = re.compile(r"^(\d{8})\.parquet$")
_META_KEY = b"rankstream.recording"
_PAIR_ID_COLUMNS = ("seq", "query_id", "p1_id", "p2_id", "rel1", "rel2")  # format 1
_GROUP_LIST_COLUMNS = ("image_id", "phi", "p1", "p2", "rel1", "rel2")  # format 2
_SOURCE = [
    pa.field("partition", pa.int32()),
    pa.field("offset", pa.int64()),
    pa.field("key", pa.binary()),
    pa.field("timestamp_ms", pa.int64()),
]
QUERY_LOG_SCHEMA = pa.schema([*_SOURCE, pa.field("value", pa.binary())])
DEFAULT_ROW_GROUP_ROWS = 65_536  # triplets per row group (whole messages)


def _phi_field(name: str, width: int) -> pa.Field:
    logical = f"fixed_size_list<float32>[{width}] little-endian".encode()
    return pa.field(name, pa.binary(4 * width), metadata={b"rankstream.logical_type": logical})


def triplet_log_schema(width: int, version: int = FORMAT_VERSION) -> pa.Schema:
    """The columns of a triplet log file of format `version` at feature width `width`."""
    if version == 1:
        wire = triplets_fields(width, 1)
        return pa.schema(
            _SOURCE
            + [wire.field(name) for name in _PAIR_ID_COLUMNS]
            + [_phi_field(name, width) for name in ("phi1", "phi2")]
        )
    if version == 2:
        wire = triplets_fields(width, 2)
        return pa.schema(
            _SOURCE
            + [wire.field("query_id"), wire.field("first_seq"), wire.field("image_id")]
            + [pa.field("phi", pa.list_(_phi_field("item", width)))]
            + [wire.field(name) for name in ("p1", "p2", "rel1", "rel2")]
        )
    raise ValueError(f"triplet log format {version} does not exist; formats are {READ_FORMATS}")


def log_schema(kind: str, width: int, version: int = FORMAT_VERSION) -> pa.Schema:
    """The columns of a `kind` log file (queries files are the same in every format)."""
    return triplet_log_schema(width, version) if kind == "triplets" else QUERY_LOG_SCHEMA


class RecordingError(ValueError):
    """A log file is unreadable or holds a bad row; `path` and `row` say where."""

    def __init__(self, path: Path | str, reason: str, row: int | None = None) -> None:
        where = f"{path}" if row is None else f"{path}: row {row}"
        super().__init__(f"{where}: {reason}")
        self.path, self.row, self.reason = Path(path), row, reason


# --- files and their metadata -------------------------------------------------------
@dataclass(frozen=True)
class LogFile:
    """One committed file: where it is and what its footer says it covers."""

    path: Path
    kind: str
    topic: str
    rows: int  # Parquet rows: triplets (format 1), groups (format 2) or queries
    records: int  # triplets (triplets files) or judged queries (queries files) it holds
    messages: int
    from_offsets: dict[int, int]  # partition -> consumer position before this file
    next_offsets: dict[int, int]  # partition -> consumer position after this file
    version: int = FORMAT_VERSION
    phi_dim: int | None = None  # None: a format-1 file (its phi column's size says)


def _kind_dir(directory: Path | str, kind: str) -> Path:
    if kind not in KINDS:
        raise ValueError(f"unknown stream kind {kind!r}; expected one of {KINDS}")
    return Path(directory) / kind


def log_paths(directory: Path | str, kind: str) -> list[Path]:
    """The committed files of one kind, in recording order (temporary files ignored)."""
    folder = _kind_dir(directory, kind)
    if not folder.is_dir():
        return []
    return sorted(p for p in folder.iterdir() if _FILE.match(p.name))


def read_log_file(path: Path | str, kind: str) -> LogFile:
    """A file's footer metadata; RecordingError if the file is not a complete log file."""
    path = Path(path)
    try:
        metadata = pq.read_metadata(path)
    except (pa.ArrowException, OSError, UnicodeDecodeError) as exc:  # damaged column names
        raise RecordingError(path, f"not a complete Parquet file ({exc})") from None
    raw = (metadata.metadata or {}).get(_META_KEY)
    try:
        meta = json.loads(raw)
        if meta["version"] not in READ_FORMATS or meta["kind"] != kind:
            raise ValueError(f"version {meta['version']} kind {meta['kind']!r}")
        width = meta.get("phi_dim")
        if width is not None and (not isinstance(width, int) or width < 1):
            raise ValueError(f"phi_dim {width!r}")
        return LogFile(
            path=path,
            kind=kind,
            topic=str(meta["topic"]),
            rows=metadata.num_rows,
            records=int(meta.get("records", metadata.num_rows)),  # format 1: one per row
            messages=int(meta["messages"]),
            from_offsets={int(p): int(o) for p, o in meta["from_offsets"].items()},
            next_offsets={int(p): int(o) for p, o in meta["next_offsets"].items()},
            version=int(meta["version"]),
            phi_dim=width,
        )
    except (TypeError, KeyError, ValueError) as exc:
        raise RecordingError(path, f"not a rankstream {kind} log file ({exc!r})") from None


def committed_positions(directory: Path | str, kind: str) -> dict[int, int]:
    """partition -> the next offset to record: where a restarted recorder resumes."""
    positions: dict[int, int] = {}
    for path in log_paths(directory, kind):
        for partition, offset in read_log_file(path, kind).next_offsets.items():
            positions[partition] = max(offset, positions.get(partition, 0))
    return positions


def _check_continuity(position: dict[int, int], f: LogFile) -> None:
    """A file must start, per partition, exactly where the previous one stopped."""
    for partition, start in f.from_offsets.items():
        if partition in position and position[partition] != start:
            raise RecordingError(
                f.path,
                f"partition {partition} starts at offset {start} but the previous "
                f"file stopped at {position[partition]} (a gap or an overlap)",
            )


# --- writing -------------------------------------------------------------------------
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
        self._folder = _kind_dir(self.directory, self.kind)
        self._folder.mkdir(parents=True, exist_ok=True)
        existing = log_paths(self.directory, self.kind)
        if existing:  # one recording, one width: appending another would strand a reader
            info = read_log_file(existing[-1], self.kind)
            _check_width(info, pq.ParquetFile(existing[-1]), self.width)
        self._next_number = int(_FILE.match(existing[-1].name).group(1)) + 1 if existing else 0
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
            batch, rows = (self._triplet_rows if self.kind == "triplets" else self._query_row)(
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
        self._file_meta = {_META_KEY: json.dumps(meta).encode()}
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
        self.counts.rejected_rows += len(block.rejects)
        groups = group_triplets(block)
        columns = [
            pa.array(groups.query_id),
            pa.array(groups.first_seq),
            _list(groups.image_offsets, pa.array(groups.image_id)),
            _list(groups.image_offsets, _phi_to_arrow(groups.phi)),
            *(
                _list(groups.triplet_offsets, pa.array(getattr(groups, name)))
                for name in ("p1", "p2", "rel1", "rel2")
            ),
        ]
        batch = pa.RecordBatch.from_arrays(
            self._source_columns(message, len(groups)) + columns, schema=self._schema
        )
        return batch, len(block)

    def _query_row(self, message: Message) -> tuple[pa.RecordBatch, int]:
        decode_query(message.value, width=self.width)  # validate: a log holds only usable queries
        batch = pa.RecordBatch.from_arrays(
            [*self._source_columns(message, 1), pa.array([message.value], pa.binary())],
            schema=QUERY_LOG_SCHEMA,
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


def _phi_to_arrow(phi: np.ndarray) -> pa.Array:
    """(m, d) phi as FIXED_LEN_BYTE_ARRAY(4d) values, the float32 bytes unchanged."""
    data = np.ascontiguousarray(phi, dtype="<f4")
    return pa.FixedSizeBinaryArray.from_buffers(
        pa.binary(4 * data.shape[1]), len(data), [None, pa.py_buffer(data)]
    )


def phi_view(column: pa.Array | pa.ChunkedArray) -> np.ndarray:
    """(n, d) float32 read-only view of a stored phi column (copies only across chunks)."""
    if isinstance(column, pa.ChunkedArray):
        column = column.combine_chunks() if column.num_chunks != 1 else column.chunk(0)
    n, row_bytes = len(column), column.type.byte_width
    buffer = column.buffers()[1]
    return np.frombuffer(
        buffer, dtype="<f4", count=n * row_bytes // 4, offset=column.offset * row_bytes
    ).reshape(n, row_bytes // 4)


# --- reading -------------------------------------------------------------------------
@dataclass(frozen=True)
class TripletChunk:
    """Consecutive triplets of one file (one row group): the normalized block (its table
    and grades read as numpy views) and where each triplet was recorded from."""

    path: Path
    first_row: int  # triplet number of triplet 0 within the file
    topic: str
    partition: np.ndarray  # int32 (n,)
    offset: np.ndarray  # int64 (n,)
    block: TripletBlock
    extra: dict[str, np.ndarray] = field(default_factory=dict)  # any extra columns read

    def __len__(self) -> int:
        return len(self.offset)

    def message_bounds(self) -> np.ndarray:
        """Start rows of each message (a new (partition, offset)), plus len at the end."""
        changed = (np.diff(self.offset) != 0) | (np.diff(self.partition) != 0)
        return np.concatenate(([0], np.flatnonzero(changed) + 1, [len(self)]))

    def select(self, keep: np.ndarray) -> TripletChunk:
        """The rows where `keep` is True (a copy), for skipping bad rows."""
        return TripletChunk(
            self.path,
            self.first_row,
            self.topic,
            self.partition[keep],
            self.offset[keep],
            self.block.select(keep),
            {k: v[keep] for k, v in self.extra.items()},
        )


@dataclass
class ReadCounts:
    files: int = 0
    rows: int = 0
    bad_rows: int = 0
    bad_files: int = 0


def _open_files(
    directory: Path | str, kind: str, skip_bad: bool, counts: ReadCounts, width: int
) -> Iterator[tuple[LogFile, pq.ParquetFile]]:
    if not Path(directory).is_dir():
        raise FileNotFoundError(f"no recording at {directory}")
    paths = log_paths(directory, kind)
    position: dict[int, int] = {}  # partition -> where the previous good file stopped
    for path in paths:
        try:
            info = read_log_file(path, kind)
            handle = pq.ParquetFile(_mapped(path))
            _check_width(info, handle, width)
            expected = log_schema(kind, width, info.version)
            if not handle.schema_arrow.remove_metadata().equals(expected.remove_metadata()):
                raise RecordingError(
                    path,
                    f"columns {handle.schema_arrow.names} are not a format-{info.version} "
                    f"{kind} log's {expected.names}",
                )
            _check_continuity(position, info)
        except RecordingError as error:
            if not skip_bad or isinstance(error, WidthMismatchError):
                raise
            counts.bad_files += 1
            position = {}  # what the skipped file covered is unknown
            continue
        position.update(info.next_offsets)
        counts.files += 1
        yield info, handle


class WidthMismatchError(RecordingError):
    """A file recorded at another feature width: a configuration error, never skipped."""


def _check_width(info: LogFile, handle: pq.ParquetFile, width: int) -> None:
    found = info.phi_dim
    if found is None and info.kind == "triplets":  # format 1: the phi column's byte width
        names = handle.schema_arrow.names
        if "phi1" in names:
            found = handle.schema_arrow.field("phi1").type.byte_width // 4
    if found is not None and found != width:
        raise WidthMismatchError(
            info.path, f"recorded at feature width {found}; this deployment's width is {width}"
        )


def _mapped(path: Path) -> pa.BufferReader:
    """The whole file memory-mapped, read through a zero-copy buffer reader.

    Measured on the 3M-triplet replay log: reading its row groups takes ~20% less CPU
    (0.14 s against 0.175 s) than through `ParquetFile(path, memory_map=True)`. The
    map lives as long as any buffer read from it.
    """
    try:
        with open(path, "rb") as handle:
            mapped = mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ)
    except (OSError, ValueError) as exc:  # ValueError: an empty file cannot be mapped
        raise RecordingError(path, f"not a complete Parquet file ({exc})") from None
    return pa.BufferReader(pa.py_buffer(mapped))


def iter_triplet_chunks(
    directory: Path | str,
    *,
    width: int = DEFAULT_PHI_DIM,
    skip_bad: bool = False,
    extra_columns: Sequence[str] = (),
    counts: ReadCounts | None = None,
) -> Iterator[TripletChunk]:
    """Every recorded triplet in recording order, one row group at a time.

    Rows with tied relevance or NaN/Inf features cannot come from a recorder (it drops
    them), so they mean a damaged file: RecordingError naming file and row, or with
    `skip_bad` the rows are dropped and counted. The NaN/Inf scan runs only where
    `nonfinite_rows` is asked (the learners detect non-finite rows themselves).
    `extra_columns` (`key`, `timestamp_ms`) come back per triplet in `chunk.extra`.
    """
    counts = counts if counts is not None else ReadCounts()
    for info, handle in _open_files(directory, "triplets", skip_bad, counts, width):
        read = _pair_chunk if info.version == 1 else _group_chunk
        first_row = 0
        for group in range(handle.num_row_groups):
            try:
                chunk = read(handle, group, info, first_row, width, extra_columns)
            except (pa.ArrowException, OSError, _DamagedError) as exc:
                n = _row_group_triplets(handle, group, info.version)
                error = RecordingError(
                    info.path, f"triplets {first_row}..{first_row + n - 1} are unreadable ({exc})"
                )
                if not skip_bad:
                    raise error from None
                counts.bad_rows += n
                first_row += n
                continue
            first_row += len(chunk)
            block = chunk.block
            tied = np.flatnonzero(block.rel1 == block.rel2)
            if tied.size:
                if not skip_bad:
                    raise RecordingError(
                        info.path, "tied relevance (rel1 == rel2)", chunk.first_row + int(tied[0])
                    )
                counts.bad_rows += tied.size
                chunk = chunk.select(block.rel1 != block.rel2)
            counts.rows += len(chunk)
            yield chunk


class _DamagedError(ValueError):
    """A row group whose values contradict each other (e.g. an index outside its table)."""


def _pair_chunk(
    handle: pq.ParquetFile,
    group: int,
    info: LogFile,
    first_row: int,
    width: int,
    extra_columns: Sequence[str],
) -> TripletChunk:
    """A format-1 row group: one row per triplet, the pair layout."""
    wanted = ["partition", "offset", *_PAIR_ID_COLUMNS, "phi1", "phi2", *extra_columns]
    table = handle.read_row_group(group, columns=wanted, use_threads=False)
    block = TripletBlock.from_pairs(
        *(_numpy(table.column(c)) for c in _PAIR_ID_COLUMNS),
        phi_view(table.column("phi1")),
        phi_view(table.column("phi2")),
    )
    return TripletChunk(
        info.path,
        first_row,
        info.topic,
        _numpy(table.column("partition")),
        _numpy(table.column("offset")),
        block,
        {c: _column_values(table.column(c)) for c in extra_columns},
    )


def _group_chunk(
    handle: pq.ParquetFile,
    group: int,
    info: LogFile,
    first_row: int,
    width: int,
    extra_columns: Sequence[str],
) -> TripletChunk:
    """A format-2 row group: one row per group, each image's phi once."""
    wanted = ["partition", "offset", "query_id", "first_seq", *_GROUP_LIST_COLUMNS]
    table = handle.read_row_group(group, columns=wanted + list(extra_columns), use_threads=False)
    lists = {name: _list_column(table.column(name)) for name in _GROUP_LIST_COLUMNS}
    image_offsets = lists["image_id"][0]
    triplet_offsets = lists["p1"][0]
    if not np.array_equal(image_offsets, lists["phi"][0]) or not all(
        np.array_equal(triplet_offsets, lists[name][0]) for name in ("p2", "rel1", "rel2")
    ):
        raise _DamagedError("list columns of a row differ in length")
    groups = TripletGroups(
        query_id=_numpy(table.column("query_id")),
        first_seq=_numpy(table.column("first_seq")),
        image_offsets=image_offsets,
        image_id=_numpy(lists["image_id"][1]),
        phi=phi_view(lists["phi"][1]),
        triplet_offsets=triplet_offsets,
        p1=_numpy(lists["p1"][1]),
        p2=_numpy(lists["p2"][1]),
        rel1=_numpy(lists["rel1"][1]),
        rel2=_numpy(lists["rel2"][1]),
    )
    problem = groups.problem()
    if problem is not None:
        raise _DamagedError(problem)
    counts = groups.triplet_counts
    per_triplet = {c: np.repeat(_column_values(table.column(c)), counts) for c in extra_columns}
    return TripletChunk(
        info.path,
        first_row,
        info.topic,
        np.repeat(_numpy(table.column("partition")), counts),
        np.repeat(_numpy(table.column("offset")), counts),
        groups.to_block(),
        per_triplet,
    )


def _list_column(column: pa.ChunkedArray) -> tuple[np.ndarray, pa.Array]:
    """A Parquet list column's offsets (from 0) and values (one chunk, no nulls)."""
    array = column.combine_chunks() if column.num_chunks != 1 else column.chunk(0)
    if array.null_count or array.values.null_count:
        raise pa.ArrowInvalid(f"list column holds {array.null_count} null lists")
    offsets = offsets_view(array)
    first, last = int(offsets[0]), int(offsets[-1])
    values = array.values
    if first or last != len(values):
        values = values.slice(first, last - first)
    return offsets - first, values


def _row_group_triplets(handle: pq.ParquetFile, group: int, version: int) -> int:
    """Triplets in a row group (format 2 counts them from its `p1` lists, if readable)."""
    if version == 1:
        return handle.metadata.row_group(group).num_rows
    try:
        column = handle.read_row_group(group, columns=["p1"], use_threads=False).column("p1")
        return int(sum(len(chunk.values) for chunk in column.chunks))
    except (pa.ArrowException, OSError):
        return handle.metadata.row_group(group).num_rows  # groups: the best we know


def nonfinite_rows(chunk: TripletChunk) -> np.ndarray:
    """Triplets (within the chunk) whose p1's or p2's phi holds NaN or Inf."""
    block = chunk.block
    finite = np.isfinite(block.phi).all(axis=1)
    return np.flatnonzero(~(finite[block.p1] & finite[block.p2]))


def _numpy(column: pa.ChunkedArray | pa.Array) -> np.ndarray:
    if column.null_count:
        raise pa.ArrowInvalid(f"column holds {column.null_count} nulls")
    if isinstance(column, pa.Array):
        return numpy_view(column)
    if column.num_chunks == 1:
        return numpy_view(column.chunk(0))
    return numpy_view(column.combine_chunks())


def _column_values(column: pa.ChunkedArray | pa.Array) -> np.ndarray:
    if pa.types.is_fixed_size_binary(column.type):
        return phi_view(column)
    if pa.types.is_binary(column.type):
        values = np.empty(len(column), dtype=object)
        values[:] = column.to_pylist()
        return values
    return _numpy(column)


@dataclass(frozen=True)
class RecordedMessage:
    """One message rebuilt from a log, with where it was recorded from."""

    kind: str
    topic: str
    partition: int
    offset: int
    key: bytes | None
    timestamp_ms: int
    value: bytes
    rows: int
    path: Path
    first_row: int


_MESSAGE_COLUMNS = ("key", "timestamp_ms")


def iter_messages(
    directory: Path | str,
    kind: str,
    *,
    width: int = DEFAULT_PHI_DIM,
    skip_bad: bool = False,
    counts: ReadCounts | None = None,
) -> Iterator[RecordedMessage]:
    """The recorded messages of one kind, in order, re-encoded for the wire.

    Triplet messages are rebuilt from their rows with `encode_triplets` (same values,
    same order, the current wire version whatever the file's format); a query row's
    bytes are decoded to check them. A bad row raises RecordingError with file and row,
    or is counted and skipped.
    """
    counts = counts if counts is not None else ReadCounts()
    if kind == "triplets":
        yield from _triplet_messages(directory, skip_bad, counts, width)
        return
    for info, handle in _open_files(directory, "queries", skip_bad, counts, width):
        first_row = 0
        for group in range(handle.num_row_groups):
            n = handle.metadata.row_group(group).num_rows
            try:
                rows = handle.read_row_group(group).to_pylist()
            except (pa.ArrowException, OSError) as exc:
                if not skip_bad:
                    raise RecordingError(
                        info.path, f"rows {first_row}..{first_row + n - 1} are unreadable ({exc})"
                    ) from None
                counts.bad_rows += n
                first_row += n
                continue
            for i, row in enumerate(rows, start=first_row):
                problem = _bad_query_row(row, width)
                if problem is not None:
                    if not skip_bad:
                        raise RecordingError(info.path, problem, i)
                    counts.bad_rows += 1
                    continue
                counts.rows += 1
                yield RecordedMessage(
                    "queries",
                    info.topic,
                    row["partition"],
                    row["offset"],
                    row["key"],
                    row["timestamp_ms"],
                    row["value"],
                    1,
                    info.path,
                    i,
                )
            first_row += n


def _bad_query_row(row: dict, width: int) -> str | None:
    """Why a recorded query row is unusable (only a damaged file has one), or None."""
    nulls = [c for c in ("partition", "offset", "timestamp_ms", "value") if row[c] is None]
    if nulls:  # a recorder never writes nulls: damaged definition levels
        return f"null {', '.join(nulls)}"
    try:
        decode_query(row["value"], width=width)
    except SchemaError as exc:
        return f"bad query bytes: {exc}"
    return None


def _triplet_messages(
    directory: Path | str, skip_bad: bool, counts: ReadCounts, width: int
) -> Iterator[RecordedMessage]:
    for chunk in iter_triplet_chunks(
        directory, width=width, skip_bad=skip_bad, extra_columns=_MESSAGE_COLUMNS, counts=counts
    ):
        bad = nonfinite_rows(chunk)
        if bad.size:
            if not skip_bad:
                raise RecordingError(
                    chunk.path, "phi holds NaN or Inf", chunk.first_row + int(bad[0])
                )
            counts.bad_rows += bad.size
            counts.rows -= bad.size
            keep = np.ones(len(chunk), bool)
            keep[bad] = False
            chunk = chunk.select(keep)
        bounds = chunk.message_bounds()
        c = chunk.extra
        for start, stop in itertools.pairwise(bounds):
            if start == stop:
                continue
            value = encode_triplets(chunk.block.select(slice(start, stop)).compact())
            yield RecordedMessage(
                "triplets",
                chunk.topic,
                int(chunk.partition[start]),
                int(chunk.offset[start]),
                c["key"][start],
                int(c["timestamp_ms"][start]),
                value,
                int(stop - start),
                chunk.path,
                chunk.first_row + int(start),
            )


# --- feeding a log back into a transport ---------------------------------------------
@dataclass
class ReplayCounts:
    messages: dict[str, int] = field(default_factory=dict)  # kind -> messages sent
    rows: int = 0
    seconds: float = 0.0
    read: ReadCounts = field(default_factory=ReadCounts)


def replay_log(
    transport: Transport,
    directory: Path | str,
    topics: dict[str, str],
    *,
    speed: float | None = 1.0,
    width: int = DEFAULT_PHI_DIM,
    skip_bad: bool = False,
    on_message: Callable[[RecordedMessage], None] | None = None,
    sleep: Callable[[float], None] = time.sleep,
) -> ReplayCounts:
    """Send every recorded message of the kinds in `topics` (kind -> target topic).

    Kinds are merged by recorded timestamp, and each kind keeps its recorded order
    and keys. A message goes to its recorded partition when the target topic has it
    (created with as many partitions as the recording used), else by key. `speed`:
    1.0 keeps the recorded pace, 2.0 twice as fast, None as fast as possible.
    """
    if speed is not None and not (speed > 0 and np.isfinite(speed)):
        raise ValueError(f"speed must be a finite number > 0 (or None), got {speed}")
    counts = ReplayCounts(messages={kind: 0 for kind in topics})
    partitions = {kind: _recorded_partitions(directory, kind) for kind in topics}
    transport.ensure_topics(
        {topics[k]: max(max(ps, default=0) + 1, 1) for k, ps in partitions.items()}
    )
    available = {k: set(transport.partitions_for(topics[k])) for k in topics}
    streams = [
        iter_messages(directory, kind, width=width, skip_bad=skip_bad, counts=counts.read)
        for kind in topics
    ]
    producer = transport.producer()
    started = time.monotonic()
    first_ts: int | None = None
    try:
        for message in heapq.merge(*streams, key=lambda m: m.timestamp_ms):
            if speed is not None:
                first_ts = message.timestamp_ms if first_ts is None else first_ts
                due = started + (message.timestamp_ms - first_ts) / 1000 / speed
                if due > time.monotonic():
                    sleep(due - time.monotonic())
            partition = message.partition if message.partition in available[message.kind] else None
            producer.send(topics[message.kind], message.value, key=message.key, partition=partition)
            counts.messages[message.kind] += 1
            counts.rows += message.rows
            if on_message is not None:
                on_message(message)
        producer.flush()
    finally:
        producer.close()
    counts.seconds = time.monotonic() - started
    return counts


def _recorded_partitions(directory: Path | str, kind: str) -> set[int]:
    parts: set[int] = set()
    for path in log_paths(directory, kind):
        try:
            parts |= set(read_log_file(path, kind).next_offsets)
        except RecordingError:
            continue  # reported (or skipped) when the file is read
    return parts
