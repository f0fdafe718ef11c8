"""Racing the engine (selection.engine_ranking): the engine as the incumbent a learned
model must beat, and the guardrail that hands serving back to the engine when a learned
champion later loses to it, by the same test, in the judged race (the evaluator) and the
click race (the click join); the evidence is in the champion record."""

from __future__ import annotations

import uuid

import numpy as np
from join_runs import run_to_end

from rankstream.ranking.online import OnlineRanker
from rankstream.ranking.scaling import Standardizer
from rankstream.selection.click_race import INTERLEAVING_RECORD
from rankstream.selection.engine_ranking import ENGINE
from rankstream.selection.judged_race import CHAMPION_RECORD, publish_champion, stored_champion
from rankstream.stream.click_schema import Click, Impression, encode_clicks, encode_impressions
from rankstream.stream.embedded import EmbeddedTransport
from rankstream.stream.embedded_store import EmbeddedModelStore
from rankstream.stream.schema import JudgedQuery
from rankstream.stream.settings import DEFAULT_PHI_DIM as D
from rankstream.stream.settings import Settings
from rankstream.workers.click_join import ClickJoin, JoinOptions
from rankstream.workers.evaluator import Evaluator, EvaluatorOptions

SCALER = Standardizer().fit(np.vstack([-np.ones(D), np.ones(D)]))


def _column_model(sign: float) -> OnlineRanker:
    """A learned model ranking by phi column 0 (sign 1: as the users' grades do; -1:
    upside down)."""
    weights = np.zeros(D)
    weights[0] = sign
    return OnlineRanker("opar1", scaler=SCALER, warm_start=weights)


def _save(store: EmbeddedModelStore, name: str, sign: float) -> None:
    meta, arrays = _column_model(sign).to_state()
    store.save(name, kind="online", meta=meta, arrays=arrays, offsets={}, expected_version=0)


def _query(seq: int, rng: np.random.Generator, engine_sign: float) -> JudgedQuery:
    """Grades follow phi column 0; the engine scores by engine_sign x that column."""
    phi = rng.random((60, D)).astype(np.float32)
    relevance = np.digitize(phi[:, 0] + 0.05 * rng.standard_normal(60), [0.6, 0.85])
    return JudgedQuery(
        seq=seq, query_id=seq, candidate_ids=np.arange(60), phi=phi,
        relevance=relevance.astype(np.int8), served_by=ENGINE, served_version=1,
        model_versions={"learned": 1}, judged=60,
        engine_scores=engine_sign * phi[:, 0].astype(np.float64),
    )  # fmt: skip


def _judged_race(champion: str, learned_sign: float, engine_sign: float) -> tuple:
    """Judged queries until the race switches (at most 300: it switches far sooner);
    (the new champion, the champion record's meta)."""
    store = EmbeddedModelStore()
    _save(store, "learned", learned_sign)
    store.save(ENGINE, kind=ENGINE, meta={}, arrays={}, offsets={}, expected_version=0)
    publish_champion(store, champion, previous="uni_con", decided_by="engine", evidence={})
    evaluator = Evaluator(Settings(topic_prefix="unused"), EvaluatorOptions(window=50),
                          store=store, transport=object())  # fmt: skip
    handler = evaluator.handler
    handler.follow_stored_champion()
    assert evaluator.champion == champion
    rng = np.random.default_rng(7)
    for seq in range(300):
        evaluator.evaluate(_query(seq, rng, engine_sign))
        if evaluator.champion != champion:
            break
    handler.publish_switch()
    return stored_champion(store), store.load(CHAMPION_RECORD).meta


def test_a_learned_model_replaces_the_engine_only_on_the_tests_evidence() -> None:
    champion, record = _judged_race(ENGINE, learned_sign=1.0, engine_sign=-1.0)
    assert champion == "learned" and record["previous"] == ENGINE
    evidence = record["evidence"]
    assert record["decided_by"] == "judged" and evidence["decision"] == "switch"
    assert evidence["log_statistic"] >= evidence["threshold"] and "guardrail" not in evidence


def test_the_engine_stays_while_no_learned_model_beats_it() -> None:
    champion, record = _judged_race(ENGINE, learned_sign=-1.0, engine_sign=1.0)
    assert champion == ENGINE and record["decided_by"] == "engine"  # never switched


def test_the_guardrail_hands_serving_back_to_the_engine_in_the_judged_race() -> None:
    champion, record = _judged_race("learned", learned_sign=-1.0, engine_sign=1.0)
    assert champion == ENGINE and record["previous"] == "learned"
    evidence = record["evidence"]
    assert evidence["guardrail"] is True and evidence["challenger"] == ENGINE
    assert evidence["decision"] == "switch" and evidence["log_statistic"] >= evidence["threshold"]
    assert isinstance(record["time"], float)


