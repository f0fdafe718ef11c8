"""The simulated engine's own rankers: their specs, their strength against Uni-Con and
the learners on the same queries, and the simulator's measurement of them."""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest

from rankstream.demo_pipeline import DemoOptions
from rankstream.ranking.baselines import UniCon
from rankstream.ranking.scaling import Standardizer
from rankstream.simulators.collection import build_collection
from rankstream.simulators.engine_rankers import EngineRanker, engine_ranker
from rankstream.simulators.judged_feedback import FeedbackSimulator, served_ndcg
from rankstream.simulators.retrieval import CandidateIndex
from rankstream.workers.simulator import SimulateOptions, Simulation

N_IMAGES = 20_000
QUERIES = 200


@pytest.fixture(scope="module")
def world():
    collection = build_collection(n_images=N_IMAGES, seed=0, progress=False)
    return collection, CandidateIndex.build(collection, seed=0, progress=False)


def test_specs_name_the_rankers_and_bad_ones_are_refused() -> None:
    assert engine_ranker("none") == EngineRanker() and not EngineRanker().enabled
    assert engine_ranker("single-descriptor") == EngineRanker("single-descriptor", column=0)
    assert engine_ranker("single-descriptor:7").column == 7
    assert engine_ranker("grades-noise:1.5").noise == 1.5
    for ranker in (EngineRanker("single-descriptor", 3), EngineRanker("grades-noise", noise=2)):
        assert engine_ranker(ranker.spec) == ranker
    for bad in ("bm25", "none:1", "single-descriptor:x", "single-descriptor:-1",
                "grades-noise:nan", "grades-noise:-0.5", ""):  # fmt: skip
        with pytest.raises(ValueError, match=r"engine ranker|column|noise"):
            engine_ranker(bad)
    with pytest.raises(ValueError, match="phi has 36 columns"):
        engine_ranker("single-descriptor:36").check_width(36)
    with pytest.raises(ValueError, match="engine ranker"):
        SimulateOptions(engine_ranker="best")
    with pytest.raises(ValueError, match="engine ranker"):
        DemoOptions(engine_ranker="grades-noise:x")


def test_grades_noise_draws_its_noise_from_the_generator_given() -> None:
    ranker = engine_ranker("grades-noise:0.5")
    grades = np.array([0, 2, 1, 0])
    a = ranker.scores(np.zeros((4, 2)), grades, np.random.default_rng(3))
    b = ranker.scores(np.zeros((4, 2)), grades, np.random.default_rng(3))
    np.testing.assert_array_equal(a, b)
    assert not np.array_equal(a, grades)  # noisy
    np.testing.assert_array_equal(
        engine_ranker("grades-noise:0").scores(np.zeros((4, 2)), grades, np.random.default_rng(0)),
        grades,
    )
    with pytest.raises(ValueError, match="generator"):
        ranker.scores(np.zeros((4, 2)), grades, None)


def test_single_descriptor_is_below_uni_con_and_grades_noise_above_any_linear_learner(
    world,
) -> None:
    """On the same 200 queries (true NDCG@50 from the collection's grades): every single
    phi column ranks below Uni-Con, and grades plus noise 0.5 ranks above the linear model
    fitted by least squares to those very queries' grades: no learner that learns a
    linear score of phi from feedback can do better than that in-sample fit."""
    collection, index = world
    simulator = FeedbackSimulator(collection, seed=1, index=index)
    unicon = UniCon(scaler=Standardizer().fit(simulator.calibration_phi(20).astype(np.float64)))
    queries = [simulator.next_query() for _ in range(QUERIES)]
    rng = np.random.default_rng(0)

    def mean_ndcg(ranker: EngineRanker) -> float:
        return float(
            np.mean([served_ndcg(q, ranker.scores(q.phi, q.relevance, rng)) for q in queries])
        )

    uni_con = float(np.mean([served_ndcg(q, unicon.score(q.phi)) for q in queries]))
    columns = [mean_ndcg(EngineRanker("single-descriptor", j)) for j in range(36)]
    phi = np.vstack([q.phi for q in queries]).astype(np.float64)
    grades = np.concatenate([q.relevance for q in queries]).astype(np.float64)
    scaler = Standardizer().fit(phi)
    weights = np.linalg.lstsq(
        np.column_stack([scaler.transform(phi), np.ones(len(phi))]), grades, rcond=None
    )[0][:-1]
    fitted_scores = [scaler.transform(q.phi.astype(np.float64)) @ weights for q in queries]
    fitted = float(
        np.mean([served_ndcg(q, s) for q, s in zip(queries, fitted_scores, strict=True)])
    )
    noisy = mean_ndcg(engine_ranker("grades-noise"))
    assert max(columns) < uni_con < fitted < noisy
    assert columns[0] == mean_ndcg(engine_ranker("single-descriptor"))  # the default column


