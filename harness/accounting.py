"""Exactly-once accounting for the harnesses: which produced records were consumed how often.

The pipeline benchmark and the chaos run both hand a `SeqCounter` to the online worker
(`on_block`) and ask it afterwards how many of the `n` produced sequence numbers were
never consumed (lost) and how many were consumed more than once (duplicated).
"""

from __future__ import annotations

import numpy as np


class SeqCounter:
    """Counts how often each produced seq was consumed (copies seq, not the block)."""

    def __init__(self) -> None:
        self.chunks: list[np.ndarray] = []

    def __call__(self, _message: object, block: object) -> None:
        self.chunks.append(np.array(block.seq, dtype=np.int64))  # type: ignore[attr-defined]

    def lost_and_duplicated(self, n: int) -> tuple[int, int]:
        seen = np.concatenate(self.chunks) if self.chunks else np.zeros(0, np.int64)
        outside = int(np.count_nonzero((seen < 0) | (seen >= n)))
        counts = np.bincount(seen[(seen >= 0) & (seen < n)], minlength=n)
        lost = int(np.count_nonzero(counts == 0))
        duplicated = int(np.maximum(counts - 1, 0).sum()) + outside
        return lost, duplicated
