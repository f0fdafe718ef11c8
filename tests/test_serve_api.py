"""The HTTP API in-process (Starlette's TestClient) on the embedded store and transport."""

from __future__ import annotations

import threading
import time

import numpy as np
import pyarrow as pa
import pytest
from starlette.testclient import TestClient

from rankstream.ranking.online import OnlineRanker
from rankstream.ranking.scaling import Standardizer
from rankstream.selection import pins
from rankstream.selection.scoring import EVALUATOR_RECORD
from rankstream.selection.what_serves import ServingModel
from rankstream.serve.app import ROUTES, create_app
from rankstream.serve.bodies import ARROW
from rankstream.serve.openapi import openapi_document
from rankstream.stream.embedded import embedded_transport, reset_embedded
from rankstream.stream.embedded_store import EmbeddedModelStore
from rankstream.stream.schema import decode_query, decode_triplets
from rankstream.stream.settings import DEFAULT_PHI_DIM as PHI_DIM
from rankstream.stream.settings import Settings
from rankstream.telemetry.prometheus_metrics import sample_value

RNG = np.random.default_rng(5)
PHI = RNG.random((300, PHI_DIM), dtype=np.float32)
IDS = np.arange(1000, 1300)
IDENTITY = Standardizer().fit(np.vstack([-np.ones(PHI_DIM), np.ones(PHI_DIM)]))  # mean 0, std 1


def _save(store, name: str, weights: np.ndarray) -> int:
    """An online model scoring phi . weights (an identity scaler), as the next version."""
    meta, arrays = OnlineRanker("opar1", scaler=IDENTITY, warm_start=weights).to_state()
    meta["triplets_seen"] = 1000
    return store.save(name, kind="online", meta=meta, arrays=arrays, offsets={},
                      expected_version=store.latest_versions().get(name, 0))  # fmt: skip


def _champion(store, name: str) -> None:
    current = store.latest_versions().get(EVALUATOR_RECORD, 0)
    meta = {
        "champion": name,
        "rolling_ndcg": {name: 0.9, "uni_con": 0.7},
        "counts": {name: 30, "uni_con": 30},
        "window": 200,
        "queries_evaluated": 30,
    }
    store.save(EVALUATOR_RECORD, kind="scores", meta=meta, arrays={}, offsets={},
               expected_version=current)  # fmt: skip


@pytest.fixture
def store() -> EmbeddedModelStore:
    store = EmbeddedModelStore()
    _save(store, "uni_con", np.ones(PHI_DIM))
    return store


def _client(store, **settings) -> TestClient:
    """A serve on `store`; no interleaving unless asked (these tests are about serving a
    model: an interleaved list would reorder its answer; tests/test_interleaved_serving.py)."""
    reset_embedded()
    settings = {"interleaving_share": 0.0, **settings}
    app = create_app(Settings(topic_prefix="api", **settings), store=store, poll_seconds=0.05)
    return TestClient(app)


def _body(**extra) -> dict:
    return {"candidate_ids": IDS.tolist(), "phi": PHI.tolist(), **extra}


def _arrow(ids=IDS, phi=PHI, ids_column="candidate_ids", **metadata) -> bytes:
    table = pa.table(
        {ids_column: pa.array(ids),
         "phi": pa.FixedSizeListArray.from_arrays(pa.array(phi.reshape(-1)), phi.shape[1])}
    ).replace_schema_metadata(metadata or None)  # fmt: skip
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema) as writer:
        writer.write_table(table)
    return sink.getvalue().to_pybytes()


def _eventually(check, seconds: float = 10.0):
    deadline = time.monotonic() + seconds
    while not (value := check()):
        assert time.monotonic() < deadline, "condition never held"
        time.sleep(0.02)
    return value


def test_rank_orders_candidates_by_the_champions_scores(store) -> None:
    with _client(store) as client:
        reply = client.post("/v1/rank", json=_body())
    assert reply.status_code == 200
    got = reply.json()
    expected = PHI.astype(np.float64).sum(axis=1)
    order = np.argsort(-expected, kind="stable")
    assert (got["model"], got["version"], got["requested"]) == ("uni_con", 1, "champion")
    assert got["candidate_ids"] == IDS[order].tolist()
    np.testing.assert_allclose(got["scores"], expected[order], rtol=1e-6)
    assert got["model_versions"] == {"uni_con": 1}


