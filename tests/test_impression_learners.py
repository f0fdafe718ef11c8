"""PDGD as a declared learner that learns from impressions and clicks: its declaration in
`ranking.learners` (kept out of the triplet learners' lists), its stored state, the
click join teaching it exactly once and publishing it, and serve showing Plackett-Luce
samples of it (embedded transport and store)."""

from __future__ import annotations

import dataclasses
import uuid

import numpy as np
import pytest

from rankstream.ranking import PDGD_LEARNING_RATE, learners
from rankstream.ranking.online import OnlineRanker
from rankstream.ranking.pdgd import PDGD, plackett_luce_intervention
from rankstream.ranking.scaling import Standardizer
from rankstream.selection.scoring import PLACKETT_LUCE_KIND, scorer_for
from rankstream.stream.embedded_store import EmbeddedModelStore
from rankstream.stream.settings import Settings
from rankstream.stream.store import WIDTH_KEY, StoredModel
from rankstream.workers.click_join import JoinOptions
from rankstream.workers.options import to_argv
from tests.test_click_join import _run, _send, _settings, _stream

D = 4


# ------------------------------------------------------------------ the declaration
def test_pdgd_is_declared_with_the_learners_but_learns_from_impressions() -> None:
    spec = learners.learner("pdgd")
    assert spec.learns_from == "impressions" and spec.label == "PDGD"
    assert learners.impression_learners() == ("pdgd",)
    assert "pdgd" not in learners.names() and "pdgd" not in learners.grids()
    assert "learning_rate" not in learners.HYPERPARAMETERS  # not an online worker option
    assert all(learners.learner(n).learns_from == "triplets" for n in learners.names())
    with pytest.raises(ValueError, match="impressions and clicks"):
        learners.check_names(["opar1", "pdgd"])
    with pytest.raises(ValueError, match="impressions and clicks"):
        OnlineRanker(algo="pdgd")
    with pytest.raises(ValueError, match="triplets"):
        JoinOptions(learn=("opar1",))
    assert JoinOptions().taught == ("pdgd",)
    for nothing in ((), ("",), ("none",)):
        options = JoinOptions(learn=nothing)
        assert options.taught == () and options.learn == ("none",)
        assert _parsed(to_argv(options)).taught == ()  # the command line round trip


def _parsed(argv: list[str]) -> JoinOptions:
    import argparse

    from rankstream.workers.options import add_arguments, from_arguments

    parser = argparse.ArgumentParser()
    add_arguments(parser, JoinOptions)
    return from_arguments(JoinOptions, parser.parse_args(argv))


def test_an_impression_model_takes_its_own_hyper_parameters_checked() -> None:
    model = learners.impression_model("pdgd", {"learning_rate": 0.3})
    assert isinstance(model, PDGD) and model.learning_rate == 0.3
    assert learners.impression_model("pdgd").learning_rate == PDGD_LEARNING_RATE == 0.02  # declared
    with pytest.raises(ValueError, match="not \\['C'\\]"):
        learners.impression_model("pdgd", {"C": 1.0})
    with pytest.raises(ValueError, match="finite and > 0"):
        learners.impression_model("pdgd", {"learning_rate": float("nan")})
    with pytest.raises(ValueError, match="triplets"):
        learners.impression_model("opar1")


def test_the_stored_state_rebuilds_the_same_model() -> None:
    rng = np.random.default_rng(0)
    phi = rng.standard_normal((30, D))
    scaler = Standardizer().fit(phi)
    model = PDGD(0.2, scaler, np.ones(D))
    for _ in range(5):
        ranking = rng.permutation(30)[:10]
        model.learn(phi, ranking, rng.random(10) < 0.3)
    meta, arrays = model.to_state()
    again = learners.impression_model_from_state(meta, arrays)
    assert again.n_updates == model.n_updates and again.learning_rate == 0.2
    np.testing.assert_array_equal(again.weights, model.weights)
    np.testing.assert_array_equal(again.score(phi), model.score(phi))
    with pytest.raises(ValueError, match="impression learner"):
        learners.impression_model_from_state({"kind": "online_ranker"}, {})


