"""Schemathesis hooks (SCHEMATHESIS_HOOKS=openapi_rules): the one rule the OpenAPI document
states beside its JSON Schemas, because JSON Schema cannot (`serve.openapi.PER_CANDIDATE`),
applied to the bodies the tester sends as valid, so that a refusal of one is a finding.

* `x-one-per-item-of: <field>`: the array holds one item per item of that array of the
  body. A generated body is brought to the longest length all of them can take and stay
  valid: the named array cut or extended with new distinct integers, the others cut or
  extended by repeating their items.

Every other rule the server applies is in the JSON Schemas (or answered 404, as a name no
model is stored under): the tester generates and checks it unaided.
Only bodies generated as valid are touched: the rest are the tester's to break.
"""

from __future__ import annotations

import json
from typing import Any

import jsonschema_rs  # schemathesis' own validator
import schemathesis

PER_ITEM = "x-one-per-item-of"
_ruled: dict[int, bool] = {}  # id(schema) -> it or a part of it carries the rule


@schemathesis.hook
def before_call(context: Any, case: Any, kwargs: dict[str, Any]) -> None:
    """Right before the request goes out: after generation, and after the tester put in
    values it saw in earlier answers (a ranking's `"requested": "champion"`, say)."""
    meta = case.meta
    if meta is None or not meta.generation.mode.is_positive or not isinstance(case.body, dict):
        return
    operation = case.operation.schema.raw_schema["paths"][case.path][case.method.lower()]
    content = operation.get("requestBody", {}).get("content", {})
    schema = content.get(case.media_type or "application/json", {}).get("schema")
    if schema is not None:
        case.body = _apply(schema, case.body)


def _apply(schema: dict[str, Any], body: Any) -> Any:
    """`body` with the rule applied where `schema` (its branches, items) carries it."""
    if not _has_rules(schema):
        return body  # phi's rows, say: nothing to do in them
    for branch in schema.get("oneOf", []):
        if isinstance(body, dict) and set(branch.get("required", [])) <= set(body):
            return _apply(branch, body)
    if isinstance(body, list) and "items" in schema:
        return [_apply(schema["items"], item) for item in body]
    if not isinstance(body, dict):
        return body
    properties = schema.get("properties", {})
    body = {k: _apply(properties.get(k, {}), v) for k, v in body.items()}
    _one_per_item(properties, body)
    return body


def _has_rules(schema: dict[str, Any]) -> bool:
    key = id(schema)
    if key not in _ruled:
        _ruled[key] = f'"{PER_ITEM}"' in json.dumps(schema)
    return _ruled[key]


def _one_per_item(properties: dict[str, Any], body: dict[str, Any]) -> None:
    groups: dict[str, list[str]] = {}
    for key, field in properties.items():
        if PER_ITEM in field and body.get(key) is not None:  # null engine_scores: absent
            groups.setdefault(field[PER_ITEM], []).append(key)
    for target, followers in groups.items():
        arrays = [body.get(target), *(body[k] for k in followers)]
        if not all(isinstance(a, list) and a for a in arrays):
            continue
        # the longest length every array can take and stay valid (relevance's maxContains
        # may forbid repeating its grades that far)
        for n in sorted({len(a) for a in arrays}, reverse=True):
            resized = {key: _resized(body[key], n) for key in followers}
            if all(_valid(properties[key], resized[key]) for key in followers):
                break
        ids = list(body[target])[:n]
        taken = set(ids)
        fresh = (i for i in range(-(2**62), 2**62) if i not in taken)
        body[target] = ids + [next(fresh) for _ in range(n - len(ids))]
        body.update(resized)


def _resized(items: list[Any], n: int) -> list[Any]:
    """`items` cut to `n`, or repeated up to `n`."""
    return [items[i % len(items)] for i in range(n)]


def _valid(schema: dict[str, Any], value: Any) -> bool:
    return bool(jsonschema_rs.validator_for(schema).is_valid(value))
