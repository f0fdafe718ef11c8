"""Triplet blocks as groups: each judged query's triplets with its own image table.

The normalized wire form (`stream.schema`, triplets version 2) and the version-2
recordings (`stream.recording_files`) store a block as *groups*: a group is a run of
triplets of one query whose `seq` values are consecutive, with the table of the
distinct images they reference (`image_id`, `phi`) and the triplets as small indices
into that table (`p1`, `p2`, int16) plus `rel1`, `rel2`. A group's seq is implicit:
`first_seq` + the triplet's position in the group. A simulator block (one judged query)
is one group; a block with gaps in `seq` or several queries becomes several groups.

`group_triplets` makes groups from any `TripletBlock`, merging table rows that are
bit-identical (same image id, same phi bytes) within a group, so a block built from
the pair layout (`TripletBlock.from_pairs`, two table rows per triplet) still sends
each distinct image once. `TripletGroups.to_block` is the way back: the image table
and relevance stay views of the arrays given (Arrow or Parquet buffers); only the
index, seq and query columns are computed.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from rankstream.ranking.triplets import TripletBlock

MAX_GROUP_IMAGES = int(np.iinfo(np.int16).max) + 1  # p1/p2 are int16 rows of a group's table
# A run of this many triplets references at most 2 x as many images, within the int16 range.
MAX_GROUP_TRIPLETS = MAX_GROUP_IMAGES // 2
_INT64_MAX = np.iinfo(np.int64).max


@dataclass(frozen=True)
class TripletGroups:
    """Groups as flat columns with offsets (Arrow's list layout): group g owns images
    image_offsets[g]:image_offsets[g+1] and triplets triplet_offsets[g]:triplet_offsets[g+1]."""

    query_id: np.ndarray  # int64 (g,)
    first_seq: np.ndarray  # int64 (g,)
    image_offsets: np.ndarray  # integer (g + 1,), starting at 0
    image_id: np.ndarray  # int64 (m,)
    phi: np.ndarray  # float32 (m, d)
    triplet_offsets: np.ndarray  # integer (g + 1,), starting at 0
    p1: np.ndarray  # int16 (n,) row of the group's image table
    p2: np.ndarray  # int16 (n,)
    rel1: np.ndarray  # int8 (n,)
    rel2: np.ndarray  # int8 (n,)
    weight: np.ndarray | None = None  # float32 (n,) importance weights; None = all 1

    def __len__(self) -> int:
        return len(self.query_id)

    @property
    def triplet_counts(self) -> np.ndarray:
        return np.diff(self.triplet_offsets)

    def problem(self) -> str | None:
        """What makes these groups inconsistent (offsets, indices, seq overflow), or None.

        Row-level faults (non-finite phi, tied relevance) are not problems here: the
        caller decides whether they reject triplets or the whole input.
        """
        g, m, n = len(self.query_id), len(self.image_id), len(self.p1)
        for name, offsets, total in (
            ("image", self.image_offsets, m),
            ("triplet", self.triplet_offsets, n),
        ):
            if offsets.shape != (g + 1,) or offsets[0] != 0 or offsets[-1] != total:
                return f"{name} offsets do not cover the {total} {name}s of {g} groups"
            if g > 1 and (np.diff(offsets) < 0).any():
                return f"{name} offsets decrease"
        if self.first_seq.shape != (g,) or self.phi.shape[0] != m:
            return "first_seq, image_id and phi lengths disagree"
        if not (len(self.p2) == len(self.rel1) == len(self.rel2) == n):
            return "p1, p2, rel1 and rel2 lengths disagree"
        if self.weight is not None and len(self.weight) != n:
            return "p1 and weight lengths disagree"
        if n == 0:
            return None
        if g == 1:  # one judged query: the common message, checked with scalars
            low = min(int(self.p1.min()), int(self.p2.min()))
            high = max(int(self.p1.max()), int(self.p2.max()))
            if low < 0 or high >= m:
                return f"a triplet references an image outside its group's {m} images"
            if int(self.first_seq[0]) > _INT64_MAX - (n - 1):
                return "first_seq + the group's triplets overflows int64"
            return None
        counts = self.triplet_counts
        images = np.repeat(np.diff(self.image_offsets), counts)
        bad = (self.p1 < 0) | (self.p1 >= images) | (self.p2 < 0) | (self.p2 >= images)
        if bad.any():
            t = int(np.flatnonzero(bad)[0])
            return f"triplet {t} references an image outside its group's {int(images[t])} images"
        last = np.maximum(counts.astype(np.int64) - 1, 0)  # seq of a group's last triplet
        if (self.first_seq > _INT64_MAX - last).any():
            return "first_seq + the group's triplets overflows int64"
        return None

    def to_block(self) -> TripletBlock:
        """The triplets as one block over the concatenated image tables (no checks:
        call `problem()` first on untrusted input)."""
        n = int(self.triplet_offsets[-1])
        if len(self.query_id) == 1:  # one judged query: the common message
            return TripletBlock(
                seq=self.first_seq[0] + np.arange(n, dtype=np.int64),
                query_id=np.full(n, self.query_id[0], dtype=np.int64),
                p1=self.p1.astype(np.int32),
                p2=self.p2.astype(np.int32),
                rel1=self.rel1,
                rel2=self.rel2,
                image_id=self.image_id,
                phi=self.phi,
                weight=self.weight,
            )
        counts = self.triplet_counts
        image_start = np.repeat(self.image_offsets[:-1].astype(np.int32), counts)
        seq_base = np.repeat(self.first_seq - self.triplet_offsets[:-1], counts)
        return TripletBlock(
            seq=seq_base + np.arange(n, dtype=np.int64),
            query_id=np.repeat(self.query_id, counts),
            p1=image_start + self.p1,
            p2=image_start + self.p2,
            rel1=self.rel1,
            rel2=self.rel2,
            image_id=self.image_id,
            phi=self.phi,
            weight=self.weight,
        )


def group_starts(block: TripletBlock) -> np.ndarray:
    """Row numbers where a group starts: a new query, a gap in seq, or the size limit."""
    n = len(block)
    if n == 0:
        return np.zeros(0, dtype=np.int64)
    seq, query = np.asarray(block.seq), np.asarray(block.query_id)
    # seq[i + 1] == seq[i] + 1, without int64 wrap-around (max, min would pass diff == 1)
    breaks = (np.diff(query) != 0) | (np.diff(seq) != 1) | (seq[1:] < seq[:-1])
    starts = np.concatenate(([0], np.flatnonzero(breaks) + 1))
    ends = np.append(starts[1:], n)
    long = (ends - starts) > MAX_GROUP_TRIPLETS
    if long.any():  # cut long runs into pieces whose tables fit int16 indices
        pieces = [np.arange(a, b, MAX_GROUP_TRIPLETS) for a, b in zip(starts, ends, strict=True)]
        starts = np.concatenate(pieces)
    return starts.astype(np.int64)


def group_triplets(block: TripletBlock) -> TripletGroups:
    """`block` as groups; each group's table holds the distinct rows it references.

    Table rows are merged only when bit-identical (image id and phi bytes), and each
    group's table keeps the block's table order.
    """
    block = block.compact()  # only referenced rows: a slice of a big chunk stays cheap
    weight = None if block.weight is None else np.asarray(block.weight, np.float32)
    n, m = len(block), len(block.image_id)
    starts = group_starts(block)
    g = len(starts)
    triplet_offsets = np.append(starts, n)
    p1, p2 = np.asarray(block.p1, np.int64), np.asarray(block.p2, np.int64)
    image_offsets = _grouped_table(block, p1, p2, starts)
    if image_offsets is not None:  # simulator blocks, one or several: the table as it is
        local = np.repeat(image_offsets[:-1], np.diff(triplet_offsets))
        return TripletGroups(
            np.asarray(block.query_id, np.int64)[starts],
            np.asarray(block.seq, np.int64)[starts],
            image_offsets,
            np.asarray(block.image_id, np.int64),
            np.asarray(block.phi, np.float32),
            triplet_offsets,
            (p1 - local).astype(np.int16),
            (p2 - local).astype(np.int16),
            np.asarray(block.rel1, np.int8),
            np.asarray(block.rel2, np.int8),
            weight,
        )
    canonical = _canonical_rows(block)
    group_of = np.repeat(np.arange(g, dtype=np.int64), np.diff(triplet_offsets))
    keys = np.concatenate([group_of, group_of]) * max(m, 1) + canonical[np.concatenate([p1, p2])]
    unique, local_of_ref = np.unique(keys, return_inverse=True)
    rows = unique % max(m, 1)
    image_offsets = np.searchsorted(unique // max(m, 1), np.arange(g + 1))
    local = local_of_ref.reshape(-1) - image_offsets[np.concatenate([group_of, group_of])]
    return TripletGroups(
        np.asarray(block.query_id, np.int64)[starts],
        np.asarray(block.seq, np.int64)[starts],
        image_offsets.astype(np.int64),
        np.asarray(block.image_id, np.int64)[rows],
        np.asarray(block.phi, np.float32)[rows],
        triplet_offsets,
        local[:n].astype(np.int16),
        local[n:].astype(np.int16),
        np.asarray(block.rel1, np.int8),
        np.asarray(block.rel2, np.int8),
        weight,
    )


def _grouped_table(
    block: TripletBlock, p1: np.ndarray, p2: np.ndarray, starts: np.ndarray
) -> np.ndarray | None:
    """The groups' image offsets when the (compact) table is already grouped: each
    group references its own run of consecutive rows, in group order, with distinct
    image ids (so no two of its rows can be bit-identical); else None."""
    m = len(block.image_id)
    if len(starts) == 0:
        return np.zeros(1, np.int64) if m == 0 else None
    low = np.minimum(np.minimum.reduceat(p1, starts), np.minimum.reduceat(p2, starts))
    high = np.maximum(np.maximum.reduceat(p1, starts), np.maximum.reduceat(p2, starts)) + 1
    # every row is referenced (compact), so disjoint runs covering 0..m are the groups'
    if low[0] != 0 or high[-1] != m or (low[1:] != high[:-1]).any():
        return None
    sizes = high - low
    if sizes.max() > MAX_GROUP_IMAGES:
        return None
    group_of_row = np.repeat(np.arange(len(starts)), sizes)
    ids = np.asarray(block.image_id)
    order = np.lexsort((ids, group_of_row))
    same = (np.diff(group_of_row[order]) == 0) & (np.diff(ids[order]) == 0)
    return None if same.any() else np.append(low, m).astype(np.int64)


def _canonical_rows(block: TripletBlock) -> np.ndarray:
    """For each table row, the first row bit-identical to it (image id and phi bytes)."""
    m = len(block.image_id)
    if m == 0:
        return np.zeros(0, np.int64)
    phi = np.ascontiguousarray(block.phi, np.float32).reshape(m, -1)
    ids = np.ascontiguousarray(block.image_id, np.int64).reshape(m, 1)
    rows = np.concatenate([ids.view(np.uint8), phi.view(np.uint8)], axis=1)
    keys = np.ascontiguousarray(rows).view(np.dtype((np.void, rows.shape[1]))).reshape(m)
    _, first, inverse = np.unique(keys, return_index=True, return_inverse=True)
    return first[inverse.reshape(-1)].astype(np.int64)
