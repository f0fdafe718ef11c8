"""Issue 38 item 4: a challenger the click race refused is not drafted again until a new
version of it learned enough to differ; its evidence for a switch continues soundly; the
share each challenger takes is a metric; a collapsed model is flagged in /v1/models."""

from __future__ import annotations

import uuid

import numpy as np
import pytest
from join_runs import run_to_end

from rankstream.ranking.baselines import UNI_CON
from rankstream.ranking.sequential import PairedTest, first_switch
from rankstream.selection.click_race import (
    INTERLEAVING_KIND,
    INTERLEAVING_RECORD,
    REFUSE_ALPHA,
    Interleaver,
    InterleavingRace,
    learned_count,
    refused_challengers,
)
from rankstream.selection.judged_race import ChampionPolicy
from rankstream.stream.click_schema import Click, Impression, encode_clicks, encode_impressions
from rankstream.stream.embedded import EmbeddedTransport
from rankstream.stream.embedded_store import EmbeddedModelStore
from rankstream.stream.settings import Settings
from rankstream.telemetry import prometheus_metrics as metrics
from rankstream.workers.click_join import ClickJoin, JoinOptions

D = 4


# ------------------------------------------------------------------ the test
def test_a_reopened_race_keeps_its_switch_wealth_and_restarts_the_rest() -> None:
    test = PairedTest()
    state = test.update(test.start(), [1, -1, -1, 0, -1, -1, -1] * 30)
    assert test.decision(state) == "refuse" and state.log_wealth < 0
    again = test.reopen(state)
    assert again.log_wealth == state.log_wealth and again.low_sums == state.low_sums
    assert again.n == 0 and again.log_wealth_refuse == 0.0 and test.decision(again) == "undecided"
    # a fresh race would switch on these wins sooner than the re-opened one: no new alpha
    wins = [1, 1, 0, 1] * 30
    fresh, carried = test.start(), again
    fresh_at = carried_at = None
    for i, d in enumerate(wins, start=1):
        fresh, carried = test.add(fresh, d), test.add(carried, d)
        if fresh_at is None and test.decision(fresh) == "switch":
            fresh_at = i
        if carried_at is None and test.decision(carried) == "switch":
            carried_at = i
    assert fresh_at is not None and carried_at is not None and fresh_at < carried_at


# ------------------------------------------------------------------ the race
def _race_refusing(version: int = 3) -> InterleavingRace:
    race = InterleavingRace(ChampionPolicy())
    race.observe("opr", [1, -1, 0, 1, -1] * 2, version=version - 1)  # not refused yet
    for _ in range(200):
        race.observe("opr", [-1], version=version)
    race.observe("arow", [1, 0, -1, 1])
    return race


def test_a_refusal_is_recorded_with_its_version_and_flags_a_collapse() -> None:
    race = _race_refusing()
    refusal = race.refusals["opr"]
    assert refusal["version"] == 3 and refusal["learned"] is None
    assert refusal["collapsed"] and refusal["mean_difference"] <= -0.2
    summary = race.summary()
    assert summary["challengers"]["opr"]["refused"] == refusal
    assert summary["challengers"]["opr"]["collapsed"] is True
    assert summary["challengers"]["arow"]["refused"] is None
    assert summary["challengers"]["arow"]["collapsed"] is False
    assert refused_challengers(summary, UNI_CON) == {"opr"}
    assert refused_challengers(summary, "arow") == frozenset()  # another champion's race
    restored = InterleavingRace.from_state(ChampionPolicy(), race.to_state())
    assert restored.summary() == summary


def test_reopen_restarts_the_counts_and_follow_forgets_the_refusals() -> None:
    race = _race_refusing()
    wealth = race.races["opr"].log_wealth
    race.reopen("opr", version=9, learned=400)
    assert "opr" not in race.refusals and race.reopened == {"opr": 1}
    assert race.counts["opr"] == {"wins": 0, "losses": 0, "ties": 0}
    assert race.races["opr"].log_wealth == wealth
    assert race.summary()["challengers"]["opr"]["reopened"] == 1
    race2 = _race_refusing()
    race2.follow("arow")
    assert race2.refusals == {} and race2.races == {}


def test_after_a_reopening_the_carried_wealth_moves_as_a_fresh_race_does() -> None:
    """The same bets as a race started afresh at the re-opening (the moments restart in
    both), so the carried log wealth stays the fresh one's plus what the refused version
    left: no evidence is made up, none of the new version's is lost."""
    test = PairedTest()
    refused = test.update(test.start(), [1, -1, -1, 0, -1, -1, -1] * 30)
    carried, fresh = test.reopen(refused), test.start()
    for d in [1, 0, 1, -1, 1, 1, 0, -1] * 20:
        carried, fresh = test.add(carried, d), test.add(fresh, d)
        assert carried.log_wealth == pytest.approx(refused.log_wealth + fresh.log_wealth)
        assert carried.log_wealth_refuse == pytest.approx(fresh.log_wealth_refuse)