def test_arrow_bodies_and_answers_carry_the_same_ranking(store) -> None:
    with _client(store) as client:
        as_json = client.post("/v1/rank", json=_body()).json()
        reply = client.post(
            "/v1/rank", content=_arrow(model="uni_con", version="1"),
            headers={"content-type": ARROW, "accept": ARROW},
        )  # fmt: skip
        as_json_from_arrow = client.post(
            "/v1/rank", content=_arrow(), headers={"content-type": ARROW}
        ).json()
    table = pa.ipc.open_stream(reply.content).read_all()
    assert table.column_names == ["candidate_ids", "scores"]
    assert table.column("candidate_ids").to_pylist() == as_json["candidate_ids"]
    assert table.column("scores").to_pylist() == as_json["scores"]
    metadata = dict(table.schema.metadata)
    assert len(metadata.pop(b"impression_id")) == 32  # the impression it was logged as
    assert metadata == {b"model": b"uni_con", b"version": b"1"}
    assert as_json_from_arrow["candidate_ids"] == as_json["candidate_ids"]
    assert "deprecation" not in reply.headers


def test_the_model_is_chosen_per_request_by_name_and_version(store) -> None:
    first = np.zeros(PHI_DIM)
    first[0] = 1.0
    _save(store, "opar1", first)
    _save(store, "opar1", -first)  # v2 ranks the other way round
    with _client(store) as client:
        newest = client.post("/v1/rank", json=_body(model="opar1")).json()
        old = client.post("/v1/rank", json=_body(model="opar1", version=1)).json()
        missing = client.post("/v1/rank", json=_body(model="opar1", version=9))
        unknown = client.post("/v1/rank", json=_body(model="nope"))
    assert (newest["model"], newest["version"], old["version"]) == ("opar1", 2, 1)
    assert old["candidate_ids"] == newest["candidate_ids"][::-1]
    assert (missing.status_code, missing.json()["error"]["field"]) == (404, "version")
    assert (unknown.status_code, unknown.json()["error"]["field"]) == (404, "model")


BAD_RANKS = [
    (b"{not json", "application/json", 400, None),
    (b"[1, 2]", "application/json", 400, None),
    (b"\x00\x01 not arrow", ARROW, 400, None),
    (b"{}", "text/plain", 415, None),
]


@pytest.mark.parametrize(("body", "kind", "status", "field"), BAD_RANKS)
def test_malformed_bodies_are_refused(store, body, kind, status, field) -> None:
    with _client(store) as client:
        reply = client.post("/v1/rank", content=body, headers={"content-type": kind})
    assert reply.status_code == status and reply.json()["error"]["field"] == field


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"candidate_ids": [1, 1, *range(2, 300)]}, "candidate_ids"),
        ({"candidate_ids": ["a"] * 300}, "candidate_ids"),
        ({"phi": np.ones((300, PHI_DIM + 1)).tolist()}, "phi"),
        ({"phi": np.ones((299, PHI_DIM)).tolist()}, "phi"),
        ({"phi": [[1e39] * PHI_DIM] * 300}, "phi"),  # Inf once it is float32
        ({"phi": [[1.0] * PHI_DIM] * 299 + [[1.0]]}, "phi"),
        ({"model": 3}, "model"),
        ({"version": 2}, "version"),  # a version needs a model name
        ({"candidate_ids": None}, "candidate_ids"),
    ],
)
def test_bad_rank_requests_name_the_field(store, change, field) -> None:
    with _client(store) as client:
        reply = client.post("/v1/rank", json=_body(**change))
    assert reply.status_code == 422 and reply.json()["error"]["field"] == field, reply.json()


