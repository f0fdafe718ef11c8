"""What the HTTP API promises a client it has never met (issue 24), in-process on the
embedded store and transport: strict input with one error shape, request ids,
idempotent feedback, one vocabulary with the old names still accepted.

`BAD_INPUTS` is also the HTTP API reference's table (docs/reference/http-api.md, "Errors"):
a test checks that the page shows every row as the API answers it.
"""

from __future__ import annotations

import json
import re
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from starlette.testclient import TestClient

from rankstream.ranking.online import OnlineRanker
from rankstream.ranking.scaling import Standardizer
from rankstream.serve.app import create_app
from rankstream.serve.bodies import ARROW
from rankstream.stream.embedded import embedded_transport, reset_embedded
from rankstream.stream.embedded_store import EmbeddedModelStore
from rankstream.stream.schema import decode_triplets
from rankstream.stream.settings import DEFAULT_PHI_DIM as PHI_DIM
from rankstream.stream.settings import Settings

K = 4
PHI = (np.arange(K * PHI_DIM, dtype=np.float64).reshape(K, PHI_DIM) % 7) / 7
IDS = [11, 12, 13, 14]
HTTP_API = Path(__file__).parents[1] / "docs" / "reference" / "http-api.md"


def _store() -> EmbeddedModelStore:
    store = EmbeddedModelStore()
    scaler = Standardizer().fit(np.vstack([-np.ones(PHI_DIM), np.ones(PHI_DIM)]))
    meta, arrays = OnlineRanker("opar1", scaler=scaler, warm_start=np.ones(PHI_DIM)).to_state()
    store.save("uni_con", kind="online", meta=meta, arrays=arrays, offsets={}, expected_version=0)
    return store


def _client(store: EmbeddedModelStore | None = None, prefix: str = "promises") -> TestClient:
    reset_embedded()
    app = create_app(Settings(topic_prefix=prefix), store=store or _store(), poll_seconds=0.05)
    return TestClient(app)


def _rank(**change) -> dict:
    return {"candidate_ids": IDS, "phi": PHI.tolist(), **change}


def _feedback(**change) -> dict:
    body = {"query_id": 5, "candidate_ids": IDS, "phi": PHI.tolist(),
            "relevance": [2, None, 0, 1], "model": "uni_con", "version": 1}  # fmt: skip
    return {k: v for k, v in {**body, **change}.items() if v is not ...}


def _clicks(**change) -> dict:
    body = {"impression_id": "i-1", "clicks": [{"candidate_id": 12, "position": 2}]}
    return {**body, **change}


def _triplet_messages(prefix: str = "promises", kind: str = "triplets") -> list:
    transport = embedded_transport()
    topic = f"{prefix}.{kind}"
    consumer = transport.consumer()
    consumer.assign([(topic, p) for p in transport.partitions_for(topic)])
    return consumer.poll(timeout_ms=0, max_records=1000)


