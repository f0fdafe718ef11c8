"""A recorded set of /v1/rank requests and what `rankstream serve` answered and logged.

`record()` sends the same requests (JSON and Arrow, valid and refused, several models and
versions, built here from fixed seeds) to an in-process serve on the embedded store and
transport and returns, per request, a digest of what was sent, the status, the headers
and the body of the answer, and the impressions logged (without their ids and times,
which are new by design). Run at a commit whose answers are the reference, it writes
the fixture tests/test_serve_replay.py compares every later commit with:

    python tests/serve_replay.py tests/data/serve_replay.json
"""

from __future__ import annotations

import base64
import hashlib
import json
import re
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
from starlette.testclient import TestClient

from rankstream.ranking.online import OnlineRanker
from rankstream.ranking.scaling import Standardizer
from rankstream.serve.app import create_app
from rankstream.stream.click_schema import decode_impressions
from rankstream.stream.embedded import embedded_transport, reset_embedded
from rankstream.stream.embedded_store import EmbeddedModelStore
from rankstream.stream.settings import DEFAULT_PHI_DIM as PHI_DIM
from rankstream.stream.settings import Settings

ARROW = "application/vnd.apache.arrow.stream"
INTERVENTION_SEED = 42  # serve's randomized logging policy, seeded so orders repeat


def _store() -> EmbeddedModelStore:
    """Uni-Con, and two versions of an online model (`opar`) that is the champion."""
    store = EmbeddedModelStore()
    rng = np.random.default_rng(3)
    scaler = Standardizer().fit(rng.standard_normal((500, PHI_DIM)))
    for name, weights in (("uni_con", np.ones(PHI_DIM)), ("opar", rng.standard_normal(PHI_DIM)),
                          ("opar", rng.standard_normal(PHI_DIM))):  # fmt: skip
        meta, arrays = OnlineRanker("opar1", scaler=scaler, warm_start=weights).to_state()
        meta["triplets_seen"] = 1000
        store.save(name, kind="online", meta=meta, arrays=arrays, offsets={},
                   expected_version=store.latest_versions().get(name, 0))  # fmt: skip
    meta = {"champion": "opar", "rolling_ndcg": {"opar": 0.9, "uni_con": 0.7}, "window": 200,
            "counts": {"opar": 30, "uni_con": 30}, "queries_evaluated": 30}  # fmt: skip
    store.save("evaluator", kind="scores", meta=meta, arrays={}, offsets={}, expected_version=0)
    return store


def _arrow(ids: Any, phi: Any, fixed: bool = True, **metadata: str) -> bytes:
    phi = np.asarray(phi)
    rows = (pa.FixedSizeListArray.from_arrays(pa.array(phi.reshape(-1)), phi.shape[1])
            if fixed else pa.array(list(phi)))  # fmt: skip
    table = pa.table({"candidate_ids": pa.array(ids), "phi": rows})
    table = table.replace_schema_metadata(metadata or None)
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema) as writer:
        writer.write_table(table)
    return sink.getvalue().to_pybytes()


