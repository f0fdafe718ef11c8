"""The HTTP API's OpenAPI 3.1 document, served at GET /openapi.json.

Written by hand (the app is plain Starlette, `serve.app`); a test checks that it
names exactly the app's routes and methods, so the two cannot drift apart. It is the
contract: every answer (status, headers, body) is described, with a token and without
one (the document a serve gives describes that serve: the bearer scheme and its 401s only
when a token is configured), and what its schemas call valid is accepted; an
OpenAPI-driven tester checks both against a running serve (tests/test_openapi_contract.py).
Every rule the server applies is a JSON Schema rule of the document but one, which JSON
Schema cannot state: one item per candidate in phi, engine_scores and relevance (a
`PER_CANDIDATE` key beside the schema; 422 otherwise). A name no model is stored under is
a 404 (no such model), as in /v1/rank, not a refusal of the request's form.
"""

from __future__ import annotations

import sys
from html import escape
from typing import Any

from rankstream.producers.candidate_checks import ENGINE_SCORES, MAX_CANDIDATES, MAX_GRADE
from rankstream.selection.engine_ranking import ENGINE
from rankstream.serve.bodies import ERROR_CODES, FEEDBACK_RENAMED, MAX_JUDGED, UNKNOWN_FIELD
from rankstream.stream.settings import Settings

_ERROR = {
    "type": "object",
    "required": ["error"],
    "properties": {
        "error": {
            "type": "object",
            "required": ["code", "message", "field"],
            "properties": {
                "code": {"type": "string", "enum": sorted({*ERROR_CODES.values(), UNKNOWN_FIELD})},
                "message": {"type": "string", "maxLength": 200},
                "field": {"type": ["string", "null"], "maxLength": 200,
                          "description": "the request field at fault"},
            },
        }
    },
}  # fmt: skip
_WHY = {
    400: "malformed JSON or Arrow",
    401: "missing or wrong bearer token",
    404: "no such route, model or version",
    405: "wrong method for this route",
    408: "the body did not arrive within the body deadline",
    409: "feedback or clicks with this Idempotency-Key: still being delivered (Retry-After)",
    413: "the body exceeds the size limit",
    415: "unsupported Content-Type",
    422: "a field is missing, unknown or invalid (`field` names it)",
    500: "an internal error (logged with the request id)",
    503: "the broker or the store did not answer within the deadline (Retry-After)",
}
_VISIBLE = "^[\\x21-\\x7e]{1,200}$"  # a request id, impression id, Idempotency-Key
_INT64 = {"type": "integer", "format": "int64", "minimum": -(2**63), "maximum": 2**63 - 1}
# phi is read as float32: a number from this on (its overflow threshold, round to nearest)
# becomes Inf and is refused, one below it is the largest float32
_FLOAT32_OVERFLOW = 3.4028235677973366e38
_FLOAT64 = sys.float_info.max  # a JSON number beyond a double's range is refused as malformed
_NAME = "^[A-Za-z0-9_.\\-]{1,200}$"  # a stored model's name (`stream.store.check_name`)
_REQUEST_ID = {
    "name": "X-Request-ID", "in": "header", "required": False, "schema": {"type": "string"},
    "description": "echoed on the answer (1-200 visible ASCII characters; else a new one)",
}  # fmt: skip
_HEADERS = {
    "X-Request-ID": {"required": True, "schema": {"type": "string", "pattern": _VISIBLE},
                     "description": "this request's id: the one sent, or a new one"},
}  # fmt: skip
_DEPRECATION = {
    "Deprecation": {"schema": {"type": "string", "const": "true"},
                    "description": "`true` when the request used a name of the previous "
                                   "release (still accepted)"},
    "X-Deprecated-Names": {"schema": {"type": "string"},
                           "description": "which old names the request used"},
}  # fmt: skip
_RETRY_AFTER = {
    "Retry-After": {"required": True, "schema": {"type": "integer", "minimum": 0},
                    "description": "seconds to wait before retrying"},
}  # fmt: skip
# the headers of an error answer besides X-Request-ID
_ERROR_HEADERS: dict[int, dict[str, Any]] = {
    401: {"WWW-Authenticate": {"required": True, "schema": {"type": "string", "const": "Bearer"},
                               "description": "the scheme the token goes in"}},
    408: {"Connection": {"schema": {"type": "string", "const": "close"},
                         "description": "the connection is closed after this answer"}},
    409: _RETRY_AFTER,
    503: _RETRY_AFTER,
}  # fmt: skip