# (what is tried, route, body, status, error code, field): the HTTP API reference's table
PHI_WITH = PHI.tolist()
BAD_INPUTS = [
    ("phi holds a string `\"0.9\"`", "/v1/rank",
     _rank(phi=[["0.9", *PHI_WITH[0][1:]], *PHI_WITH[1:]]), 422, "invalid_field", "phi"),
    ("phi holds `true`", "/v1/rank",
     _rank(phi=[[True, *PHI_WITH[0][1:]], *PHI_WITH[1:]]), 422, "invalid_field", "phi"),
    ("phi holds `\"1e3\"` mid-row", "/v1/rank",
     _rank(phi=[[*PHI_WITH[0][:5], "1e3", *PHI_WITH[0][6:]], *PHI_WITH[1:]]), 422,
     "invalid_field", "phi"),
    ("phi holds `null` (ranking)", "/v1/rank",
     _rank(phi=[*PHI_WITH[:2], [*PHI_WITH[2][:-1], None], *PHI_WITH[3:]]), 422,
     "invalid_field", "phi"),
    ("phi holds `null`", "/v1/feedback",
     _feedback(phi=[[None, *PHI_WITH[0][1:]], *PHI_WITH[1:]]), 422, "invalid_field", "phi"),
    ("a row of phi of the wrong width", "/v1/rank",
     _rank(phi=[PHI_WITH[0][:-1], *PHI_WITH[1:]]), 422, "invalid_field", "phi"),
    ("grade `-1`", "/v1/feedback", _feedback(relevance=[2, -1, 0, 1]), 422, "invalid_field",
     "relevance"),
    ("grade `128`", "/v1/feedback", _feedback(relevance=[2, 128, 0, 1]), 422, "invalid_field",
     "relevance"),
    ("grade `1.5`", "/v1/feedback", _feedback(relevance=[2, 1.5, 0, 1]), 422, "invalid_field",
     "relevance"),
    ("grade `true`", "/v1/feedback", _feedback(relevance=[2, True, 0, 1]), 422,
     "invalid_field", "relevance"),
    ("`model: null` (was `served_by`)", "/v1/feedback", _feedback(model=None), 422,
     "invalid_field", "model"),
    ("`model: 123`", "/v1/feedback", _feedback(model=123), 422, "invalid_field", "model"),
    ("`model` not a stored model", "/v1/feedback", _feedback(model="nope"), 404,
     "not_found", "model"),
    ("`model_versions` naming no stored model", "/v1/feedback",
     _feedback(model_versions={"nope": 1}), 404, "not_found", "model_versions"),
    ("`version: -1`", "/v1/feedback", _feedback(version=-1), 422, "invalid_field", "version"),
    ("`version: \"1\"`", "/v1/feedback", _feedback(version="1"), 422, "invalid_field",
     "version"),
    ("`model_versions: []`", "/v1/feedback", _feedback(model_versions=[]), 422,
     "invalid_field", "model_versions"),
    ("`model_versions: {\"../../x\": 3}`", "/v1/feedback",
     _feedback(model_versions={"../../x": 3}), 422, "invalid_field", "model_versions"),
    ("`model_versions: {\"uni_con\": 0}`", "/v1/feedback",
     _feedback(model_versions={"uni_con": 0}), 422, "invalid_field", "model_versions"),
    ("an unknown key `colour`", "/v1/rank", _rank(colour="red"), 422, "unknown_field",
     "colour"),
    ("an unknown key `served`", "/v1/feedback", _feedback(served="x"), 422, "unknown_field",
     "served"),
    ("`served_by` and `model` both", "/v1/feedback", _feedback(served_by="uni_con"), 422,
     "invalid_field", "served_by"),
    ("a 10 KB model name", "/v1/rank", _rank(model="m" * 10_000), 404, "not_found", "model"),
    ("`version: \"2\"` (a string)", "/v1/rank", _rank(model="uni_con", version="2"), 422,
     "invalid_field", "version"),
    ("`query_id: true`", "/v1/feedback", _feedback(query_id=True), 422, "invalid_field",
     "query_id"),
    ("1,001 judged candidates", "/v1/feedback",
     _feedback(candidate_ids=list(range(1001)), phi=np.zeros((1001, PHI_DIM)).tolist(),
               relevance=[0] * 1001), 422, "invalid_field", "relevance"),
    ("no candidate judged", "/v1/feedback", _feedback(relevance=[None] * 4), 422,
     "invalid_field", "relevance"),
    ("`query_id: 1.5` (ranking)", "/v1/rank", _rank(query_id=1.5), 422, "invalid_field",
     "query_id"),
    ("a 201-character `request_id`", "/v1/rank", _rank(request_id="r" * 201), 422,
     "invalid_field", "request_id"),
    ("a click's `candidate_id: \"7\"`", "/v1/clicks",
     _clicks(clicks=[{"candidate_id": "7"}]), 422, "invalid_field", "clicks[0].candidate_id"),
    ("a click's `position: 0`", "/v1/clicks", _clicks(clicks=[{"candidate_id": 7,
     "position": 0}]), 422, "invalid_field", "clicks[0].position"),
    ("a click's `dwell: -1`", "/v1/clicks", _clicks(clicks=[{"candidate_id": 7, "dwell": -1}]),
     422, "invalid_field", "clicks[0].dwell"),
    ("an unknown key `colour` in a click", "/v1/clicks",
     _clicks(clicks=[{"candidate_id": 7, "colour": 1}]), 422, "unknown_field",
     "clicks[0].colour"),
    ("`impression_id` with a space", "/v1/clicks", _clicks(impression_id="a b"), 422,
     "invalid_field", "impression_id"),
    ("`{not json`", "/v1/rank", b"{not json", 400, "malformed_body", None),
    ("a JSON array body", "/v1/feedback", b"[1, 2]", 400, "malformed_body", None),
]  # fmt: skip


