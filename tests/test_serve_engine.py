"""The engine's own ranking as the model `engine` (selection.engine_ranking), through the
HTTP API on the embedded store and transport: `engine_scores` on /v1/rank (JSON and
Arrow) and /v1/feedback, checked like phi; logged with every impression (impressions
version 2, older version-1 messages still read); `"model": "engine"`; listed in
/v1/models; scored by the evaluator on the feedback that carries it.

Reading a topic after the app's lifespan has closed is deterministic: closing the
impression log writes everything queued before it returns.
"""

from __future__ import annotations

import time

import numpy as np
import pyarrow as pa
import pytest
from starlette.testclient import TestClient

from rankstream.ranking.metrics import average_precision, ndcg_at_k
from rankstream.ranking.online import OnlineRanker
from rankstream.ranking.scaling import Standardizer
from rankstream.selection import pins
from rankstream.selection.engine_ranking import ENGINE, adopt_engine, engine_order
from rankstream.selection.judged_race import publish_champion
from rankstream.serve.app import create_app
from rankstream.serve.bodies import ARROW
from rankstream.stream.click_schema import decode_impressions
from rankstream.stream.connect import open_transport
from rankstream.stream.embedded import reset_embedded
from rankstream.stream.embedded_store import EmbeddedModelStore
from rankstream.stream.schema import UNJUDGED, JudgedQuery, decode_query, encode_query
from rankstream.stream.settings import DEFAULT_PHI_DIM as PHI_DIM
from rankstream.stream.settings import Settings
from rankstream.workers.evaluator import Evaluator, EvaluatorOptions

K = 6
IDS = [31, 7, 502, 44, 9, 18]
PHI = np.random.default_rng(3).random((K, PHI_DIM))
ENGINE_SCORES = [0.5, 2.0, 0.5, -1.0, 3.0, 2.0]  # ties: 7 before 18, 31 before 502
ENGINE_IDS = [9, 7, 18, 31, 502, 44]  # that order, ties in the given order


def _rank(**change) -> dict:
    return {"candidate_ids": IDS, "phi": PHI.tolist(), **change}


def _arrow_rank(engine=None, **metadata: str) -> bytes:
    columns = {"candidate_ids": pa.array(IDS, pa.int64()),
               "phi": pa.FixedSizeListArray.from_arrays(
                   pa.array(PHI.reshape(-1).astype(np.float32)), PHI_DIM)}  # fmt: skip
    if engine is not None:
        columns["engine_score"] = engine
    table = pa.table(columns).replace_schema_metadata(metadata or None)
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema) as writer:
        writer.write_table(table)
    return sink.getvalue().to_pybytes()


def _client(settings: Settings, store=None) -> TestClient:
    reset_embedded()
    return TestClient(create_app(settings, store=store, poll_seconds=0.05))


def _settings(tmp_path, **change) -> Settings:
    return Settings(**{"topic_prefix": "engine", "data_dir": str(tmp_path),
                       "interleaving_share": 0.0, **change})  # fmt: skip


def _topic(settings: Settings, topic: str) -> list:
    transport = open_transport(settings)
    consumer = transport.consumer()
    try:
        partitions = transport.partitions_for(topic)
        consumer.assign([(topic, p) for p in partitions])
        for p in partitions:
            consumer.seek_to_beginning(topic, p)
        return consumer.poll(timeout_ms=0, max_records=10_000)
    finally:
        consumer.close()
        transport.close()


def _impressions(settings: Settings) -> dict:
    found = {}
    for message in _topic(settings, settings.impressions_topic):
        decoded = decode_impressions(message.value)
        assert decoded.rejects == []
        found.update((imp.impression_id, imp) for imp in decoded.records)
    return found


def test_the_engines_order_sorts_its_scores_ties_in_the_given_order() -> None:
    order = engine_order(np.array(ENGINE_SCORES))
    assert np.asarray(IDS)[order].tolist() == ENGINE_IDS


