"""The batch worker on real Kafka and Redis: a stopped/crashed worker resumes exactly, and
the models it publishes rank held-out queries from the store."""

from __future__ import annotations

from test_batch_models import simulated_feedback
from test_worker_batch import assert_same_reservoir, produce, reference_reservoir

from rankstream.ranking.batch_models import RankMKLParams
from rankstream.ranking.reservoir import TripletReservoir
from rankstream.selection.scoring import ScorerCache
from rankstream.stream.connect import open_store
from rankstream.workers.batch_worker import RESERVOIR_NAME, BatchOptions, BatchWorker
from rankstream.workers.runtime import EXIT_OK


def test_reservoir_survives_restarts_and_models_rank_from_redis(service_settings):
    feedback = simulated_feedback(n_queries=20, n_held_out=8)
    n = produce(service_settings, feedback)
    options = BatchOptions(
        reservoir=1500,
        seed=9,
        max_poll_records=3,
        refit_records=n // 5,
        refit_seconds=3600.0,
        rankmkl=RankMKLParams(max_pairs=300),
    )

    first = BatchWorker(service_settings, options)  # stopped cleanly part-way
    assert first.run(until=lambda w: w.counters.messages >= 6) == EXIT_OK
    second = BatchWorker(service_settings, options)  # persists once more, then "crashes"
    second.start()
    assert second.reservoir.n_seen == first.reservoir.n_seen > 0
    while second.counters.messages < 4:
        second.process(second.poll())
    assert second.persist()
    while second.process(second.poll()) == 0:
        pass
    second.close()

    last = BatchWorker(
        service_settings, BatchOptions(**{**options.__dict__, "exit_when_idle": 2.0})
    )
    assert last.run() == EXIT_OK
    expected = reference_reservoir(feedback, 1500, seed=9)
    assert_same_reservoir(last.reservoir, expected)
    store = open_store(service_settings)
    stored = store.load(RESERVOIR_NAME)
    assert_same_reservoir(TripletReservoir.from_state(stored.meta, stored.arrays), expected)
    assert stored.offsets[service_settings.triplets_topic] == {0: len(feedback.triplets)}

    cache = ScorerCache(store)
    for name in ("cmds_dml", "rankmkl"):
        version = store.latest_versions()[name]
        assert version >= 1
        scorer = cache.get(name, version)
        assert feedback.mean_ndcg(scorer.score) > feedback.random_ndcg() + 0.2
