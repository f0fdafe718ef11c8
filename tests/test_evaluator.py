"""The evaluator scores each judged query with exactly the stamped model versions."""

from __future__ import annotations

import numpy as np
import pytest

from rankstream.ranking.baselines import UNI_CON, UniCon
from rankstream.ranking.metrics import average_precision, ndcg_at_k
from rankstream.ranking.online import OnlineRanker
from rankstream.ranking.scaling import Standardizer
from rankstream.ranking.sequential import PairedTest
from rankstream.selection.judged_race import ChampionPolicy
from rankstream.selection.scoring import EVALUATOR_RECORD
from rankstream.selection.what_serves import CHAMPION, ServingModel
from rankstream.stream.connect import open_store, open_transport
from rankstream.stream.embedded_store import EmbeddedModelStore
from rankstream.stream.schema import UNJUDGED, JudgedQuery, decode_dead_letter, encode_query
from rankstream.stream.settings import Settings
from rankstream.telemetry.prometheus_metrics import sample_value
from rankstream.workers.evaluator import Evaluator, EvaluatorOptions

RNG = np.random.default_rng(11)
SCALER = Standardizer().fit(RNG.random((500, 36)))


def _save(store, name, model, kind="online") -> int:
    meta, arrays = model.to_state()
    return store.save(
        name,
        kind=kind,
        meta=meta,
        arrays=arrays,
        offsets={},
        expected_version=store.latest_versions().get(name, 0),
    )


def _query(seq: int, versions: dict[str, int], k: int = 120) -> JudgedQuery:
    """Candidates whose graded relevance follows phi column 0 (plus noise)."""
    phi = RNG.random((k, 36)).astype(np.float32)
    signal = phi[:, 0] + 0.1 * RNG.standard_normal(k)
    relevance = np.digitize(signal, [0.6, 0.85]).astype(np.int8)
    return JudgedQuery(
        seq=seq,
        query_id=seq,
        candidate_ids=np.arange(k, dtype=np.int64),
        phi=phi,
        relevance=relevance,
        served_by=UNI_CON,
        served_version=1,
        model_versions=versions,
        judged=50,
    )


def _column_model(column: int, sign: float = 1.0) -> OnlineRanker:
    weights = np.zeros(36)
    weights[column] = sign
    return OnlineRanker(algo="opar1", scaler=SCALER, warm_start=weights)


def _evaluator(store) -> Evaluator:
    """An evaluator for direct `evaluate` calls (they never touch the transport)."""
    return Evaluator(
        Settings(topic_prefix="unused"),
        EvaluatorOptions(window=50),
        store=store,
        transport=object(),
    )


def test_scores_use_the_stamped_version_never_a_newer_one() -> None:
    store = EmbeddedModelStore(keep_versions=2)
    v1, v2 = _column_model(0), _column_model(0, -1.0)
    _save(store, "opar1", v1)
    _save(store, "opar1", v2)
    evaluator = _evaluator(store)
    query = _query(0, {"opar1": 1})
    result = evaluator.evaluate(query)
    expected = ndcg_at_k(v1.score(query.phi), query.relevance, 50)
    assert result.ndcg == {"opar1": expected}
    assert result.ap == {"opar1": average_precision(v1.score(query.phi), query.relevance)}
    assert expected != ndcg_at_k(v2.score(query.phi), query.relevance, 50)
    newer = evaluator.evaluate(_query(1, {"opar1": 2}))
    assert newer.ndcg["opar1"] < 0.5 < expected  # v2 ranks backwards


def test_a_trimmed_version_is_skipped_and_counted_not_replaced() -> None:
    store = EmbeddedModelStore(keep_versions=1)
    _save(store, "opr", _column_model(0))
    _save(store, "opr", _column_model(1))
    _save(store, UNI_CON, UniCon(scaler=SCALER), kind="linear")
    evaluator = _evaluator(store)
    before = sample_value("rankstream_evaluator_skipped_total", {"reason": "missing_version"})
    result = evaluator.evaluate(_query(0, {"opr": 1, UNI_CON: 1}))
    assert result.skipped == {"opr": "missing_version"} and set(result.ndcg) == {UNI_CON}
    assert evaluator.rolling.counts() == {UNI_CON: 1}
    after = sample_value("rankstream_evaluator_skipped_total", {"reason": "missing_version"})
    assert after == before + 1