def test_model_engine_answers_in_the_engines_order_and_logs_its_scores(tmp_path) -> None:
    settings = _settings(tmp_path)
    with _client(settings) as client:
        named = client.post("/v1/rank", json=_rank(model="engine", engine_scores=ENGINE_SCORES))
        arrow = client.post(
            "/v1/rank", content=_arrow_rank(pa.array(ENGINE_SCORES), model="engine"),
            headers={"content-type": ARROW, "accept": ARROW},
        )  # fmt: skip
        plain = client.post("/v1/rank", json=_rank())  # the engine is champion: Uni-Con
    assert named.status_code == arrow.status_code == plain.status_code == 200
    answer = named.json()
    assert (answer["model"], answer["version"], answer["candidate_ids"]) == (
        ENGINE, 1, ENGINE_IDS)  # fmt: skip
    assert answer["scores"] == sorted(ENGINE_SCORES, reverse=True)
    table = pa.ipc.open_stream(arrow.content).read_all()
    assert table.column("candidate_ids").to_pylist() == ENGINE_IDS
    assert table.schema.metadata[b"model"] == b"engine"
    logged = _impressions(settings)
    shown = logged[answer["impression_id"]]
    assert (shown.model, shown.candidate_ids.tolist()) == (ENGINE, ENGINE_IDS)
    by_id = dict(zip(IDS, ENGINE_SCORES, strict=True))
    assert shown.engine_scores.tolist() == [by_id[i] for i in ENGINE_IDS]  # displayed order
    assert logged[plain.json()["impression_id"]].engine_scores is None


def test_a_ranking_without_engine_scores_is_logged_as_impressions_version_1(tmp_path) -> None:
    settings = _settings(tmp_path)
    with _client(settings) as client:
        assert client.post("/v1/rank", json=_rank()).status_code == 200
    (message,) = _topic(settings, settings.impressions_topic)
    schema = pa.ipc.open_stream(message.value).schema
    assert schema.metadata[b"rankstream.version"] == b"1" and "engine_scores" not in schema.names


@pytest.mark.parametrize(
    ("scores", "message"),
    [
        (ENGINE_SCORES[:3], "one number per candidate (6), got 3"),
        (["1"] * K, "list of JSON numbers"),
        ([True] * K, "list of JSON numbers"),
        ([None] * K, "list of JSON numbers"),
        ({"a": 1}, "list of JSON numbers"),
        ([1e308, -1e308, 0, 0, 0, 0], None),  # finite numbers: accepted
    ],
)
def test_bad_engine_scores_are_a_422_naming_the_field(tmp_path, scores, message) -> None:
    with _client(_settings(tmp_path)) as client:
        reply = client.post("/v1/rank", json=_rank(engine_scores=scores))
        judged = {"query_id": 1, "relevance": [1, 0, 0, 2, 0, 0]}
        feedback = client.post("/v1/feedback", json={**_rank(engine_scores=scores), **judged})
    if message is None:
        assert reply.status_code == feedback.status_code == 200
        return
    for answer in (reply, feedback):
        assert answer.status_code == 422
        assert answer.json()["error"]["field"] == "engine_scores"
        assert message in answer.json()["error"]["message"]


@pytest.mark.parametrize(
    ("column", "message"),
    [
        (pa.array([1.0, np.nan, 0, 0, 0, 0]), "entry 1 is NaN or Inf"),
        (pa.array([1.0, None, 0, 0, 0, 0]), "holds nulls"),
        (pa.array(["a"] * K), "must be a number column"),
    ],
)
def test_bad_arrow_engine_scores_are_a_422_naming_the_column(tmp_path, column, message) -> None:
    with _client(_settings(tmp_path)) as client:
        reply = client.post("/v1/rank", content=_arrow_rank(column),
                            headers={"content-type": ARROW})  # fmt: skip
    assert reply.status_code == 422
    assert reply.json()["error"]["field"] == "engine_score"
    assert message in reply.json()["error"]["message"]


def test_model_engine_without_engine_scores_is_a_clear_422(tmp_path) -> None:
    with _client(_settings(tmp_path)) as client:
        reply = client.post("/v1/rank", json=_rank(model="engine"))
    assert reply.status_code == 422
    error = reply.json()["error"]
    assert error["field"] == "engine_scores" and "model 'engine'" in error["message"]


def test_the_engine_is_listed_as_a_model_and_becomes_the_incumbent(tmp_path) -> None:
    store = EmbeddedModelStore()
    with _client(_settings(tmp_path), store) as client:
        before = client.get("/v1/models").json()
        assert client.post("/v1/rank", json=_rank()).status_code == 200
        assert client.post("/v1/rank", json=_rank(engine_scores=ENGINE_SCORES)).status_code == 200
        listing = client.get("/v1/models").json()
        one = client.get("/v1/models/engine").json()
    assert ENGINE not in {m["name"] for m in before["models"]}
    entry = {m["name"]: m for m in listing["models"]}[ENGINE]
    assert (entry["kind"], entry["version"], entry["servable"], entry["pinned"]) == (
        "engine", 1, True, False)  # fmt: skip
    assert entry["champion"] and listing["champion"] == ENGINE
    assert {"race", "interleaving", "rolling_ndcg_at_50"} <= set(entry)
    assert listing["champion_decision"]["decided_by"] == "engine"
    assert listing["champion_decision"]["previous"] == "uni_con"
    assert one["kind"] == "engine" and one["kept_versions"] == [1]