def test_the_click_race_refuses_at_its_own_level_and_switches_at_alpha() -> None:
    """A refusal only stops drafting until the challenger changed: at 0.1 it needs
    log(10) of evidence, not log(100); the switch still needs log(1/alpha)."""
    race = InterleavingRace(ChampionPolicy())
    assert race.policy.test.refuse_alpha == REFUSE_ALPHA == 0.1
    assert race.policy.test.alpha == ChampionPolicy().test.alpha == 0.01
    assert race.summary()["refuse_alpha"] == 0.1
    losing = [1, -1, -1, 0, -1] * 40
    lenient = PairedTest(refuse_alpha=0.1)
    strict = PairedTest()
    at = {}
    for name, test in (("lenient", lenient), ("strict", strict)):
        state = test.start()
        for i, d in enumerate(losing, start=1):
            state = test.add(state, d)
            if test.decision(state) == "refuse":
                at[name] = i
                break
    assert at["lenient"] < at["strict"]
    winning = [1, 1, 0, 1, -1] * 40
    assert first_switch(lenient, winning) == first_switch(strict, winning)
    with pytest.raises(ValueError, match="refuse_alpha"):
        PairedTest(refuse_alpha=1.0)


def test_learned_count_reads_triplets_then_sessions_then_the_version() -> None:
    assert learned_count({"triplets_seen": 120, "n_updates": 3}, 7) == 120
    assert learned_count({"n_updates": 3}, 7) == 3
    assert learned_count({}, 7) == 7


# ------------------------------------------------------------------ the join
def _settings() -> Settings:
    return Settings(topic_prefix=f"rf-{uuid.uuid4().hex[:8]}", phi_dim=D, click_window_s=100.0,
                    click_grace_s=10.0)  # fmt: skip


def _save(store, name: str, triplets_seen: int) -> int:
    version = store.latest_versions().get(name, 0)
    return store.save(name, kind="online", meta={"triplets_seen": triplets_seen}, arrays={},
                      offsets={}, expected_version=version)  # fmt: skip


def _produce(transport, settings: Settings, first: int, last: int, version: int) -> None:
    """Interleaved impressions whose user clicks only Uni-Con's results: opr loses each."""
    producer = transport.producer()
    for i in range(first, last):
        rng = np.random.default_rng(i)
        imp = Impression(
            impression_id=f"{i:032x}", time=float(i), model=UNI_CON, version=1,
            model_versions={UNI_CON: 1, "opr": version},
            candidate_ids=np.arange(100 * i, 100 * i + 6, dtype=np.int64),
            phi=rng.standard_normal((6, D)).astype(np.float32),
            teams=np.array([1, 0, 0, 1, 1, 0], dtype=np.int8), team_models=(UNI_CON, "opr"),
        )  # fmt: skip
        clicks = [Click(imp.impression_id, int(imp.candidate_ids[1]), time=imp.time + 0.5),
                  Click.no_click(imp.impression_id, time=imp.time + 1.0)]  # fmt: skip
        producer.send(settings.impressions_topic, encode_impressions([imp]))
        producer.send(settings.clicks_topic, encode_clicks(clicks))
    producer.flush()


def _join_all(settings: Settings, transport, store) -> ClickJoin:
    join = ClickJoin(settings, JoinOptions(checkpoint_seconds=None, checkpoint_records=7),
                     transport=transport, store=store)  # fmt: skip
    return run_to_end(join, settings)


def test_the_join_reopens_a_refused_challenger_once_a_new_version_learned_twice_as_much() -> None:
    settings, transport, store = _settings(), EmbeddedTransport(), EmbeddedModelStore()
    for seen in (100, 200, 300):
        _save(store, "opr", seen)  # versions 1, 2, 3: v3 learned 300
    _produce(transport, settings, 0, 40, version=3)
    race = _join_all(settings, transport, store).handler.race
    assert race.refusals["opr"]["version"] == 3 and race.refusals["opr"]["learned"] == 300
    published = store.load(INTERLEAVING_RECORD).meta["interleaving"]
    assert refused_challengers(published, UNI_CON) == {"opr"}

    _save(store, "opr", 500)  # v4: a new version, but not twice what v3 had learned
    _produce(transport, settings, 40, 45, version=3)  # in flight when it was refused
    race = _join_all(settings, transport, store).handler.race
    assert "opr" in race.refusals and race.reopened == {}

    _save(store, "opr", 600)  # v5: twice v3's
    _produce(transport, settings, 45, 46, version=3)
    race = _join_all(settings, transport, store).handler.race
    assert "opr" not in race.refusals and race.reopened == {"opr": 1}
    published = store.load(INTERLEAVING_RECORD).meta["interleaving"]
    assert refused_challengers(published, UNI_CON) == frozenset()
    assert published["challengers"]["opr"]["reopened"] == 1


