"""The HTTP API's bodies: JSON or Arrow IPC in, checked arrays out; rankings back out.

One vocabulary in both encodings (docs/reference/http-api.md):

* a ranking request: `candidate_ids`, `phi` and, optionally, `model` and `version` (the
  champion when absent). JSON carries them as fields; an Arrow IPC stream
  (`application/vnd.apache.arrow.stream`) as columns `candidate_ids` (integers) and `phi`
  (a (fixed-size) list of numbers) and schema metadata `model` / `version`;
* a ranking: `model`, `version`, `candidate_ids`, `scores` (best first): JSON fields, or
  an Arrow stream with those two columns and that metadata when `Accept` asks for one;
* feedback (JSON): `query_id`, `candidate_ids`, `phi`, `relevance`, and `model` /
  `version` echoing the ranking that was judged;
* a ranking request and feedback may carry the engine's own ranking
  (`selection.engine_ranking`): JSON `engine_scores`, one number per candidate, higher
  first; Arrow a number column `engine_score`. Checked like phi (numbers only, finite,
  one per candidate: a 422 naming the field);
* a ranking request may name its `query_id` and `request_id` (JSON fields, or Arrow
  schema metadata); the ranking echoes them and always carries its `impression_id` (the
  id the clicks on it name);
* clicks (JSON or Arrow): `{"impression_id", "clicks": [{"candidate_id", "position"?,
  "time"?, "dwell"?}, ...], "session_over"?}`, or `{"impressions": [that, ...]}` for a
  batch; an empty `clicks` list says "shown, nothing clicked, session over", and
  `"session_over": true` says the session is over after these clicks (its session-over
  row follows them, `producers.click_producer.sessions_over`); without it the session
  stays open for more clicks until the click window. Arrow: one row per click, columns
  `impression_id`, `candidate_id` (null: the session-over row, after the impression's
  clicks if any) and, optionally, `position`, `time`, `dwell` (`stream.click_schema`'s
  wire layout is such a body).

Strict, like the APIs people trust: an unknown key is a 422 naming it; phi holds JSON
numbers only (not strings, booleans or nulls); a grade is an integer 0..127 or null. An
integer is a JSON number with no fractional part, however written (`2`, `2.0`, `2e0`), as
in JSON Schema (the OpenAPI document's "integer").
The names of the previous release (`served_by`, `served_version`; Arrow's `candidate_id`
column and `?model=&version=` query parameters) are still accepted and listed in
`deprecated`, which the app answers with a `Deprecation` header. Every refusal is a
`BadRequest` naming the field at fault.
"""

from __future__ import annotations

import hashlib
import itertools
import re
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import orjson
import pyarrow as pa

from rankstream.producers.candidate_checks import (
    ENGINE_SCORES,
    MAX_GRADE,
    FieldError,
    check_candidates,
    check_engine_scores,
)
from rankstream.producers.click_producer import sessions_over
from rankstream.producers.feedback_producer import Feedback
from rankstream.ranking.judgments import UNJUDGED
from rankstream.selection.engine_ranking import ENGINE
from rankstream.stream.click_schema import Click, InvalidRecordError
from rankstream.stream.store import check_name

JSON = "application/json"
ARROW = "application/vnd.apache.arrow.stream"
REQUEST_ID = re.compile(r"[\x21-\x7e]{1,200}")  # a request id, Idempotency-Key: visible ASCII


# status -> the error code when the raise names none (the OpenAPI document lists them)
ERROR_CODES = {
    400: "malformed_body",
    401: "unauthorized",
    404: "not_found",
    405: "method_not_allowed",
    408: "body_timeout",
    409: "in_progress",
    413: "body_too_large",
    415: "unsupported_media_type",
    422: "invalid_field",
    500: "internal_error",
    503: "unavailable",
}
UNKNOWN_FIELD = "unknown_field"
# Judged candidates per feedback over HTTP: the triplets grow with their square (1,000 with
# 128 grades: ~500,000 triplets, ~2 s); 2,000 missed the 5 s deadline, and 10,000 (~50M
# triplets) kept a thread busy long after its 503.
MAX_JUDGED = 1000


