"""Broker and Redis restarts mid-stream, a Redis that loses its last checkpoint.

Guarantee under test (docs/reference/guarantees.md): a model's offsets are stored in the same
atomic write as the weights that cover them, so whatever checkpoint survives a restart
or a crash is self-consistent; a worker whose in-memory state is ahead of what Redis
kept is fenced on its next save (it never saves on top of an older checkpoint), and the
restart recomputes the rest -> final weights bit-identical to an uninterrupted run.
"""

from __future__ import annotations

import dataclasses

import pytest

from rankstream.harness.chaos import ChaosPlan, forget_latest_checkpoints, run_chaos
from rankstream.harness.generator import TripletGenerator
from rankstream.stream.connect import open_store, open_transport
from rankstream.stream.schema import encode_triplets
from rankstream.stream.settings import Settings
from rankstream.workers.checkpoint import weights_sha256
from rankstream.workers.online_worker import LINEAR_ALGOS, OnlineWorker, WorkerOptions
from rankstream.workers.runtime import EXIT_FENCED

pytestmark = pytest.mark.timeout(400)
OPTIONS = WorkerOptions(
    scaler_rows=500,
    checkpoint_records=1,
    checkpoint_seconds=1000.0,
    exit_when_idle=1.0,
    poll_ms=100,
    max_poll_records=1,
)


def _produce(settings: Settings, blocks: int, seed: int = 3) -> None:
    transport = open_transport(settings)
    transport.ensure_topics({settings.triplets_topic: 1, settings.dead_letter_topic: 1})
    producer = transport.producer()
    for block in TripletGenerator(seed=seed).blocks(blocks * 1000, 1000):
        producer.send(settings.triplets_topic, encode_triplets(block))
    producer.flush()
    producer.close()
    transport.close()


def _consume_until(worker: OnlineWorker, records: int) -> None:
    while worker.counters.records < records:
        worker.process(worker.consumer.poll(timeout_ms=200, max_records=1))  # type: ignore[union-attr]


def test_kafka_and_redis_restarts_and_a_redis_crash_mid_stream(
    services, service_settings: Settings
) -> None:
    plan = ChaosPlan(
        triplets=120_000,
        kills=0,
        seed=2,
        counts={"restart-kafka": 1, "restart-redis": 1, "crash-redis": 1, "lose-checkpoint": 1},
    )
    result = run_chaos(service_settings, plan, manager=services.manager)
    assert result.events == {
        "restart-kafka": 1,
        "restart-redis": 1,
        "crash-redis": 1,
        "lose-checkpoint": 1,
    }
    assert result.events_missed == 0
    assert result.exits.get(str(EXIT_FENCED), 0) >= 1  # the worker ahead of the lost checkpoint
    assert (result.lost, result.duplicated) == (0, 0)
    assert result.identical, result.models


def test_a_worker_ahead_of_a_lost_checkpoint_is_fenced_and_its_successor_recomputes(
    service_settings: Settings,
) -> None:
    """What an AOF that lost its last second looks like to a live worker."""
    _produce(service_settings, 8)
    reference = dataclasses.replace(
        service_settings, topic_prefix=service_settings.topic_prefix + "-ref"
    )
    _produce(reference, 8)
    assert OnlineWorker(reference, OPTIONS).run() == 0
    store = open_store(service_settings)

    worker = OnlineWorker(service_settings, OPTIONS)
    worker.start()
    _consume_until(worker, 4000)
    assert worker.checkpoint()
    _consume_until(worker, 6000)
    assert worker.checkpoint()
    saved = {n: store.load(n).version for n in LINEAR_ALGOS}  # type: ignore[union-attr]
    assert forget_latest_checkpoints(service_settings, list(LINEAR_ALGOS)) == len(LINEAR_ALGOS)
    survived = {n: store.load(n) for n in LINEAR_ALGOS}
    for name, stored in survived.items():  # an older, self-consistent checkpoint
        assert stored is not None and stored.version == saved[name] - 1
        assert stored.meta["triplets_seen"] == 4000
        assert stored.offsets[service_settings.triplets_topic] == {0: 4}

    assert worker.run() == EXIT_FENCED  # its next save names a version Redis lost
    after = {n: store.load(n) for n in LINEAR_ALGOS}
    assert {n: (m.version, m.meta["triplets_seen"]) for n, m in after.items()} == {
        n: (m.version, 4000) for n, m in survived.items()
    }  # nothing saved on top

    assert OnlineWorker(service_settings, OPTIONS).run() == 0  # reloads, re-seeks to 4
    ref_store = open_store(reference)
    for name in LINEAR_ALGOS:
        ours, theirs = store.load(name), ref_store.load(name)
        assert ours.meta["triplets_seen"] == theirs.meta["triplets_seen"] == 8000
        assert weights_sha256(ours.arrays["weights"]) == weights_sha256(theirs.arrays["weights"])


def test_a_clean_redis_restart_keeps_every_checkpoint(services, service_settings: Settings) -> None:
    _produce(service_settings, 3)
    assert OnlineWorker(service_settings, OPTIONS).run() == 0
    store = open_store(service_settings)
    before = {n: store.load(n) for n in LINEAR_ALGOS}
    services.manager.restart("redis")
    after = {n: open_store(service_settings).load(n) for n in LINEAR_ALGOS}
    for name in LINEAR_ALGOS:
        assert after[name].version == before[name].version
        assert after[name].offsets == before[name].offsets
        assert weights_sha256(after[name].arrays["weights"]) == weights_sha256(
            before[name].arrays["weights"]
        )