# The rule JSON Schema cannot state, said in the document for people and testers: this
# array holds one item per item of the named array of the same body (422 otherwise).
PER_CANDIDATE = "x-one-per-item-of"


def _phi(width: int) -> dict[str, Any]:
    return {
        "type": "array",
        "description": f"one row of {width} finite numbers per candidate, in candidate order "
                       "(as many rows as candidate_ids; numbers within float32's range)",
        "minItems": 1, "maxItems": MAX_CANDIDATES, PER_CANDIDATE: "candidate_ids",
        "items": {"type": "array", "minItems": width, "maxItems": width,
                  "items": {"type": "number", "exclusiveMinimum": -_FLOAT32_OVERFLOW,
                            "exclusiveMaximum": _FLOAT32_OVERFLOW}},
    }  # fmt: skip


_IDS = {
    "type": "array",
    "description": "the candidates' ids, distinct (one phi row each, in this order)",
    "items": _INT64,
    "minItems": 1,
    "maxItems": MAX_CANDIDATES,
    "uniqueItems": True,
}
_ENGINE_SCORES = {
    "type": ["array", "null"], "minItems": 1, "maxItems": MAX_CANDIDATES,
    PER_CANDIDATE: "candidate_ids",
    "items": {"type": "number", "minimum": -_FLOAT64, "maximum": _FLOAT64},
    "description": "the engine's own ranking: one number per candidate (as many as "
                   "candidate_ids), higher first (an engine with only an order sends "
                   "-position); ties keep the candidates' order; null is as absent. Logged "
                   "with the impression",
}  # fmt: skip
_HAS_ENGINE_SCORES = {"required": [ENGINE_SCORES], "properties": {ENGINE_SCORES: {"type": "array"}}}
_VERSIONS = {
    "type": "object",
    "propertyNames": {"pattern": _NAME},
    "additionalProperties": {**_INT64, "minimum": 1},
    "description": "model name -> version current when the query was ranked",
}
_RANK_REQUEST: dict[str, Any] = {
    "type": "object",
    "required": ["candidate_ids", "phi"],
    "additionalProperties": False,
    "properties": {
        "candidate_ids": _IDS,
        "model": {"type": ["string", "null"], "minLength": 1, "default": "champion",
                  "description": "'champion' (the evaluator's best) or a model name "
                                 "(404 when no model of that name is stored); null is as "
                                 "absent"},
        "version": {**_INT64, "type": ["integer", "null"], "minimum": 1,
                    "description": "an exact stored version of `model` (default: its newest, "
                                   "or its pinned version); needs a model name, not "
                                   "'champion' (404 when not kept); null is as absent"},
        "query_id": {**_INT64, "type": ["integer", "null"],
                     "description": "yours: echoed, and logged with the impression; null is "
                                    "as absent"},
        "request_id": {"type": ["string", "null"], "pattern": _VISIBLE,
                       "description": "yours, 1-200 visible ASCII characters (default: the "
                                      "X-Request-ID you sent): echoed, and logged with the "
                                      "impression; null is as absent"},
        ENGINE_SCORES: {**_ENGINE_SCORES, "description": _ENGINE_SCORES["description"]
                        + f"; required with model '{ENGINE}' (which ranks by them) and, in "
                          "shadow mode, with the champion"},
    },
    # a version needs a model name, not 'champion'
    "if": {"required": ["version"], "properties": {"version": {"type": "integer"}}},
    "then": {"required": ["model"],
             "properties": {"model": {"type": "string", "not": {"const": "champion"}}}},
}  # fmt: skip
_RANKING = {
    "type": "object",
    "required": ["model", "version", "candidate_ids", "scores"],
    "properties": {
        "model": {"type": "string"},
        "version": {"type": "integer"},
        "requested": {"type": "string"},
        "pinned": {"type": "boolean"},
        "candidate_ids": {"type": "array", "items": {"type": "integer"},
                          "description": "best first"},
        "scores": {"type": "array", "items": {"type": "number"}},
        "model_versions": _VERSIONS,
        "impression_id": {"type": "string",
                          "description": "this ranking as shown (logged to the impressions "
                                         "topic unless impression logging is off): name it "
                                         "when posting clicks"},
        "query_id": {"type": "integer", "description": "echoed, when sent"},
        "request_id": {"type": "string", "description": "echoed, when sent"},
    },
}  # fmt: skip
# model 'engine' ranks by the request's engine_scores: it needs them
_ENGINE_NEEDS_SCORES = {
    "anyOf": [{"properties": {"model": {"not": {"const": ENGINE}}}}, _HAS_ENGINE_SCORES]
}
# shadow mode answers champion requests with the engine's order: they need engine_scores
_SHADOW_NEEDS_SCORES = {"anyOf": [
    _HAS_ENGINE_SCORES,
    {"required": ["model"], "properties": {"model": {"type": "string",
                                                     "not": {"const": "champion"}}}},
]}  # fmt: skip
_CLICK = {
    "type": "object",
    "required": ["candidate_id"],
    "additionalProperties": False,
    "properties": {
        "candidate_id": {**_INT64,
                         "description": "a candidate of the impression that was clicked"},
        "position": {"type": ["integer", "null"], "minimum": 1, "maximum": 2**31 - 1,
                     "description": "its displayed rank, 1-based, if known"},
        "time": {"type": ["number", "null"], "minimum": -_FLOAT64, "maximum": _FLOAT64,
                 "description": "unix seconds of the click"},
        "dwell": {"type": ["number", "null"], "minimum": 0, "maximum": _FLOAT64,
                  "description": "seconds"},
    },
}  # fmt: skip
_IMPRESSION_CLICKS = {
    "type": "object",
    "required": ["impression_id", "clicks"],
    "additionalProperties": False,
    "properties": {
        "impression_id": {"type": "string", "pattern": _VISIBLE,
                          "description": "what /v1/rank answered"},
        "clicks": {"type": "array", "items": _CLICK,
                   "description": "its clicks; empty: shown, session over, nothing clicked"},
        "session_over": {"type": "boolean", "default": False,
                         "description": "true: no more clicks will come for this "
                                        "impression; its session closes after these clicks "
                                        "and is learned from at once. Absent or false: it "
                                        "stays open for more clicks until the click window "
                                        "(see the route's description). false with an empty "
                                        "clicks list is refused (422)"},
    },
    # an empty clicks list is itself the session-over row: with it, session_over is true
    "anyOf": [{"properties": {"clicks": {"minItems": 1}}},
              {"properties": {"session_over": {"const": True}}}],
}  # fmt: skip
_WINDOW_S = Settings().click_window_s
_SESSIONS = (
    "A session (an impression and its clicks) is learned from when it closes: when the "
    "engine says it is over (`session_over: true` with its clicks, an empty `clicks` "
    "list, or in Arrow a row with a null candidate_id after its clicks), else once the "
    f"click window has passed in event time (RANKSTREAM_CLICK_WINDOW_SECONDS, default "
    f"{_WINDOW_S:g} s after the impression) or the clicks stream has been quiet for a "
    "window and a grace (RANKSTREAM_CLICK_GRACE_SECONDS). An engine that never says it "
    "waits for the window. Closed sessions are learned from in the order their impressions "
    "were logged (ranked), so one left open holds back the later ones: close every "
    "impression you rank (its clicks with session_over: true, or an empty clicks list). "
    "Clicks after a session's end are dead-lettered as late."
)
_CLICKS: dict[str, Any] = {
    "oneOf": [
        _IMPRESSION_CLICKS,
        {"type": "object", "required": ["impressions"], "additionalProperties": False,
         "properties": {"impressions": {"type": "array", "minItems": 1,
                                        "items": _IMPRESSION_CLICKS,
                                        "description": "taken in order, as if posted one "
                                                       "after another (an impression may "
                                                       "come more than once)"}}},
    ],
}  # fmt: skip
_CLICKS_RECEIPT = {
    "type": "object",
    "properties": {
        "impressions": {"type": "integer"},
        "clicks": {"type": "integer", "description": "clicked rows"},
        "rows": {"type": "integer", "description": "rows written (a no-click row counts)"},
        "duplicate": {"type": "boolean",
                      "description": "true: this Idempotency-Key was seen; this is the first "
                                     "answer, and nothing was published again"},
    },
}  # fmt: skip
_MODEL_NAME = {
    "type": "string",
    "pattern": _NAME,
    "description": "echo /v1/rank's: the stored model that ranked the query, or "
    f"'{ENGINE}' (default: unknown; 404 when no model of that name is stored)",
}
_FEEDBACK: dict[str, Any] = {
    "type": "object",
    "required": ["query_id", "candidate_ids", "phi", "relevance"],
    "additionalProperties": False,
    "properties": {
        "query_id": {**_INT64, "description": "the message key of its triplets and judged "
                                               "query"},
        "candidate_ids": _IDS,
        "relevance": {"type": "array", "minItems": 1, "maxItems": MAX_CANDIDATES,
                      PER_CANDIDATE: "candidate_ids",
                      "items": {"type": ["integer", "null"], "minimum": 0, "maximum": MAX_GRADE},
                      "contains": {"type": "integer"}, "maxContains": MAX_JUDGED,
                      "description": "the user's grade per candidate (as many as "
                                     f"candidate_ids, 1..{MAX_JUDGED} not null); null = not "
                                     "judged. Every pair of judged candidates with different "
                                     "grades becomes a triplet"},
        "model": _MODEL_NAME,
        "version": {**_INT64, "minimum": 0, "description": "echo /v1/rank's"},
        "model_versions": {**_VERSIONS,
                           "description": "echo /v1/rank's: names of stored models (404 when "
                                          "one is not); default: the versions current now"},
        "served_by": {**_MODEL_NAME, "deprecated": True,
                      "description": "old name of model (not both)"},
        "served_version": {**_INT64, "minimum": 0, "deprecated": True,
                           "description": "old name of version (not both)"},
        ENGINE_SCORES: _ENGINE_SCORES,
    },
    # an old name and its new one in one body is refused (422, naming the old one)
    "allOf": [{"not": {"required": [old, new]}} for old, new in FEEDBACK_RENAMED.items()],
}  # fmt: skip
_RECEIPT = {
    "type": "object",
    "properties": {
        "query_id": {"type": "integer"},
        "seq": {"type": "integer"},
        "triplets": {"type": "integer", "description": "0 with fewer than two distinct grades"},
        "judged": {"type": "integer"},
        "distinct_grades": {"type": "integer"},
        "duplicate": {"type": "boolean",
                      "description": "true: this Idempotency-Key was seen; this is the first "
                                     "answer, and nothing was published again"},
    },
}  # fmt: skip


