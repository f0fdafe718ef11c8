"""A seeded source of valid, learnable triplet blocks at any width, for tests and benchmarks.

Images get random features phi in [0, 1)^d (float32, d = `width`); a hidden weight
vector w* scores them, and the grades follow the scores, so y = sign(rel1 - rel2)
agrees with w*.(phi1 - phi2) and a learner has something real to find. Tied pairs are
never emitted (the wire contract). Same seed, same blocks.

Two shapes:

* `query_block` / `query_blocks`: what the simulator's users send, one judged query at
  a time (`ranking.judgments.feedback_triplets`, the simulator's own construction). Its grade
  counts follow the stream of `rankstream demo` at its defaults (2,000 queries; 872 of
  them had two or more grades among their 50 judged images and sent a block): every
  block references all 50 judged images; in 10.4% of them all 50 are relevant (grades
  1 and 2), otherwise the number of relevant images is geometric with mean 8.5, kept
  within 1..49 (the demo: 100, 80, 70, 58, 52 blocks with 1..5 relevant); grade-1
  images (1 + Poisson(2.5) of the relevant ones) appear in every all-relevant block and
  in 24% of the others, the other relevant images have grade 2. That gives ~283
  triplets a block (the demo: 283 on average, 49 to 831). Blocks that would have no triplets are not
  drawn: the simulator does not send them either.
* `block` / `blocks`: random pairs, one query id per triplet (the old benchmark shape,
  still used where only the rows matter).

`candidates` gives one query's retrieved candidates with graded relevance for all of
them, for a synthetic engine at any width (the simulator itself is 36-wide).
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np

from rankstream.ranking.judgments import feedback_triplets
from rankstream.ranking.triplets import TripletBlock
from rankstream.simulators.judged_feedback import JUDGED
from rankstream.stream.settings import DEFAULT_PHI_DIM

GRADES = 5
ALL_RELEVANT = 0.104  # share of blocks whose judged images are all relevant
RELEVANT_MEAN = 8.5  # mean of the geometric number of relevant images otherwise
GRADE1_SHARE = 0.24  # share of the other blocks with grade-1 images
GRADE1_EXTRA_MEAN = 2.5  # grade-1 images: 1 + Poisson(this)
MEAN_QUERY_TRIPLETS = 283  # triplets a sent block holds on average (the demo's, and these)


class TripletGenerator:
    """Deterministic blocks (see the module docstring); send them with
    `stream.schema.encode_triplets` and key `stream.schema.block_key`."""

    def __init__(
        self, seed: int = 0, n_images: int = 100_000, width: int = DEFAULT_PHI_DIM
    ) -> None:
        if n_images < 2 * JUDGED:
            raise ValueError(f"n_images must be >= {2 * JUDGED}, got {n_images}")
        if width < 1:
            raise ValueError(f"width must be >= 1, got {width}")
        self._rng = np.random.default_rng(seed)
        self.width = width
        self.true_weights = self._rng.standard_normal(width)
        self.n_images = n_images
        # Score quantiles of random phi, so the grades of random pairs are roughly balanced.
        sample = self._rng.random((4096, width)) @ self.true_weights
        self._cuts = np.quantile(sample, np.linspace(0, 1, GRADES + 1)[1:-1])
        self._next_seq = 0
        self._next_query = 0

    # --- simulator-shaped ---------------------------------------------------------------
    def query_block(self, judged: int = JUDGED) -> TripletBlock:
        """One judged query's block, shaped like the simulator's (module docstring)."""
        if judged < 2:
            raise ValueError(f"judged must be >= 2, got {judged}")
        phi = self._rng.random((judged, self.width), dtype=np.float32)
        grades = self._judged_grades(phi, judged)
        ids = self._distinct_ids(judged)
        query = self._next_query
        self._next_query += 1
        block = feedback_triplets(
            query, ids, phi, grades, np.ones(judged, bool), self._next_seq, self._rng
        )
        self._next_seq += len(block)
        return block

    def query_blocks(self, n_triplets: int, judged: int = JUDGED) -> Iterator[TripletBlock]:
        """Judged queries' blocks totalling exactly `n_triplets` (the last one cut short)."""
        remaining = n_triplets
        while remaining > 0:
            block = self.query_block(judged)
            if len(block) > remaining:
                self._next_seq -= len(block) - remaining
                block = block.select(slice(0, remaining)).compact()
            remaining -= len(block)
            yield block

    def messages(
        self, n_triplets: int, queries_per_message: int = 1, judged: int = JUDGED
    ) -> Iterator[TripletBlock]:
        """`query_blocks` packed `queries_per_message` to a message (one block each)."""
        if queries_per_message < 1:
            raise ValueError(f"queries_per_message must be >= 1, got {queries_per_message}")
        pending: list[TripletBlock] = []
        for block in self.query_blocks(n_triplets, judged):
            pending.append(block)
            if len(pending) == queries_per_message:
                yield pending[0] if len(pending) == 1 else TripletBlock.concatenate(pending)
                pending = []
        if pending:
            yield TripletBlock.concatenate(pending)

    def _judged_grades(self, phi: np.ndarray, judged: int) -> np.ndarray:
        """Grade counts as in the demo's stream, given to the images by their w* score."""
        rng = self._rng
        if rng.random() < ALL_RELEVANT:
            relevant = judged
            grade1 = min(judged - 1, 1 + int(rng.poisson(GRADE1_EXTRA_MEAN)))
        else:
            relevant = judged
            while relevant >= judged:  # geometric on 1.., kept below `judged`
                relevant = int(rng.geometric(1.0 / RELEVANT_MEAN))
            grade1 = 0
            if rng.random() < GRADE1_SHARE:
                grade1 = min(relevant, 1 + int(rng.poisson(GRADE1_EXTRA_MEAN)))
        order = np.argsort(-(phi @ self.true_weights), kind="stable")
        grades = np.zeros(judged, np.int8)
        grades[order[: relevant - grade1]] = 2
        grades[order[relevant - grade1 : relevant]] = 1
        return grades

    def _distinct_ids(self, k: int) -> np.ndarray:
        while True:
            ids = self._rng.integers(0, self.n_images, size=k, dtype=np.int64)
            if len(np.unique(ids)) == k:
                return ids

    # --- a synthetic engine's candidates ------------------------------------------------
    def candidates(self, k: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """One query's `k` candidates: ids (k,), phi (k, width) float32, relevance (k,)
        int8 graded 0..4 by w* score quantiles."""
        if k < 1:
            raise ValueError(f"k must be >= 1, got {k}")
        phi = self._rng.random((k, self.width), dtype=np.float32)
        relevance = np.searchsorted(self._cuts, phi @ self.true_weights).astype(np.int8)
        return self._distinct_ids(k), phi, relevance

    # --- random pairs -------------------------------------------------------------------
    def block(self, n: int, query_ids: np.ndarray | None = None) -> TripletBlock:
        """`n` untied random pairs; query ids default to one fresh id per row."""
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

    def blocks(self, n_triplets: int, block_size: int = 2000) -> Iterator[TripletBlock]:
        """Big blocks of random pairs totalling exactly `n_triplets`."""
        if block_size < 1:
            raise ValueError(f"block_size must be >= 1, got {block_size}")
        remaining = n_triplets
        while remaining > 0:
            n = min(block_size, remaining)
            remaining -= n
            yield self.block(n)

    def _untied_pairs(self, n: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        d = self.width
        phi1 = np.empty((n, d), np.float32)
        phi2 = np.empty((n, d), np.float32)
        rel1 = np.empty(n, np.int8)
        rel2 = np.empty(n, np.int8)
        filled = 0
        while filled < n:
            want = max(16, 2 * (n - filled))
            a = self._rng.random((want, d), dtype=np.float32)
            b = self._rng.random((want, d), dtype=np.float32)
            ga = np.searchsorted(self._cuts, a @ self.true_weights).astype(np.int8)
            gb = np.searchsorted(self._cuts, b @ self.true_weights).astype(np.int8)
            keep = np.flatnonzero(ga != gb)[: n - filled]
            end = filled + len(keep)
            phi1[filled:end], phi2[filled:end] = a[keep], b[keep]
            rel1[filled:end], rel2[filled:end] = ga[keep], gb[keep]
            filled = end
        return phi1, phi2, rel1, rel2
