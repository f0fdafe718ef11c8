"""Zero-copy numpy views of Arrow arrays, read straight from their buffers.

pyarrow's `Array.to_numpy` imports pandas on first use whenever pandas is installed
(pyarrow 26 checks for pandas' extension types), which costs a process ~0.5 s the first
time it decodes a message or reads a recording: a third of `rankstream replay --direct`
before this module. The views here are what `to_numpy(zero_copy_only=True)` returns for
the arrays the wire and the recordings use (fixed-width numbers without nulls), read
from the buffers directly, so decoding never imports pandas.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa

_NUMPY = {
    pa.int8(): np.int8,
    pa.int16(): np.int16,
    pa.int32(): np.int32,
    pa.int64(): np.int64,
    pa.uint8(): np.uint8,
    pa.uint16(): np.uint16,
    pa.uint32(): np.uint32,
    pa.uint64(): np.uint64,
    pa.float32(): np.float32,
    pa.float64(): np.float64,
}


def numpy_view(array: pa.Array) -> np.ndarray:
    """A read-only view of a fixed-width numeric array without nulls (no copy).

    ValueError for anything else (nulls, another type): a caller that can meet those
    uses pyarrow's own conversion.
    """
    dtype = _NUMPY.get(array.type)
    if dtype is None:
        raise ValueError(f"no zero-copy view of a {array.type} array")
    if array.null_count:
        raise ValueError(f"a {array.type} array with {array.null_count} nulls has no view")
    data = array.buffers()[1]
    if data is None or len(array) == 0:
        return np.empty(0, dtype)
    width = np.dtype(dtype).itemsize
    view = np.frombuffer(data, dtype=dtype, count=len(array), offset=array.offset * width)
    view.flags.writeable = False
    return view


def offsets_view(array: pa.ListArray) -> np.ndarray:
    """The int32 offsets of a list array (len + 1 entries; a view, no copy)."""
    data = array.buffers()[1]
    view = np.frombuffer(data, dtype=np.int32, count=len(array) + 1, offset=array.offset * 4)
    view.flags.writeable = False
    return view