def test_nan_in_arrow_phi_names_the_field(store) -> None:
    phi = PHI.copy()
    phi[7, 3] = np.nan
    with _client(store) as client:
        reply = client.post("/v1/rank", content=_arrow(phi=phi), headers={"content-type": ARROW})
    assert reply.status_code == 422 and reply.json()["error"]["field"] == "phi"
    assert "row 7" in reply.json()["error"]["message"]


def _feedback(**extra) -> dict:
    relevance = [None] * 300
    for i, grade in ((0, 2), (4, 0), (9, 1), (30, 2)):
        relevance[i] = grade
    body = {"query_id": 77, "candidate_ids": IDS.tolist(), "phi": PHI.tolist(),
            "relevance": relevance, "model": "uni_con", "version": 1}  # fmt: skip
    return {**body, **extra}


def _topic(topic: str) -> list:
    transport = embedded_transport()
    consumer = transport.consumer()
    consumer.assign([(topic, p) for p in transport.partitions_for(topic)])
    return consumer.poll(timeout_ms=0, max_records=100)


def test_feedback_is_produced_as_triplets_and_a_judged_query(store) -> None:
    with _client(store) as client:
        reply = client.post("/v1/feedback", json=_feedback())
    assert reply.status_code == 200
    assert reply.json() == {"query_id": 77, "seq": 0, "triplets": 5, "judged": 4,
                            "distinct_grades": 3, "duplicate": False}  # fmt: skip
    assert "deprecation" not in reply.headers
    [triplets] = _topic("api.triplets")
    [query] = _topic("api.queries")
    assert triplets.key == query.key == b"77"
    assert len(decode_triplets(triplets.value)) == 5  # 2>0, 2>1, 1>0 twice over: 5 pairs
    judged = decode_query(query.value)
    assert judged.n_judged == 4 and judged.model_versions == {"uni_con": 1}  # stamped now


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"relevance": [None] * 300}, "relevance"),
        ({"relevance": [200] * 300}, "relevance"),
        ({"relevance": [1.5] * 300}, "relevance"),
        ({"relevance": [1] * 299}, "relevance"),
        ({"query_id": "x"}, "query_id"),
        ({"candidate_ids": [5] * 300}, "candidate_ids"),
        ({"phi": np.ones((300, 8)).tolist()}, "phi"),
        ({"model_versions": {"opr": -1}}, "model_versions"),
        ({"model": "a b"}, "model"),
    ],
)
def test_bad_feedback_names_the_field_and_reaches_no_topic(store, change, field) -> None:
    with _client(store) as client:
        reply = client.post("/v1/feedback", json=_feedback(**change))
    assert reply.status_code == 422 and reply.json()["error"]["field"] == field, reply.json()
    transport = embedded_transport()
    assert transport.partitions_for("api.queries") in ([], [0])
    assert _topic("api.queries") == [] and _topic("api.triplets") == []


def test_a_token_guards_every_route_but_the_health_checks(store) -> None:
    with _client(store, api_token="s3cret-token") as client:
        assert client.get("/healthz").status_code == 200
        assert client.get("/readyz").status_code == 200
        for path, (_, methods, public) in ROUTES.items():
            if public:
                continue
            url = path.replace("{name}", "uni_con")
            refused = client.request(methods[0], url, json=_body())
            assert refused.status_code == 401 and refused.headers["www-authenticate"] == "Bearer"
        wrong = client.post("/v1/rank", json=_body(), headers={"authorization": "Bearer nope"})
        right = client.post(
            "/v1/rank", json=_body(), headers={"authorization": "Bearer s3cret-token"}
        )
    assert wrong.status_code == 401 and right.status_code == 200


def test_bodies_over_the_limit_are_refused_before_use(store) -> None:
    with _client(store, api_max_body_bytes=10_000) as client:
        reply = client.post("/v1/rank", json=_body())
    assert reply.status_code == 413