def test_the_simulator_measures_its_engine_and_stays_deterministic(tmp_path, world) -> None:
    from rankstream.stream.settings import Settings

    collection, index = world
    options = SimulateOptions(
        triplets=None, queries=30, seed=2, images=N_IMAGES, calibration_queries=10,
        linger_s=math.inf, engine_ranker="grades-noise:0.5",
    )  # fmt: skip
    summaries, measured = [], []
    for run in range(2):
        settings = Settings(topic_prefix=f"eng{run}{tmp_path.name[-12:]}", data_dir=str(tmp_path))
        simulation = Simulation(settings, options, collection=collection, index=index)
        steps: list = []
        summaries.append(simulation.run(steps.append))
        measured.append([step.engine_ndcg for step in steps])
        simulation.close()
    assert measured[0] == measured[1] and len(measured[0]) == 30
    summary = summaries[0]
    assert summary["engine_ranker"] == "grades-noise:0.5"
    assert summary["engine_ndcg_at_50"] == round(float(np.mean(measured[0])), 4)
    settings = Settings(topic_prefix=f"eng2{tmp_path.name[-12:]}", data_dir=str(tmp_path))
    plain = Simulation(
        settings, dataclasses.replace(options, engine_ranker="none"),
        collection=collection, index=index,
    )  # fmt: skip
    steps = []
    assert "engine_ranker" not in plain.run(steps.append)
    assert all(step.engine_ndcg is None for step in steps)
    plain.close()


# -- the simulated engine on the wire: its scores with every query, as an engine sends them --

CLICKS = SimulateOptions(
    triplets=None, queries=16, seed=3, images=N_IMAGES, calibration_queries=10,
    linger_s=math.inf, feedback="clicks:perfect", engine_ranker="single-descriptor:2",
)  # fmt: skip


def _impressions(settings):
    from rankstream.stream.click_schema import decode_impressions
    from rankstream.stream.connect import open_transport

    consumer = open_transport(settings).consumer()
    consumer.assign([(settings.impressions_topic, 0)])
    found = []
    while batch := consumer.poll(timeout_ms=50, max_records=1000):
        found += [imp for m in batch for imp in decode_impressions(m.value).records]
    return found


def _engine_order(query, column: int) -> np.ndarray:
    return np.argsort(-query.phi[:, column].astype(np.float64), kind="stable")


def test_the_engine_arrives_as_the_champion_and_its_scores_are_logged_with_what_was_shown(
    embedded_settings, world
) -> None:
    """The first query with engine scores stores the engine and makes it the champion, as
    serve's first such request does; every impression carries the engine's scores of what
    it showed; outside the interleaved share users see the engine's order; interleaved
    lists draft the engine (the incumbent) against the other model."""
    from rankstream.selection.engine_ranking import ENGINE
    from rankstream.selection.judged_race import stored_champion
    from rankstream.stream.connect import open_store

    collection, index = world
    settings = dataclasses.replace(embedded_settings, interleaving_share=0.5)
    simulation = Simulation(settings, CLICKS, collection=collection, index=index)
    simulation.run()
    store = open_store(settings)
    assert store.load(ENGINE).kind == "engine" and stored_champion(store) == ENGINE
    replay = FeedbackSimulator(collection, seed=CLICKS.seed, index=index)
    interleaved = 0
    for impression in _impressions(settings):
        query = replay.next_query()
        scores = query.phi[:, 2].astype(np.float64)
        position = {c: i for i, c in enumerate(query.candidate_ids.tolist())}
        shown = [position[c] for c in impression.candidate_ids.tolist()]
        np.testing.assert_array_equal(impression.engine_scores, scores[shown])
        assert impression.model == ENGINE
        if impression.teams is not None:
            interleaved += 1
            assert impression.team_models == (ENGINE, "uni_con")
        else:
            order = _engine_order(query, 2)[:50]
            np.testing.assert_array_equal(impression.candidate_ids, query.candidate_ids[order])
    assert 0 < interleaved < CLICKS.queries
    simulation.close()


