"""From a judged query to its triplets: the one place feedback pairs are formed.

A user judges some of a query's candidates with graded relevance and leaves the others
unjudged. Every pair of judged candidates with different grades becomes one triplet;
tied grades carry no order and are never emitted, and unjudged candidates take part in
no pair. A query whose judged candidates hold fewer than two distinct grades therefore
yields no triplets at all (its callers count it).

Each unordered pair {a more relevant, b less relevant} is emitted once, and a fair coin
orients it: p1 = a or p1 = b, so y = sign(rel1 - rel2) takes both values (docs/architecture.md's
wire label; a linear pairwise ranker sees the same y x either way). Within a query the
triplets are shuffled (users' judgements arrive in no order). The coins and the shuffle
come from the `rng` the caller passes, so the triplets are a pure function of the
judgments and that generator's state.

The simulator (`simulators.judged_feedback.judge`, judged = its served top 50) and the
ingestion library (`producers.feedback_producer`, judged = whatever an engine's user judged) both
call `feedback_triplets`, so the two producers can never form pairs differently.

>>> rng = np.random.default_rng(0)
>>> relevance = np.array([2, UNJUDGED, 0, 2, 1], dtype=np.int8)
>>> block = feedback_triplets(7, np.arange(10, 15), np.eye(5, dtype=np.float32),
...                           relevance, relevance != UNJUDGED, first_seq=100, rng=rng)
>>> len(block), sorted(block.image_id.tolist())  # 10-12 10-14 13-12 13-14 14-12: not 10-13, not 11
(5, [10, 12, 13, 14])
>>> bool((block.rel1 != block.rel2).all()), block.seq.tolist()
(True, [100, 101, 102, 103, 104])
"""

from __future__ import annotations

import numpy as np

from rankstream.ranking.triplets import UNJUDGED, TripletBlock


def judged_pairs(
    relevance: np.ndarray, judged: np.ndarray, rng: np.random.Generator
) -> tuple[np.ndarray, np.ndarray]:
    """Candidate indices (first, second) of every judged pair with different grades.

    Randomly oriented and shuffled (module docstring). `judged` is a boolean mask over
    the candidates; `relevance` must hold a grade >= 0 wherever it is set.
    """
    rows = np.flatnonzero(judged)
    grades = np.asarray(relevance)[rows].astype(np.int64)
    better, worse = np.nonzero(grades[:, None] > grades[None, :])
    flip = rng.random(len(better)) < 0.5
    first = np.where(flip, worse, better)
    second = np.where(flip, better, worse)
    shuffle = rng.permutation(len(first))
    return rows[first[shuffle]], rows[second[shuffle]]


def check_judgments(relevance: object, judged: object, k: int) -> tuple[np.ndarray, np.ndarray]:
    """(relevance int8 (k,), judged bool (k,)) or ValueError naming the field.

    Judged candidates need a grade in 0..127; unjudged ones may hold `UNJUDGED` or a
    known grade (the simulator knows every candidate's ground truth).
    """
    rel = np.asarray(relevance)
    mask = np.asarray(judged)
    if rel.shape != (k,) or rel.dtype.kind not in "iu":
        raise ValueError(f"relevance must be {k} integers, got {rel.dtype} {rel.shape}")
    if mask.shape != (k,) or mask.dtype != np.bool_:
        raise ValueError(f"judged must be {k} booleans, got {mask.dtype} {mask.shape}")
    if ((rel < UNJUDGED) | (rel > 127)).any():
        raise ValueError(f"relevance must be within 0..127 (or {UNJUDGED}: unjudged)")
    if (rel[mask] < 0).any():
        raise ValueError("relevance: a judged candidate has no grade")
    return rel.astype(np.int8), mask


def feedback_triplets(
    query_id: int,
    candidate_ids: np.ndarray,
    phi: np.ndarray,
    relevance: np.ndarray,
    judged: np.ndarray,
    first_seq: int,
    rng: np.random.Generator,
) -> TripletBlock:
    """The query's triplets, numbered from `first_seq`, over a table of the judged images.

    The table holds each image some triplet references once (`TripletBlock.compact`).
    """
    first, second = judged_pairs(relevance, judged, rng)
    rows = np.flatnonzero(judged)
    position = np.empty(len(candidate_ids), dtype=np.int32)
    position[rows] = np.arange(len(rows), dtype=np.int32)
    n = len(first)
    rel = np.asarray(relevance)
    return TripletBlock(
        seq=int(first_seq) + np.arange(n, dtype=np.int64),
        query_id=np.full(n, int(query_id), dtype=np.int64),
        p1=position[first],
        p2=position[second],
        rel1=rel[first],
        rel2=rel[second],
        image_id=np.asarray(candidate_ids)[rows],
        phi=np.asarray(phi)[rows],
    ).compact()


def distinct_grades(relevance: np.ndarray, judged: np.ndarray) -> int:
    """How many different grades the judged candidates hold (< 2: no triplets)."""
    return len(np.unique(np.asarray(relevance)[np.asarray(judged)]))
