"""serve's request and answer bodies, as the client writes and reads them (JSON, or Arrow
IPC streams through pyarrow, imported only when Arrow is used).

The vocabulary is serve's (`GET /openapi.json`): a ranking request carries
`candidate_ids` and `phi` (one row of the deployment's width per candidate) and may name
a `model`, an exact `version` and the engine's `query_id`; the ranking answers the ids
best first with their `scores`, the `model` and `version` that ranked them and the
`impression_id` the clicks on it name. Clicks are posted per impression, with
`session_over` saying no more will come (the session is learned from at once); an empty
list of clicks says "shown, nothing clicked, session over". Only shapes are checked
here (Arrow needs them to encode); every other rule is the server's, and its refusal
names the field (`errors.ApiError.field`).
"""

from __future__ import annotations

import json
import operator
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

JSON = "application/json"
ARROW = "application/vnd.apache.arrow.stream"


@dataclass(frozen=True)
class Ranking:
    """A ranking as served: `candidate_ids` best first and their `scores`; the `model` and
    `version` that ranked them; `impression_id`, to name when posting its clicks;
    `request_id` (the X-Request-ID the server logged); the echoed `query_id`.
    `model_versions` (JSON answers only: None from Arrow) is what feedback echoes;
    `extra` holds the answer's other fields (`requested`, `pinned`, ...)."""

    candidate_ids: np.ndarray
    scores: np.ndarray
    model: str
    version: int
    impression_id: str
    request_id: str | None = None
    query_id: int | None = None
    model_versions: dict[str, int] | None = None
    extra: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Receipt:
    """What /v1/feedback or /v1/clicks answered: `duplicate` true when this Idempotency-Key
    (or the default key) was seen before and nothing was published again; `body` the
    whole answer (feedback: triplets, judged, ...; clicks: impressions, clicks, rows)."""

    duplicate: bool
    body: dict[str, Any]
    request_id: str | None = None


@dataclass(frozen=True)
class Click:
    """A click on one candidate of an impression; `position` 1-based as displayed, `time`
    unix seconds, `dwell` seconds (each optional)."""

    candidate_id: int
    position: int | None = None
    time: float | None = None
    dwell: float | None = None

    def as_json(self) -> dict[str, Any]:
        values = {"candidate_id": operator.index(self.candidate_id), "position": self.position,
                  "time": self.time, "dwell": self.dwell}  # fmt: skip
        return {name: value for name, value in values.items() if value is not None}


@dataclass(frozen=True)
class ImpressionClicks:
    """The clicks on one impression. `clicks`: Click or bare candidate ids (an empty list:
    shown, nothing clicked, session over). `session_over`: True, no more clicks will come
    for it (learned from at once); None (default), it stays open until the click window;
    False with no clicks is refused (the empty list already says it is over)."""

    impression_id: str
    clicks: Sequence[Click | int] = ()
    session_over: bool | None = None

    def __post_init__(self) -> None:
        rows = tuple(c if isinstance(c, Click) else Click(operator.index(c)) for c in self.clicks)
        object.__setattr__(self, "clicks", rows)
        if not rows and self.session_over is False:
            raise ValueError(
                "session_over=False with no clicks: an empty clicks list says the session "
                "is over with nothing clicked; post its clicks when there are some"
            )

    def as_json(self) -> dict[str, Any]:
        entry: dict[str, Any] = {
            "impression_id": self.impression_id,
            "clicks": [click.as_json() for click in self.clicks],  # type: ignore[union-attr]
        }
        if self.session_over is not None and self.clicks:
            entry["session_over"] = self.session_over
        return entry


def candidates(
    candidate_ids: Sequence[int] | np.ndarray, phi: Any
) -> tuple[np.ndarray, np.ndarray]:
    """The ids as int64 (k,) and phi as a (k, width) float array; ValueError otherwise."""
    ids = np.asarray(candidate_ids)
    if ids.ndim != 1 or (ids.size and not np.issubdtype(ids.dtype, np.integer)):
        raise ValueError(f"candidate_ids: a 1-d sequence of integers, got shape {ids.shape}")
    matrix = np.asarray(phi, dtype=np.float64)
    if matrix.ndim != 2 or matrix.shape[0] != ids.shape[0]:
        raise ValueError(
            f"phi: one row per candidate ({ids.shape[0]}), got an array of shape {matrix.shape}"
        )
    return ids.astype(np.int64, copy=False), matrix


def engine_scores_of(scores: Any, k: int) -> np.ndarray | None:
    """The engine's own scores (one finite number per candidate, higher ranks first) as
    float64 (k,), or None; ValueError otherwise (serve would refuse them with a 422)."""
    if scores is None:
        return None
    values = np.asarray(scores, dtype=np.float64)
    if values.shape != (k,):
        raise ValueError(f"engine_scores: one number per candidate ({k}), got shape {values.shape}")
    if not np.isfinite(values).all():
        raise ValueError("engine_scores: NaN or infinite values cannot be sent")
    return values


def dumps(document: dict[str, Any], where: str = "phi") -> bytes:
    """Strict JSON (no NaN or Infinity, which serve refuses as malformed JSON)."""
    try:
        return json.dumps(document, allow_nan=False, separators=(",", ":")).encode()
    except ValueError:
        raise ValueError(f"{where}: NaN or infinite values cannot be sent") from None


