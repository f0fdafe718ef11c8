"""Interleaving on live traffic (issue 27): serve drafts and logs teams, the click join
credits clicks to teams and decides the champion, /v1/models shows the evidence."""

from __future__ import annotations

import time
import uuid

import numpy as np
import pytest
from join_runs import run_to_end

from rankstream.ranking.baselines import UNI_CON, UniCon
from rankstream.ranking.online import OnlineRanker
from rankstream.ranking.scaling import Standardizer
from rankstream.selection.click_race import INTERLEAVING_RECORD, session_outcomes
from rankstream.selection.judged_race import CHAMPION_RECORD, stored_champion
from rankstream.selection.scoring import scorer_for
from rankstream.stream.click_schema import (
    Click,
    Impression,
    decode_impressions,
    encode_clicks,
    encode_impressions,
)
from rankstream.stream.embedded import EmbeddedTransport
from rankstream.stream.embedded_store import EmbeddedModelStore
from rankstream.stream.settings import Settings, SettingsError
from rankstream.workers.click_join import ClickJoin, JoinOptions

D = 4


# ------------------------------------------------------------------ credit
def test_each_click_is_credited_to_the_team_that_placed_the_result() -> None:
    teams = np.array([0, 1, 1, 0, 1, -1])
    both = ("uni_con", "opr")
    assert session_outcomes(both, teams, np.array([1, 0, 0, 0, 0, 0], bool)) == {"opr": -1}
    assert session_outcomes(both, teams, np.array([1, 1, 1, 0, 0, 0], bool)) == {"opr": 1}
    assert session_outcomes(both, teams, np.array([1, 1, 0, 0, 0, 1], bool)) == {"opr": 0}
    assert session_outcomes(both, teams, np.zeros(6, bool)) == {"opr": 0}  # no click: a tie
    three = ("uni_con", "opr", "arow")
    teams3 = np.array([0, 1, 2, 2, 1, 0])
    clicked = np.array([0, 1, 1, 1, 0, 0], bool)  # opr 1, arow 2, champion 0
    assert session_outcomes(three, teams3, clicked) == {"opr": 1, "arow": 1}
    assert session_outcomes(three, teams3, np.array([1, 0, 0, 0, 0, 1], bool)) == {
        "opr": -1,
        "arow": -1,
    }


def test_the_interleaving_settings_are_checked(monkeypatch) -> None:
    monkeypatch.setenv("RANKSTREAM_INTERLEAVING_SHARE", "1")
    monkeypatch.setenv("RANKSTREAM_INTERLEAVING_METHOD", "multileave")
    found = Settings.from_env()
    assert (found.interleaving_share, found.interleaving_method) == (1.0, "multileave")
    for bad in ("1.5", "-0.1", "nan"):
        monkeypatch.setenv("RANKSTREAM_INTERLEAVING_SHARE", bad)
        with pytest.raises(SettingsError, match="INTERLEAVING_SHARE"):
            Settings.from_env()
    monkeypatch.setenv("RANKSTREAM_INTERLEAVING_SHARE", "0")
    monkeypatch.setenv("RANKSTREAM_INTERLEAVING_METHOD", "balanced")
    with pytest.raises(SettingsError, match="INTERLEAVING_METHOD"):
        Settings.from_env()


# ------------------------------------------------------------------ the join
def _settings(**extra) -> Settings:
    return Settings(topic_prefix=f"il-{uuid.uuid4().hex[:8]}", phi_dim=D, click_window_s=100.0,
                    click_grace_s=10.0, **extra)  # fmt: skip


def _interleaved(i: int, champion: str = UNI_CON, challenger: str = "opr") -> Impression:
    rng = np.random.default_rng(i)
    return Impression(
        impression_id=f"{i:032x}",
        time=float(i),
        model=champion,
        version=1,
        model_versions={champion: 1, challenger: 1},
        candidate_ids=np.arange(100 * i, 100 * i + 6, dtype=np.int64),
        phi=rng.standard_normal((6, D)).astype(np.float32),
        teams=np.array([1, 0, 0, 1, 1, 0], dtype=np.int8),
        team_models=(champion, challenger),
    )