def test_in_shadow_mode_and_under_the_kill_switch_users_see_the_engines_order(
    embedded_settings, world
) -> None:
    """Shadow mode: every impression is the engine's order, nothing interleaved, though
    the interleaving share is 1. The kill switch (the engine pinned) does the same while a
    learned model is the champion."""
    from rankstream.selection.engine_ranking import ENGINE
    from rankstream.selection.judged_race import publish_champion
    from rankstream.selection.pins import pin
    from rankstream.stream.connect import open_store

    collection, index = world
    shadow = dataclasses.replace(embedded_settings, interleaving_share=1.0, shadow=True)
    pinned = dataclasses.replace(
        embedded_settings, interleaving_share=1.0, topic_prefix=embedded_settings.topic_prefix + "k"
    )
    store = open_store(pinned)
    for settings in (shadow, pinned):
        if settings is pinned:  # a learned champion, then the kill switch
            from rankstream.selection.engine_ranking import adopt_engine

            adopt_engine(store, "test")
            publish_champion(store, "uni_con", previous=ENGINE, decided_by="clicks", evidence={})
            pin(store, ENGINE, 1)
        simulation = Simulation(settings, CLICKS, collection=collection, index=index)
        simulation.run()
        replay = FeedbackSimulator(collection, seed=CLICKS.seed, index=index)
        impressions = _impressions(settings)
        assert len(impressions) == CLICKS.queries
        for impression in impressions:
            query = replay.next_query()
            assert impression.model == ENGINE and impression.teams is None
            order = _engine_order(query, 2)[:50]
            np.testing.assert_array_equal(impression.candidate_ids, query.candidate_ids[order])
        simulation.close()


def test_judged_queries_carry_the_engines_scores_in_served_order(embedded_settings, world) -> None:
    from rankstream.stream.connect import open_transport
    from rankstream.stream.schema import decode_query

    collection, index = world
    options = SimulateOptions(
        triplets=None, queries=6, seed=4, images=N_IMAGES, calibration_queries=10,
        linger_s=math.inf, engine_ranker="single-descriptor:5",
    )  # fmt: skip
    simulation = Simulation(embedded_settings, options, collection=collection, index=index)
    simulation.run()
    consumer = open_transport(embedded_settings).consumer()
    consumer.assign([(embedded_settings.queries_topic, 0)])
    queries = [decode_query(m.value) for m in consumer.poll(timeout_ms=50, max_records=100)]
    assert len(queries) == 6
    for judged in queries:
        np.testing.assert_array_equal(judged.engine_scores, judged.phi[:, 5].astype(np.float64))
        assert judged.served_by == "engine"  # the incumbent ranks: its scores fall
        assert (np.diff(judged.engine_scores) <= 0).all()
    simulation.close()


# -- both demos with an engine ranker ------------------------------------------------------


def test_both_demos_race_the_engine_and_report_its_true_ndcg() -> None:
    """The judged demo: the engine arrives as the champion on the first query, serves
    until the judged race moves it, and is scored on every query like any model. The
    click demo: the engine is the incumbent its challengers are interleaved with."""
    from test_click_demo import TINY as CLICKED
    from test_demo import TINY as JUDGED

    from rankstream.click_demo import run_click_demo
    from rankstream.demo_pipeline import run_demo
    from rankstream.selection.engine_ranking import ENGINE

    collection = build_collection(n_images=JUDGED["images"], seed=0, progress=False)
    index = CandidateIndex.build(collection, seed=0, progress=False)
    judged = run_demo(
        DemoOptions(queries=12, refit_every=6, engine_ranker="single-descriptor", **JUDGED),
        collection=collection, index=index, progress=False,
    ).report()  # fmt: skip
    assert judged["engine_ranker"] == "single-descriptor:0"
    assert 0 < judged["engine_ndcg_at_50"] < 1
    assert judged["served_by"].get(ENGINE, 0) >= 1  # the first query: the engine's order
    assert judged["scored_queries"].get(ENGINE, 0) >= 1  # the evaluator scores its order
    clicked = run_click_demo(
        DemoOptions(**{**CLICKED, "queries": 20}, engine_ranker="grades-noise:0.5"),
        collection=collection, index=index, progress=False,
    )  # fmt: skip
    report = clicked.report()
    assert report["engine_ranker"] == "grades-noise:0.5"
    assert report["champions"][0]["champion"] == ENGINE
    assert report["served_by"] == {ENGINE: 20}  # nothing beats grades plus noise in 20
    assert report["engine_ndcg_at_50"] > report["true_ndcg_at_50"]["shown"] - 1e-9