@pytest.mark.parametrize(
    ("what", "route", "body", "status", "code", "field"), BAD_INPUTS, ids=[b[0] for b in BAD_INPUTS]
)
def test_each_bad_input_gets_one_error_shape_naming_its_field(
    what, route, body, status, code, field
) -> None:
    with _client() as client:
        if isinstance(body, bytes):
            reply = client.post(route, content=body, headers={"content-type": "application/json"})
        else:
            reply = client.post(route, json=body)
    assert reply.status_code == status, reply.text
    error = reply.json()["error"]
    assert set(reply.json()) == {"error"} and set(error) == {"code", "message", "field"}
    assert (error["code"], error["field"]) == (code, field), error
    assert len(error["message"]) <= 200
    assert _triplet_messages() == [] and _triplet_messages(kind="clicks") == []


def _reference_table_rows() -> list[str]:
    return [
        f"| {what} | `{route}` | {status} `{code}`" + (f", field `{field}`" if field else "") + " |"
        for what, route, _, status, code, field in BAD_INPUTS
    ]


def test_the_reference_table_shows_every_bad_input_and_its_answer() -> None:
    text = HTTP_API.read_text()
    missing = [row for row in _reference_table_rows() if row not in text]
    assert not missing, "\n".join(missing)


def test_routing_refusals_use_the_same_error_shape() -> None:
    with _client() as client:
        missing = client.get("/v2/rank")
        wrong_method = client.get("/v1/rank")
        unknown_model = client.get("/v1/models/" + "x" * 5000)
    assert missing.status_code == 404 and missing.json()["error"]["code"] == "not_found"
    assert wrong_method.status_code == 405 and wrong_method.headers["allow"] == "POST"
    assert wrong_method.json()["error"]["code"] == "method_not_allowed"
    assert unknown_model.status_code == 404
    assert len(unknown_model.json()["error"]["message"]) <= 200
    assert "x-request-id" in missing.headers and "x-request-id" in wrong_method.headers


def test_openapi_is_public_under_a_token() -> None:
    reset_embedded()
    app = create_app(Settings(topic_prefix="promises", api_token="t0ken"), store=_store())
    with TestClient(app) as client:
        assert client.get("/openapi.json").status_code == 200
        assert client.post("/v1/rank", json=_rank()).status_code == 401


def test_every_answer_carries_the_request_id_the_client_sent_or_a_new_one() -> None:
    with _client() as client:
        given = client.post("/v1/rank", json=_rank(), headers={"X-Request-ID": "abc-123"})
        fresh = [client.post("/v1/rank", json=_rank(colour=1)) for _ in range(2)]
        bad = client.get("/healthz", headers={"X-Request-ID": "bad id " * 50})
    assert given.headers["x-request-id"] == "abc-123"
    ids = [reply.headers["x-request-id"] for reply in fresh]
    assert all(re.fullmatch(r"[0-9a-f]{32}", i) for i in ids) and ids[0] != ids[1]
    assert bad.headers["x-request-id"] != "bad id " * 50


def test_a_repeated_feedback_answers_its_first_answer_and_publishes_nothing() -> None:
    store = _store()
    with _client(store) as client:
        first = client.post("/v1/feedback", json=_feedback())
        again = client.post("/v1/feedback", json=_feedback())  # default key: the query id
        keyed = client.post("/v1/feedback", json=_feedback(query_id=6),
                            headers={"Idempotency-Key": "k-1"})  # fmt: skip
        keyed_again = client.post("/v1/feedback", json=_feedback(query_id=7),
                                  headers={"Idempotency-Key": "k-1"})  # fmt: skip
    assert first.status_code == again.status_code == 200
    assert first.json()["duplicate"] is False and again.json()["duplicate"] is True
    assert {**again.json(), "duplicate": False} == first.json()
    assert keyed_again.json() == {**keyed.json(), "duplicate": True}
    blocks = [decode_triplets(m.value) for m in _triplet_messages()]
    query_ids = np.concatenate([b.query_id for b in blocks])
    assert sorted(np.unique(query_ids).tolist()) == [5, 6]  # 7 was never published
    assert len(query_ids) == first.json()["triplets"] + keyed.json()["triplets"]
    # the keys live in the store: a new app on it (a restart) still knows them
    with _client(store) as client:
        restarted = client.post("/v1/feedback", json=_feedback())
    assert restarted.json() == {**first.json(), "duplicate": True}


