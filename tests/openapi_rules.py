"""Schemathesis hooks (SCHEMATHESIS_HOOKS=openapi_rules): the rules the OpenAPI document
states beside its JSON Schemas, because JSON Schema cannot (`serve.openapi`'s `x-` keys),
applied to the bodies the tester sends as valid, so that a refusal of one is a finding.

* `x-one-per-item-of: <field>`: the array holds one item per item of that array of the
  body. A generated body is brought to the longest length all of them can take and stay
  valid: the named array cut or extended with new distinct integers, the others cut or
  extended by repeating their items.
* `x-distinct-field: <field>`: no two items carry the same value of it; later ones are dropped.
* `x-stored-model`: a stored model's name (`GET /v1/models`): a name no model is stored
  under is replaced by a stored one (dropped while none is), a `{name: version}` object
  keeps the stored names.

Only bodies generated as valid are touched: the rest are the tester's to break.
"""

from __future__ import annotations

import json
import os
import time
import urllib.request
from typing import Any

import jsonschema_rs  # schemathesis' own validator
import schemathesis

PER_ITEM, DISTINCT, STORED = "x-one-per-item-of", "x-distinct-field", "x-stored-model"
_stored: tuple[float, list[str]] = (-1e9, [])
_ruled: dict[int, bool] = {}  # id(schema) -> it or a part of it carries a rule


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
        case.body = _apply(schema, case.body, case.operation.base_url or "")


def _apply(schema: dict[str, Any], body: Any, url: str) -> Any:
    """`body` with the `x-` rules of `schema` (and of its branches and items) applied."""
    if not _has_rules(schema):
        return body  # phi's rows, say: nothing to do in them
    for branch in schema.get("oneOf", []):
        if isinstance(body, dict) and set(branch.get("required", [])) <= set(body):
            return _apply(branch, body, url)
    if isinstance(body, list) and "items" in schema:
        if DISTINCT in schema:
            field, seen, kept = schema[DISTINCT], set(), []
            for item in body:
                value = json.dumps(item.get(field)) if isinstance(item, dict) else None
                if value not in seen:
                    seen.add(value)
                    kept.append(item)
            body = kept
        return [_apply(schema["items"], item, url) for item in body]
    if not isinstance(body, dict):
        return body
    properties = schema.get("properties", {})
    body = {k: _apply(properties.get(k, {}), v, url) for k, v in body.items()}
    for key, field in properties.items():
        if field.get(STORED) and key in body:
            _stored_name(body, key, url)
    _one_per_item(properties, body)
    return body


def _has_rules(schema: dict[str, Any]) -> bool:
    key = id(schema)
    if key not in _ruled:
        _ruled[key] = any(
            f'"{rule}"' in json.dumps(schema) for rule in (PER_ITEM, DISTINCT, STORED)
        )
    return _ruled[key]


def _one_per_item(properties: dict[str, Any], body: dict[str, Any]) -> None:
    groups: dict[str, list[str]] = {}
    for key, field in properties.items():
        if PER_ITEM in field and key in body:
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


def _stored_name(body: dict[str, Any], key: str, url: str) -> None:
    names = _stored_names(url)
    value = body[key]
    if isinstance(value, dict):
        body[key] = {name: v for name, v in value.items() if name in names}
    elif value not in names:
        if names:
            body[key] = names[0]
        else:
            del body[key]


def _stored_names(url: str) -> list[str]:
    """The stored models' names, asked of the server at most once a second."""
    global _stored
    asked, names = _stored
    if time.monotonic() - asked > 1.0:
        token = os.environ.get("OPENAPI_RULES_TOKEN")
        request = urllib.request.Request(
            url.rstrip("/") + "/v1/models",
            headers={"Authorization": f"Bearer {token}"} if token else {},
        )
        with urllib.request.urlopen(request, timeout=10) as reply:
            names = [model["name"] for model in json.load(reply)["models"]]
        _stored = (time.monotonic(), names)
    return names