_READY = {
    "type": "object",
    "properties": {
        "ready": {"type": "boolean"},
        "champion": {"type": "string"},
        "problems": {"type": "array", "items": {"type": "string"}},
    },
}


_MODEL = {
    "type": "object",
    "description": "One stored model (further fields: docs)",
    "properties": {
        "name": {"type": "string"},
        "kind": {"type": ["string", "null"]},
        "version": {"type": ["integer", "null"], "description": "newest stored version"},
        "champion": {"type": "boolean"},
        "interleaving": {"type": ["object", "null"],
                         "description": "its click race against the champion: impressions, "
                                        "wins, losses, ties, statistic, decision; refused "
                                        "(null while drafted, else the version refused "
                                        "and its evidence), reopened, collapsed"},
        "collapsed": {"type": "boolean",
                      "description": "true: the click race put this model far below the "
                                     "champion (refused, its mean preference margin "
                                     "<= -0.2); it is not drafted "
                                     "against the champion until a new version learned "
                                     "twice as much"},
    },
}  # fmt: skip
_MODELS = {
    "type": "object",
    "properties": {
        "champion": {"type": "string"},
        "models": {"type": "array", "items": _MODEL},
    },
}


def _json(schema: dict[str, Any]) -> dict[str, Any]:
    return {"content": {"application/json": {"schema": schema}}}


