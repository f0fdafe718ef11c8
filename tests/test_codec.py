"""The array codec: exact round trips of numeric arrays, refusal of everything else."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from rankstream.stream.codec import MAGIC, decode_arrays, encode_arrays

_dtypes = st.sampled_from(
    ["<f8", ">f8", "<f4", "<f2", "<i8", ">i4", "<i2", "i1", "u1", "<u4", "<u8", "?", "<c16"]
)


@settings(max_examples=60, deadline=None)
@given(
    st.dictionaries(
        st.text(min_size=1, max_size=8),
        _dtypes.flatmap(
            lambda dt: hnp.arrays(
                dt, hnp.array_shapes(min_dims=0, max_dims=3, min_side=0, max_side=5)
            )
        ),
        max_size=4,
    )
)
def test_any_numeric_arrays_round_trip_bit_exactly(arrays):
    decoded = decode_arrays(encode_arrays(arrays))
    assert list(decoded) == list(arrays)
    for name, array in arrays.items():
        got = decoded[name]
        assert got.shape == array.shape
        assert got.dtype == array.dtype.newbyteorder("<")
        assert got.tobytes() == np.asarray(array, got.dtype, order="C").tobytes()
        assert got.flags.writeable


def test_non_contiguous_and_fortran_arrays_encode_their_values():
    base = np.arange(24, dtype=np.float64).reshape(4, 6)
    arrays = {"strided": base[:, ::2], "fortran": np.asfortranarray(base)}
    decoded = decode_arrays(encode_arrays(arrays))
    assert np.array_equal(decoded["strided"], base[:, ::2])
    assert np.array_equal(decoded["fortran"], base)


@pytest.mark.parametrize(
    "bad",
    [
        np.array(["a"]),
        np.array([b"a"]),
        np.array([object()], dtype=object),
        np.array([1], dtype="datetime64[s]"),
        [1.0, 2.0],
    ],
)
def test_non_numeric_values_are_refused(bad):
    with pytest.raises(ValueError):
        encode_arrays({"x": bad})


def test_corrupt_bundles_raise_value_errors():
    good = encode_arrays({"w": np.arange(10.0)})
    for data in [b"", b"garbage!", good[:10], good[:-8], MAGIC + b"\xff\xff\xff\x7f"]:
        with pytest.raises(ValueError):
            decode_arrays(data)
    header_len = int.from_bytes(good[8:12], "little")
    header = good[12 : 12 + header_len]
    for evil in [
        b'[{"name":"w","dtype":"|O","shape":[1],"offset":0,"nbytes":8}]',
        b'[{"name":"w","dtype":"<f8","shape":[3],"offset":0,"nbytes":8}]',
        b'{"not": "a list"}',
        b"not json",
    ]:
        padded = evil.ljust(len(header))
        with pytest.raises(ValueError):
            decode_arrays(good[:12] + padded + good[12 + header_len :])