def requests() -> list[tuple[str, dict[str, str], bytes]]:
    """(query string, headers, body) of every recorded request, in order."""
    rng = np.random.default_rng(11)
    out: list[tuple[str, dict[str, str], bytes]] = []

    def json_body(k: int, **extra: Any) -> bytes:
        ids = rng.permutation(10**6)[:k].tolist()
        phi = rng.standard_normal((k, PHI_DIM)).round(6).tolist()
        return json.dumps({"candidate_ids": ids, "phi": phi, **extra}).encode()

    def arrow_body(k: int, dtype: Any = np.float32, **metadata: str) -> bytes:
        ids = rng.permutation(10**6)[:k].astype(np.int64)
        return _arrow(ids, rng.standard_normal((k, PHI_DIM)).astype(dtype), **metadata)

    as_json = {"content-type": "application/json"}
    as_arrow = {"content-type": ARROW}
    arrow_both = {"content-type": ARROW, "accept": ARROW}
    # valid: the champion, named models, an older version, caller ids, several sizes
    for k in (300, 300, 40, 1):
        out.append(("", as_json, json_body(k)))
    out.append(("", as_json, json_body(50, model="uni_con")))
    out.append(("", as_json, json_body(50, model="opar", version=1)))
    out.append(("", as_json, json_body(50, model="champion", query_id=77, request_id="rq-9")))
    out.append(("", as_json, json_body(20).replace(b"]]", b"]] ", 1)))  # spacing
    ints = {"candidate_ids": [5, 3, 9], "phi": [[1] * PHI_DIM, [0] * PHI_DIM, [2.5] * PHI_DIM]}
    out.append(("", as_json, json.dumps(ints).encode()))
    big = {"candidate_ids": [1, 2], "phi": [[1e30] * PHI_DIM, [-3e-7] * PHI_DIM]}
    out.append(("", as_json, json.dumps(big).encode()))
    for k in (300, 300, 40):
        out.append(("", arrow_both, arrow_body(k)))
    out.append(("", as_arrow, arrow_body(30)))  # Arrow in, JSON out
    out.append(("", arrow_both, arrow_body(30, np.float64, model="opar", version="1")))
    out.append(("", arrow_both, arrow_body(30, model="uni_con", query_id="-5", request_id="r")))
    out.append(("model=uni_con", arrow_both, arrow_body(30)))  # deprecated query parameters
    ids16 = np.arange(10, 26, dtype=np.int32)
    out.append(("", arrow_both, _arrow(ids16, rng.random((16, PHI_DIM)), fixed=False)))
    # refused
    phi2 = [[0.5] * PHI_DIM, [0.25] * PHI_DIM]
    for document in (
        {"candidate_ids": [1, 1], "phi": phi2},  # duplicate id
        {"candidate_ids": [1, 2], "phi": [[0.5] * 3, [0.25] * 3]},  # wrong width
        {"candidate_ids": [1, 2], "phi": [[0.5] * PHI_DIM, [0.25] * (PHI_DIM - 1)]},
        {"candidate_ids": [1, 2], "phi": [["0.5"] * PHI_DIM, [0.25] * PHI_DIM]},  # strings
        {"candidate_ids": [1, 2], "phi": [[True] * PHI_DIM, [0.25] * PHI_DIM]},
        {"candidate_ids": [1, 2], "phi": [[None] * PHI_DIM, [0.25] * PHI_DIM]},
        {"candidate_ids": [1, 2], "phi": [[1e300] * PHI_DIM, [0.25] * PHI_DIM]},  # > float32
        {"candidate_ids": [1, 2, 3], "phi": phi2},  # rows != ids
        {"candidate_ids": [1.5, 2], "phi": phi2},
        {"candidate_ids": [2**64, 2], "phi": phi2},
        {"candidate_ids": [], "phi": []},
        {"candidate_ids": [1, 2], "phi": 3},
        {"candidate_ids": [1, 2]},
        {"candidate_ids": [1, 2], "phi": phi2, "model": "nope"},
        {"candidate_ids": [1, 2], "phi": phi2, "model": "opar", "version": 9},
        {"candidate_ids": [1, 2], "phi": phi2, "version": 1},
        {"candidate_ids": [1, 2], "phi": phi2, "model": ""},
        {"candidate_ids": [1, 2], "phi": phi2, "query_id": "x"},
        {"candidate_ids": [1, 2], "phi": phi2, "request_id": ""},
    ):
        out.append(("", as_json, json.dumps(document).encode()))
    out.append(("", as_json, b'{"candidate_ids": [1, 2], "phi": [[NaN'))
    out.append(("", as_json, b"[1, 2]"))
    out.append(("", as_json, b""))
    out.append(("model=opar", as_json, json_body(2)))
    out.append(("", {"content-type": "text/plain"}, b"hello"))
    out.append(("", arrow_both, b"not arrow at all"))
    out.append(("", arrow_both, arrow_body(4)[:-40]))  # cut short
    out.append(("", arrow_both, _arrow([1, 1], np.ones((2, PHI_DIM), np.float32))))
    out.append(("", arrow_both, _arrow([1, 2], np.ones((2, 5), np.float32))))
    out.append(("", arrow_both, _arrow([1, 2], np.full((2, PHI_DIM), np.inf, np.float32))))
    out.append(("", arrow_both, _arrow(pa.array([1, None], pa.int64()),
                                       np.ones((2, PHI_DIM), np.float32))))  # fmt: skip
    rows = pa.array([[0.5] * PHI_DIM, [0.5] * (PHI_DIM - 2)], pa.list_(pa.float32()))
    out.append(("", arrow_both, _arrow_columns({"candidate_ids": pa.array([1, 2]), "phi": rows})))
    strings = pa.array([["a"] * PHI_DIM, ["b"] * PHI_DIM], pa.list_(pa.string()))
    out.append(
        ("", arrow_both, _arrow_columns({"candidate_ids": pa.array([1, 2]), "phi": strings}))
    )
    out.append(("", arrow_both, arrow_body(3, model="opar", version="0")))
    out.append(("", arrow_both, arrow_body(3, model="ghost")))
    return [(query, {**headers, "x-request-id": f"replay-{i}"}, body)
            for i, (query, headers, body) in enumerate(out)]  # fmt: skip