class BadRequest(Exception):  # noqa: N818 (an HTTP answer, not a program error)
    """A request the API refuses: HTTP `status`, a message, the field when one is at fault,
    a machine-readable `code` (`ERROR_CODES` by default) and extra answer headers."""

    def __init__(
        self,
        status: int,
        message: str,
        field: str | None = None,
        code: str | None = None,
        headers: dict[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.status, self.message, self.field = status, message, field
        self.code = code or ERROR_CODES.get(status, "error")
        self.headers = headers or {}

    @classmethod
    def of(cls, exc: FieldError) -> BadRequest:
        return cls(422, str(exc), exc.field)


@dataclass(frozen=True)
class RankRequest:
    candidate_ids: np.ndarray  # int64 (k,), distinct
    phi: np.ndarray  # float32 (k, 36), finite
    model: str | None  # None: the champion
    version: int | None
    deprecated: tuple[str, ...] = ()  # old names this request used
    query_id: int | None = None  # the caller's, echoed and logged with the impression
    request_id: str | None = None
    engine_scores: np.ndarray | None = None  # float64 (k,), finite: the engine's own ranking


RANK_FIELDS = (
    "candidate_ids", "phi", "model", "version", "query_id", "request_id", ENGINE_SCORES,
)  # fmt: skip
ENGINE_COLUMN = "engine_score"  # the Arrow request's column of the engine's scores
CLICKS_FIELDS = ("impression_id", "clicks", "session_over")
CLICK_FIELDS = ("candidate_id", "position", "time", "dwell")
CLICK_COLUMNS = ("impression_id", *CLICK_FIELDS)
FEEDBACK_FIELDS = (
    "query_id", "candidate_ids", "phi", "relevance", "model", "version", "model_versions",
    ENGINE_SCORES,
)  # fmt: skip
# old name -> its name now (accepted on input for this release, with a Deprecation header)
FEEDBACK_RENAMED = {"served_by": "model", "served_version": "version"}


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


_FLOAT_INT_BOUND = 2.0**63  # orjson reads an integer beyond 64 bits as a rounded float


def whole(value: object) -> object:
    """A JSON number with no fractional part (`2.0`, `1e3`) as an int, as JSON Schema counts
    it an integer; any other value unchanged, for the caller's check to refuse. A float
    at or beyond +-2**63 stays a float (refused): it may be an integer literal outside
    int64 that the parser rounded into range (-9223372036854775809 reads as -2**63)."""
    if type(value) is float and value.is_integer() and abs(value) < _FLOAT_INT_BOUND:
        return int(value)
    return value


def _refuse_unknown(document: dict[str, Any], known: tuple[str, ...], at: str = "") -> None:
    """`at`: where `document` sits in the body (`impressions[2].`), prefixed to the field."""
    for key in document:
        if key not in known:
            raise BadRequest(422, f"unknown field {at + key!r}; known: {', '.join(known)}",
                             f"{at}{key}", code=UNKNOWN_FIELD)  # fmt: skip


def _required(document: dict[str, Any], field: str, at: str = "") -> Any:
    if field not in document or document[field] is None:
        raise BadRequest(422, f"{at}{field}: required", f"{at}{field}")
    return document[field]


def _caller_ids(query_id: object, request_id: object, text: bool = False) -> dict[str, Any]:
    """A ranking request's own `query_id` (an int64) and `request_id` (1-200 visible ASCII
    characters), from JSON values or from text (Arrow metadata)."""
    query_id = whole(query_id)
    if query_id is not None:
        if text and isinstance(query_id, str) and re.fullmatch(r"-?[0-9]{1,19}", query_id):
            query_id = int(query_id)
        if (
            isinstance(query_id, bool)
            or not isinstance(query_id, int)
            or not (-(2**63) <= query_id < 2**63)
        ):
            raise BadRequest(422, "query_id: must be a 64-bit integer", "query_id")
    if request_id is not None and (
        not isinstance(request_id, str) or not REQUEST_ID.fullmatch(request_id)
    ):
        raise BadRequest(422, "request_id: must be 1-200 visible ASCII characters",
                         "request_id")  # fmt: skip
    return {"query_id": query_id, "request_id": request_id}


def _model_choice(
    model: object, version: object, text: bool = False
) -> tuple[str | None, int | None]:
    """(model, version) from JSON values, or from text (`text`: Arrow metadata, queries)."""
    if model is not None and (not isinstance(model, str) or not model):
        raise BadRequest(422, "model: must be a model name or 'champion'", "model")
    version = whole(version)
    if version is not None:
        if text and isinstance(version, str) and version.isascii() and version.isdigit():
            version = int(version)
        if isinstance(version, bool) or not isinstance(version, int) or not 1 <= version < 2**63:
            raise BadRequest(422, "version: must be an integer >= 1", "version")  # < 2**63
        if model in (None, "champion"):
            raise BadRequest(422, "version: needs a model name (a champion has none)", "version")
    return model, version  # type: ignore[return-value]


def _matrix(values: object, field: str, body: bytes, document: dict[str, Any]) -> np.ndarray:
    """JSON numbers only: a string, boolean or null anywhere is refused, not converted.

    numpy would turn "0.9" into 0.9 and true into 1.0, so every element's type is
    checked, unless the body shows there is nothing but numbers to find: no "u" and no
    "f" (true, null and false need one; numbers and the ranking request's field names
    never hold one) and no quote beyond those of the top-level keys and string values.
    """
    message = f"{field}: must be a list of equal-length rows of JSON numbers"
    if not isinstance(values, list):
        raise BadRequest(422, message, field)
    strings = sum(isinstance(v, str) for v in document.values())
    plain = (b"u" not in body and b"f" not in body
             and body.count(b'"') == 2 * (len(document) + strings))  # fmt: skip
    if not plain and not all(
        isinstance(row, list) and all(type(v) is float or type(v) is int for v in row)
        for row in values
    ):
        raise BadRequest(422, message, field)
    try:
        return _rows_of_floats(values)
    except (TypeError, ValueError, OverflowError):
        raise BadRequest(422, message, field) from None


def _engine_scores(values: object, k: int) -> np.ndarray | None:
    """The engine's own scores (`selection.engine_ranking`): JSON numbers only, one per
    candidate, finite (`producers.candidate_checks.check_engine_scores`); None if absent."""
    if values is None:
        return None
    if not isinstance(values, list) or not all(type(v) is float or type(v) is int for v in values):
        raise BadRequest(422, f"{ENGINE_SCORES}: must be a list of JSON numbers, one per "
                         f"candidate ({k})", ENGINE_SCORES)  # fmt: skip
    try:
        return check_engine_scores(np.asarray(values, dtype=np.float64), k)
    except OverflowError:
        raise BadRequest(422, f"{ENGINE_SCORES}: a number overflows float64",
                         ENGINE_SCORES) from None  # fmt: skip
    except FieldError as exc:
        raise BadRequest.of(exc) from None


def _rows_of_floats(rows: list) -> np.ndarray:
    """`rows` (lists of JSON numbers, checked) as float64, the values `np.asarray` gives.

    When they are k lists of one length d >= 1 the numbers are read in one flat pass
    (`np.fromiter`, each converted as `np.asarray` converts it), which skips the nested
    sequence discovery that made `np.asarray` about as costly as parsing the JSON itself;
    anything else (ragged, nested deeper, empty) is left to `np.asarray`, whose answer
    or error stands as before. No JSON library here reads numbers into an array without
    a Python float each (orjson and msgspec build lists; pyarrow's JSON reader was slower
    on these bodies: docs/results/serving-cost.md)."""
    width = len(rows[0]) if rows and type(rows[0]) is list else 0
    if width and all(type(row) is list and len(row) == width for row in rows):
        try:
            flat = np.fromiter(itertools.chain.from_iterable(rows), np.float64, len(rows) * width)
            return flat.reshape(len(rows), width)
        except (TypeError, ValueError, OverflowError):
            pass  # np.asarray decides, as before
    return np.asarray(rows, dtype=np.float64)


def _ids(values: object) -> np.ndarray:
    if isinstance(values, list) and any(type(v) is float for v in values):
        if any(type(v) is float and v.is_integer() and abs(v) >= _FLOAT_INT_BOUND for v in values):
            raise BadRequest(422, "candidate_ids: ids must fit in 64 bits", "candidate_ids")
        values = [whole(v) for v in values]
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
    _refuse_unknown(document, RANK_FIELDS)
    ids = _ids(_required(document, "candidate_ids"))
    phi = _matrix(_required(document, "phi"), "phi", body, document)
    model, version = _model_choice(document.get("model"), document.get("version"))
    caller = _caller_ids(document.get("query_id"), document.get("request_id"))
    try:
        ids, phi = check_candidates(ids, phi, width)
    except FieldError as exc:
        raise BadRequest.of(exc) from None
    engine = _engine_scores(document.get(ENGINE_SCORES), ids.shape[0])
    return RankRequest(ids, phi, model, version, **caller, engine_scores=engine)


def rank_from_arrow(body: bytes, query: Mapping[str, str], width: int) -> RankRequest:
    """An Arrow ranking request; `query` holds the URL's query parameters (the model was
    chosen there before this release: still accepted, deprecated)."""
    table, metadata = _arrow_table(body)
    deprecated: list[str] = []
    names = list(table.column_names)
    if "candidate_id" in names and "candidate_ids" not in names:
        names[names.index("candidate_id")] = "candidate_ids"
        deprecated.append("candidate_id")
    for name in names:
        if name not in ("candidate_ids", "phi", ENGINE_COLUMN):
            raise BadRequest(422, f"unknown column {name!r}; known: candidate_ids, phi, "
                             f"{ENGINE_COLUMN}", name, code=UNKNOWN_FIELD)  # fmt: skip
    for field in ("candidate_ids", "phi"):
        if field not in names:
            raise BadRequest(422, f"{field}: required column", field)
    table = table.rename_columns(names)
    ids_column = table.column("candidate_ids")
    if not pa.types.is_integer(ids_column.type) or ids_column.null_count:
        raise BadRequest(422, "candidate_ids: must be a non-null integer column", "candidate_ids")
    ids = ids_column.to_numpy()
    phi = _arrow_matrix(table.column("phi"))
    known = ("model", "version", "query_id", "request_id")
    for key in metadata:
        if key not in known:
            raise BadRequest(422, f"unknown schema metadata {key!r}; known: {', '.join(known)}",
                             key, code=UNKNOWN_FIELD)  # fmt: skip
    caller = _caller_ids(metadata.pop("query_id", None), metadata.pop("request_id", None), True)
    model, version = metadata.get("model"), metadata.get("version")
    for key in query:
        if key not in ("model", "version"):
            raise BadRequest(422, f"unknown query parameter {key!r}", key, code=UNKNOWN_FIELD)
    if query and metadata:
        raise BadRequest(422, "model: give it in the schema metadata, not also the query",
                         "model")  # fmt: skip
    if query:
        model, version = query.get("model"), query.get("version")
        deprecated.append("query parameters model/version")
    choice = _model_choice(model, version, text=True)
    try:
        ids, phi = check_candidates(ids, phi, width)
    except FieldError as exc:
        raise BadRequest.of(exc) from None
    engine = None
    if ENGINE_COLUMN in names:
        engine = _arrow_engine_scores(table.column(ENGINE_COLUMN), ids.shape[0])
    return RankRequest(ids, phi, *choice, deprecated=tuple(deprecated), **caller,
                       engine_scores=engine)  # fmt: skip


def _arrow_engine_scores(column: pa.ChunkedArray, k: int) -> np.ndarray:
    """The `engine_score` column: numbers, no nulls; refused (422) as the JSON field is,
    naming the column."""
    if not (pa.types.is_floating(column.type) or pa.types.is_integer(column.type)):
        raise BadRequest(422, f"{ENGINE_COLUMN}: must be a number column, got {column.type}",
                         ENGINE_COLUMN)  # fmt: skip
    if column.null_count:
        raise BadRequest(422, f"{ENGINE_COLUMN}: holds nulls", ENGINE_COLUMN)
    try:
        return check_engine_scores(column.to_numpy().astype(np.float64), k)
    except FieldError as exc:
        raise BadRequest(422, f"{ENGINE_COLUMN}: {exc.message}", ENGINE_COLUMN) from None


def _arrow_table(body: bytes) -> tuple[pa.Table, dict[str, str]]:
    """An Arrow IPC stream body and its schema metadata as text; 400 when malformed."""
    try:
        table = pa.ipc.open_stream(pa.py_buffer(body)).read_all()
        table.validate(full=True)  # corrupt offsets/lengths must not reach numpy
    except (pa.ArrowException, OSError, ValueError) as exc:
        raise BadRequest(400, f"malformed Arrow IPC stream: {exc}") from None
    metadata = {k.decode(errors="replace"): v.decode(errors="replace")
                for k, v in (table.schema.metadata or {}).items()}  # fmt: skip
    return table, metadata


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


def warm_arrow() -> None:
    """pyarrow's first array built from numpy imports pandas when it is installed (1-2 s,
    more on a busy machine): serve does that at start-up, not within the deadline of the
    first request that encodes Arrow (a feedback's triplets, an Arrow ranking)."""
    pa.array(np.zeros(1))


def ranking_json(
    ids: np.ndarray, scores: np.ndarray, model: str, version: int, extra: dict[str, Any]
) -> bytes:
    """The ranking as JSON; the arrays are written by orjson from numpy (the same bytes
    as their lists give, without a Python int and float per candidate: as int64 and
    float64, C-ordered, which is what orjson writes as `.tolist()` would)."""
    document = {
        "model": model,
        "version": version,
        "candidate_ids": np.ascontiguousarray(ids, dtype=np.int64),
        "scores": np.ascontiguousarray(scores, dtype=np.float64),
        **extra,
    }
    return orjson.dumps(document, option=orjson.OPT_SERIALIZE_NUMPY)


def feedback_from_json(body: bytes, stored: Collection[str]) -> tuple[Feedback, tuple[str, ...]]:
    """A feedback body and the old names it used; relevance holds a grade 0..127 or null
    (unjudged) per candidate; `model` and the keys of `model_versions` must be among
    `stored`, the stored models' names: another model name is a 404 (no such model, as in
    /v1/rank; checked once the body's form is, which is a 422 when wrong), what cannot be a
    model name (`stream.store.check_name`) a 422."""
    document = parse_json(body)
    deprecated = tuple(old for old in FEEDBACK_RENAMED if old in document)
    for old in deprecated:
        new = FEEDBACK_RENAMED[old]
        if new in document:
            raise BadRequest(422, f"{old}: the old name of {new}; send only {new}", old)
        document[new] = document.pop(old)
    _refuse_unknown(document, FEEDBACK_FIELDS)
    query_id = whole(_required(document, "query_id"))
    if isinstance(query_id, bool) or not isinstance(query_id, int):
        raise BadRequest(422, "query_id: must be an integer", "query_id")
    relevance = _grades(_required(document, "relevance"))
    model = document.get("model", "unknown")  # absent: an engine ranking on its own
    if "model" in document and not _is_name(model):
        raise BadRequest(422, f"model: {str(model)[:40]!r} is not a model name", "model")
    version = whole(document.get("version", 0))
    if isinstance(version, bool) or not isinstance(version, int) or not 0 <= version < 2**63:
        raise BadRequest(422, f"version: must be an integer >= 0, got {version!r}", "version")
    versions = _model_versions(document.get("model_versions", {}))
    ids = _ids(_required(document, "candidate_ids"))
    feedback = Feedback(
        query_id=query_id,
        candidate_ids=ids,
        phi=_matrix(_required(document, "phi"), "phi", body, document),
        relevance=relevance,
        served_by=model,
        served_version=version,
        model_versions=versions,
        engine_scores=_engine_scores(document.get(ENGINE_SCORES), ids.shape[0]),
    )
    if "model" in document and model not in (*stored, ENGINE):
        raise BadRequest(404, f"model: no stored model {model[:80]!r}; stored: "
                         f"{', '.join(sorted(stored))}", "model")  # fmt: skip
    for name in versions:
        if name not in stored:
            raise BadRequest(404, f"model_versions: no stored model {name[:80]!r}",
                             "model_versions")  # fmt: skip
    return feedback, deprecated


def _grades(grades: object) -> np.ndarray:
    """Grades 0..MAX_GRADE or null (-> UNJUDGED); -1 is refused, not read as unjudged."""
    if not isinstance(grades, list):
        raise BadRequest(422, "relevance: must be a list of integer grades or nulls", "relevance")
    grades = [whole(g) for g in grades]
    for at, grade in enumerate(grades):
        if grade is None:
            continue
        if isinstance(grade, bool) or not isinstance(grade, int):
            raise BadRequest(422, f"relevance: grade {grade!r} at {at} is not an integer "
                             f"0..{MAX_GRADE} or null", "relevance")  # fmt: skip
        if not 0 <= grade <= MAX_GRADE:
            raise BadRequest(422, f"relevance: grade {grade} at {at} outside 0..{MAX_GRADE} "
                             "(null = not judged)", "relevance")  # fmt: skip
    judged = len(grades) - grades.count(None)
    if judged > MAX_JUDGED:
        raise BadRequest(422, f"relevance: {judged} judged candidates; at most {MAX_JUDGED} "
                         "per feedback (null the rest)", "relevance")  # fmt: skip
    return np.asarray([UNJUDGED if g is None else g for g in grades], dtype=np.int64)


def _model_versions(versions: object) -> dict[str, int]:
    if not isinstance(versions, dict):
        raise BadRequest(422, "model_versions: must be an object {model: version}",
                         "model_versions")  # fmt: skip
    versions = {name: whole(version) for name, version in versions.items()}
    for name, version in versions.items():
        if not _is_name(name):
            raise BadRequest(422, f"model_versions: {name[:40]!r} is not a model name",
                             "model_versions")  # fmt: skip
        if isinstance(version, bool) or not isinstance(version, int) or not 1 <= version < 2**63:
            raise BadRequest(422, f"model_versions: {name!r}: {version!r} is not a stored "
                             "version (an integer >= 1)", "model_versions")  # fmt: skip
    return versions


def _is_name(name: object) -> bool:
    """A string that can name a stored model (`stream.store.check_name`)."""
    try:
        check_name(name)  # type: ignore[arg-type]
    except ValueError:
        return False
    return True


# --- clicks -------------------------------------------------------------------------------
def clicks_from_json(body: bytes) -> list[Click]:
    """`{"impression_id", "clicks": [...], "session_over"?}` or `{"impressions": [those]}`
    as Click rows (an empty `clicks` list: the impression's no-click row; `session_over`
    true: its session-over row after its clicks); 422 naming the field otherwise, e.g.
    `impressions[1].clicks[0].position`. A batch is its entries in order, as if posted
    one after another: an impression may come more than once (as rows may in Arrow)."""
    document = parse_json(body)
    if "impressions" in document:
        _refuse_unknown(document, ("impressions",))
        entries = document["impressions"]
        if not isinstance(entries, list) or not entries:
            raise BadRequest(422, "impressions: must be a non-empty list of "
                             "{impression_id, clicks}", "impressions")  # fmt: skip
        places = [f"impressions[{i}]." for i in range(len(entries))]
    else:
        entries, places = [document], [""]
    clicks: list[Click] = []
    for entry, at in zip(entries, places, strict=True):
        if not isinstance(entry, dict):
            raise BadRequest(422, f"{at[:-1]}: must be an object {{impression_id, clicks}}",
                             at[:-1])  # fmt: skip
        _refuse_unknown(entry, CLICKS_FIELDS, at)
        impression_id = _required(entry, "impression_id", at)
        rows = _required(entry, "clicks", at)
        if not isinstance(rows, list):
            raise BadRequest(422, f"{at}clicks: must be a list (empty: nothing was clicked)",
                             f"{at}clicks")  # fmt: skip
        over = _session_over(entry, rows, at)
        found = [] if rows else [_click(at, "", impression_id, None)]
        for j, row in enumerate(rows):
            where = f"{at}clicks[{j}]."
            if not isinstance(row, dict):
                raise BadRequest(422, f"{where[:-1]}: must be an object {{candidate_id, ...}}",
                                 where[:-1])  # fmt: skip
            _refuse_unknown(row, CLICK_FIELDS, where)
            candidate = whole(_required(row, "candidate_id", where))
            values = (row.get(name) for name in CLICK_FIELDS[1:])
            position, *rest = values
            found.append(_click(at, where, impression_id, candidate, whole(position), *rest))
        clicks += sessions_over(found) if over else found
    return clicks


def _session_over(entry: dict, rows: list, at: str) -> bool:
    """The entry's `session_over` (false when absent): a JSON boolean; false with an empty
    `clicks` list is a contradiction (that list is itself the session-over row)."""
    over = entry.get("session_over", False)
    field = f"{at}session_over"
    if not isinstance(over, bool):
        raise BadRequest(422, f"{field}: must be true or false, got {str(over)[:40]!r}", field)
    if not rows and "session_over" in entry and not over:
        raise BadRequest(422, f"{field}: false with an empty clicks list, which says the "
                         "session is over with nothing clicked; post its clicks when "
                         "there are some", field)  # fmt: skip
    return over


def _click(at: str, where: str, impression_id: object, *values: object) -> Click:
    """A Click, or a 422 naming the field at fault (`at`: the impression's place in the
    body, `where`: the click's)."""
    try:
        return Click(impression_id, *values)  # type: ignore[arg-type]
    except InvalidRecordError as exc:
        field = f"{at}{exc.field}" if exc.field == "impression_id" else f"{where}{exc.field}"
        raise BadRequest(422, f"{field}: {exc.message}", field) from None


def clicks_from_arrow(body: bytes) -> list[Click]:
    """One row per click: columns `impression_id` (text), `candidate_id` (integers; null:
    the no-click row) and, optionally, `position` (integers), `time` and `dwell` (numbers),
    nulls allowed. The clicks wire message itself (`rankstream.schema` = clicks, version
    1) is such a body."""
    table, metadata = _arrow_table(body)
    for key, value in metadata.items():
        wire = {"rankstream.schema": "clicks", "rankstream.version": "1"}
        if key not in wire:
            raise BadRequest(422, f"unknown schema metadata {key!r}", key, code=UNKNOWN_FIELD)
        if value != wire[key]:
            raise BadRequest(422, f"{key}: {value[:40]!r}, expected {wire[key]!r}", key)
    for name in table.column_names:
        if name not in CLICK_COLUMNS:
            raise BadRequest(422, f"unknown column {name!r}; known: {', '.join(CLICK_COLUMNS)}",
                             name, code=UNKNOWN_FIELD)  # fmt: skip
    if len(set(table.column_names)) != table.num_columns:
        raise BadRequest(422, "a column appears twice", "columns")
    kinds = {"impression_id": (pa.types.is_string, pa.types.is_large_string),
             "candidate_id": (pa.types.is_integer,), "position": (pa.types.is_integer,),
             "time": (pa.types.is_integer, pa.types.is_floating),
             "dwell": (pa.types.is_integer, pa.types.is_floating)}  # fmt: skip
    columns = {}
    for name in CLICK_COLUMNS:
        if name not in table.column_names:
            if name in ("impression_id", "candidate_id"):
                raise BadRequest(422, f"{name}: required column", name)
            continue
        column = table.column(name)
        if not any(check(column.type) for check in kinds[name]):
            raise BadRequest(422, f"{name}: a {column.type} column is not accepted", name)
        columns[name] = column.to_pylist()
    if table.num_rows == 0:
        raise BadRequest(422, "clicks: the body holds no rows", "clicks")
    clicks = []
    for row in range(table.num_rows):
        values = [columns[name][row] if name in columns else None for name in CLICK_COLUMNS]
        try:
            clicks.append(Click(*values))
        except InvalidRecordError as exc:
            raise BadRequest(422, f"{exc.field}: row {row}: {exc.message}", exc.field) from None
    return clicks


def clicks_digest(clicks: list[Click]) -> str:
    """A hash of the clicks' content (not their encoding: the same clicks in JSON or Arrow,
    spaced any way, hash alike): the default idempotency key's second half."""
    rows = [[c.impression_id, c.candidate_id, c.position, c.time, c.dwell] for c in clicks]
    return hashlib.sha256(orjson.dumps(rows)).hexdigest()[:32]
