"""Checks of what an engine sends: a query's candidates, their phi and the user's grades.

The ranking endpoint, the feedback endpoint and the feedback library (`producers.feedback_producer`)
all check their input here, so a bad request fails the same way everywhere: a
`FieldError` that names the field (the HTTP API answers 422 with it) and nothing is
scored or produced.
"""

from __future__ import annotations

import numpy as np

from rankstream.ranking.judgments import UNJUDGED

MAX_CANDIDATES = 10_000  # per query: ranks in ~ms; a 300-candidate query is the design point
MAX_GRADE = 127  # relevance is int8 on the wire; gains are 2^rel - 1


class FieldError(ValueError):
    """A request field is missing or bad; `field` names it (dotted for nested fields)."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field, self.message = field, message


def check_candidates(
    candidate_ids: object, phi: object, width: int
) -> tuple[np.ndarray, np.ndarray]:
    """(ids int64 (k,), phi float32 (k, width)): distinct ids, finite features; `width` is
    the deployment's (`Settings.phi_dim`)."""
    ids = _int_vector(candidate_ids, "candidate_ids")
    k = ids.shape[0]
    if not 1 <= k <= MAX_CANDIDATES:
        raise FieldError("candidate_ids", f"needs 1..{MAX_CANDIDATES} candidates, got {k}")
    ordered = np.sort(ids)
    repeated = np.flatnonzero(ordered[1:] == ordered[:-1])
    if repeated.size:
        raise FieldError("candidate_ids", f"duplicate id {int(ordered[repeated[0]])}")
    features = np.asarray(phi)
    if features.dtype == object or features.dtype.kind not in "iuf":
        raise FieldError("phi", "must be a matrix of numbers (one row per candidate)")
    if features.ndim != 2 or features.shape[0] != k:
        raise FieldError("phi", f"must have one row per candidate ({k}), got {features.shape}")
    if features.shape[1] != width:
        raise FieldError("phi", f"wrong width: rows have {features.shape[1]}, expected {width}")
    with np.errstate(over="ignore"):  # a float64 beyond float32's range becomes Inf: refused
        features = np.ascontiguousarray(features, dtype=np.float32)
    if not np.isfinite(features).all():  # the common case costs one pass
        bad = np.flatnonzero(~np.isfinite(features).all(axis=1))
        raise FieldError("phi", f"row {int(bad[0])} holds NaN or Inf (or overflows float32)")
    return ids, features


def check_relevance(relevance: object, k: int) -> np.ndarray:
    """int8 (k,) grades in 0..MAX_GRADE, UNJUDGED where the user judged nothing."""
    grades = np.asarray(relevance)
    if grades.dtype == object or grades.dtype.kind not in "iu" or grades.shape != (k,):
        raise FieldError("relevance", f"must hold one integer grade or null per candidate ({k})")
    out = np.flatnonzero((grades != UNJUDGED) & ((grades < 0) | (grades > MAX_GRADE)))
    if out.size:
        raise FieldError(
            "relevance", f"grade {int(grades[out[0]])} at {int(out[0])} outside 0..{MAX_GRADE}"
        )
    return grades.astype(np.int8)


def check_query_id(query_id: object) -> int:
    """A query id: an int64 (the message key is its ASCII decimal)."""
    if isinstance(query_id, bool) or not isinstance(query_id, int | np.integer):
        raise FieldError("query_id", f"must be an integer, got {query_id!r}")
    if not -(2**63) <= int(query_id) < 2**63:
        raise FieldError("query_id", "must fit in 64 bits")
    return int(query_id)


def _int_vector(values: object, field: str) -> np.ndarray:
    arr = np.asarray(values)
    if arr.ndim != 1 or arr.dtype == object or arr.dtype.kind not in "iu":
        raise FieldError(field, "must be a list of integers")
    if arr.dtype.kind == "u" and arr.size and arr.max() >= 2**63:
        raise FieldError(field, "ids must fit in a signed 64-bit integer")
    return arr.astype(np.int64)


ENGINE_SCORES = "engine_scores"  # the request field carrying the engine's own ranking


def check_engine_scores(scores: object, k: int) -> np.ndarray:
    """The engine's own scores of a query's `k` candidates (`selection.engine_ranking`):
    float64 (k,), finite, higher ranks first; FieldError naming `engine_scores` otherwise."""
    values = np.asarray(scores)
    if values.dtype == object or values.dtype.kind not in "iuf" or values.ndim != 1:
        raise FieldError(ENGINE_SCORES, f"must be a list of numbers, one per candidate ({k})")
    if values.shape != (k,):
        got = values.shape[0]
        raise FieldError(ENGINE_SCORES, f"needs one number per candidate ({k}), got {got}")
    values = values.astype(np.float64)
    if not np.isfinite(values).all():
        bad = int(np.flatnonzero(~np.isfinite(values))[0])
        raise FieldError(ENGINE_SCORES, f"entry {bad} is NaN or Inf")
    return values