def test_champion_switches_to_a_clearly_better_model_and_is_published(embedded_settings) -> None:
    store = open_store(embedded_settings)
    transport = open_transport(embedded_settings)
    _save(store, UNI_CON, UniCon(scaler=SCALER), kind="linear")
    _save(store, "good", _column_model(0))
    producer = transport.producer()
    for seq in range(30):
        producer.send(
            embedded_settings.queries_topic, encode_query(_query(seq, {UNI_CON: 1, "good": 1}))
        )
    producer.send(embedded_settings.queries_topic, b"not arrow at all")
    producer.flush()
    options = EvaluatorOptions(
        window=20,
        exit_when_idle=0.3,
        poll_ms=20,
        policy=ChampionPolicy(test=PairedTest(min_pairs=10)),
    )
    switches = sample_value("rankstream_champion_switches_total")
    evaluator = Evaluator(embedded_settings, options, transport=transport, store=store)
    assert evaluator.run() == 0
    assert evaluator.queries_evaluated == 30 and evaluator.dead_letters == 1
    assert evaluator.champion == "good"
    assert sample_value("rankstream_champion_switches_total") == switches + 1
    good = sample_value("rankstream_ndcg_at_50", {"model": "good"})
    unicon = sample_value("rankstream_ndcg_at_50", {"model": UNI_CON})
    assert good > unicon + 0.2
    assert good == pytest.approx(np.mean([h.ndcg["good"] for h in list(evaluator.history)[-20:]]))
    record = store.load(EVALUATOR_RECORD)
    assert record.meta["champion"] == "good" and record.meta["window"] == 20
    assert record.meta["rolling_ndcg"]["good"] == pytest.approx(good)
    assert record.offsets[embedded_settings.queries_topic] == {0: 31}
    assert ServingModel(store, CHAMPION).refresh().name == "good"
    consumer = transport.consumer()
    consumer.assign([(embedded_settings.dead_letter_topic, 0)])
    letters = [decode_dead_letter(m.value) for m in consumer.poll(timeout_ms=100)]
    assert [(d.reason, d.source_offset) for d in letters] == [("bad_bytes", 30)]

    # a restarted evaluator restores the windows and resumes after the last query
    producer.send(embedded_settings.queries_topic, encode_query(_query(99, {UNI_CON: 1})))
    restarted = Evaluator(embedded_settings, options, transport=transport, store=store)
    restarted.run()
    assert restarted.queries_evaluated == 31 and restarted.champion == "good"
    assert restarted.rolling.counts() == {UNI_CON: 20, "good": 20}
    assert list(restarted.rolling.ndcg["good"]) == list(evaluator.rolling.ndcg["good"])


class _BrokenScorer:
    """Stands in for a scorer rebuilt from a corrupt stored model: it raises on use."""

    def score(self, phi: np.ndarray) -> np.ndarray:
        raise IndexError("weights have 3 entries, phi has 36 columns")


def test_a_query_that_cannot_be_evaluated_is_dead_lettered_and_the_evaluator_goes_on(
    embedded_settings,
) -> None:
    store = open_store(embedded_settings)
    transport = open_transport(embedded_settings)
    _save(store, "good", _column_model(0))
    _save(store, "broken", _column_model(1))
    producer = transport.producer()
    for seq, versions in enumerate([{"good": 1}, {"good": 1, "broken": 1}, {"good": 1}]):
        producer.send(embedded_settings.queries_topic, encode_query(_query(seq, versions)))
    producer.flush()
    options = EvaluatorOptions(window=20, exit_when_idle=0.3, poll_ms=20)
    evaluator = Evaluator(embedded_settings, options, transport=transport, store=store)
    real_get = evaluator.cache.get
    evaluator.cache.get = lambda model, version: (  # type: ignore[method-assign]
        _BrokenScorer() if model == "broken" else real_get(model, version)
    )
    failed = sample_value("rankstream_dead_letters_total", {"reason": "evaluation_failed"})
    assert evaluator.run() == 0
    assert evaluator.queries_evaluated == 2 and evaluator.dead_letters == 1
    assert evaluator.rolling.counts() == {"good": 2}  # the failed query left no partial score
    assert evaluator.offsets == {0: 3}
    after = sample_value("rankstream_dead_letters_total", {"reason": "evaluation_failed"})
    assert after == failed + 1
    consumer = transport.consumer()
    consumer.assign([(embedded_settings.dead_letter_topic, 0)])
    letters = [decode_dead_letter(m.value) for m in consumer.poll(timeout_ms=100)]
    assert [(d.reason, d.source_offset) for d in letters] == [("evaluation_failed", 1)]
    assert "IndexError" in letters[0].detail


