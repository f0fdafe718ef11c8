"""A uniform sample of a stream: Vitter's Algorithm R over rows of arrays.

The batch learners (cMDS-DML, RankMKL refits) train on a fixed-size uniform sample
of every triplet seen so far. Algorithm R (Vitter, "Random Sampling with a
Reservoir", ACM TOMS 1985): the first `capacity` rows fill the reservoir; row t
(0-based) after that draws j uniform in 0..t and replaces slot j when j < capacity.

Two properties the streaming system relies on:

* Batch invariance. Each row past the fill consumes exactly one float64 draw
  (j = floor(u (t + 1))), so the result depends on the rows and the seed only,
  never on how the stream was cut into `add_many` calls (a restarted consumer may
  fetch different batch boundaries).
* Exact restart. `to_state()` holds the rows and the generator's state as JSON-able
  meta plus named arrays (no pickle), and `from_state()` continues identically.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from rankstream.ranking.validation import first_nonfinite_row


class Reservoir:
    """Keeps a uniform sample of at most `capacity` rows of one or more columns.

    >>> r = Reservoir(capacity=3, seed=7)
    >>> r.add_many(np.arange(10), np.arange(10) * 10.0)
    >>> r.n_seen, r.size
    (10, 3)
    >>> ids, values = r.columns
    >>> bool(np.all(values == ids * 10.0))
    True
    """

    def __init__(self, capacity: int, seed: int = 0) -> None:
        if int(capacity) != capacity or capacity < 1:
            raise ValueError(f"capacity must be a positive integer, got {capacity!r}")
        self.capacity = int(capacity)
        self.seed = int(seed)
        self._rng = np.random.Generator(np.random.PCG64(self.seed))
        self._buffers: list[np.ndarray] | None = None
        self.n_seen = 0
        self.size = 0

    @property
    def columns(self) -> tuple[np.ndarray, ...]:
        """The sampled rows of each column (copies), in slot order."""
        if self._buffers is None:
            return ()
        return tuple(b[: self.size].copy() for b in self._buffers)

    def _check_columns(self, columns: tuple[object, ...]) -> list[np.ndarray]:
        if not columns:
            raise ValueError("add_many needs at least one column")
        arrays = [np.asarray(c) for c in columns]
        for i, a in enumerate(arrays):
            if a.ndim < 1:
                raise ValueError(f"column {i} must have a leading row axis, got a scalar")
            if a.dtype == object:
                raise ValueError(f"column {i} has dtype object; pass numeric or string arrays")
        n = arrays[0].shape[0]
        for i, a in enumerate(arrays):
            if a.shape[0] != n:
                raise ValueError(f"column {i} has {a.shape[0]} rows, column 0 has {n}")
            if np.issubdtype(a.dtype, np.floating) or np.issubdtype(a.dtype, np.complexfloating):
                bad = first_nonfinite_row(a)
                if bad >= 0:
                    raise ValueError(f"column {i} row {bad} is NaN/Inf")
        if self._buffers is not None:
            if len(arrays) != len(self._buffers):
                raise ValueError(f"expected {len(self._buffers)} columns, got {len(arrays)}")
            for i, (a, b) in enumerate(zip(arrays, self._buffers, strict=True)):
                if a.shape[1:] != b.shape[1:]:
                    raise ValueError(f"column {i} rows have shape {a.shape[1:]}, not {b.shape[1:]}")
        return arrays

    def add_many(self, *columns: object) -> None:
        """Offer the rows of each column (all with the same number of rows)."""
        arrays = self._check_columns(columns)
        n = arrays[0].shape[0]
        if self._buffers is None:
            self._buffers = [np.empty((self.capacity, *a.shape[1:]), a.dtype) for a in arrays]
        fill = min(n, self.capacity - self.size)
        for buf, a in zip(self._buffers, arrays, strict=True):
            buf[self.size : self.size + fill] = a[:fill]
        self.size += fill
        rest = n - fill
        if rest > 0:
            t = self.n_seen + fill + np.arange(rest, dtype=np.float64)  # 0-based row numbers
            slots = np.minimum(np.floor(self._rng.random(rest) * (t + 1.0)), t).astype(np.int64)
            chosen = np.flatnonzero(slots < self.capacity)
            # later rows overwrite earlier ones in the same slot, as the sequential loop does
            reversed_slots = slots[chosen][::-1]
            _, last = np.unique(reversed_slots, return_index=True)
            winners = chosen[::-1][last]
            for buf, a in zip(self._buffers, arrays, strict=True):
                buf[slots[winners]] = a[fill + winners]
        self.n_seen += n

    def to_state(self) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
        """JSON-able meta (the generator state as decimal strings) and the sampled rows."""
        bit_state = self._rng.bit_generator.state
        meta = {
            "kind": "reservoir",
            "capacity": self.capacity,
            "seed": self.seed,
            "n_seen": self.n_seen,
            "size": self.size,
            "n_columns": 0 if self._buffers is None else len(self._buffers),
            "rng": {
                "bit_generator": bit_state["bit_generator"],
                "state": str(bit_state["state"]["state"]),
                "inc": str(bit_state["state"]["inc"]),
                "has_uint32": int(bit_state["has_uint32"]),
                "uinteger": int(bit_state["uinteger"]),
            },
        }
        return meta, {f"column{i}": c for i, c in enumerate(self.columns)}

    @classmethod
    def from_state(cls, meta: dict[str, Any], arrays: dict[str, np.ndarray]) -> Reservoir:
        """Rebuild a reservoir that continues exactly where `to_state` left off."""
        if meta.get("kind") != "reservoir":
            raise ValueError(f"state kind {meta.get('kind')!r} is not 'reservoir'")
        res = cls(meta["capacity"], meta["seed"])
        rng = meta["rng"]
        if rng["bit_generator"] != "PCG64":
            raise ValueError(f"unsupported bit generator {rng['bit_generator']!r}")
        res._rng.bit_generator.state = {
            "bit_generator": "PCG64",
            "state": {"state": int(rng["state"]), "inc": int(rng["inc"])},
            "has_uint32": int(rng["has_uint32"]),
            "uinteger": int(rng["uinteger"]),
        }
        size = int(meta["size"])
        if not 0 <= size <= res.capacity:
            raise ValueError(f"size {size} outside 0..{res.capacity}")
        columns = [np.asarray(arrays[f"column{i}"]) for i in range(int(meta["n_columns"]))]
        if any(c.shape[0] != size for c in columns):
            raise ValueError(f"every column must hold exactly {size} rows")
        if columns:
            res._buffers = [np.empty((res.capacity, *c.shape[1:]), c.dtype) for c in columns]
            for buf, c in zip(res._buffers, columns, strict=True):
                buf[:size] = c
        res.size = size
        res.n_seen = int(meta["n_seen"])
        return res