def test_a_new_checkpoint_is_served_without_a_restart(store) -> None:
    weights = np.zeros(PHI_DIM)
    weights[1] = 1.0
    _save(store, "arow", weights)
    _champion(store, "arow")
    with _client(store) as client:
        assert client.post("/v1/rank", json=_body()).json()["version"] == 1
        _save(store, "arow", 2 * weights)
        served = _eventually(lambda: client.post("/v1/rank", json=_body()).json()["version"] == 2)
        assert served
        assert sample_value("rankstream_serving_model_version", {"model": "arow"}) == 2
        _champion(store, "uni_con")
        _eventually(lambda: client.post("/v1/rank", json=_body()).json()["model"] == "uni_con")


def test_a_request_never_sees_a_half_loaded_model(store) -> None:
    """Version v scores phi . (v e0): every answer's scores match its own version."""
    unit = np.zeros(PHI_DIM)
    unit[0] = 1.0
    _save(store, "opar2", unit)
    _champion(store, "opar2")
    stop = threading.Event()

    def checkpoints() -> None:
        while not stop.is_set():
            version = store.latest_versions()["opar2"] + 1
            _save(store, "opar2", version * unit)
            time.sleep(0.005)

    writer = threading.Thread(target=checkpoints)
    versions = set()
    with _client(store) as client:
        writer.start()
        try:
            for _ in range(200):
                got = client.post("/v1/rank", json=_body()).json()
                assert got["model"] == "opar2"
                top = IDS.tolist().index(got["candidate_ids"][0])
                assert got["scores"][0] == pytest.approx(got["version"] * PHI[top, 0], rel=1e-5)
                versions.add(got["version"])
        finally:
            stop.set()
            writer.join()
    assert len(versions) > 1  # reloads happened while it served


def test_pins_are_served_and_unpinned(store) -> None:
    unit = np.zeros(PHI_DIM)
    unit[2] = 1.0
    for scale in (1, 2, 3):
        _save(store, "ogdr", scale * unit)
    _champion(store, "ogdr")
    pins.pin(store, "ogdr", 2)
    with _client(store) as client:
        got = _eventually(lambda: client.post("/v1/rank", json=_body()).json())
        assert (got["model"], got["version"], got["pinned"]) == ("ogdr", 2, True)
        assert got["model_versions"]["ogdr"] == 3  # the evaluator still scores the newest
        by_name = client.post("/v1/rank", json=_body(model="ogdr")).json()
        assert by_name["version"] == 2
        listing = {m["name"]: m for m in client.get("/v1/models").json()["models"]}
        assert listing["ogdr"]["pinned"] and listing["ogdr"]["served_version"] == 2
        assert "pin.ogdr" not in listing
        pins.unpin(store, "ogdr")
        _eventually(lambda: client.post("/v1/rank", json=_body()).json()["version"] == 3)
    history = pins.pin_history(store, "ogdr")
    assert [(e["pinned"], e["version"]) for e in history] == [(True, 2), (False, None)]


def test_the_simulators_serving_honours_a_pin_that_outlived_its_version(store) -> None:
    """The pin keeps a copy: serving works after the store trimmed the pinned version."""
    trimming = EmbeddedModelStore(keep_versions=2)
    unit = np.zeros(PHI_DIM)
    unit[3] = 1.0
    _save(trimming, "uni_con", np.ones(PHI_DIM))
    _save(trimming, "opr", unit)
    pins.pin(trimming, "opr", 1)
    for scale in (2, 3, 4):
        _save(trimming, "opr", scale * unit)
    assert trimming.load_version("opr", 1) is None
    served = ServingModel(trimming, "opr").refresh()
    assert (served.name, served.version) == ("opr", 1)
    assert served.model_versions["opr"] == 4
    np.testing.assert_allclose(served.scorer.score(PHI), PHI[:, 3].astype(np.float64), rtol=1e-6)
    with pytest.raises(LookupError, match="no stored version 2"):
        pins.pin(trimming, "opr", 2)


