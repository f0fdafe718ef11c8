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

`TripletReservoir` samples triplet blocks with exactly these draws, but stores the
normalized form the stream carries: each slot holds one triplet (seq, query, grades)
and two references into a table of sampled (query, image) points, where a point's phi
is kept once however many sampled triplets use it (the batch models deduplicate
points by (query, image) anyway). Only the rows a draw picks are copied in: the other
~99% of a long stream's triplets are never gathered.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from rankstream.ranking.triplets import TripletBlock
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
        slots, rows = self.offer(n)
        for buf, a in zip(self._buffers, arrays, strict=True):
            buf[slots] = a[rows]

    def offer(self, n: int) -> tuple[np.ndarray, np.ndarray]:
        """Draw the places of the next `n` rows: (slots, rows), row rows[i] goes to slot
        slots[i] (each slot at most once: a later row in the same slot wins, as the
        sequential loop leaves it). Advances `size` and `n_seen`; stores nothing."""
        fill = min(n, self.capacity - self.size)
        fill_slots = np.arange(self.size, self.size + fill, dtype=np.int64)
        fill_rows = np.arange(fill, dtype=np.int64)
        self.size += fill
        rest = n - fill
        slots, rows = fill_slots, fill_rows
        if rest > 0:
            t = self.n_seen + fill + np.arange(rest, dtype=np.float64)  # 0-based row numbers
            drawn = np.minimum(np.floor(self._rng.random(rest) * (t + 1.0)), t).astype(np.int64)
            chosen = np.flatnonzero(drawn < self.capacity)
            # later rows overwrite earlier ones in the same slot, as the sequential loop does
            reversed_slots = drawn[chosen][::-1]
            _, last = np.unique(reversed_slots, return_index=True)
            winners = chosen[::-1][last]
            replaced = drawn[winners]
            keep = ~np.isin(fill_slots, replaced)  # a fill row overwritten in the same call
            slots = np.concatenate([fill_slots[keep], replaced])
            rows = np.concatenate([fill_rows[keep], fill + winners])
        self.n_seen += n
        return slots, rows

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


_SLOT_COLUMNS = ("seq", "query_id", "rel1", "rel2")