def _arrow_columns(columns: dict[str, pa.Array]) -> bytes:
    table = pa.table(columns)
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema) as writer:
        writer.write_table(table)
    return sink.getvalue().to_pybytes()


def _masked(body: bytes, content_type: str) -> str:
    """The answer's bytes with its impression id (new by design) masked, same length:
    JSON as text, an Arrow stream in base64 (its layout is compared byte for byte too)."""
    if content_type.startswith(ARROW):
        if body.startswith(b"\xff\xff\xff\xff"):
            table = pa.ipc.open_stream(body).read_all()
            given = (table.schema.metadata or {}).get(b"impression_id")
            if given is not None:
                body = body.replace(given, b"*" * len(given))
        return "base64:" + base64.b64encode(body).decode()
    text = body.decode("utf-8", "replace")
    return re.sub(r'"impression_id":"[0-9a-f]{32}"', '"impression_id":"*"', text)


def _impressions(settings: Settings) -> list[dict[str, Any]]:
    """Every logged impression, by request id, without its id and time."""
    consumer = embedded_transport().consumer()
    topic = settings.impressions_topic
    consumer.assign([(topic, p) for p in embedded_transport().partitions_for(topic)])
    for partition in embedded_transport().partitions_for(topic):
        consumer.seek_to_beginning(topic, partition)
    found = []
    while messages := consumer.poll(timeout_ms=100):
        for message in messages:
            for imp in decode_impressions(message.value, width=PHI_DIM).records:
                found.append({
                    "request_id": imp.request_id, "query_id": imp.query_id, "model": imp.model,
                    "version": imp.version, "model_versions": dict(imp.model_versions),
                    "candidate_ids": imp.candidate_ids.tolist(),
                    "phi_sha256": hashlib.sha256(imp.phi.astype("<f4").tobytes()).hexdigest(),
                    "shown_probability": imp.shown_probability,
                    "intervention": imp.intervention,
                    "teams": None if imp.teams is None else imp.teams.tolist(),
                    "team_models": list(imp.team_models),
                })  # fmt: skip
    consumer.close()
    return sorted(found, key=lambda imp: str(imp["request_id"]))


def record() -> dict[str, Any]:
    """Send `requests()` to a fresh serve; what it answered and logged."""
    reset_embedded()
    settings = Settings(topic_prefix="replay", interleaving_share=0.0, intervention_share=0.5)
    app = create_app(settings, store=_store(), poll_seconds=60.0)
    answers = []
    with TestClient(app) as client:
        app.state.serve.interventions = np.random.default_rng(INTERVENTION_SEED)
        for query, headers, body in requests():
            reply = client.post("/v1/rank" + (f"?{query}" if query else ""), content=body,
                                headers=headers)  # fmt: skip
            answers.append({
                "request": {"query": query, "headers": headers,
                            "body_sha256": hashlib.sha256(body).hexdigest()},
                "status": reply.status_code,
                "headers": sorted([k.lower(), v] for k, v in reply.headers.items()
                                  if k.lower() != "content-length"),
                "body": _masked(reply.content, reply.headers.get("content-type", "")),
            })  # fmt: skip
    return {"answers": answers, "impressions": _impressions(settings)}


def _jsonable(value: Any) -> Any:
    return json.loads(json.dumps(value, default=str))


if __name__ == "__main__":
    target = Path(sys.argv[1])
    target.write_text(json.dumps(_jsonable(record()), indent=0, sort_keys=True) + "\n")
    print(f"{target}: {target.stat().st_size} bytes", file=sys.stderr)