def _clicks_on(imp: Impression, positions: list[int]) -> list[Click]:
    clicks = [Click(imp.impression_id, int(imp.candidate_ids[p]), time=imp.time + 0.5)
              for p in positions]  # fmt: skip
    return [*clicks, Click.no_click(imp.impression_id, time=imp.time + 1.0)]


def _join_all(settings: Settings, transport, store) -> ClickJoin:
    """A new join over everything in its input topics (restoring what `store` holds)."""
    join = ClickJoin(settings, JoinOptions(checkpoint_seconds=None, checkpoint_records=7),
                     transport=transport, store=store)  # fmt: skip
    return run_to_end(join, settings)


def _produce(transport, settings: Settings, first: int, last: int) -> None:
    """Impressions first..last-1, each with its clicks: the user clicks only what the
    challenger placed (a win), on one impression in five also one of Uni-Con's (a tie)."""
    producer = transport.producer()
    for i in range(first, last):
        imp = _interleaved(i)
        producer.send(settings.impressions_topic, encode_impressions([imp]))
        clicked = [0, 1] if i % 5 == 4 else [0]
        producer.send(settings.clicks_topic, encode_clicks(_clicks_on(imp, clicked)))
    producer.flush()


def test_the_join_credits_clicks_and_switches_the_champion_exactly_once() -> None:
    """A user who prefers the challenger's results: the race switches within the stream,
    the champion record says so with its evidence, later sessions drafted against Uni-Con
    are skipped as stale; a join restarted midway decides exactly as an unbroken one."""
    settings, transport, store = _settings(), EmbeddedTransport(), EmbeddedModelStore()
    _produce(transport, settings, 0, 60)
    join = _join_all(settings, transport, store)
    assert stored_champion(store) == "opr" == join.handler.race.incumbent
    record = store.load(CHAMPION_RECORD)
    assert record.meta["decided_by"] == "clicks" and record.meta["previous"] == UNI_CON
    evidence = record.meta["evidence"]
    assert evidence["decision"] == "switch" and evidence["losses"] == 0
    assert evidence["log_statistic"] >= evidence["threshold"]
    decided = evidence["impressions"]
    assert decided == evidence["wins"] + evidence["ties"] < 60
    assert evidence["ties"] == decided // 5  # every fifth impression
    counters = store.load("click-join").meta["join"]["counters"]
    assert counters["sessions"] == 60 and counters["stale_interleavings"] == 60 - decided
    shown = store.load(INTERLEAVING_RECORD).meta["interleaving"]
    assert shown["incumbent"] == "opr" and shown["challengers"] == {}

    # the same stream, the join stopped after 10 impressions and restarted from its checkpoint
    settings2, transport2, store2 = _settings(), EmbeddedTransport(), EmbeddedModelStore()
    _produce(transport2, settings2, 0, 10)
    early = _join_all(settings2, transport2, store2).handler.race.to_state()
    assert early["incumbent"] == UNI_CON and early["races"]["opr"]["counts"]["wins"] == 8
    _produce(transport2, settings2, 10, 60)
    _join_all(settings2, transport2, store2)
    assert store2.load(CHAMPION_RECORD).meta["evidence"] == evidence
    counters2 = store2.load("click-join").meta["join"]["counters"]
    assert counters2["stale_interleavings"] == counters["stale_interleavings"]


# ------------------------------------------------------------------ serving
def _scaler(rng) -> Standardizer:
    return Standardizer().fit(rng.standard_normal((200, 36)))


def _save(store, name, model, kind) -> None:
    meta, arrays = model.to_state()
    store.save(name, kind=kind, meta=meta, arrays=arrays, offsets={},
               expected_version=store.latest_versions().get(name, 0))  # fmt: skip