class TripletReservoir:
    """A uniform sample of triplets (Algorithm R, `Reservoir`'s draws) in normalized form.

    Slot k holds triplet (seq, query_id, rel1, rel2) and the points p1, p2 it compares;
    a point is one (query, image, phi) and is stored once while any slot uses it
    (reference counts free it when its last slot is overwritten). Points are merged only
    when bit-identical, so `sample()` gives exactly the triplets, phi included, that a
    per-row reservoir over the pair layout would hold.

    >>> from rankstream.ranking.triplets import TripletBlock
    >>> phi = np.eye(3, dtype=np.float32)
    >>> block = TripletBlock(np.arange(3), np.zeros(3, np.int64), np.array([0, 0, 1]),
    ...                      np.array([1, 2, 2]), np.array([2, 2, 1], np.int8),
    ...                      np.array([1, 0, 0], np.int8), np.arange(3), phi)
    >>> r = TripletReservoir(capacity=2, seed=0)
    >>> r.add_block(block)
    >>> r.n_seen, r.size, r.points  # two slots over at most three distinct images
    (3, 2, 3)
    """

    def __init__(self, capacity: int, seed: int = 0, width: int | None = None) -> None:
        self._sampler = Reservoir(capacity, seed)
        self.capacity, self.seed = self._sampler.capacity, self._sampler.seed
        self.width = width
        self._slots = {
            "seq": np.zeros(self.capacity, np.int64),
            "query_id": np.zeros(self.capacity, np.int64),
            "rel1": np.zeros(self.capacity, np.int8),
            "rel2": np.zeros(self.capacity, np.int8),
        }
        self._p1 = np.zeros(self.capacity, np.int64)  # point rows
        self._p2 = np.zeros(self.capacity, np.int64)
        self._index: dict[bytes, int] = {}  # point key -> row of the point table
        self._refs = np.zeros(2 * self.capacity, np.int64)
        self._image = np.zeros(2 * self.capacity, np.int64)
        self._phi: np.ndarray | None = None  # (2 * capacity, width) float32 once known
        self._keys: list[bytes] = [b""] * (2 * self.capacity)
        self._free = list(range(2 * self.capacity - 1, -1, -1))

    @property
    def n_seen(self) -> int:
        return self._sampler.n_seen

    @property
    def size(self) -> int:
        return self._sampler.size

    @property
    def points(self) -> int:
        """Distinct points the sampled triplets reference."""
        return len(self._index)

    def add_block(self, block: TripletBlock) -> None:
        """Offer every triplet of `block`, in order (its table must be finite where used)."""
        n = len(block)
        if n == 0:
            return
        if self.width is None:
            self.width = block.dim
        if block.dim != self.width:
            raise ValueError(f"block phi has width {block.dim}, the reservoir holds {self.width}")
        filled = self.size
        slots, rows = self._sampler.offer(n)
        if len(slots) == 0:
            return
        table = np.unique(np.concatenate([block.p1[rows], block.p2[rows]]))
        bad = first_nonfinite_row(np.asarray(block.phi[table]))
        if bad >= 0:
            raise ValueError(f"table row {int(table[bad])} of the block holds NaN/Inf")
        old = slots[slots < filled]
        self._release(np.concatenate([self._p1[old], self._p2[old]]))
        point_of = np.full(len(block.image_id), -1, np.int64)
        point_of[table] = self._acquire(block, table)
        for name in _SLOT_COLUMNS:
            self._slots[name][slots] = np.asarray(getattr(block, name))[rows]
        self._p1[slots] = point_of[block.p1[rows]]
        self._p2[slots] = point_of[block.p2[rows]]
        np.add.at(self._refs, self._p1[slots], 1)
        np.add.at(self._refs, self._p2[slots], 1)

    def _acquire(self, block: TripletBlock, table: np.ndarray) -> np.ndarray:
        """Point rows of the block's table rows `table`, inserting new points."""
        if self._phi is None:
            self._phi = np.zeros((2 * self.capacity, self.width), np.float32)
        phi = np.ascontiguousarray(block.phi[table], dtype=np.float32)
        images = np.asarray(block.image_id)[table].astype(np.int64)
        query = self._query_of_rows(block, table)
        found = np.empty(len(table), np.int64)
        for i, key in enumerate(_point_keys(query, images, phi)):
            row = self._index.get(key)
            if row is None:
                row = self._free.pop()
                self._index[key] = row
                self._keys[row] = key
                self._image[row] = images[i]
                self._phi[row] = phi[i]
            found[i] = row
        return found

    @staticmethod
    def _query_of_rows(block: TripletBlock, table: np.ndarray) -> np.ndarray:
        """The query of each table row (that of a triplet referencing it)."""
        query = np.zeros(len(block.image_id), np.int64)
        query[block.p2] = block.query_id
        query[block.p1] = block.query_id
        return query[table]

    def _release(self, rows: np.ndarray) -> None:
        """Drop one reference per row given; free the points nobody references now."""
        if len(rows) == 0:
            return
        np.subtract.at(self._refs, rows, 1)
        for row in np.unique(rows[self._refs[rows] == 0]).tolist():
            del self._index[self._keys[row]]
            self._free.append(row)

    def sample(self) -> TripletBlock:
        """The sampled triplets in slot order over their points (canonical order: by
        first use, p1 before p2), each point once."""
        size = self.size
        p = np.column_stack([self._p1[:size], self._p2[:size]]).reshape(-1)
        rows, first = np.unique(p, return_index=True)
        order = rows[np.argsort(first, kind="stable")]
        local = np.empty(2 * self.capacity, np.int32)
        local[order] = np.arange(len(order), dtype=np.int32)
        width = self.width or 0
        phi = self._phi[order] if self._phi is not None else np.zeros((0, width), np.float32)
        return TripletBlock(
            *(self._slots[name][:size].copy() for name in ("seq", "query_id")),
            local[self._p1[:size]],
            local[self._p2[:size]],
            *(self._slots[name][:size].copy() for name in ("rel1", "rel2")),
            self._image[order],
            phi,
        )

    def to_state(self) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
        """JSON-able meta (the sampler's draws, width) and the sample: slot columns and
        each point once (`sample()`'s arrays)."""
        meta, _ = self._sampler.to_state()
        meta.update(kind="triplet_reservoir", n_columns=0, phi_dim=self.width)
        block = self.sample()
        arrays = {
            **{name: getattr(block, name) for name in ("seq", "query_id", "p1", "p2")},
            "rel1": block.rel1,
            "rel2": block.rel2,
            "image_id": block.image_id,
            "phi": block.phi,
        }
        return meta, arrays

    @classmethod
    def from_state(cls, meta: dict[str, Any], arrays: dict[str, np.ndarray]) -> TripletReservoir:
        """Rebuild a reservoir that continues exactly where `to_state` left off.

        Also reads a per-row `Reservoir` state of the pair layout (kind "reservoir",
        columns query_id, p1_id, p2_id, rel1, rel2, phi1, phi2: the batch worker's state
        before the normalized form); its seq are unknown and read back as -1.
        """
        kind = meta.get("kind")
        if kind == "reservoir":
            return cls._from_pair_rows(meta, arrays)
        if kind != "triplet_reservoir":
            raise ValueError(f"state kind {kind!r} is not 'triplet_reservoir'")
        width = meta.get("phi_dim")
        block = TripletBlock(
            *(np.asarray(arrays[name]) for name in ("seq", "query_id", "p1", "p2", "rel1")),
            np.asarray(arrays["rel2"]),
            np.asarray(arrays["image_id"]),
            np.asarray(arrays["phi"], np.float32).reshape(-1, width or 0),
        )
        return cls._restore(meta, block, width)

    @classmethod
    def _from_pair_rows(
        cls, meta: dict[str, Any], arrays: dict[str, np.ndarray]
    ) -> TripletReservoir:
        if int(meta.get("n_columns", 0)) != 7:
            raise ValueError("a per-row reservoir state needs the 7 pair-layout columns")
        q, p1_id, p2_id, rel1, rel2, phi1, phi2 = (
            np.asarray(arrays[f"column{i}"]) for i in range(7)
        )
        n = len(q)
        block = TripletBlock.from_pairs(
            np.full(n, -1, np.int64), q, p1_id, p2_id, rel1, rel2, phi1, phi2
        )
        return cls._restore(meta, block, block.dim if n else None)

    @classmethod
    def _restore(
        cls, meta: dict[str, Any], block: TripletBlock, width: int | None
    ) -> TripletReservoir:
        sampler = Reservoir.from_state({**meta, "kind": "reservoir", "n_columns": 0}, {})
        if len(block) != sampler.size:
            raise ValueError(f"every slot column must hold exactly {sampler.size} rows")
        m = len(block.image_id)
        if len(block) and (
            min(block.p1.min(), block.p2.min()) < 0 or max(block.p1.max(), block.p2.max()) >= m
        ):
            raise ValueError("a slot references a point outside the point table")
        res = cls(sampler.capacity, sampler.seed, width)
        if len(block):
            res.add_block(block)  # fills slots 0..size-1 in order, without draws
        res._sampler = sampler
        return res


def _point_keys(query: np.ndarray, images: np.ndarray, phi: np.ndarray) -> list[bytes]:
    """One bytes key per point: query id, image id and phi, as stored (bit-exact)."""
    rows = np.concatenate(
        [query.reshape(-1, 1).view(np.uint8), images.reshape(-1, 1).view(np.uint8),
         phi.view(np.uint8).reshape(len(phi), -1)],
        axis=1,
    )  # fmt: skip
    return [row.tobytes() for row in rows]
