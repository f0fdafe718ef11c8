"""The batch worker on the embedded transport and store: exact resume, refits, fencing."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from test_batch_models import Feedback, simulated_feedback

from rankstream.cli import main as cli_main
from rankstream.ranking.baselines import UniCon
from rankstream.ranking.batch_models import RankMKLParams
from rankstream.ranking.reservoir import Reservoir, TripletReservoir
from rankstream.selection.scoring import ScorerCache
from rankstream.stream.connect import open_store, open_transport
from rankstream.stream.schema import encode_triplets, triplet_key
from rankstream.stream.settings import Settings
from rankstream.stream.store import WrongWidthError
from rankstream.telemetry.prometheus_metrics import sample_value
from rankstream.workers.batch_worker import (
    RESERVOIR_NAME,
    BatchOptions,
    BatchWorker,
)
from rankstream.workers.runtime import EXIT_FENCED, EXIT_OK


@pytest.fixture(scope="module")
def feedback() -> Feedback:
    return simulated_feedback(n_queries=24, n_held_out=8)


def produce(settings: Settings, feedback: Feedback, junk_at: int | None = None) -> int:
    """One message per judged query (key = query id), optionally one undecodable message."""
    transport = open_transport(settings)
    try:
        transport.ensure_topics({settings.triplets_topic: 1})
        producer = transport.producer()
        try:
            for i, t in enumerate(feedback.triplets):
                if i == junk_at:
                    producer.send(settings.triplets_topic, b"not arrow", key=b"junk")
                value = encode_triplets(t)
                producer.send(settings.triplets_topic, value, key=triplet_key(int(t.query_id[0])))
            producer.flush()
        finally:
            producer.close()  # a Kafka client left open keeps its IO thread running
    finally:
        transport.close()
    return sum(len(t) for t in feedback.triplets)


PAIR_COLUMNS = ("query_id", "p1_id", "p2_id", "rel1", "rel2", "phi1", "phi2")


def reference_reservoir(feedback: Feedback, capacity: int, seed: int) -> Reservoir:
    """What an uninterrupted worker must hold: Algorithm R over every triplet in log
    order, written per row in the pair layout (the batch worker's old state)."""
    reservoir = Reservoir(capacity, seed=seed)
    for t in feedback.triplets:
        reservoir.add_many(*(getattr(t, name) for name in PAIR_COLUMNS))
    return reservoir


def assert_same_reservoir(a: TripletReservoir, b: Reservoir) -> None:
    """The normalized reservoir holds exactly the per-row reference's triplets."""
    assert (a.n_seen, a.size) == (b.n_seen, b.size)
    sample = a.sample()
    for name, expected in zip(PAIR_COLUMNS, b.columns, strict=True):
        np.testing.assert_array_equal(getattr(sample, name), expected)


def test_crash_and_restart_ends_with_the_uninterrupted_reservoir(embedded_settings, feedback):
    produce(embedded_settings, feedback, junk_at=5)
    options = BatchOptions(
        reservoir=1500,
        seed=4,
        models=("rankmkl",),
        max_poll_records=4,
        refit_records=10**9,
        refit_seconds=3600.0,
    )
    first = BatchWorker(embedded_settings, options)
    assert first.run(until=lambda w: w.counters.messages >= 8) == EXIT_OK  # clean stop persists
    assert first.counters.skipped_messages == 1
    second = BatchWorker(embedded_settings, options)
    second.start()
    assert second.handler.reservoir_version == first.handler.reservoir_version
    assert second.reservoir.n_seen == first.reservoir.n_seen
    while second.counters.messages < 8:
        second.process(second.poll())
    second.persist()
    assert second.process(second.poll()) > 0  # ... then crashes: these are never persisted
    second.close()

    third = BatchWorker(
        embedded_settings, BatchOptions(**{**options.__dict__, "exit_when_idle": 0.5})
    )
    assert third.run() == EXIT_OK
    assert third.counters.skipped_messages == 0  # the junk was before its stored offsets
    stored = open_store(embedded_settings).load(RESERVOIR_NAME)
    assert stored.kind == "reservoir" and stored.offsets[embedded_settings.triplets_topic] == {
        0: len(feedback.triplets) + 1
    }
    expected = reference_reservoir(feedback, 1500, seed=4)
    assert_same_reservoir(third.reservoir, expected)
    assert_same_reservoir(TripletReservoir.from_state(stored.meta, stored.arrays), expected)
    assert stored.meta["phi_dim"] == 36 and len(stored.arrays["phi"]) < 2 * third.reservoir.size


def test_a_reservoir_stored_per_row_is_continued_and_one_of_another_width_refused(
    embedded_settings, feedback
):
    """Upgrading: the pair-layout state an older batch worker saved is read and continued
    exactly; a deployment of another width refuses it at load."""
    produce(embedded_settings, feedback)
    half = len(feedback.triplets) // 2
    old = Reservoir(700, seed=2)
    for t in feedback.triplets[:half]:
        old.add_many(*(getattr(t, name) for name in PAIR_COLUMNS))
    meta, arrays = old.to_state()
    topic = embedded_settings.triplets_topic
    open_store(embedded_settings).save(
        RESERVOIR_NAME, kind="reservoir", meta=meta, arrays=arrays,
        offsets={topic: {0: half}}, expected_version=0,
    )  # fmt: skip
    options = BatchOptions(reservoir=700, seed=2, models=("rankmkl",), exit_when_idle=0.5)
    narrow = BatchWorker(dataclasses.replace(embedded_settings, phi_dim=8), options)
    with pytest.raises(WrongWidthError, match="36-wide"):
        narrow.start()
    worker = BatchWorker(embedded_settings, options)
    assert worker.run() == EXIT_OK
    assert_same_reservoir(worker.reservoir, reference_reservoir(feedback, 700, seed=2))
    assert open_store(embedded_settings).load(RESERVOIR_NAME).meta["kind"] == "triplet_reservoir"


def test_refit_publishes_scorable_models_with_metrics(embedded_settings, feedback):
    n = produce(embedded_settings, feedback)
    before = sample_value("rankstream_refit_seconds_count", {"model": "rankmkl"})
    options = BatchOptions(
        reservoir=2000,
        refit_records=n // 2,
        refit_seconds=3600.0,
        exit_when_idle=0.5,
        rankmkl=RankMKLParams(max_pairs=300),
    )
    worker = BatchWorker(embedded_settings, options)
    assert worker.run() == EXIT_OK
    store = open_store(embedded_settings)
    versions = store.latest_versions()
    assert versions["cmds_dml"] == versions["rankmkl"] == worker.counters.refits >= 1
    assert sample_value("rankstream_refit_seconds_count", {"model": "rankmkl"}) == (
        before + worker.counters.refits
    )
    assert sample_value("rankstream_model_version", {"model": "cmds_dml"}) == versions["cmds_dml"]
    cache = ScorerCache(store)
    ndcg = {}
    for name in ("cmds_dml", "rankmkl"):
        stored = store.load(name)
        assert stored.kind == name and stored.meta["reservoir_n_seen"] <= n
        assert stored.offsets[embedded_settings.triplets_topic][0] <= len(feedback.triplets)
        scorer = cache.get(name, versions[name])
        # both learned from the triplets; Uni-Con ranks the same held-out queries with
        # the reservoir's scaling. cMDS-DML at its former fixed setting (s = 3 from the
        # first phi columns, K = 15, 300 iterations) scored 0.2 below Uni-Con here.
        ndcg[name] = feedback.mean_ndcg(scorer.score)
    uni_con = feedback.mean_ndcg(UniCon().fit(feedback.sample().phi).score)
    # here (4,000 images, 24 queries): cMDS-DML 0.852, RankMKL 0.862, Uni-Con 0.867
    assert ndcg["rankmkl"] > uni_con - 0.05 and ndcg["cmds_dml"] > uni_con - 0.05
    # nothing new arrived: a time-triggered refit would republish the same sample
    assert not worker.refit_due()


def test_a_stale_worker_is_fenced_and_stops(embedded_settings, feedback):
    produce(embedded_settings, feedback)
    options = BatchOptions(
        reservoir=500,
        models=("rankmkl",),
        refit_seconds=3600.0,
        refit_records=10**9,
        max_poll_records=2,
    )
    stale = BatchWorker(embedded_settings, options)
    stale.start()
    stale.process(stale.poll())
    newer = BatchWorker(embedded_settings, options)
    newer.start()
    newer.process(newer.poll())
    assert newer.persist()
    stale.process(stale.poll())
    assert not stale.persist() and stale.fenced
    assert stale.run() == EXIT_FENCED
    assert open_store(embedded_settings).load(RESERVOIR_NAME).meta["writer"] == newer.writer


def test_options_and_cli_reject_bad_values(capsys) -> None:
    with pytest.raises(ValueError, match="models"):
        BatchOptions(models=("ldmlr",))
    with pytest.raises(ValueError, match="reservoir"):
        BatchOptions(reservoir=0)
    assert cli_main(["worker", "batch", "--models", "cmds_dml,nope"]) == 2
    assert "nope" in capsys.readouterr().err