# ------------------------------------------------------------------ the click join
def test_the_join_teaches_pdgd_every_session_and_publishes_it() -> None:
    settings, store = _settings(), EmbeddedModelStore()
    from rankstream.stream.embedded import EmbeddedTransport

    transport = EmbeddedTransport()
    _send(transport, settings, _stream(n=40, seed=1))
    join = _run(settings, transport, store, JoinOptions())
    counters = join.handler.counters
    assert counters.learned == counters.sessions == 40 and counters.refused == 0
    published = store.load("pdgd")
    assert published is not None and published.kind == PLACKETT_LUCE_KIND
    assert published.meta[WIDTH_KEY] == D
    model = join.handler.learned["pdgd"]
    assert published.meta["n_updates"] == model.n_updates > 0
    np.testing.assert_array_equal(published.arrays["weights"], model.weights)
    assert not np.allclose(model.weights, np.ones(D))  # it moved from Uni-Con's start
    # the checkpoint holds it: a join loaded from the store has the same model
    again = type(join)(settings, JoinOptions(), transport=transport, store=store)
    again.handler.load(again)
    np.testing.assert_array_equal(again.handler.learned["pdgd"].weights, model.weights)


def test_a_join_told_to_learn_nothing_publishes_no_model() -> None:
    from rankstream.stream.embedded import EmbeddedTransport

    settings, store, transport = _settings(), EmbeddedModelStore(), EmbeddedTransport()
    _send(transport, settings, _stream(n=10, seed=2))
    join = _run(settings, transport, store, JoinOptions(learn=("none",)))
    assert join.handler.counters.sessions == 10 and join.handler.counters.learned == 0
    assert store.load("pdgd") is None


def test_pdgd_starts_from_the_stored_uni_con() -> None:
    from rankstream.ranking.baselines import UNI_CON, UniCon
    from rankstream.stream.embedded import EmbeddedTransport

    settings, store, transport = _settings(), EmbeddedModelStore(), EmbeddedTransport()
    scaler = Standardizer().fit(np.random.default_rng(5).standard_normal((50, D)) * 3 + 1)
    meta, arrays = UniCon(scaler=scaler).to_state()
    store.save(UNI_CON, kind="linear", meta={**meta, WIDTH_KEY: D}, arrays=arrays, offsets={},
               expected_version=0)  # fmt: skip
    _send(transport, settings, _stream(n=1, seed=3))
    join = _run(settings, transport, store, JoinOptions())
    model = join.handler.learned["pdgd"]
    np.testing.assert_array_equal(model.scaler.mean_, scaler.mean_)
    np.testing.assert_array_equal(model.scaler.std_, scaler.std_)


# ------------------------------------------------------------------ serving
def _stored_pdgd(store: EmbeddedModelStore, weights: np.ndarray, width: int) -> None:
    model = PDGD(0.1, None, weights)
    meta, arrays = model.to_state()
    store.save("pdgd", kind=PLACKETT_LUCE_KIND, meta={**meta, WIDTH_KEY: width},
               arrays=arrays, offsets={}, expected_version=0)  # fmt: skip


def test_its_scorer_scores_w_phi_and_says_plackett_luce() -> None:
    store = EmbeddedModelStore()
    _stored_pdgd(store, np.array([1.0, -2.0, 0.5, 0.0]), D)
    stored = store.load("pdgd")
    assert isinstance(stored, StoredModel)
    scorer = scorer_for(stored, D)
    phi = np.random.default_rng(1).standard_normal((7, D)).astype(np.float32)
    assert scorer.plackett_luce is True  # type: ignore[attr-defined]
    np.testing.assert_allclose(scorer.score(phi), phi.astype(np.float64) @ [1.0, -2.0, 0.5, 0.0])


def test_a_sampled_ranking_logs_the_probability_of_its_first_ten() -> None:
    # e^s = 1, 2, 3: the order 2, 1, 0 has probability 3/6 * 2/3 * 1/1
    intervention, p = plackett_luce_intervention(np.log([1.0, 2.0, 3.0]), np.array([2, 1, 0]))
    assert intervention == "plackett-luce:1-3" and p == pytest.approx(1 / 3)
    rng = np.random.default_rng(3)
    scores = rng.standard_normal(300) * 5
    order = rng.permutation(300)
    intervention, p = plackett_luce_intervention(scores, order)
    e, left, expected = np.exp(scores), set(range(300)), 1.0
    for doc in order[:10]:
        expected *= e[doc] / sum(e[d] for d in left)
        left.remove(doc)
    assert intervention == "plackett-luce:1-10" and p == pytest.approx(expected, rel=1e-9)
    _, tiny = plackett_luce_intervention(np.array([0.0, 2000.0]), np.array([0, 1]))
    assert tiny == np.finfo(np.float64).tiny  # underflow floored: still in (0, 1]