def _logged(settings: Settings, count: int) -> dict[str, Impression]:
    from rankstream.stream.embedded import embedded_transport

    transport, topic = embedded_transport(), settings.impressions_topic
    deadline = time.monotonic() + 30  # the writer thread drains the queue: a hang guard
    found: dict[str, Impression] = {}
    consumer = transport.consumer(None)
    consumer.assign([(topic, 0)])
    consumer.seek_to_beginning(topic, 0)
    while len(found) < count:  # a message may hold several impressions
        assert time.monotonic() < deadline, f"{len(found)} of {count} impressions written"
        for m in consumer.poll(timeout_ms=100, max_records=500):
            for imp in decode_impressions(m.value, width=settings.phi_dim).records:
                found[imp.impression_id] = imp
    consumer.close()
    return found


@pytest.mark.parametrize("method", ["team-draft", "multileave"])
def test_serve_with_share_one_interleaves_and_logs_the_teams(method: str) -> None:
    from starlette.testclient import TestClient

    from rankstream.serve.app import create_app
    from rankstream.stream.embedded import reset_embedded

    reset_embedded()
    settings = Settings(topic_prefix=f"il-{uuid.uuid4().hex[:8]}", interleaving_share=1.0,
                        interleaving_method=method)  # fmt: skip
    rng = np.random.default_rng(5)
    store = EmbeddedModelStore()
    _save(store, UNI_CON, UniCon(scaler=_scaler(rng)), "linear")
    for algo in ("opr", "opar1"):
        ranker = OnlineRanker(algo=algo, scaler=_scaler(rng))
        ranker.learn_many(rng.standard_normal((40, 36)), np.where(rng.random(40) < 0.5, 1.0, -1.0))
        _save(store, algo, ranker, "online")
    ids = np.arange(500, 530)
    phi = rng.standard_normal((30, settings.phi_dim)).astype(np.float32)
    with TestClient(create_app(settings, store=store, poll_seconds=0.05)) as client:
        body = {"candidate_ids": ids.tolist(), "phi": phi.tolist()}
        # no click posted yet: nothing is interleaved (an engine of judged feedback only
        # would pay for lists no click can credit)
        before = client.post("/v1/rank", json=body).json()
        session = {"impression_id": before["impression_id"], "clicks": []}
        assert client.post("/v1/clicks", json={"impressions": [session]}).status_code == 200
        answers = [client.post("/v1/rank", json=body).json() for _ in range(8)]
        named = client.post("/v1/rank", json={**body, "model": "opr"}).json()
        logged = _logged(settings, 10)
    assert logged[before["impression_id"]].team_models == ()
    champion_scores = np.sort(scorer_for(store.load(UNI_CON)).score(phi))[::-1]
    pairs = set()
    for answer in answers:
        assert answer["model"] == UNI_CON
        np.testing.assert_allclose(answer["scores"], champion_scores, rtol=1e-6)
        imp = logged[answer["impression_id"]]
        assert imp.model == UNI_CON and imp.team_models[0] == UNI_CON
        assert imp.candidate_ids.tolist() == answer["candidate_ids"]
        assert sorted(answer["candidate_ids"]) == ids.tolist()  # every candidate once
        sizes = np.bincount(imp.teams, minlength=len(imp.team_models))
        assert sizes.max() - sizes.min() <= 1  # a team draft: fair shares
        pairs.add(imp.team_models[1:])
    if method == "team-draft":
        assert pairs == {("opar1",), ("opr",)}  # round-robin over the challengers
    else:
        assert pairs == {("opar1", "opr")}
    assert logged[named["impression_id"]].team_models == ()  # a named model: not interleaved


