"""Shared input checks for everything in `ranking`.

Every learner and metric validates at its boundary with these helpers, so a bad
input fails the same way everywhere: a ValueError that names the argument, the
problem, and (for matrices) the index of the first bad row. Conversions happen
once here (float32 -> float64, C order) so the compiled kernels see one layout.
"""

from __future__ import annotations

import numpy as np


def first_nonfinite_row(X: np.ndarray) -> int:
    """Index of the first row holding a NaN or Inf, or -1 when all are finite."""
    if np.isfinite(X).all():  # the common case: one pass, no per-row reduction
        return -1
    bad = ~np.isfinite(X)
    if X.ndim > 1:
        bad = bad.any(axis=tuple(range(1, X.ndim)))
    hits = np.flatnonzero(bad)
    return int(hits[0]) if hits.size else -1


def _real_array(x: object, name: str, ndim: int, layout: str) -> np.ndarray:
    """`x` as an array of real numbers with `ndim` dimensions (`layout` names them)."""
    arr = np.asarray(x)
    if arr.dtype == object or not (
        np.issubdtype(arr.dtype, np.floating) or np.issubdtype(arr.dtype, np.integer)
    ):
        raise ValueError(f"{name} must hold real numbers, got dtype {arr.dtype}")
    if arr.ndim != ndim:
        raise ValueError(f"{name} must be {ndim}-d {layout}, got {arr.ndim}-d shape {arr.shape}")
    return arr


def as_float_matrix(
    X: object, name: str = "X", dim: int | None = None, check_finite: bool = True
) -> np.ndarray:
    """`X` as a finite, C-ordered float64 (n, d) array; `dim` fixes d when given.

    `check_finite=False` skips the NaN/Inf scan for callers (the compiled learners)
    that detect non-finite rows in the same pass that uses them.
    """
    arr = _real_array(X, name, 2, "(n, d)")
    if dim is not None and arr.shape[1] != dim:
        raise ValueError(f"{name} has {arr.shape[1]} columns, expected {dim}")
    arr = np.ascontiguousarray(arr, dtype=np.float64)
    if check_finite:
        bad = first_nonfinite_row(arr)
        if bad >= 0:
            raise ValueError(f"{name} row {bad} contains NaN or Inf")
    return arr


def as_float_vector(x: object, name: str = "x", dim: int | None = None) -> np.ndarray:
    """`x` as a finite, contiguous float64 (d,) array; `dim` fixes d when given."""
    arr = _real_array(x, name, 1, "(d,)")
    if dim is not None and arr.shape[0] != dim:
        raise ValueError(f"{name} has length {arr.shape[0]}, expected {dim}")
    arr = np.ascontiguousarray(arr, dtype=np.float64)
    bad = first_nonfinite_row(arr)
    if bad >= 0:
        raise ValueError(f"{name}[{bad}] is NaN or Inf")
    return arr


def as_pair_labels(y: object, n: int, name: str = "y") -> np.ndarray:
    """Pair labels as float64 (n,) holding only +1 and -1 (the order p1 > p2 or p1 < p2)."""
    arr = np.asarray(y)
    if arr.ndim != 1:
        raise ValueError(f"{name} must be 1-d (n,), got {arr.ndim}-d shape {arr.shape}")
    if arr.shape[0] != n:
        raise ValueError(f"{name} has {arr.shape[0]} labels for {n} rows")
    if arr.dtype == object or arr.dtype == bool or not np.issubdtype(arr.dtype, np.number):
        raise ValueError(f"{name} must be numeric +1/-1 labels, got dtype {arr.dtype}")
    arr = np.ascontiguousarray(arr, dtype=np.float64)
    bad = np.flatnonzero((arr != 1.0) & (arr != -1.0))
    if bad.size:
        raise ValueError(f"{name}[{bad[0]}] = {arr[bad[0]]!r}; labels must be +1 or -1")
    return arr


def as_relevance(rel: object, n: int, name: str = "relevance") -> np.ndarray:
    """Graded relevance as finite, non-negative float64 (n,)."""
    arr = as_float_vector(rel, name, n)
    neg = np.flatnonzero(arr < 0)
    if neg.size:
        raise ValueError(f"{name}[{neg[0]}] = {arr[neg[0]]!r}; relevance must be >= 0")
    return arr


def check_positive(value: float, name: str) -> float:
    """A finite, strictly positive hyper-parameter as float."""
    v = float(value)
    if not np.isfinite(v) or v <= 0:
        raise ValueError(f"{name} must be a finite number > 0, got {value!r}")
    return v