# --- the click race (the click join) ------------------------------------------------------
def _interleaved(i: int, team_models: tuple[str, str]) -> Impression:
    rng = np.random.default_rng(i)
    return Impression(
        impression_id=f"{i:032x}", time=float(i), model=team_models[0], version=1,
        model_versions={"learned": 1}, candidate_ids=np.arange(100 * i, 100 * i + 6),
        phi=rng.standard_normal((6, D)).astype(np.float32),
        teams=np.array([1, 0, 0, 1, 1, 0], dtype=np.int8), team_models=team_models,
    )  # fmt: skip


def _produce(transport, settings: Settings, team_models, winner: int, first: int, last: int):
    """Impressions first..last-1 of `team_models`; the user clicks the first result team
    `winner` placed (and, one in five, also the other team's first: a tie)."""
    producer = transport.producer()
    for i in range(first, last):
        imp = _interleaved(i, team_models)
        producer.send(settings.impressions_topic, encode_impressions([imp]))
        positions = [int(np.flatnonzero(imp.teams == winner)[0])]
        if i % 5 == 4:
            positions.append(int(np.flatnonzero(imp.teams != winner)[0]))
        clicks = [Click(imp.impression_id, int(imp.candidate_ids[p]), time=i + 0.5)
                  for p in positions]  # fmt: skip
        clicks.append(Click.no_click(imp.impression_id, time=i + 1.0))
        producer.send(settings.clicks_topic, encode_clicks(clicks))
    producer.flush()


def _join_all(settings: Settings, transport, store) -> ClickJoin:
    join = ClickJoin(settings, JoinOptions(checkpoint_seconds=None, checkpoint_records=7,
                                           learn=("none",)),
                     transport=transport, store=store)  # fmt: skip
    return run_to_end(join, settings)


def _click_race(champion: str, challenger: str, winner: int, n: int = 80) -> tuple:
    settings = Settings(topic_prefix=f"er-{uuid.uuid4().hex[:8]}", phi_dim=D,
                        click_window_s=100.0, click_grace_s=10.0)  # fmt: skip
    transport, store = EmbeddedTransport(), EmbeddedModelStore()
    _save_learned(store, triplets_seen=1000)
    store.save(ENGINE, kind=ENGINE, meta={}, arrays={}, offsets={}, expected_version=0)
    publish_champion(store, champion, previous="uni_con", decided_by="engine", evidence={})
    _produce(transport, settings, (champion, challenger), winner, 0, n)
    join = _join_all(settings, transport, store)
    return settings, transport, store, join


def _save_learned(store: EmbeddedModelStore, triplets_seen: int) -> None:
    weights = np.zeros(D)
    meta, arrays = OnlineRanker("opar1", scaler=Standardizer().fit(np.eye(D)),
                                warm_start=weights).to_state()  # fmt: skip
    meta["triplets_seen"] = triplets_seen
    store.save("learned", kind="online", meta=meta, arrays=arrays, offsets={},
               expected_version=store.latest_versions().get("learned", 0))  # fmt: skip


def test_the_click_race_moves_the_champion_from_the_engine_on_its_evidence() -> None:
    _, _, store, _ = _click_race(ENGINE, "learned", winner=1)
    record = store.load(CHAMPION_RECORD).meta
    assert stored_champion(store) == "learned" and record["previous"] == ENGINE
    evidence = record["evidence"]
    assert record["decided_by"] == "clicks" and evidence["decision"] == "switch"
    assert evidence["wins"] > 0 and evidence["losses"] == 0 and "guardrail" not in evidence


def test_the_guardrail_hands_serving_back_to_the_engine_in_the_click_race() -> None:
    _, _, store, _ = _click_race("learned", ENGINE, winner=1)
    record = store.load(CHAMPION_RECORD).meta
    assert stored_champion(store) == ENGINE and record["previous"] == "learned"
    evidence = record["evidence"]
    assert record["decided_by"] == "clicks" and evidence["guardrail"] is True
    assert evidence["challenger"] == ENGINE and evidence["decision"] == "switch"
    assert evidence["log_statistic"] >= evidence["threshold"]
    assert {"wins", "losses", "ties", "impressions"} <= set(evidence)
    assert isinstance(record["time"], float)