def test_feedback_carries_engine_scores_to_the_judged_query(tmp_path) -> None:
    settings = _settings(tmp_path)
    relevance = [1, 0, None, 2, 0, None]
    with _client(settings) as client:
        with_engine = client.post("/v1/feedback", json={
            **_rank(engine_scores=ENGINE_SCORES), "query_id": 5, "relevance": relevance,
            "model": "engine"})  # fmt: skip
        without = client.post("/v1/feedback", json={**_rank(), "query_id": 6,
                                                    "relevance": relevance})  # fmt: skip
    assert with_engine.status_code == without.status_code == 200, with_engine.json()
    queries = {q.query_id: q for q in (decode_query(m.value) for m in
                                       _topic(settings, settings.queries_topic))}  # fmt: skip
    assert queries[5].engine_scores.tolist() == ENGINE_SCORES and queries[5].served_by == ENGINE
    assert queries[6].engine_scores is None


def _judged(engine_scores=None) -> JudgedQuery:
    relevance = np.array([0, 2, UNJUDGED, 1, 0, 2], np.int8)
    return JudgedQuery(seq=0, query_id=1, candidate_ids=np.array(IDS), phi=PHI.astype(np.float32),
                       relevance=relevance, served_by=ENGINE, served_version=1,
                       model_versions={}, judged=relevance != UNJUDGED,
                       engine_scores=engine_scores)  # fmt: skip


def test_queries_with_engine_scores_are_version_3_and_others_stay_version_2() -> None:
    scores = np.array(ENGINE_SCORES)
    carried, plain = encode_query(_judged(scores)), encode_query(_judged())
    assert pa.ipc.open_stream(carried).schema.metadata[b"rankstream.version"] == b"3"
    assert pa.ipc.open_stream(plain).schema.metadata[b"rankstream.version"] == b"2"
    assert decode_query(carried).engine_scores.tolist() == ENGINE_SCORES
    assert decode_query(plain).engine_scores is None


def test_the_evaluator_scores_the_engines_order_on_queries_that_carry_it() -> None:
    evaluator = Evaluator(Settings(topic_prefix="unused"), EvaluatorOptions(window=50),
                          store=EmbeddedModelStore(), transport=object())  # fmt: skip
    query = _judged(np.array(ENGINE_SCORES))
    result = evaluator.evaluate(query)
    graded = query.graded
    expected = ndcg_at_k(np.array(ENGINE_SCORES)[graded], query.relevance[graded], 50)
    assert result.ndcg == {ENGINE: expected}
    assert result.ap[ENGINE] == average_precision(
        np.array(ENGINE_SCORES)[graded], query.relevance[graded])  # fmt: skip
    assert ENGINE not in evaluator.evaluate(_judged()).ndcg  # not sent: not scored


# --- shadow mode (RANKSTREAM_SHADOW) -----------------------------------------------------
def _learned_champion(store: EmbeddedModelStore) -> None:
    """A stored learned model `good` that is the champion (it would answer otherwise)."""
    weights = np.zeros(PHI_DIM)
    weights[0] = 1.0
    scaler = Standardizer().fit(np.vstack([-np.ones(PHI_DIM), np.ones(PHI_DIM)]))
    meta, arrays = OnlineRanker("opar1", scaler=scaler, warm_start=weights).to_state()
    store.save("good", kind="online", meta=meta, arrays=arrays, offsets={}, expected_version=0)
    publish_champion(store, "good", previous="uni_con", decided_by="judged", evidence={})


def _random_query(rng: np.random.Generator, n: int = 12) -> dict:
    return {"candidate_ids": rng.choice(10**6, size=n, replace=False).tolist(),
            "phi": rng.random((n, PHI_DIM)).tolist(),
            "engine_scores": rng.integers(0, 5, n).astype(float).tolist()}  # ties too  # fmt: skip


def _engine_ids(body: dict) -> list[int]:
    return np.asarray(body["candidate_ids"])[engine_order(np.array(body["engine_scores"]))].tolist()