def test_a_bad_idempotency_key_is_refused() -> None:
    with _client() as client:
        reply = client.post("/v1/feedback", json=_feedback(), headers={"Idempotency-Key": "a b"})
    assert reply.status_code == 422 and reply.json()["error"]["field"] == "Idempotency-Key"


def test_an_integer_written_with_a_fraction_or_exponent_is_an_integer() -> None:
    """JSON Schema's "integer" (the OpenAPI document's): 2.0 and 1e1 are integers, 1.5 is not."""
    rank = _rank(candidate_ids=[11.0, 12, 1.3e1, 14], query_id=7.0, model="uni_con", version=1.0)
    feedback = _feedback(query_id=5.0, relevance=[2.0, None, 0, 1e0], version=1.0,
                         model_versions={"uni_con": 1.0})  # fmt: skip
    clicks = _clicks(impression_id="i-float", clicks=[{"candidate_id": 12.0, "position": 2.0}])
    with _client() as client:
        ranked = client.post("/v1/rank", json=rank)
        judged = client.post("/v1/feedback", json=feedback)
        clicked = client.post("/v1/clicks", json=clicks)
        half = client.post("/v1/rank", json=_rank(candidate_ids=[11, 12, 13, 14.5]))
    assert ranked.status_code == 200, ranked.text
    assert sorted(ranked.json()["candidate_ids"]) == IDS and ranked.json()["query_id"] == 7
    assert judged.status_code == 200 and judged.json()["query_id"] == 5, judged.text
    assert clicked.status_code == 200 and clicked.json()["clicks"] == 1, clicked.text
    assert half.status_code == 422 and half.json()["error"]["field"] == "candidate_ids"


def test_old_names_are_accepted_with_a_deprecation_header() -> None:
    old = _feedback(model=..., version=..., served_by="uni_con", served_version=1)
    table = pa.table({"candidate_id": pa.array(IDS),
                      "phi": pa.FixedSizeListArray.from_arrays(pa.array(PHI.reshape(-1)),
                                                               PHI_DIM)})  # fmt: skip
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema) as writer:
        writer.write_table(table)
    with _client() as client:
        feedback = client.post("/v1/feedback", json=old)
        arrow = client.post("/v1/rank?model=uni_con&version=1",
                            content=sink.getvalue().to_pybytes(),
                            headers={"content-type": ARROW})  # fmt: skip
        new = client.post("/v1/rank", json=_rank(model="uni_con"))
    assert feedback.status_code == 200 and feedback.headers["deprecation"] == "true"
    assert arrow.status_code == 200 and arrow.headers["deprecation"] == "true"
    assert arrow.json()["model"] == "uni_con"
    assert "deprecation" not in new.headers


def test_the_model_is_chosen_the_same_way_in_both_encodings() -> None:
    """JSON fields `model`/`version`, Arrow schema metadata `model`/`version`."""
    table = pa.table({"candidate_ids": pa.array(IDS),
                      "phi": pa.FixedSizeListArray.from_arrays(pa.array(PHI.reshape(-1)),
                                                               PHI_DIM)})  # fmt: skip
    sink = pa.BufferOutputStream()
    table = table.replace_schema_metadata({"model": "nope"})
    with pa.ipc.new_stream(sink, table.schema) as writer:
        writer.write_table(table)
    with _client() as client:
        arrow = client.post("/v1/rank", content=sink.getvalue().to_pybytes(),
                            headers={"content-type": ARROW})  # fmt: skip
        as_json = client.post("/v1/rank", json=_rank(model="nope"))
    assert arrow.status_code == as_json.status_code == 404
    assert arrow.json()["error"]["field"] == as_json.json()["error"]["field"] == "model"