def _answers(
    ok: dict[str, Any], *errors: int, guarded: bool = False, deprecation: bool = False
) -> dict[str, Any]:
    """200 and every error the route can answer (each route: 404 and 405 from routing,
    500; 401 when `guarded`: a token is configured and the route needs it), each with its
    headers; `deprecation`: the 200 may say the request used old names."""
    headers = {**_HEADERS, **(_DEPRECATION if deprecation else {})}
    answers = {"200": {"description": "OK", "headers": headers, **ok}}
    for status in sorted({*errors, 404, 405, 500, *((401,) if guarded else ())}):
        answers[str(status)] = {"description": _WHY[status],
                                "headers": {**_HEADERS, **_ERROR_HEADERS.get(status, {})},
                                **_json(_ERROR)}  # fmt: skip
    return answers


def _with_phi(schema: dict[str, Any], width: int) -> dict[str, Any]:
    """A request schema with its `phi` field at the deployment's width."""
    return {**schema, "properties": {**schema["properties"], "phi": _phi(width)}}


def openapi_document(width: int, shadow: bool = False, token: bool = False) -> dict[str, Any]:
    """The document for a deployment whose phi has `width` columns (`Settings.phi_dim`),
    in shadow mode or not (`Settings.shadow`: a champion ranking needs engine_scores),
    with an API token or not (`Settings.api_token`: then every route but the public ones
    needs it as a bearer token, and may answer 401; without one nothing is asked)."""
    bearer = {"securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}}}
    security = {"components": bearer, "security": [{"bearer": []}]} if token else {}
    return {
        "openapi": "3.1.0",
        "info": {"title": "rankstream", "version": "1",
                 "description": "Rank with the models rankstream learns; send back feedback "
                                "and clicks."},
        **security,
        "paths": {
            **_posts(width, shadow, token),
            **_gets(token),
        },
    }  # fmt: skip


def _posts(width: int, shadow: bool, guarded: bool) -> dict[str, Any]:
    """/v1/rank and /v1/feedback, their bodies at the deployment's width."""
    arrow = "application/vnd.apache.arrow.stream"
    rules = [_ENGINE_NEEDS_SCORES, *([_SHADOW_NEEDS_SCORES] if shadow else [])]
    rank_request = {**_with_phi(_RANK_REQUEST, width), "allOf": rules}
    return {
        "/v1/rank": {"post": {
            "summary": "Rank a query's candidates with the champion or a chosen model",
            "parameters": [_REQUEST_ID],
            "requestBody": {"required": True, "content": {
                "application/json": {"schema": rank_request},
                arrow: {"schema": {"description": "columns candidate_ids int64, phi "
                                   f"fixed_size_list<float32>[{width}]; schema metadata "
                                   "model, version, query_id, request_id (optional, as "
                                   "in JSON); optional column engine_score (numbers, as "
                                   "JSON's engine_scores). The previous release's "
                                   "?model=&version= query parameters are still accepted "
                                   "with an Arrow body, deprecated"}},
            }},
            "responses": _answers(
                {"content": {"application/json": {"schema": _RANKING},
                             arrow: {"schema": {"description": "columns candidate_ids, "
                                                "scores (best first); schema metadata "
                                                "model, version, impression_id (query_id, "
                                                "request_id when sent); when Accept "
                                                "asks"}}}},
                400, 408, 413, 415, 422, 503, guarded=guarded, deprecation=True),
        }},
        "/v1/feedback": {"post": {
            "summary": "A judged query: produced as triplets + judged query once "
                       "the broker acknowledged; once per Idempotency-Key",
            "parameters": [_REQUEST_ID, _idempotency_key("the query_id")],
            "requestBody": {"required": True, **_json(_with_phi(_FEEDBACK, width))},
            "responses": _answers(_json(_RECEIPT), 400, 408, 409, 413, 415, 422, 503,
                                  guarded=guarded, deprecation=True),
        }},
        "/v1/clicks": {"post": {
            "summary": "Clicks on impressions (one or a batch): on the clicks topic once the "
                       "broker acknowledged; once per Idempotency-Key",
            "description": _SESSIONS,
            "parameters": [
                _REQUEST_ID,
                _idempotency_key("the first impression_id and a hash of the clicks' content"),
            ],
            "requestBody": {"required": True, "content": {
                "application/json": {"schema": _CLICKS},
                arrow: {"schema": {"description": "one row per click: impression_id utf8, "
                                   "candidate_id int64 (null: the impression's session-"
                                   "over row: nothing more will come, after its click rows "
                                   "if any), optional position int, time and dwell numbers "
                                   "(docs/reference/wire.md's rankstream.clicks message is one)"}},
            }},
            "responses": _answers(_json(_CLICKS_RECEIPT), 400, 408, 409, 413, 415, 422, 503,
                                  guarded=guarded),
        }},
    }  # fmt: skip


def _idempotency_key(default: str) -> dict[str, Any]:
    """The Idempotency-Key header of a route that publishes; `default`: the key without it."""
    return {"name": "Idempotency-Key", "in": "header", "required": False,
            "schema": {"type": "string", "pattern": _VISIBLE},
            "description": "a repeat within the retention window (default 24 h) gets the "
                           "first answer with duplicate: true and publishes nothing "
                           f"(default key: {default})"}  # fmt: skip


def _gets(guarded: bool) -> dict[str, Any]:
    public = {"security": []} if guarded else {}  # open to all even with a token
    return {
        "/v1/models": {"get": {"summary": "Every stored model", "parameters": [_REQUEST_ID],
                               "responses": _answers(_json(_MODELS), guarded=guarded)}},
        "/v1/models/{name}": {"get": {
            "summary": "One stored model and its kept versions",
            "parameters": [_REQUEST_ID,
                           {"name": "name", "in": "path", "required": True,
                            "schema": {"type": "string"}}],
            "responses": _answers(_json({"type": "object"}), 503, guarded=guarded),
        }},
        "/healthz": {"get": {"summary": "Live", **public, "parameters": [_REQUEST_ID],
                             "responses": _answers({})}},
        "/readyz": {"get": {"summary": "The broker and the store answer, and a champion "
                                       "is loaded or no Uni-Con is stored yet (the first "
                                       "ranking publishes it); 503 otherwise, with the "
                                       "problems",
                            **public, "parameters": [_REQUEST_ID],
                            "responses": {**_answers(_json(_READY)),
                                          "503": {"description": "not ready",
                                                  "headers": _HEADERS,
                                                  **_json(_READY)}}}},
        "/docs": {"get": {"summary": "This document as a page", **public,
                          "parameters": [_REQUEST_ID],
                          "responses": _answers({"content": {"text/html": {}}})}},
        "/openapi.json": {"get": {"summary": "This document", **public,
                                  "parameters": [_REQUEST_ID],
                                  "responses": _answers(_json({"type": "object"}))}},
    }  # fmt: skip


def docs_page(document: dict[str, Any]) -> str:
    """GET /docs: the OpenAPI document as one self-contained HTML page (no scripts, no
    assets from elsewhere): every route, its fields and every answer it can give."""
    parts = [
        "<!doctype html><html lang=en><head><meta charset=utf-8>",
        f"<title>{escape(document['info']['title'])} API</title><style>",
        "body{font:15px/1.5 system-ui,sans-serif;max-width:60em;margin:2em auto;color:#222}",
        "h2{border-top:1px solid #ccc;padding-top:.8em}code{background:#f3f3f3;padding:0 .2em}",
        "table{border-collapse:collapse}td,th{border:1px solid #ddd;padding:.2em .5em;"
        "text-align:left;vertical-align:top}</style></head><body>",
        f"<h1>{escape(document['info']['title'])} HTTP API</h1>",
        f"<p>{escape(document['info']['description'])} Machine-readable: "
        "<a href=/openapi.json><code>/openapi.json</code></a>.</p>",
    ]
    for path, operations in document["paths"].items():
        for method, operation in operations.items():
            parts.append(f"<h2><code>{method.upper()} {escape(path)}</code></h2>")
            parts.append(f"<p>{escape(operation['summary'])}</p>")
            parts.extend(_fields_table(operation))
            parts.append("<table><tr><th>answer</th><th>when</th></tr>")
            for status, answer in operation["responses"].items():
                parts.append(f"<tr><td>{status}</td><td>{escape(answer['description'])}</td></tr>")
            parts.append("</table>")
    parts.append("</body></html>")
    return "".join(parts)


def _fields_table(operation: dict[str, Any]) -> list[str]:
    rows = [(p["name"], p["in"], p.get("description", "")) for p in operation.get("parameters", [])]
    body = operation.get("requestBody", {}).get("content", {}).get("application/json", {})
    for name, field in body.get("schema", {}).get("properties", {}).items():
        rows.append((name, "JSON body", field.get("description", "")))
    if not rows:
        return []
    cells = "".join(
        f"<tr><td><code>{escape(n)}</code></td><td>{escape(w)}</td><td>{escape(d)}</td></tr>"
        for n, w, d in rows
    )
    return [f"<table><tr><th>field</th><th>in</th><th>meaning</th></tr>{cells}</table><p></p>"]
