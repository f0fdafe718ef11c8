"""Model arrays <-> bytes: a small self-describing binary that can never run code.

Layout: the magic `RSARRAY1`, a little-endian uint32 header length, a JSON header
listing each array's name, dtype (little-endian numpy string), shape, offset and byte
length, then the raw buffers, each starting on an 8-byte boundary. Only numeric and
boolean dtypes are accepted, so decoding is `np.frombuffer` on known types: no pickle,
no object arrays, nothing executable.
"""

from __future__ import annotations

import json
import re
import struct
from collections.abc import Mapping

import numpy as np

MAGIC = b"RSARRAY1"
_HEADER_LEN = struct.Struct("<I")
_ALIGN = 8
_NUMERIC_KINDS = frozenset("biufc")
_DTYPE_STR = re.compile(r"[<>|=][biufc][0-9]{1,2}")  # what numpy's dtype.str gives them


def _pad(n: int) -> int:
    return -n % _ALIGN


def _as_little_endian(name: str, array: np.ndarray) -> np.ndarray:
    if not isinstance(array, np.ndarray):
        raise ValueError(f"array {name!r}: expected numpy.ndarray, got {type(array).__name__}")
    if array.dtype.kind not in _NUMERIC_KINDS:
        raise ValueError(f"array {name!r}: dtype {array.dtype} is not numeric (bool/int/float)")
    return np.asarray(array, dtype=array.dtype.newbyteorder("<"), order="C")


def encode_arrays(arrays: Mapping[str, np.ndarray]) -> bytes:
    """Serialise named numeric arrays; raises ValueError for anything else."""
    entries, buffers, offset = [], [], 0
    for name, raw in arrays.items():
        if not isinstance(name, str) or not name:
            raise ValueError(f"array names must be non-empty strings, got {name!r}")
        array = _as_little_endian(name, raw)
        data = array.tobytes()
        entries.append(
            {
                "name": name,
                "dtype": array.dtype.str,
                "shape": list(array.shape),
                "offset": offset,
                "nbytes": len(data),
            }
        )
        buffers.append(data + b"\0" * _pad(len(data)))
        offset += len(data) + _pad(len(data))
    header = json.dumps(entries, separators=(",", ":")).encode()
    header += b" " * _pad(len(MAGIC) + _HEADER_LEN.size + len(header))
    return b"".join([MAGIC, _HEADER_LEN.pack(len(header)), header, *buffers])


def decode_arrays(data: bytes) -> dict[str, np.ndarray]:
    """Inverse of `encode_arrays`; arrays are writable and share one private buffer."""
    view = memoryview(data)
    if bytes(view[: len(MAGIC)]) != MAGIC:
        raise ValueError("not an encoded array bundle (bad magic)")
    start = len(MAGIC) + _HEADER_LEN.size
    if len(view) < start:
        raise ValueError("array bundle truncated in its header length")
    (header_len,) = _HEADER_LEN.unpack(view[len(MAGIC) : start])
    body_start = start + header_len
    if len(view) < body_start:
        raise ValueError("array bundle truncated in its header")
    try:
        entries = json.loads(bytes(view[start:body_start]))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ValueError(f"array bundle header is not JSON: {exc}") from None
    if not isinstance(entries, list):
        raise ValueError("array bundle header must be a list")
    body = bytearray(view[body_start:])
    out: dict[str, np.ndarray] = {}
    for entry in entries:
        out[entry.get("name", "?")] = _decode_entry(entry, body)
    return out


def _decode_entry(entry: object, body: bytearray) -> np.ndarray:
    try:
        name, dtype_str = entry["name"], entry["dtype"]  # type: ignore[index]
        shape, offset, nbytes = entry["shape"], entry["offset"], entry["nbytes"]  # type: ignore[index]
        if not (isinstance(dtype_str, str) and _DTYPE_STR.fullmatch(dtype_str)):
            # np.dtype() would parse anything (comma strings go through ast.literal_eval
            # and can raise SyntaxError); only simple numeric type strings are ours.
            raise ValueError(f"dtype {dtype_str!r} is not a numeric type string")
        dtype = np.dtype(dtype_str)
        shape = tuple(int(s) for s in shape)
    except (KeyError, TypeError, ValueError) as exc:
        raise ValueError(f"array bundle entry {entry!r} is malformed: {exc}") from None
    if dtype.kind not in _NUMERIC_KINDS or dtype.hasobject:
        raise ValueError(f"array {name!r}: dtype {dtype_str!r} is not numeric")
    if any(s < 0 for s in shape) or int(np.prod(shape, dtype=np.int64)) * dtype.itemsize != nbytes:
        raise ValueError(f"array {name!r}: shape {shape} does not match {nbytes} bytes")
    if not (isinstance(offset, int) and offset >= 0 and offset + nbytes <= len(body)):
        raise ValueError(f"array {name!r}: bundle truncated at bytes {offset}..{offset + nbytes}")
    return np.frombuffer(body, dtype=dtype, count=nbytes // dtype.itemsize, offset=offset).reshape(
        shape
    )