def test_the_champion_moves_to_a_learned_model_on_clicks_alone() -> None:
    """The embedded `serve` with its in-process workers, every request interleaved: a
    simulated user (navigational cascade clicks on grades of a hidden linear truth that
    Uni-Con's uniform weights ignore) clicks; no feedback or judgment is sent. The online
    learners learn from the join's click pairs, the interleaving race decides, and the
    champion moves from Uni-Con to a learned model; /v1/models shows the evidence."""
    from starlette.testclient import TestClient

    from rankstream.serve.app import create_app
    from rankstream.simulators.click_models import click_model
    from rankstream.stream.embedded import embedded_transport, reset_embedded

    reset_embedded()
    settings = Settings(topic_prefix=f"il-{uuid.uuid4().hex[:8]}", interleaving_share=1.0,
                        click_window_s=5.0, unicon_calibration=300)  # fmt: skip
    rng = np.random.default_rng(27)
    truth = rng.standard_normal(settings.phi_dim)
    truth -= truth.mean()  # orthogonal to Uni-Con's all-equal weights
    user = click_model("navigational", n_grades=3)
    n, previous, listing = 30, None, {}
    with TestClient(create_app(settings, poll_seconds=0.05, workers=True)) as client:
        for _ in range(3000):  # a bound only: the switch comes far sooner (asserted below)
            phi = rng.standard_normal((n, settings.phi_dim)).astype(np.float32)
            ids = rng.choice(10**9, size=n, replace=False)
            answer = client.post("/v1/rank", json={"candidate_ids": ids.tolist(),
                                                   "phi": phi.tolist()}).json()  # fmt: skip
            true_rank = np.argsort(np.argsort(-(phi @ truth)))
            grades = np.where(true_rank < 3, 2, np.where(true_rank < 8, 1, 0))
            shown = [int(np.flatnonzero(ids == c)[0]) for c in answer["candidate_ids"]]
            clicked = np.flatnonzero(user.clicks(grades[shown], rng))
            sessions = [{"impression_id": answer["impression_id"], "clicks": [
                {"candidate_id": answer["candidate_ids"][p], "position": int(p) + 1}
                for p in clicked]}]  # fmt: skip
            if previous is not None:  # the previous impression's session is over
                sessions.append({"impression_id": previous, "clicks": []})
            assert client.post("/v1/clicks", json={"impressions": sessions}).status_code == 200
            previous = answer["impression_id"]
            listing = client.get("/v1/models").json()
            if listing["champion"] != UNI_CON:
                break
        # The join's checkpoint writes the champion record, then the race's record: serve
        # may show the new champion beside the previous race for a poll (a wait bounded by
        # a deadline that only guards a hang; the race's record must follow).
        deadline = time.monotonic() + 30
        while (
            listing["champion"] != UNI_CON
            and listing["interleaving"]["incumbent"] != listing["champion"]
            and time.monotonic() < deadline
        ):
            time.sleep(0.05)
            listing = client.get("/v1/models").json()
    assert listing["champion"] != UNI_CON, "the champion never left Uni-Con on clicks"
    decision = listing["champion_decision"]
    assert decision["decided_by"] == "clicks" and decision["previous"] == UNI_CON
    evidence = decision["evidence"]
    assert evidence["challenger"] == listing["champion"] and evidence["decision"] == "switch"
    assert evidence["wins"] > 2 * evidence["losses"]  # a clear preference, not a fluke
    assert evidence["log_statistic"] >= evidence["threshold"]
    assert listing["interleaving"]["incumbent"] == listing["champion"]
    queries = embedded_transport().end_offsets(settings.queries_topic)
    assert sum(queries.values()) == 0  # no judged query was ever sent


def test_whichever_race_decides_first_switches_and_the_other_follows() -> None:
    """The champion record is a compare-and-set: a judged switch decided against a
    champion the clicks already replaced loses, and the evaluator follows the record."""
    from rankstream.selection.judged_race import publish_champion
    from rankstream.workers.evaluator import EvaluatorHandler, EvaluatorOptions

    store = EmbeddedModelStore()
    evaluator = EvaluatorHandler(Settings(), EvaluatorOptions(), store)
    evaluator.race.races["arow"] = evaluator.policy.test.add(evaluator.policy.test.start(), 0.5)
    assert publish_champion(store, "opr", previous=UNI_CON, decided_by="clicks",
                            evidence={"wins": 9}) == ("opr", True)  # fmt: skip
    assert publish_champion(store, "arow", previous=UNI_CON, decided_by="judged",
                            evidence={}) == ("opr", False)  # fmt: skip
    assert store.load(CHAMPION_RECORD).meta["evidence"] == {"wins": 9}
    evaluator.follow_stored_champion()
    assert evaluator.race.incumbent == "opr" and evaluator.race.races == {}
    assert publish_champion(store, "arow", previous="opr", decided_by="judged",
                            evidence={}) == ("arow", True)  # fmt: skip
    assert stored_champion(store) == "arow"
