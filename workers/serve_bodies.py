"""The HTTP API's bodies: JSON or Arrow IPC in, checked arrays out; rankings back out.

Ranking requests come as JSON (`application/json`) or, for high-volume callers, as one
Arrow IPC stream (`application/vnd.apache.arrow.stream`): one row per candidate, columns
`candidate_id` (int64) and `phi` (fixed_size_list<float32>[36]; any list of floats is
accepted), the model chosen with the `model` / `version` query parameters. The ranking
comes back as JSON, or as an Arrow stream (columns `candidate_id`, `score`, in ranked
order; schema metadata `rankstream.model`, `rankstream.version`) when the request's
`Accept` asks for one. Feedback is JSON. Every check names the field it refused
(`BadRequest.field`), via `workers.candidates`.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any

import numpy as np
import orjson
import pyarrow as pa

from rankstream.ranking.judgments import UNJUDGED
from rankstream.workers.candidates import FieldError, check_candidates
from rankstream.workers.ingest import Feedback

JSON = "application/json"
ARROW = "application/vnd.apache.arrow.stream"


class BadRequest(Exception):  # noqa: N818 (an HTTP answer, not a program error)
    """A request the API refuses: HTTP `status`, a message, and the field when one is at fault."""

    def __init__(self, status: int, message: str, field: str | None = None) -> None:
        super().__init__(message)
        self.status, self.message, self.field = status, message, field

    @classmethod
    def of(cls, exc: FieldError) -> BadRequest:
        return cls(422, str(exc), exc.field)


@dataclass(frozen=True)
class RankRequest:
    candidate_ids: np.ndarray  # int64 (k,), distinct
    phi: np.ndarray  # float32 (k, 36), finite
    model: str | None  # None: the champion
    version: int | None


def media_type(content_type: str | None) -> str:
    return (content_type or JSON).split(";")[0].strip().lower()


def parse_json(body: bytes) -> dict[str, Any]:
    try:
        document = orjson.loads(body)
    except orjson.JSONDecodeError as exc:
        raise BadRequest(400, f"malformed JSON: {exc}") from None
    if not isinstance(document, dict):
        raise BadRequest(400, "the body must be a JSON object")
    return document


def _required(document: dict[str, Any], field: str) -> Any:
    if field not in document or document[field] is None:
        raise BadRequest(422, f"{field}: required", field)
    return document[field]


def _model_choice(model: object, version: object) -> tuple[str | None, int | None]:
    if model is not None and (not isinstance(model, str) or not model):
        raise BadRequest(422, "model: must be a model name or 'champion'", "model")
    if version is not None:
        if isinstance(version, str) and version.isdigit():
            version = int(version)
        if isinstance(version, bool) or not isinstance(version, int) or version < 1:
            raise BadRequest(422, "version: must be an integer >= 1", "version")
        if model in (None, "champion"):
            raise BadRequest(422, "version: needs a model name (a champion has none)", "version")
    return model, version  # type: ignore[return-value]


def _matrix(values: object, field: str) -> np.ndarray:
    try:
        return np.asarray(values, dtype=np.float64)
    except (TypeError, ValueError):
        message = f"{field}: must be a list of equal-length rows of numbers"
        raise BadRequest(422, message, field) from None


def _ids(values: object) -> np.ndarray:
    if not isinstance(values, list) or not all(
        isinstance(v, int) and not isinstance(v, bool) for v in values
    ):
        raise BadRequest(422, "candidate_ids: must be a list of integers", "candidate_ids")
    try:
        return np.asarray(values, dtype=np.int64)
    except OverflowError:
        raise BadRequest(422, "candidate_ids: ids must fit in 64 bits", "candidate_ids") from None


def rank_from_json(body: bytes, width: int) -> RankRequest:
    document = parse_json(body)
    ids = _ids(_required(document, "candidate_ids"))
    phi = _matrix(_required(document, "phi"), "phi")
    model, version = _model_choice(document.get("model"), document.get("version"))
    try:
        ids, phi = check_candidates(ids, phi, width)
    except FieldError as exc:
        raise BadRequest.of(exc) from None
    return RankRequest(ids, phi, model, version)


def rank_from_arrow(body: bytes, model: str | None, version: str | None, width: int) -> RankRequest:
    try:
        table = pa.ipc.open_stream(pa.py_buffer(body)).read_all()
        table.validate(full=True)  # corrupt offsets/lengths must not reach numpy
    except (pa.ArrowException, OSError, ValueError) as exc:
        raise BadRequest(400, f"malformed Arrow IPC stream: {exc}") from None
    for field in ("candidate_id", "phi"):
        if field not in table.column_names:
            raise BadRequest(422, f"{field}: required column", field)
    ids_column = table.column("candidate_id")
    if not pa.types.is_integer(ids_column.type) or ids_column.null_count:
        raise BadRequest(422, "candidate_id: must be a non-null integer column", "candidate_id")
    ids = ids_column.to_numpy()
    phi = _arrow_matrix(table.column("phi"))
    choice = _model_choice(model, version)
    try:
        ids, phi = check_candidates(ids, phi, width)
    except FieldError as exc:
        raise BadRequest.of(exc) from None
    return RankRequest(ids, phi, *choice)


def _arrow_matrix(column: pa.ChunkedArray) -> np.ndarray:
    """(k, d) floats from a (fixed-size) list column; 422 for anything else."""
    kind = column.type
    if not (pa.types.is_fixed_size_list(kind) or pa.types.is_list(kind)) or not (
        pa.types.is_floating(kind.value_type) or pa.types.is_integer(kind.value_type)
    ):
        raise BadRequest(422, f"phi: must be a list<float> column, got {kind}", "phi")
    array = column.combine_chunks() if column.num_chunks != 1 else column.chunk(0)
    # a fixed-size list read from IPC is not sliced: its child values are the rows as they are
    fixed = pa.types.is_fixed_size_list(kind) and array.offset == 0
    values = array.values if fixed else array.flatten()
    if array.null_count or values.null_count:
        raise BadRequest(422, "phi: holds nulls", "phi")
    k = len(array)
    width = kind.list_size if pa.types.is_fixed_size_list(kind) else None
    if width is None:
        lengths = np.diff(array.offsets.to_numpy())
        if k and (lengths != lengths[0]).any():
            raise BadRequest(422, "phi: rows of unequal length", "phi")
        width = int(lengths[0]) if k else 0
    return values.to_numpy(zero_copy_only=False).reshape(k, width)


def ranking_json(
    ids: np.ndarray, scores: np.ndarray, model: str, version: int, extra: dict[str, Any]
) -> bytes:
    return orjson.dumps(
        {
            "model": model,
            "version": version,
            "candidate_ids": ids.tolist(),
            "scores": scores.tolist(),
            **extra,
        }
    )


@functools.lru_cache(maxsize=256)
def _ranking_schema(model: str, version: int) -> pa.Schema:
    return pa.schema(
        [("candidate_id", pa.int64()), ("score", pa.float64())],
        metadata={"rankstream.model": model, "rankstream.version": str(version)},
    )


def ranking_arrow(ids: np.ndarray, scores: np.ndarray, model: str, version: int) -> bytes:
    schema = _ranking_schema(model, version)
    batch = pa.RecordBatch.from_arrays([pa.array(ids), pa.array(scores)], schema=schema)
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, schema) as writer:
        writer.write_batch(batch)
    return sink.getvalue().to_pybytes()


def feedback_from_json(body: bytes) -> Feedback:
    """A feedback body: relevance holds a grade or null (unjudged) per candidate."""
    document = parse_json(body)
    query_id = _required(document, "query_id")
    if isinstance(query_id, bool) or not isinstance(query_id, int):
        raise BadRequest(422, "query_id: must be an integer", "query_id")
    grades = _required(document, "relevance")
    if not isinstance(grades, list) or not all(
        g is None or (isinstance(g, int) and not isinstance(g, bool)) for g in grades
    ):
        raise BadRequest(422, "relevance: must be a list of integer grades or nulls", "relevance")
    versions = document.get("model_versions") or {}
    if not isinstance(versions, dict):
        raise BadRequest(
            422, "model_versions: must be an object {model: version}", "model_versions"
        )
    served_version = document.get("served_version", 0)
    try:
        relevance = np.asarray([UNJUDGED if g is None else g for g in grades], dtype=np.int64)
    except OverflowError:
        raise BadRequest(422, "relevance: a grade is far out of range", "relevance") from None
    return Feedback(
        query_id=query_id,
        candidate_ids=_ids(_required(document, "candidate_ids")),
        phi=_matrix(_required(document, "phi"), "phi"),
        relevance=relevance,
        served_by=str(document.get("served_by", "unknown")),
        served_version=served_version,
        model_versions=versions,
    )