# -- property: any JSON value in any field is answered, never with a 5xx ------------------
JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**70), 2**70) | st.floats(allow_nan=False)
    | st.text(max_size=20),
    lambda children: st.lists(children, max_size=5)
    | st.dictionaries(st.text(max_size=8), children, max_size=4),
    max_leaves=12,
)  # fmt: skip
FIELDS = {
    "/v1/rank": ["candidate_ids", "phi", "model", "version", "query_id", "request_id"],
    "/v1/clicks": ["impression_id", "clicks", "impressions"],
    "/v1/feedback": ["query_id", "candidate_ids", "phi", "relevance", "model", "version",
                     "model_versions", "served_by", "served_version"],
}  # fmt: skip
CASES = st.sampled_from(sorted(FIELDS)).flatmap(
    lambda route: st.tuples(
        st.just(route),
        st.sampled_from(FIELDS[route]),
        JSON_VALUES,
    )
)


@pytest.fixture(scope="module")
def property_client():
    with _client(prefix="property") as client:
        yield client


@settings(
    max_examples=300,
    deadline=10_000,  # a hang guard, not a speed test
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(case=CASES, query_id=st.integers(0, 10**9))
def test_random_json_in_any_field_is_never_a_server_error(property_client, case, query_id):
    route, field, value = case
    base = {"/v1/rank": _rank(), "/v1/clicks": _clicks(impression_id=f"i-{query_id}")}.get(
        route, _feedback(query_id=query_id)
    )
    body = {k: v for k, v in base.items() if k not in ("served_by", "model")} if (
        field == "served_by") else base  # fmt: skip
    reply = property_client.post(route, content=json.dumps({**body, field: value}),
                                 headers={"content-type": "application/json"})  # fmt: skip
    assert reply.status_code < 500, (reply.status_code, reply.text)
    if reply.status_code >= 400:
        assert set(reply.json()["error"]) == {"code", "message", "field"}


# -- a real server: slow bodies and clients that hang up ----------------------------------
def test_a_slow_body_gets_408_and_a_hang_up_is_one_info_line(embedded_settings, tmp_path):
    import socket

    from rankstream.harness.serve_process import ServeProcess

    log = tmp_path / "serve.log"
    server = ServeProcess(embedded_settings, log, RANKSTREAM_API_BODY_DEADLINE_SECONDS="1")
    try:
        server.wait_ready()
        head = (b"POST /v1/rank HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                b"Content-Length: 1000\r\nX-Request-ID: slow-1\r\n\r\n")  # fmt: skip
        with socket.create_connection(("127.0.0.1", server.port), timeout=10) as slow:
            slow.sendall(head + b'{"candidate_ids": [')  # ... and nothing more
            started = time.monotonic()
            first = slow.recv(4096)
            waited = time.monotonic() - started
            # the head and the body may come in separate segments: read to the hang-up
            # the answer promises ("connection: close")
            answer = (first + b"".join(iter(lambda: slow.recv(4096), b""))).decode()
        assert answer.startswith("HTTP/1.1 408") and '"code":"body_timeout"' in answer
        assert waited < 5  # the 1 s body deadline, not the client's patience
        with socket.create_connection(("127.0.0.1", server.port), timeout=10) as gone:
            gone.sendall(head.replace(b"slow-1", b"gone-1") + b'{"candidate_ids": [')
        time.sleep(1.5)  # the server notices at its next read
    finally:
        server.stop()
    text = log.read_text()
    hung_up = [line for line in text.splitlines() if "client hung up" in line]
    assert len(hung_up) == 1, text
    assert json.loads(hung_up[0])["level"] == "info" and "gone-1" in hung_up[0]
    assert "Traceback" not in text and '"level":"error"' not in text, text


def test_the_docs_page_is_public_and_shows_every_route_and_answer() -> None:
    reset_embedded()
    app = create_app(Settings(topic_prefix="promises", api_token="t0ken"), store=_store())
    with TestClient(app) as client:
        page = client.get("/docs")
        document = client.get("/openapi.json").json()
    assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
    for path, operations in document["paths"].items():
        for method in operations:
            assert f"<code>{method.upper()} {path}</code>" in page.text
    assert "Idempotency-Key" in page.text and "<script" not in page.text


def test_the_openapi_document_lists_every_answer_a_bad_input_got() -> None:
    from rankstream.serve.openapi import openapi_document

    paths = openapi_document(PHI_DIM)["paths"]
    for what, route, _, status, code, _ in BAD_INPUTS:
        answers = paths[route]["post"]["responses"]
        assert str(status) in answers, what
        codes = answers[str(status)]["content"]["application/json"]["schema"]
        assert code in codes["properties"]["error"]["properties"]["code"]["enum"], what
