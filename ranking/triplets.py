"""A block of triplets: the one record type of the feedback stream.

A triplet is a judged pair of one query's candidates: (seq, query_id, p1, p2, rel1,
rel2), where p1 and p2 point into the block's image table (`image_id`, and `phi`, the
query-image feature vectors phi(q, p)), and the label is y = sign(rel1 - rel2) (ties
are never emitted). A judged query of 50 candidates yields ~120 triplets over the same
~50 images, so the table holds each image's phi once and the triplets reference it:
the normalized form the wire carries (`stream.schema`, version 2), recordings store and
the compiled learners read directly (x = phi[p1] - phi[p2], formed inside the loop).

The simulator produces blocks (`simulators.judged_feedback`), the wire schema encodes and
decodes them, recordings store and read them back (`stream.recording_*`), the learners
take their rows; all use this class, so y is derived in one place. It lives in
`ranking/`, the lowest layer, as the learners' input: `stream/` imports this module
and nothing else of `ranking/` (`tests/test_architecture.py`).

`from_pairs` builds a block from the pair layout (phi1, phi2 per triplet: the wire's
version 1), with an image table of the n phi1 rows followed by the n phi2 rows; the
gathered `phi1`, `phi2`, `p1_id`, `p2_id` give the pair layout back. A judged query's
block is built by `ranking.judgments.feedback_triplets` (the one place pairs are
formed): the simulator's users, the ingestion library and the synthetic stream
generator (`harness.generator`) all make their blocks with it.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

TRIPLET_COLUMNS = ("seq", "query_id", "p1", "p2", "rel1", "rel2")  # one value per triplet
IMAGE_COLUMNS = ("image_id", "phi")  # one value per row of the image table
UNJUDGED = -1  # the relevance of a candidate the user did not judge (null on the wire)


def pair_table(phi1: np.ndarray, phi2: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The pair layout (phi1, phi2 per triplet) as the normalized form (phi, p1, p2):
    the table is the n phi1 rows followed by the n phi2 rows (read-only)."""
    phi1, phi2 = np.asarray(phi1), np.asarray(phi2)
    if phi1.ndim != 2 or phi1.shape != phi2.shape:
        raise ValueError(f"phi1 {phi1.shape} and phi2 {phi2.shape} must both have shape (n, d)")
    n = phi1.shape[0]
    index = np.arange(n, dtype=np.int32)
    table = np.concatenate([phi1, phi2])
    table.setflags(write=False)  # a record: read-only like a decoded message's buffers
    return table, index, index + np.int32(n)


def pair_labels(rel1: np.ndarray, rel2: np.ndarray) -> np.ndarray:
    """y = sign(rel1 - rel2) as float64 +1/-1 (a tie, never sent, would give -1)."""
    return np.where(np.asarray(rel1, np.int16) > rel2, 1.0, -1.0)