def test_models_lists_versions_kinds_and_rolling_scores(store) -> None:
    _save(store, "opar1", np.ones(PHI_DIM))
    _champion(store, "opar1")
    with _client(store) as client:
        listing = client.get("/v1/models").json()
        one = client.get("/v1/models/opar1").json()
        missing = client.get("/v1/models/nope")
    assert listing["champion"] == "opar1"
    entry = {m["name"]: m for m in listing["models"]}["opar1"]
    assert {m["name"] for m in listing["models"]} == {"opar1", "uni_con"}, "the evaluator's record"
    assert entry["kind"] == "online" and entry["version"] == 1 and entry["triplets_seen"] == 1000
    assert entry["rolling_ndcg_at_50"] == 0.9 and entry["scored_queries"] == 30
    assert one["kept_versions"] == [1] and missing.status_code == 404
    assert entry["interleaving"] is None and listing["interleaving"] == {}


def test_models_show_each_challengers_interleaving_race(store) -> None:
    """The click join's published record `interleaving` (an `InterleavingRace.summary()`)
    is what /v1/models shows per challenger and for the race (docs/reference/store.md)."""
    from rankstream.selection.click_race import (
        INTERLEAVING_KIND,
        INTERLEAVING_RECORD,
        InterleavingRace,
    )
    from rankstream.selection.judged_race import ChampionPolicy

    _save(store, "opar1", np.ones(PHI_DIM))
    race = InterleavingRace(ChampionPolicy())
    race.observe("opar1", [1, 0, -1, 1])
    store.save(INTERLEAVING_RECORD, kind=INTERLEAVING_KIND,
               meta={"interleaving": race.summary()}, arrays={}, offsets={},
               expected_version=0)  # fmt: skip
    with _client(store) as client:
        listing = _eventually(
            lambda: (reply := client.get("/v1/models").json())["interleaving"] and reply
        )
    entry = {m["name"]: m for m in listing["models"]}["opar1"]
    assert INTERLEAVING_RECORD not in {m["name"] for m in listing["models"]}, "a record"
    assert {k: entry["interleaving"][k] for k in ("impressions", "wins", "losses", "ties")} == {
        "impressions": 4, "wins": 2, "losses": 1, "ties": 1,
    }  # fmt: skip
    assert entry["interleaving"]["decision"] == "undecided"
    assert listing["interleaving"]["incumbent"] == "uni_con"
    assert listing["interleaving"]["alpha"] == 0.01 and "challengers" not in listing["interleaving"]


def test_a_store_of_records_but_no_model_is_ready_the_first_request_calibrates() -> None:
    store = EmbeddedModelStore()
    store.save("reservoir", kind="reservoir", meta={}, arrays={}, offsets={}, expected_version=0)
    with _client(store) as client:
        assert client.get("/healthz").status_code == 200
        assert client.get("/readyz").status_code == 200  # tests/test_serve_ready.py: not loadable
        got = client.post("/v1/rank", json=_body()).json()
    assert (got["model"], got["version"]) == ("uni_con", 1)


def test_an_empty_store_gets_a_uni_con_calibrated_on_the_first_request() -> None:
    store = EmbeddedModelStore()
    with _client(store) as client:
        assert client.get("/readyz").status_code == 200
        got = client.post("/v1/rank", json=_body()).json()
    assert (got["model"], got["version"]) == ("uni_con", 1)
    standardized = (PHI - PHI.mean(axis=0)) / PHI.std(axis=0)
    assert got["candidate_ids"][0] == IDS[np.argmax(standardized.sum(axis=1))]


def test_the_openapi_document_names_exactly_the_apps_routes(store) -> None:
    document = openapi_document(PHI_DIM)
    routes = {path: {m.lower() for m in methods} for path, (_, methods, _) in ROUTES.items()}
    assert {p: set(ops) for p, ops in document["paths"].items()} == routes
    with _client(store) as client:
        assert client.get("/openapi.json").json() == document


def test_request_metrics_count_routes_models_and_statuses(store) -> None:
    labels = {"route": "/v1/rank", "status": "422"}
    before = sample_value("rankstream_http_requests_total", labels)
    with _client(store) as client:
        client.post("/v1/rank", json=_body(phi=[[0.0]]))
        client.post("/v1/rank", json=_body())
    assert sample_value("rankstream_http_requests_total", labels) == before + 1
    count = sample_value(
        "rankstream_http_request_seconds_count", {"route": "/v1/rank", "model": "uni_con"}
    )
    assert count >= 1