def test_shadow_mode_answers_the_engines_order_outside_the_randomized_share(tmp_path) -> None:
    """Shadow on, a learned champion stored, every request eligible for interleaving (share
    1, clicks heard) and half of them randomized: outside the randomized share the answer
    is the engine's order on every impression, none is interleaved, each is logged as the
    engine's with its scores; a champion request without engine_scores is a 422."""
    store = EmbeddedModelStore()
    _learned_champion(store)
    settings = _settings(tmp_path, shadow=True, interleaving_share=1.0, intervention_share=0.5)
    rng = np.random.default_rng(11)
    bodies = [_random_query(rng) for _ in range(40)]
    with _client(settings, store) as client:
        client.app.state.serve.interventions = np.random.default_rng(4)  # the coin, seeded
        first = client.post("/v1/rank", json=bodies[0]).json()
        clicks = {"impression_id": first["impression_id"], "clicks": []}
        assert client.post("/v1/clicks", json=clicks).status_code == 200  # interleaving may begin
        answers = [first] + [client.post("/v1/rank", json=b).json() for b in bodies[1:]]
        missing = client.post("/v1/rank", json=_rank())
        named = client.post("/v1/rank", json={**bodies[0], "model": "good"}).json()
    assert missing.status_code == 422 and missing.json()["error"]["field"] == "engine_scores"
    assert "shadow" in missing.json()["error"]["message"]
    assert named["model"] == "good"  # a model named explicitly is still that model
    logged = _impressions(settings)
    randomized = 0
    for body, answer in zip(bodies, answers, strict=True):
        shown = logged[answer["impression_id"]]
        assert answer["model"] == shown.model == ENGINE
        assert shown.teams is None and shown.team_models == ()
        assert shown.candidate_ids.tolist() == answer["candidate_ids"]
        assert shown.engine_scores is not None
        if shown.intervention is None:
            assert answer["candidate_ids"] == _engine_ids(body)
        else:
            randomized += 1
            assert sorted(answer["candidate_ids"]) == sorted(body["candidate_ids"])
    assert 0 < randomized < len(bodies)  # the seeded coin: both kinds were served


def test_pure_shadow_serves_the_engines_order_on_every_impression(tmp_path) -> None:
    store = EmbeddedModelStore()
    _learned_champion(store)
    settings = _settings(tmp_path, shadow=True, interleaving_share=1.0)
    rng = np.random.default_rng(12)
    bodies = [_random_query(rng) for _ in range(20)]
    with _client(settings, store) as client:
        arrow = client.post(
            "/v1/rank", content=_arrow_rank(pa.array(ENGINE_SCORES)),
            headers={"content-type": ARROW, "accept": ARROW},
        )  # fmt: skip
        answers = [client.post("/v1/rank", json=b).json() for b in bodies]
    assert pa.ipc.open_stream(arrow.content).read_all().column("candidate_ids").to_pylist() == (
        ENGINE_IDS)  # fmt: skip
    logged = _impressions(settings)
    for body, answer in zip(bodies, answers, strict=True):
        assert answer["candidate_ids"] == _engine_ids(body)
        shown = logged[answer["impression_id"]]
        assert shown.intervention is None and shown.shown_probability is None
        assert shown.model == ENGINE


def test_in_shadow_mode_every_learner_learns_from_clicks_on_the_engines_rankings(
    tmp_path, monkeypatch
) -> None:
    """The embedded serve with its workers, shadow on: the users see only the engine's
    order; their clicks on it are joined into weighted pairs the online learners learn
    from, and the impression learner (PDGD) learns the sessions too. The wait polls with
    a deadline that only guards a hang."""
    settings = _settings(
        tmp_path, shadow=True, click_window_s=5.0, unicon_calibration=50, api_deadline_s=60.0
    )  # a busy machine's warm-up is no 503
    rng = np.random.default_rng(13)
    truth = rng.standard_normal(PHI_DIM)
    seen: dict[str, int] = {}
    monkeypatch.setenv("RANKSTREAM_ONLINE_SCALER_ROWS", "100")  # learn from the first pairs on
    reset_embedded()
    with TestClient(create_app(settings, poll_seconds=0.05, workers=True)) as client:
        for _ in range(40):
            phi = rng.random((10, PHI_DIM))
            body = {"candidate_ids": rng.choice(10**6, size=10, replace=False).tolist(),
                    "phi": phi.tolist(), "engine_scores": (phi @ truth).tolist()}  # fmt: skip
            answer = client.post("/v1/rank", json=body).json()
            assert answer["model"] == ENGINE and answer["candidate_ids"] == _engine_ids(body)
            session = {
                "impression_id": answer["impression_id"],
                "session_over": True,
                "clicks": [{"candidate_id": answer["candidate_ids"][1], "position": 2}],
            }
            assert client.post("/v1/clicks", json=session).status_code == 200
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            listing = client.get("/v1/models").json()
            seen = {m["name"]: m["triplets_seen"] or 0 for m in listing["models"]}
            if seen.get("opr", 0) > 0 and "pdgd" in seen:
                break
            time.sleep(0.1)
    assert seen.get("opr", 0) > 0, f"no online learner learned from the clicks: {seen}"
    assert "pdgd" in seen  # the impression learner published what it learned