@dataclass(frozen=True)
class TripletBlock:
    """Triplets referencing an image table (read-only views when decoded).

    `rejects` lists rows a decoder dropped (triplet row in the message, reason), so a
    consumer can learn from the good rows and dead-letter the others by index.
    `weight` is each triplet's importance weight (float32 (n,), finite, > 0: a click
    pair's inverse propensity, `workers.click_join`); None means every weight is 1 (the
    judged feedback), which the learners learn bit for bit as the unweighted rule.
    """

    seq: np.ndarray  # int64 (n,) producer sequence
    query_id: np.ndarray  # int64 (n,)
    p1: np.ndarray  # int32 (n,) row of the image table
    p2: np.ndarray  # int32 (n,)
    rel1: np.ndarray  # int8 (n,) graded relevance of p1
    rel2: np.ndarray  # int8 (n,)
    image_id: np.ndarray  # int64 (m,)
    phi: np.ndarray  # float32 (m, d) phi(query, image) of each table row
    rejects: list[tuple[int, str]] = field(default_factory=list)
    weight: np.ndarray | None = None  # float32 (n,), None = all 1

    @classmethod
    def from_pairs(
        cls,
        seq: np.ndarray,
        query_id: np.ndarray,
        p1_id: np.ndarray,
        p2_id: np.ndarray,
        rel1: np.ndarray,
        rel2: np.ndarray,
        phi1: np.ndarray,
        phi2: np.ndarray,
    ) -> TripletBlock:
        """A block from the pair layout: table = the phi1 rows, then the phi2 rows."""
        n = len(seq)
        shape1, shape2 = np.shape(phi1), np.shape(phi2)
        if len(shape1) != 2 or shape1 != shape2 or shape1[0] != n:
            raise ValueError(f"phi1 {shape1} and phi2 {shape2} must both have shape (n={n}, d)")
        table, p1, p2 = pair_table(phi1, phi2)
        return cls(
            np.asarray(seq),
            np.asarray(query_id),
            p1,
            p2,
            np.asarray(rel1),
            np.asarray(rel2),
            np.concatenate([np.asarray(p1_id), np.asarray(p2_id)]),
            table,
        )

    def __len__(self) -> int:
        return int(self.seq.shape[0])

    @property
    def dim(self) -> int:
        """The width d of phi."""
        return int(self.phi.shape[1])

    @property
    def phi1(self) -> np.ndarray:
        """float32 (n, d) phi of each triplet's p1 (gathered: a copy)."""
        return self.phi[self.p1]

    @property
    def phi2(self) -> np.ndarray:
        return self.phi[self.p2]

    @property
    def p1_id(self) -> np.ndarray:
        return self.image_id[self.p1]

    @property
    def p2_id(self) -> np.ndarray:
        return self.image_id[self.p2]

    def y(self) -> np.ndarray:
        """float64 (n,) labels sign(rel1 - rel2) in {+1, -1}, ready for `learn_many`."""
        return pair_labels(self.rel1, self.rel2)

    def x(self) -> np.ndarray:
        """float64 (n, d) rows x = phi[p1] - phi[p2], the online learners' input."""
        return np.subtract(self.phi1, self.phi2, dtype=np.float64)

    def select(self, keep: np.ndarray | slice) -> TripletBlock:
        """The triplets `keep` selects (a mask, indices or a slice), sharing the table."""
        return TripletBlock(
            *(getattr(self, name)[keep] for name in TRIPLET_COLUMNS),
            self.image_id,
            self.phi,
            weight=None if self.weight is None else self.weight[keep],
        )

    @property
    def weighted(self) -> bool:
        """Whether some triplet's weight is not 1 (then the wire needs version 3)."""
        return self.weight is not None and bool((np.asarray(self.weight) != 1).any())

    def compact(self) -> TripletBlock:
        """The same triplets over only the table rows they reference (in table order)."""
        referenced = np.zeros(len(self.image_id), bool)
        referenced[self.p1] = True
        referenced[self.p2] = True
        if referenced.all():
            return self
        used = np.flatnonzero(referenced)
        remap = np.full(len(self.image_id), -1, dtype=np.int32)
        remap[used] = np.arange(len(used), dtype=np.int32)
        return TripletBlock(
            self.seq, self.query_id, remap[self.p1], remap[self.p2], self.rel1, self.rel2,
            self.image_id[used], self.phi[used], weight=self.weight,
        )  # fmt: skip

    def pair_columns(self) -> dict[str, np.ndarray]:
        """The pair layout's columns (seq, query_id, p1_id, p2_id, rel1, rel2, phi1, phi2)."""
        return {
            "seq": self.seq,
            "query_id": self.query_id,
            "p1_id": self.p1_id,
            "p2_id": self.p2_id,
            "rel1": self.rel1,
            "rel2": self.rel2,
            "phi1": self.phi1,
            "phi2": self.phi2,
        }

    @classmethod
    def concatenate(cls, blocks: list[TripletBlock]) -> TripletBlock:
        """One block of all triplets and tables, in order (rejects are not carried over;
        weights are, 1 for a block without)."""
        if not blocks:
            raise ValueError("nothing to concatenate")
        weight = None
        if any(b.weight is not None for b in blocks):
            weight = np.concatenate(
                [np.ones(len(b), np.float32) if b.weight is None else b.weight for b in blocks]
            ).astype(np.float32)
        starts = np.cumsum([0] + [len(b.image_id) for b in blocks[:-1]]).astype(np.int32)
        join = np.concatenate
        return cls(
            join([b.seq for b in blocks]),
            join([b.query_id for b in blocks]),
            join([b.p1 + s for b, s in zip(blocks, starts, strict=True)]),
            join([b.p2 + s for b, s in zip(blocks, starts, strict=True)]),
            join([b.rel1 for b in blocks]),
            join([b.rel2 for b in blocks]),
            join([b.image_id for b in blocks]),
            join([b.phi for b in blocks]),
            weight=weight,
        )