def _answers(weights: np.ndarray, n: int) -> tuple[list[dict], np.ndarray, np.ndarray]:
    import time

    from starlette.testclient import TestClient

    from rankstream.serve.app import create_app
    from rankstream.stream.click_schema import decode_impressions
    from rankstream.stream.embedded import embedded_transport, reset_embedded

    reset_embedded()
    settings = Settings(topic_prefix=f"pdgd-{uuid.uuid4().hex[:8]}", intervention_share=0.0)
    settings = dataclasses.replace(settings)
    store = EmbeddedModelStore()
    _stored_pdgd(store, weights, settings.phi_dim)
    rng = np.random.default_rng(0)
    ids = np.arange(500, 512)
    phi = rng.standard_normal((12, settings.phi_dim)).astype(np.float32)
    with TestClient(create_app(settings, store=store, poll_seconds=0.05)) as client:
        body = {"candidate_ids": ids.tolist(), "phi": phi.tolist(), "model": "pdgd"}
        answers = [client.post("/v1/rank", json=body).json() for _ in range(n)]
        consumer, topic = embedded_transport().consumer(None), settings.impressions_topic
        consumer.assign([(topic, 0)])
        consumer.seek_to_beginning(topic, 0)
        logged: dict = {}
        deadline = time.monotonic() + 30  # the writer thread drains its queue: a hang guard
        while len(logged) < n:
            assert time.monotonic() < deadline, f"{len(logged)} of {n} impressions written"
            for m in consumer.poll(timeout_ms=100, max_records=100):
                for imp in decode_impressions(m.value, width=settings.phi_dim).records:
                    logged[imp.impression_id] = imp
    scores = phi.astype(np.float64) @ weights
    for answer in answers:  # each impression: the sample shown and its probability
        imp = logged[answer["impression_id"]]
        assert imp.candidate_ids.tolist() == answer["candidate_ids"]
        order = np.searchsorted(ids, imp.candidate_ids)
        assert (imp.intervention, imp.shown_probability) == pytest.approx(
            plackett_luce_intervention(scores, order)
        )
    return answers, ids, scores


def test_serve_shows_plackett_luce_samples_of_a_pdgd_model() -> None:
    """Near-tied scores: the orders vary from answer to answer, every answer a permutation
    with each candidate's own model score; far-apart scores: the sample is the ranking."""
    dim = Settings().phi_dim
    answers, ids, scores = _answers(np.full(dim, 1e-3), 20)
    orders = {tuple(a["candidate_ids"]) for a in answers}
    assert len(orders) > 10  # 12 near-tied candidates: a repeated order has P ~ 1/12!
    for answer in answers:
        assert answer["model"] == "pdgd"
        assert sorted(answer["candidate_ids"]) == ids.tolist()
        by_id = dict(zip(ids.tolist(), scores.tolist(), strict=True))
        np.testing.assert_allclose(answer["scores"], [by_id[i] for i in answer["candidate_ids"]])
    answers, ids, scores = _answers(np.full(dim, 1e3), 5)
    expected = ids[np.argsort(-scores, kind="stable")].tolist()
    assert all(a["candidate_ids"] == expected for a in answers)


def test_the_interleaver_drafts_a_pdgd_challenger_from_its_samples() -> None:
    """The click race compares what each model would show: a PDGD challenger's ranking in
    the draft is a Plackett-Luce sample (tied scores: it varies), a linear one's is its
    sorted scores (tied: the request's order, so the draft with an identical champion
    ranking is that order every time)."""
    from types import SimpleNamespace

    from rankstream.selection.click_race import Interleaver
    from rankstream.selection.scoring import CheckedScorer

    phi = np.zeros((12, D))
    order = np.arange(12)
    champion = SimpleNamespace(
        name="uni_con", scorer=CheckedScorer("uni_con", 1, lambda p: np.zeros(len(p)), D)
    )
    drafts = {}
    for sampled in (False, True):
        scorer = CheckedScorer("pdgd", 1, lambda p: np.zeros(len(p)), D, plackett_luce=sampled)
        challenger = SimpleNamespace(name="pdgd", scorer=scorer)
        interleaver = Interleaver(Settings(interleaving_share=1.0), np.random.default_rng(0))
        drafts[sampled] = {
            tuple(interleaver.interleave(champion, order, np.zeros(12), [challenger], phi).order)
            for _ in range(20)
        }
    assert drafts[False] == {tuple(range(12))}
    assert len(drafts[True]) > 10