# ------------------------------------------------------------------ drafting
class _Model:
    def __init__(self, name: str) -> None:
        self.name = name
        self.scorer = None


@pytest.mark.parametrize("method", ["team-draft", "multileave"])
def test_refused_challengers_are_not_drafted_and_the_share_gauge_says_so(method: str) -> None:
    interleaver = Interleaver(Settings(interleaving_share=0.5, interleaving_method=method),
                              np.random.default_rng(0))  # fmt: skip
    models = {n: _Model(n) for n in (UNI_CON, "opr", "arow", "pdgd")}
    drafted = [[m.name for m in interleaver.challengers(models, UNI_CON, {"opr"})]
               for _ in range(1500)]  # fmt: skip
    assert not any("opr" in names for names in drafted)
    drafted = drafted[-1000:]  # the gauge's window
    share = {n: sum(n in names for names in drafted) / 1000 for n in ("arow", "pdgd")}
    for name, value in share.items():
        assert metrics.sample_value("rankstream_challenger_impression_share",
                                    {"challenger": name}) == pytest.approx(value)  # fmt: skip
    interleaved = sum(bool(names) for names in drafted) / 1000
    assert 0.45 < interleaved < 0.55  # Binomial(1000, 0.5): > 3 sd either side
    if method == "team-draft":
        assert sum(share.values()) == pytest.approx(interleaved)


def test_models_flag_a_collapsed_model_and_show_its_refusal() -> None:
    from starlette.testclient import TestClient

    from rankstream.ranking.baselines import UniCon
    from rankstream.ranking.scaling import Standardizer
    from rankstream.serve.app import create_app

    store = EmbeddedModelStore()
    rng = np.random.default_rng(3)
    unicon = UniCon(scaler=Standardizer().fit(rng.standard_normal((50, 36))))
    meta, arrays = unicon.to_state()
    for name in (UNI_CON, "opr", "arow"):
        store.save(name, kind="linear", meta=meta, arrays=arrays, offsets={}, expected_version=0)
    store.save(INTERLEAVING_RECORD, kind=INTERLEAVING_KIND,
               meta={"interleaving": _race_refusing().summary()}, arrays={}, offsets={},
               expected_version=0)  # fmt: skip
    with TestClient(create_app(Settings(), store=store, poll_seconds=0.05)) as client:
        listing = client.get("/v1/models").json()
        document = client.get("/openapi.json").json()
    entries = {m["name"]: m for m in listing["models"]}
    assert entries["opr"]["collapsed"] is True and entries["opr"]["interleaving"]["refused"]
    assert entries["arow"]["collapsed"] is False and entries[UNI_CON]["collapsed"] is False
    schema = document["paths"]["/v1/models"]["get"]["responses"]["200"]["content"]
    fields = schema["application/json"]["schema"]["properties"]["models"]["items"]
    assert fields["properties"]["collapsed"]["type"] == "boolean"


def test_by_default_serve_interleaves_a_tenth_once_an_engine_posts_clicks() -> None:
    """Issue 38 item 5: with no setting but the width, a click-posting engine's champion
    rankings are interleaved (RANKSTREAM_INTERLEAVING_SHARE 0.1 by default), an engine that
    has posted no click gets none."""
    from starlette.testclient import TestClient

    from rankstream.ranking.baselines import UniCon
    from rankstream.ranking.scaling import Standardizer
    from rankstream.serve.app import create_app
    from rankstream.stream.embedded import reset_embedded

    reset_embedded()
    settings = Settings(topic_prefix=f"rf-{uuid.uuid4().hex[:8]}")
    assert settings.interleaving_share == 0.1
    store = EmbeddedModelStore()
    rng = np.random.default_rng(4)
    for name in (UNI_CON, "opr"):
        unicon = UniCon(scaler=Standardizer().fit(rng.standard_normal((50, 36))))
        meta, arrays = unicon.to_state()
        store.save(name, kind="linear", meta=meta, arrays=arrays, offsets={}, expected_version=0)
    body = {"candidate_ids": list(range(20)), "phi": rng.standard_normal((20, 36)).tolist()}
    before = metrics.sample_value("rankstream_rankings_interleaved_total")
    with TestClient(create_app(settings, store=store, poll_seconds=0.05)) as client:
        first = [client.post("/v1/rank", json=body).json() for _ in range(100)]
        assert metrics.sample_value("rankstream_rankings_interleaved_total") == before
        session = {"impression_id": first[0]["impression_id"], "clicks": []}
        assert client.post("/v1/clicks", json={"impressions": [session]}).status_code == 200
        for _ in range(400):
            client.post("/v1/rank", json=body)
    interleaved = metrics.sample_value("rankstream_rankings_interleaved_total") - before
    assert 10 <= interleaved <= 80  # Binomial(400, 0.1): 40 +- 6; a failure is < 1e-6