def rank_json(
    ids: np.ndarray,
    phi: np.ndarray,
    model: str | None,
    version: int | None,
    query_id: int | None,
    engine_scores: np.ndarray | None = None,
) -> bytes:
    document: dict[str, Any] = {"candidate_ids": ids.tolist(), "phi": phi.tolist()}
    for name, value in (("model", model), ("version", version), ("query_id", query_id)):
        if value is not None:
            document[name] = value
    if engine_scores is not None:
        document["engine_scores"] = engine_scores.tolist()
    return dumps(document)


def rank_arrow(
    ids: np.ndarray,
    phi: np.ndarray,
    model: str | None,
    version: int | None,
    query_id: int | None,
    engine_scores: np.ndarray | None = None,
) -> bytes:
    """Columns candidate_ids int64, phi fixed_size_list<float32>[width] and, with the
    engine's scores, engine_score float64; model, version and query_id as schema metadata."""
    import pyarrow as pa

    width = phi.shape[1]
    rows = pa.FixedSizeListArray.from_arrays(pa.array(phi.astype(np.float32).ravel()), width)
    metadata = {name: str(value) for name, value in
                (("model", model), ("version", version), ("query_id", query_id))
                if value is not None}  # fmt: skip
    columns = {"candidate_ids": pa.array(ids, pa.int64()), "phi": rows}
    if engine_scores is not None:
        columns["engine_score"] = pa.array(engine_scores, pa.float64())
    table = pa.table(columns)
    return _ipc(table.replace_schema_metadata(metadata or None))


def _ipc(table: Any) -> bytes:
    import pyarrow as pa

    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema) as writer:
        writer.write_table(table)
    return sink.getvalue().to_pybytes()


def ranking_from_json(body: bytes, request_id: str | None) -> Ranking:
    document = json.loads(body)
    known = ("candidate_ids", "scores", "model", "version", "impression_id", "query_id",
             "request_id", "model_versions")  # fmt: skip
    return Ranking(
        candidate_ids=np.asarray(document["candidate_ids"], dtype=np.int64),
        scores=np.asarray(document["scores"], dtype=np.float64),
        model=document["model"],
        version=document["version"],
        impression_id=document["impression_id"],
        request_id=request_id,
        query_id=document.get("query_id"),
        model_versions=document.get("model_versions"),
        extra={k: v for k, v in document.items() if k not in known},
    )


def ranking_from_arrow(body: bytes, request_id: str | None) -> Ranking:
    """Columns candidate_ids, scores; model, version, impression_id (query_id, request_id
    when sent) in the schema metadata, as text."""
    import pyarrow as pa

    table = pa.ipc.open_stream(pa.py_buffer(body)).read_all()
    metadata = {k.decode(): v.decode() for k, v in (table.schema.metadata or {}).items()}
    query_id = metadata.pop("query_id", None)
    known = ("model", "version", "impression_id", "request_id")
    return Ranking(
        candidate_ids=table.column("candidate_ids").to_numpy().astype(np.int64, copy=False),
        scores=table.column("scores").to_numpy().astype(np.float64, copy=False),
        model=metadata["model"],
        version=int(metadata["version"]),
        impression_id=metadata["impression_id"],
        request_id=request_id,
        query_id=None if query_id is None else int(query_id),
        extra={k: v for k, v in metadata.items() if k not in known},
    )


def feedback_json(
    query_id: int,
    ids: np.ndarray,
    phi: np.ndarray,
    relevance: Sequence[int | None] | np.ndarray,
    model: str | None,
    version: int | None,
    model_versions: Mapping[str, int] | None,
    engine_scores: np.ndarray | None = None,
) -> bytes:
    """A judged query; `relevance` a grade 0..127 or None (not judged) per candidate."""
    grades = []
    for at, grade in enumerate(relevance):
        try:
            grades.append(None if grade is None else operator.index(grade))
        except TypeError:
            raise ValueError(f"relevance: grade {grade!r} at {at}: an integer or None") from None
    document: dict[str, Any] = {
        "query_id": operator.index(query_id), "candidate_ids": ids.tolist(), "phi": phi.tolist(),
        "relevance": grades,
    }  # fmt: skip
    for name, value in (("model", model), ("version", version)):
        if value is not None:
            document[name] = value
    if model_versions is not None:
        document["model_versions"] = {str(k): int(v) for k, v in model_versions.items()}
    if engine_scores is not None:
        document["engine_scores"] = engine_scores.tolist()
    return dumps(document)


def clicks_json(impressions: Sequence[ImpressionClicks]) -> bytes:
    entries = [impression.as_json() for impression in impressions]
    return dumps(entries[0] if len(entries) == 1 else {"impressions": entries}, "clicks")


def clicks_arrow(impressions: Sequence[ImpressionClicks]) -> bytes:
    """One row per click; each impression's session-over row (a null candidate_id) after
    its clicks when it is over (no clicks, or `session_over` True)."""
    import pyarrow as pa

    columns: dict[str, list[Any]] = {n: [] for n in ("impression_id", "candidate_id",
                                                     "position", "time", "dwell")}  # fmt: skip
    for impression in impressions:
        rows: list[Click | None] = list(impression.clicks)  # type: ignore[arg-type]
        if not rows or impression.session_over:
            rows.append(None)
        for click in rows:
            columns["impression_id"].append(impression.impression_id)
            columns["candidate_id"].append(None if click is None else click.candidate_id)
            for name in ("position", "time", "dwell"):
                columns[name].append(None if click is None else getattr(click, name))
    types = {"impression_id": pa.string(), "candidate_id": pa.int64(), "position": pa.int64(),
             "time": pa.float64(), "dwell": pa.float64()}  # fmt: skip
    return _ipc(pa.table({n: pa.array(v, types[n]) for n, v in columns.items()}))
