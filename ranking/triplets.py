"""A block of triplets: the one record type of the feedback stream.

A triplet is a judged pair of one query's candidates: (seq, query_id, p1_id, p2_id,
rel1, rel2, phi1, phi2), where phi is the query-image feature vector phi(q, p) and the
label is y = sign(rel1 - rel2) (ties are never emitted). The simulator produces blocks
(`simulators.feedback`), the wire schema encodes and decodes them (`stream.schema`),
recordings store and read them back (`stream.recording`), and the learners take their
rows x = phi1 - phi2 with labels y; all of them use this class, so y is derived in one
place. It lives in `ranking/`, the lowest layer, as the learners' input: `stream/`
imports this module and nothing else of `ranking/` (`tests/test_architecture.py`).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

COLUMNS = ("seq", "query_id", "p1_id", "p2_id", "rel1", "rel2", "phi1", "phi2")


def pair_labels(rel1: np.ndarray, rel2: np.ndarray) -> np.ndarray:
    """y = sign(rel1 - rel2) as float64 +1/-1 (a tie, never sent, would give -1)."""
    return np.where(np.asarray(rel1, np.int16) > rel2, 1.0, -1.0)


@dataclass(frozen=True)
class TripletBlock:
    """Triplet rows as column arrays of equal length n (read-only views when decoded).

    `rejects` lists rows a decoder dropped (row in the message, reason), so a consumer
    can learn from the good rows and dead-letter the others by index.
    """

    seq: np.ndarray  # int64 (n,) producer sequence
    query_id: np.ndarray  # int64 (n,)
    p1_id: np.ndarray  # int64 (n,)
    p2_id: np.ndarray  # int64 (n,)
    rel1: np.ndarray  # int8 (n,) graded relevance of p1
    rel2: np.ndarray  # int8 (n,)
    phi1: np.ndarray  # float32 (n, d)
    phi2: np.ndarray  # float32 (n, d)
    rejects: list[tuple[int, str]] = field(default_factory=list)

    def __len__(self) -> int:
        return int(self.seq.shape[0])

    @property
    def dim(self) -> int:
        """The width d of phi."""
        return int(self.phi1.shape[1])

    def y(self) -> np.ndarray:
        """float64 (n,) labels sign(rel1 - rel2) in {+1, -1}, ready for `learn_many`."""
        return pair_labels(self.rel1, self.rel2)

    def x(self) -> np.ndarray:
        """float64 (n, d) rows x = phi1 - phi2, the online learners' input."""
        return np.subtract(self.phi1, self.phi2, dtype=np.float64)

    def select(self, keep: np.ndarray) -> TripletBlock:
        """The rows where `keep` (a boolean mask or row indices) selects (a copy)."""
        return TripletBlock(*(getattr(self, name)[keep] for name in COLUMNS))

    def columns(self) -> dict[str, np.ndarray]:
        """The record's columns by field name."""
        return {name: getattr(self, name) for name in COLUMNS}

    @classmethod
    def concatenate(cls, blocks: list[TripletBlock]) -> TripletBlock:
        """One block of all rows, in order (rejects are not carried over)."""
        if not blocks:
            raise ValueError("nothing to concatenate")
        return cls(*(np.concatenate([getattr(b, name) for b in blocks]) for name in COLUMNS))
