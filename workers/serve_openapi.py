"""The HTTP API's OpenAPI 3.1 document, served at GET /openapi.json.

Written by hand (the app is plain Starlette, `workers.serve_app`); a test checks that it
names exactly the app's routes and methods, so the two cannot drift apart.
"""

from __future__ import annotations

from typing import Any

from rankstream.workers.candidates import MAX_CANDIDATES, MAX_GRADE

_ERROR = {
    "type": "object",
    "properties": {
        "error": {"type": "string"},
        "field": {"type": ["string", "null"], "description": "the request field at fault"},
    },
}


def _phi(width: int) -> dict[str, Any]:
    return {
        "type": "array",
        "description": f"one row of {width} finite numbers per candidate, in candidate order",
        "items": {"type": "array", "items": {"type": "number"}, "minItems": width,
                  "maxItems": width},
    }  # fmt: skip


_IDS = {
    "type": "array",
    "items": {"type": "integer", "format": "int64"},
    "minItems": 1,
    "maxItems": MAX_CANDIDATES,
    "uniqueItems": True,
}
_VERSIONS = {
    "type": "object",
    "additionalProperties": {"type": "integer"},
    "description": "model name -> version current when the query was ranked",
}
_RANK_REQUEST: dict[str, Any] = {
    "type": "object",
    "required": ["candidate_ids", "phi"],
    "properties": {
        "candidate_ids": _IDS,
        "model": {"type": "string", "default": "champion",
                  "description": "'champion' (the evaluator's best) or a model name"},
        "version": {"type": "integer", "minimum": 1,
                    "description": "an exact stored version of `model` (default: its newest, "
                                   "or its pinned version)"},
    },
}  # fmt: skip
_RANKING = {
    "type": "object",
    "properties": {
        "model": {"type": "string"},
        "version": {"type": "integer"},
        "requested": {"type": "string"},
        "pinned": {"type": "boolean"},
        "candidate_ids": {"type": "array", "items": {"type": "integer"},
                          "description": "best first"},
        "scores": {"type": "array", "items": {"type": "number"}},
        "model_versions": _VERSIONS,
    },
}  # fmt: skip
_FEEDBACK: dict[str, Any] = {
    "type": "object",
    "required": ["query_id", "candidate_ids", "phi", "relevance"],
    "properties": {
        "query_id": {"type": "integer", "format": "int64",
                     "description": "the message key of its triplets and judged query"},
        "candidate_ids": _IDS,
        "relevance": {"type": "array",
                      "items": {"type": ["integer", "null"], "minimum": 0, "maximum": MAX_GRADE},
                      "description": "the user's grade per candidate; null = not judged. "
                                     "Every pair of judged candidates with different grades "
                                     "becomes a triplet"},
        "served_by": {"type": "string", "description": "the model that ranked the query"},
        "served_version": {"type": "integer"},
        "model_versions": {**_VERSIONS,
                           "description": "echo /v1/rank's; default: the versions current now"},
    },
}  # fmt: skip
_RECEIPT = {
    "type": "object",
    "properties": {
        "query_id": {"type": "integer"},
        "seq": {"type": "integer"},
        "triplets": {"type": "integer", "description": "0 with fewer than two distinct grades"},
        "judged": {"type": "integer"},
        "distinct_grades": {"type": "integer"},
    },
}


def _json(schema: dict[str, Any]) -> dict[str, Any]:
    return {"content": {"application/json": {"schema": schema}}}


def _answers(ok: dict[str, Any], *errors: int) -> dict[str, Any]:
    answers = {"200": {"description": "OK", **ok}}
    for status in (401, *errors):
        answers[str(status)] = {"description": "refused", **_json(_ERROR)}
    return answers


def _with_phi(schema: dict[str, Any], width: int) -> dict[str, Any]:
    """A request schema with its `phi` field at the deployment's width."""
    return {**schema, "properties": {**schema["properties"], "phi": _phi(width)}}


def openapi_document(width: int) -> dict[str, Any]:
    """The document for a deployment whose phi has `width` columns (`Settings.phi_dim`)."""
    arrow = "application/vnd.apache.arrow.stream"
    return {
        "openapi": "3.1.0",
        "info": {"title": "rankstream", "version": "1",
                 "description": "Rank with the models rankstream learns; send back feedback."},
        "components": {"securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}}},
        "security": [{"bearer": []}],
        "paths": {
            "/v1/rank": {"post": {
                "summary": "Rank a query's candidates with the champion or a chosen model",
                "parameters": [
                    {"name": "model", "in": "query", "schema": {"type": "string"},
                     "description": "Arrow bodies: the model (JSON bodies carry it inline)"},
                    {"name": "version", "in": "query", "schema": {"type": "integer"}},
                ],
                "requestBody": {"required": True, "content": {
                    "application/json": {"schema": _with_phi(_RANK_REQUEST, width)},
                    arrow: {"schema": {"description": "columns candidate_id int64, phi "
                                       f"fixed_size_list<float32>[{width}]"}},
                }},
                "responses": _answers(
                    {"content": {"application/json": {"schema": _RANKING},
                                 arrow: {"schema": {"description": "columns candidate_id, "
                                                    "score (best first) when Accept asks"}}}},
                    400, 404, 413, 415, 422),
            }},
            "/v1/feedback": {"post": {
                "summary": "A judged query: produced as triplets + judged query once "
                           "the broker acknowledged",
                "requestBody": {"required": True, **_json(_with_phi(_FEEDBACK, width))},
                "responses": _answers(_json(_RECEIPT), 400, 413, 415, 422, 503),
            }},
            "/v1/models": {"get": {"summary": "Every stored model",
                                   "responses": _answers(_json({"type": "object"}))}},
            "/v1/models/{name}": {"get": {
                "summary": "One stored model and its kept versions",
                "parameters": [{"name": "name", "in": "path", "required": True,
                                "schema": {"type": "string"}}],
                "responses": _answers(_json({"type": "object"}), 404),
            }},
            "/healthz": {"get": {"summary": "Live", "security": [],
                                 "responses": {"200": {"description": "live"}}}},
            "/readyz": {"get": {"summary": "A champion is loaded and the store answers",
                                "security": [],
                                "responses": {"200": {"description": "ready"},
                                              "503": {"description": "not ready"}}}},
            "/openapi.json": {"get": {"summary": "This document",
                                      "responses": _answers(_json({"type": "object"}))}},
        },
    }  # fmt: skip
