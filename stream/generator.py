"""A seeded source of valid, learnable triplet blocks for tests and the pipeline benchmark.

Images get random features phi in [0, 1)^36 (float32); a hidden weight vector w* scores
them and the score's quantile gives a graded relevance 0..4, so y = sign(rel1 - rel2)
agrees with w*.(phi1 - phi2) and a learner has something real to find. Tied pairs are
never emitted (the wire contract). Same seed, same blocks.
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np

from rankstream.ranking.triplets import TripletBlock
from rankstream.stream.schema import PHI_DIM

GRADES = 5


class TripletGenerator:
    """Deterministic blocks: per-query ones (`query_block`) or big mixed ones (`blocks`);
    send them with `stream.schema.encode_triplets` and key `stream.schema.block_key`."""

    def __init__(self, seed: int = 0, n_images: int = 100_000) -> None:
        if n_images < 2:
            raise ValueError(f"n_images must be >= 2, got {n_images}")
        self._rng = np.random.default_rng(seed)
        self.true_weights = self._rng.standard_normal(PHI_DIM)
        self.n_images = n_images
        # Score quantiles of random phi, so the grades are roughly balanced.
        sample = self._rng.random((4096, PHI_DIM)) @ self.true_weights
        self._cuts = np.quantile(sample, np.linspace(0, 1, GRADES + 1)[1:-1])
        self._next_seq = 0
        self._next_query = 0

    def block(self, n: int, query_ids: np.ndarray | None = None) -> TripletBlock:
        """`n` untied triplets; query ids default to one fresh id per row."""
        if n < 0:
            raise ValueError(f"n must be >= 0, got {n}")
        if query_ids is None:
            query_ids = np.arange(self._next_query, self._next_query + n, dtype=np.int64)
            self._next_query += n
        query_ids = np.asarray(query_ids, dtype=np.int64)
        if query_ids.shape != (n,):
            raise ValueError(f"query_ids must have shape ({n},), got {query_ids.shape}")
        phi1, phi2, rel1, rel2 = self._untied_pairs(n)
        ids = self._rng.integers(0, self.n_images, size=(2, n), dtype=np.int64)
        seq = np.arange(self._next_seq, self._next_seq + n, dtype=np.int64)
        self._next_seq += n
        return TripletBlock.from_pairs(seq, query_ids, ids[0], ids[1], rel1, rel2, phi1, phi2)

    def query_block(self, min_pairs: int = 20, max_pairs: int = 200) -> TripletBlock:
        """All triplets of one new query: the block the simulator's users produce."""
        n = int(self._rng.integers(min_pairs, max_pairs + 1))
        query = self._next_query
        self._next_query += 1
        return self.block(n, np.full(n, query, dtype=np.int64))

    def blocks(self, n_triplets: int, block_size: int = 2000) -> Iterator[TripletBlock]:
        """Big mixed blocks (the benchmark's shape) totalling exactly `n_triplets`."""
        if block_size < 1:
            raise ValueError(f"block_size must be >= 1, got {block_size}")
        remaining = n_triplets
        while remaining > 0:
            n = min(block_size, remaining)
            remaining -= n
            yield self.block(n)

    def _untied_pairs(self, n: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        phi1 = np.empty((n, PHI_DIM), np.float32)
        phi2 = np.empty((n, PHI_DIM), np.float32)
        rel1 = np.empty(n, np.int8)
        rel2 = np.empty(n, np.int8)
        filled = 0
        while filled < n:
            want = max(16, 2 * (n - filled))
            a = self._rng.random((want, PHI_DIM), dtype=np.float32)
            b = self._rng.random((want, PHI_DIM), dtype=np.float32)
            ga = np.searchsorted(self._cuts, a @ self.true_weights).astype(np.int8)
            gb = np.searchsorted(self._cuts, b @ self.true_weights).astype(np.int8)
            keep = np.flatnonzero(ga != gb)[: n - filled]
            end = filled + len(keep)
            phi1[filled:end], phi2[filled:end] = a[keep], b[keep]
            rel1[filled:end], rel2[filled:end] = ga[keep], gb[keep]
            filled = end
        return phi1, phi2, rel1, rel2
