"""Logged streams on disk, their files: the format, the footer metadata, the paths.

A recording is rolling Parquet files of triplets, judged queries, impressions and
clicks. This module holds
what the writer (`stream.recording_writer`), the readers (`stream.recording_reader`) and
the replay into a transport (`stream.recording_replay`) share: the files' layouts and
schemas, their footer metadata, where they are, and the width check.

A recording directory holds one folder per stream kind (`triplets/`, `queries/`,
`impressions/`, `clicks/`), each a run of numbered Parquet files. Every file is written
to a temporary name, fsynced and renamed, so a file that exists is complete; its footer
metadata names the format version, the source topic, the feature width (`phi_dim`), the
consumer position per partition when the file's first message was read (`from_offsets`)
and after its last (`next_offsets`). A restarted recorder seeks every partition to the largest
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
* queries, impressions, clicks (`MESSAGE_KINDS`): one row per message holding the
  original Arrow IPC bytes (`value`), validated with the kind's decoder
  (`decode_query`, `decode_impressions`, `decode_clicks`, at the recording's width) when
  recorded and again when read. An impressions message already holds each impression's
  candidates' phi once (`stream.click_schema`), so its bytes are the compact form; keeping
  them whole keeps rows the join would dead-letter (a bad row within a good message), so a
  replayed join dead-letters and emits exactly what the original did.

Readers of either triplet format yield `TripletChunk`s whose `block` is normalized
(triplets indexing an image table; format-1 files give the pair layout's table); row
numbers in errors count triplets within the file.

The long-running recorder that fills a recording from the topics is
`workers.recorder`.

Only what a worker would learn from is recorded: a triplet message that fails to
decode (at the recorder's width) is counted and left out, and rejected triplets
(NaN/Inf, ties) are dropped, exactly as `workers.online_worker` dead-letters them; replaying
the log therefore trains the same weights as the original stream.

A damaged file raises `RecordingError` naming the file and, where it can be known, the
row; readers given `skip_bad=True` count and skip the damage instead. A file of another
feature width is never skipped: it raises, whatever `skip_bad` says.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from rankstream.stream.click_schema import decode_clicks, decode_impressions
from rankstream.stream.schema import decode_query, triplets_fields


class MessageKind(NamedTuple):
    """A kind recorded one row per message, as its wire bytes."""

    noun: str  # what one of its records is called in errors
    check: Callable[[bytes, int], object]  # decode at a width; SchemaError if unusable


MESSAGE_KINDS = {
    "queries": MessageKind("query", lambda value, width: decode_query(value, width=width)),
    "impressions": MessageKind(
        "impression", lambda value, width: decode_impressions(value, width=width)
    ),
    "clicks": MessageKind("click", lambda value, width: decode_clicks(value)),
}
KINDS = ("triplets", *MESSAGE_KINDS)
FORMAT_VERSION = 2  # written; READ_FORMATS are read
READ_FORMATS = (1, 2)
FILE_NAME = re.compile(r"^(\d{8})\.parquet$")
META_KEY = b"rankstream.recording"
PAIR_ID_COLUMNS = ("seq", "query_id", "p1_id", "p2_id", "rel1", "rel2")  # format 1
GROUP_LIST_COLUMNS = ("image_id", "phi", "p1", "p2", "rel1", "rel2")  # format 2
SOURCE_FIELDS = [
    pa.field("partition", pa.int32()),
    pa.field("offset", pa.int64()),
    pa.field("key", pa.binary()),
    pa.field("timestamp_ms", pa.int64()),
]
MESSAGE_LOG_SCHEMA = pa.schema([*SOURCE_FIELDS, pa.field("value", pa.binary())])
DEFAULT_ROW_GROUP_ROWS = 65_536  # triplets per row group (whole messages)


def phi_field(name: str, width: int) -> pa.Field:
    logical = f"fixed_size_list<float32>[{width}] little-endian".encode()
    return pa.field(name, pa.binary(4 * width), metadata={b"rankstream.logical_type": logical})


def triplet_log_schema(width: int, version: int = FORMAT_VERSION) -> pa.Schema:
    """The columns of a triplet log file of format `version` at feature width `width`."""
    if version == 1:
        wire = triplets_fields(width, 1)
        return pa.schema(
            SOURCE_FIELDS
            + [wire.field(name) for name in PAIR_ID_COLUMNS]
            + [phi_field(name, width) for name in ("phi1", "phi2")]
        )
    if version == 2:
        wire = triplets_fields(width, 2)
        return pa.schema(
            SOURCE_FIELDS
            + [wire.field("query_id"), wire.field("first_seq"), wire.field("image_id")]
            + [pa.field("phi", pa.list_(phi_field("item", width)))]
            + [wire.field(name) for name in ("p1", "p2", "rel1", "rel2")]
        )
    raise ValueError(f"triplet log format {version} does not exist; formats are {READ_FORMATS}")


def log_schema(kind: str, width: int, version: int = FORMAT_VERSION) -> pa.Schema:
    """The columns of a `kind` log file (message kinds' files are the same in every format)."""
    return triplet_log_schema(width, version) if kind == "triplets" else MESSAGE_LOG_SCHEMA


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
    records: int  # triplets (triplets files), else the messages it holds
    messages: int
    from_offsets: dict[int, int]  # partition -> consumer position before this file
    next_offsets: dict[int, int]  # partition -> consumer position after this file
    version: int = FORMAT_VERSION
    phi_dim: int | None = None  # None: a format-1 file (its phi column's size says)


def kind_dir(directory: Path | str, kind: str) -> Path:
    if kind not in KINDS:
        raise ValueError(f"unknown stream kind {kind!r}; expected one of {KINDS}")
    return Path(directory) / kind


def log_paths(directory: Path | str, kind: str) -> list[Path]:
    """The committed files of one kind, in recording order (temporary files ignored)."""
    folder = kind_dir(directory, kind)
    if not folder.is_dir():
        return []
    return sorted(p for p in folder.iterdir() if FILE_NAME.match(p.name))


def read_log_file(path: Path | str, kind: str) -> LogFile:
    """A file's footer metadata; RecordingError if the file is not a complete log file."""
    path = Path(path)
    try:
        metadata = pq.read_metadata(path)
    except (pa.ArrowException, OSError, UnicodeDecodeError) as exc:  # damaged column names
        raise RecordingError(path, f"not a complete Parquet file ({exc})") from None
    raw = (metadata.metadata or {}).get(META_KEY)
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


def check_continuity(position: dict[int, int], f: LogFile) -> None:
    """A file must start, per partition, exactly where the previous one stopped."""
    for partition, start in f.from_offsets.items():
        if partition in position and position[partition] != start:
            raise RecordingError(
                f.path,
                f"partition {partition} starts at offset {start} but the previous "
                f"file stopped at {position[partition]} (a gap or an overlap)",
            )


def phi_to_arrow(phi: np.ndarray) -> pa.Array:
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


class WidthMismatchError(RecordingError):
    """A file recorded at another feature width: a configuration error, never skipped."""


def check_width(info: LogFile, handle: pq.ParquetFile, width: int) -> None:
    found = info.phi_dim
    if found is None and info.kind == "triplets":  # format 1: the phi column's byte width
        names = handle.schema_arrow.names
        if "phi1" in names:
            found = handle.schema_arrow.field("phi1").type.byte_width // 4
    if found is not None and found != width:
        raise WidthMismatchError(
            info.path, f"recorded at feature width {found}; this deployment's width is {width}"
        )