def test_partial_judgments_are_scored_over_the_graded_candidates_only() -> None:
    """NDCG@50 and AP of a partially judged query rank the graded candidates among
    themselves; ungraded ones cannot move them; a query with none is counted, not scored."""
    store = EmbeddedModelStore()
    v = _save(store, "good", _column_model(0))
    evaluator = _evaluator(store)
    query = _query(0, {"good": v}, k=200)
    graded = np.zeros(200, bool)
    graded[::3] = True  # a third of the candidates judged
    partial = JudgedQuery(
        **{
            **query.__dict__,
            "relevance": np.where(graded, query.relevance, UNJUDGED).astype(np.int8),
            "judged": graded,
        }
    )
    before = sample_value("rankstream_judged_queries_total", {"judgments": "partial"})
    result = evaluator.evaluate(partial)
    scores = store.load("good")  # the model's own scores, restricted by hand
    model = OnlineRanker.from_state(scores.meta, scores.arrays)
    own = model.score(query.phi)[graded]
    assert result.ndcg["good"] == pytest.approx(ndcg_at_k(own, query.relevance[graded], 50))
    assert result.ap["good"] == pytest.approx(average_precision(own, query.relevance[graded]))
    assert result.ndcg["good"] != pytest.approx(ndcg_at_k(model.score(query.phi), query.relevance))
    assert sample_value("rankstream_judged_queries_total", {"judgments": "partial"}) == before + 1

    nothing = JudgedQuery(
        **{**query.__dict__, "relevance": np.full(200, UNJUDGED, np.int8), "judged": 0}
    )
    result = evaluator.evaluate(nothing)
    assert result.ndcg == {} and result.skipped == {"good": "unjudged"}
    single = JudgedQuery(**{**query.__dict__, "relevance": np.ones(200, np.int8)})
    assert evaluator.evaluate(single).ndcg == {"good": 1.0}  # any order is ideal
    summary = evaluator.summary()["judgments"]
    assert summary == {"all": 1, "partial": 1, "none": 1, "single_grade": 1}
    assert evaluator.rolling.counts() == {"good": 2}  # the unjudged query left no value


def test_a_champion_gone_from_the_store_falls_back_to_unicon_and_the_races_restart() -> None:
    """Serving falls back to Uni-Con when the champion leaves the store; the race must
    too, or its races would wait forever for pairs against a model no query is scored
    with. A champion merely not scored on one query (a trimmed version) stays."""
    store = EmbeddedModelStore()
    _save(store, UNI_CON, UniCon(scaler=SCALER), kind="linear")
    _save(store, "good", _column_model(0))
    _save(store, "other", _column_model(1))
    stamps = {UNI_CON: 1, "good": 1, "other": 1}
    evaluator = Evaluator(
        Settings(topic_prefix="unused"),
        EvaluatorOptions(window=50, policy=ChampionPolicy(test=PairedTest(min_pairs=5))),
        store=store,
        transport=object(),
    )
    for seq in range(30):
        evaluator.evaluate(_query(seq, stamps))
        if evaluator.champion == "good":
            break
    assert evaluator.champion == "good"
    evaluator.evaluate(_query(40, stamps))
    evaluator.evaluate(_query(41, {**stamps, "good": 7}))  # no version 7: not scored
    assert evaluator.champion == "good" and evaluator.handler.race.races[UNI_CON].n == 1
    switches = sample_value("rankstream_champion_switches_total")
    assert store.delete("good")
    evaluator.evaluate(_query(42, {UNI_CON: 1, "other": 1}))
    assert evaluator.champion == UNI_CON
    assert {m: s.n for m, s in evaluator.handler.race.races.items()} == {"other": 1}  # restarted
    assert sample_value("rankstream_champion_switches_total") == switches + 1
    assert sample_value("rankstream_champion_race_paired_queries", {"model": "other"}) == 1
    assert ServingModel(store, CHAMPION).refresh().name == UNI_CON