# --- racing the engine -------------------------------------------------------------------
def _interleaving_client(settings: Settings, store: EmbeddedModelStore, bodies) -> tuple:
    """Answers to `bodies` (after a first ranking and a click: interleaving may begin)."""
    with _client(settings, store) as client:
        first = client.post("/v1/rank", json=bodies[0]).json()
        session = {"impression_id": first["impression_id"], "clicks": []}
        assert client.post("/v1/clicks", json=session).status_code == 200
        answers = [client.post("/v1/rank", json=body).json() for body in bodies]
        listing = client.get("/v1/models").json()
    return answers, listing


def test_the_engine_is_the_incumbent_challengers_are_interleaved_with_its_order(tmp_path):
    store = EmbeddedModelStore()
    _learned_champion(store)
    settings = _settings(tmp_path, interleaving_share=1.0)
    bodies = [_random_query(np.random.default_rng(21)) for _ in range(12)]
    answers, listing = _interleaving_client(settings, store, bodies)
    assert listing["champion"] == ENGINE  # its arrival: the incumbent to beat
    logged = _impressions(settings)
    drafted = set()
    for body, answer in zip(bodies, answers, strict=True):
        shown = logged[answer["impression_id"]]
        assert answer["model"] == ENGINE and shown.team_models[0] == ENGINE
        engine_team = shown.candidate_ids[shown.teams == 0].tolist()
        ranks = {c: r for r, c in enumerate(_engine_ids(body))}
        assert engine_team == sorted(engine_team, key=ranks.get)  # the engine's own order
        drafted.update(shown.team_models[1:])
    assert drafted == {"good", "uni_con"}  # every other servable model, in turn


def test_a_learned_champion_races_the_engine_as_a_challenger(tmp_path) -> None:
    """The guardrail's impressions: a learned champion (the engine arrived before and lost)
    is interleaved with the engine's order on the requests that carry engine_scores."""
    store = EmbeddedModelStore()
    _learned_champion(store)
    assert adopt_engine(store, "test")  # the engine arrived ...
    publish_champion(store, "good", previous=ENGINE, decided_by="clicks", evidence={})  # lost
    settings = _settings(tmp_path, interleaving_share=1.0, interleaving_method="multileave")
    bodies = [_random_query(np.random.default_rng(22)) for _ in range(4)]
    answers, listing = _interleaving_client(settings, store, bodies)
    assert listing["champion"] == "good"  # not adopted again
    logged = _impressions(settings)
    for answer in answers:
        assert logged[answer["impression_id"]].team_models == ("good", ENGINE, "uni_con")


def test_the_kill_switch_returns_every_champion_request_to_the_engines_order(tmp_path) -> None:
    """`rankstream model pin engine 1` (here `pins.pin`): at once the engine's order, nothing
    interleaved, whatever the champion; unpinned, the champion serves again."""
    store = EmbeddedModelStore()
    _learned_champion(store)
    adopt_engine(store, "test")
    publish_champion(store, "good", previous=ENGINE, decided_by="clicks", evidence={})
    settings = _settings(tmp_path, interleaving_share=1.0)
    bodies = [_random_query(np.random.default_rng(23)) for _ in range(10)]
    with _client(settings, store) as client:
        serve = client.app.state.serve
        before = client.post("/v1/rank", json=bodies[0]).json()
        session = {"impression_id": before["impression_id"], "clicks": []}
        assert client.post("/v1/clicks", json=session).status_code == 200
        pins.pin(store, ENGINE, 1)
        serve.registry.refresh()  # what the reload thread does on the pin's announcement
        pinned = [client.post("/v1/rank", json=body).json() for body in bodies]
        listing = client.get("/v1/models").json()
        pins.unpin(store, ENGINE)
        serve.registry.refresh()
        after = client.post("/v1/rank", json=bodies[0]).json()
    assert before["model"] == "good" and after["model"] == "good"
    logged = _impressions(settings)
    for body, answer in zip(bodies, pinned, strict=True):
        assert answer["model"] == ENGINE and answer["candidate_ids"] == _engine_ids(body)
        assert logged[answer["impression_id"]].team_models == ()
    entry = {m["name"]: m for m in listing["models"]}[ENGINE]
    assert entry["pinned"] and listing["champion"] == "good"
