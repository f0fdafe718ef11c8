"""Reading a recording: triplet chunks for learning, whole messages for replay.

Readers of either triplet format (`stream.recording_files`) yield `TripletChunk`s whose
`block` is normalized (triplets indexing an image table; format-1 files give the pair
layout's table), phi as zero-copy (m, d) float32 views; row numbers in errors count
triplets within the file. `iter_messages` gives back the recorded messages themselves,
re-encoded where the file holds decoded rows.

A damaged file raises `RecordingError` naming the file and, where it can be known, the
row; readers given `skip_bad=True` count and skip the damage instead. A file of another
feature width is never skipped: it raises, whatever `skip_bad` says.
"""

from __future__ import annotations

import itertools
import mmap
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from rankstream.ranking.triplets import TripletBlock
from rankstream.stream.arrow_views import numpy_view, offsets_view
from rankstream.stream.recording_files import (
    GROUP_LIST_COLUMNS,
    MESSAGE_KINDS,
    PAIR_ID_COLUMNS,
    LogFile,
    RecordingError,
    WidthMismatchError,
    check_continuity,
    check_width,
    log_paths,
    log_schema,
    phi_view,
    read_log_file,
)
from rankstream.stream.schema import (
    SchemaError,
    encode_triplets,
)
from rankstream.stream.settings import DEFAULT_PHI_DIM
from rankstream.stream.triplet_groups import TripletGroups


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
            check_width(info, handle, width)
            expected = log_schema(kind, width, info.version)
            if not handle.schema_arrow.remove_metadata().equals(expected.remove_metadata()):
                raise RecordingError(
                    path,
                    f"columns {handle.schema_arrow.names} are not a format-{info.version} "
                    f"{kind} log's {expected.names}",
                )
            check_continuity(position, info)
        except RecordingError as error:
            if not skip_bad or isinstance(error, WidthMismatchError):
                raise
            counts.bad_files += 1
            position = {}  # what the skipped file covered is unknown
            continue
        position.update(info.next_offsets)
        counts.files += 1
        yield info, handle


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
        first_row = 0
        for group in range(handle.num_row_groups):
            try:
                chunk = _read_chunk(handle, group, info, first_row, extra_columns)
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


def _read_chunk(
    handle: pq.ParquetFile,
    group: int,
    info: LogFile,
    first_row: int,
    extra_columns: Sequence[str],
) -> TripletChunk:
    """One row group: its layout's triplets (format 1: one row per triplet, format 2: one
    row per group), each with the partition, offset and `extra_columns` of its row."""
    columns, to_block = _PAIR_LAYOUT if info.version == 1 else _GROUP_LAYOUT
    wanted = ["partition", "offset", *columns, *extra_columns]
    table = handle.read_row_group(group, columns=wanted, use_threads=False)
    block, triplets_per_row = to_block(table)

    def per_triplet(values: np.ndarray) -> np.ndarray:
        return values if triplets_per_row is None else np.repeat(values, triplets_per_row)

    return TripletChunk(
        info.path,
        first_row,
        info.topic,
        per_triplet(_numpy(table.column("partition"))),
        per_triplet(_numpy(table.column("offset"))),
        block,
        {c: per_triplet(_column_values(table.column(c))) for c in extra_columns},
    )


def _pair_block(table: pa.Table) -> tuple[TripletBlock, None]:
    """Format 1, the pair layout: one row per triplet."""
    block = TripletBlock.from_pairs(
        *(_numpy(table.column(c)) for c in PAIR_ID_COLUMNS),
        phi_view(table.column("phi1")),
        phi_view(table.column("phi2")),
    )
    return block, None


def _group_block(table: pa.Table) -> tuple[TripletBlock, np.ndarray]:
    """Format 2: one row per group, each image's phi once; also each row's triplet count."""
    lists = {name: _list_column(table.column(name)) for name in GROUP_LIST_COLUMNS}
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
    return groups.to_block(), groups.triplet_counts


# per format, the columns a row group's triplets are read from and how
_PAIR_LAYOUT = ([*PAIR_ID_COLUMNS, "phi1", "phi2"], _pair_block)
_GROUP_LAYOUT = (["query_id", "first_seq", *GROUP_LIST_COLUMNS], _group_block)


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
    same order, the current wire version whatever the file's format); the bytes of a
    message kind's row (queries, impressions, clicks) are decoded to check them. A bad
    row raises RecordingError with file and row, or is counted and skipped.
    """
    counts = counts if counts is not None else ReadCounts()
    if kind == "triplets":
        yield from _triplet_messages(directory, skip_bad, counts, width)
        return
    for info, handle in _open_files(directory, kind, skip_bad, counts, width):
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
                problem = _bad_message_row(kind, row, width)
                if problem is not None:
                    if not skip_bad:
                        raise RecordingError(info.path, problem, i)
                    counts.bad_rows += 1
                    continue
                counts.rows += 1
                yield RecordedMessage(
                    kind,
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


def _bad_message_row(kind: str, row: dict, width: int) -> str | None:
    """Why a recorded message row is unusable (only a damaged file has one), or None."""
    nulls = [c for c in ("partition", "offset", "timestamp_ms", "value") if row[c] is None]
    if nulls:  # a recorder never writes nulls: damaged definition levels
        return f"null {', '.join(nulls)}"
    try:
        MESSAGE_KINDS[kind].check(row["value"], width)
    except SchemaError as exc:
        return f"bad {MESSAGE_KINDS[kind].noun} bytes: {exc}"
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