def test_a_refused_engine_is_raced_again_once_the_champion_learned_twice_as_much() -> None:
    """The engine never changes, so its refused guardrail race re-opens when the champion
    it was refused against has learned twice what it had then (the champion may have
    drifted): the users stop paying for the engine's interleavings meanwhile."""
    settings, transport, store, _ = _click_race("learned", ENGINE, winner=0)
    race = store.load(INTERLEAVING_RECORD).meta["interleaving"]
    refused = race["challengers"][ENGINE]["refused"]
    assert refused is not None and refused["learned"] == 1000  # the champion's, at refusal
    assert stored_champion(store) == "learned"
    _save_learned(store, triplets_seen=1500)  # learned more, not twice as much
    _produce(transport, settings, ("learned", ENGINE), 0, 80, 81)
    _join_all(settings, transport, store)
    race = store.load(INTERLEAVING_RECORD).meta["interleaving"]
    assert race["challengers"][ENGINE]["refused"] is not None
    _save_learned(store, triplets_seen=2000)
    _produce(transport, settings, ("learned", ENGINE), 0, 81, 82)
    _join_all(settings, transport, store)
    race = store.load(INTERLEAVING_RECORD).meta["interleaving"]
    assert race["challengers"][ENGINE]["refused"] is None
    assert race["challengers"][ENGINE]["reopened"] == 1


def test_over_http_a_learned_model_takes_over_from_a_worse_engine_on_clicks_alone() -> None:
    """The embedded `serve` with its workers, every request interleaved: the users click by
    a hidden linear truth (navigational cascade clicks), the engine ranks by that truth
    plus noise (better than Uni-Con, which ignores the truth, and worse than what a linear
    learner can learn from the clicks). The engine arrives as the champion; the
    learners learn from the clicks on its interleaved rankings, and a learned model takes
    over only when the click race's test says so. The loop's bound and the deadlines only
    guard a hang."""
    from starlette.testclient import TestClient

    from rankstream.serve.app import create_app
    from rankstream.simulators.click_models import click_model
    from rankstream.stream.embedded import reset_embedded

    reset_embedded()
    settings = Settings(topic_prefix=f"er-{uuid.uuid4().hex[:8]}", interleaving_share=1.0,
                        click_window_s=5.0, unicon_calibration=300,
                        api_deadline_s=60.0)  # a busy machine's warm-up is no 503  # fmt: skip
    rng = np.random.default_rng(31)
    truth = rng.standard_normal(settings.phi_dim)
    truth -= truth.mean()
    spread = float(np.linalg.norm(truth))  # the sd of phi @ truth
    user = click_model("navigational", n_grades=3)
    n, previous, listing, served = 30, None, {}, []
    with TestClient(create_app(settings, poll_seconds=0.05, workers=True)) as client:
        for _ in range(3000):
            phi = rng.standard_normal((n, settings.phi_dim)).astype(np.float32)
            ids = rng.choice(10**9, size=n, replace=False)
            engine = phi @ truth + 1.5 * spread * rng.standard_normal(n)  # a noisy truth
            body = {"candidate_ids": ids.tolist(), "phi": phi.tolist(),
                    "engine_scores": engine.astype(float).tolist()}  # fmt: skip
            answer = client.post("/v1/rank", json=body).json()
            served.append(answer["model"])
            true_rank = np.argsort(np.argsort(-(phi @ truth)))
            grades = np.where(true_rank < 3, 2, np.where(true_rank < 8, 1, 0))
            shown = [int(np.flatnonzero(ids == c)[0]) for c in answer["candidate_ids"]]
            clicked = np.flatnonzero(user.clicks(grades[shown], rng))
            sessions = [{"impression_id": answer["impression_id"], "clicks": [
                {"candidate_id": answer["candidate_ids"][p], "position": int(p) + 1}
                for p in clicked]}]  # fmt: skip
            if previous is not None:
                sessions.append({"impression_id": previous, "clicks": []})
            assert client.post("/v1/clicks", json={"impressions": sessions}).status_code == 200
            previous = answer["impression_id"]
            listing = client.get("/v1/models").json()
            if listing["champion"] not in (ENGINE, "uni_con"):
                break
    assert served[0] == ENGINE  # the engine arrived as the champion
    assert listing["champion"] not in (ENGINE, "uni_con"), "never left the engine"
    decision = listing["champion_decision"]
    assert decision["decided_by"] == "clicks" and decision["previous"] == ENGINE, decision
    evidence = decision["evidence"]
    assert evidence["decision"] == "switch" and evidence["wins"] > evidence["losses"]
    assert evidence["log_statistic"] >= evidence["threshold"]
