"""Scale-out on the embedded transport and store: per-partition models and their mix.

Two workers in one group over a 4-partition topic, a join and an abrupt leave (no
final checkpoint, like SIGKILL) and a clean one: every partition model ends
bit-identical to one worker reading the partitions alone; the mix equals its formula.
The Kafka/Redis version with real SIGTERM/SIGKILL is in test_scaleout_services.py.
"""

from __future__ import annotations

import uuid

import numpy as np
import pytest

from rankstream.harness.generator import TripletGenerator
from rankstream.ranking.online import OnlineRanker
from rankstream.ranking.scaling import Standardizer
from rankstream.stream.connect import open_store
from rankstream.stream.embedded import embedded_transport
from rankstream.stream.schema import encode_triplets
from rankstream.stream.settings import Settings
from rankstream.workers.checkpoint import weights_sha256
from rankstream.workers.online_worker import OnlineWorker, WorkerOptions
from rankstream.workers.runtime import EXIT_OK
from rankstream.workers.scaleout import (
    mix_rankers,
    parse_partition_model_name,
    partition_model_name,
    publish_mix,
)

PARTITIONS, BLOCKS_PER_PARTITION, BLOCK = 4, 6, 150
ALGOS = ("opr", "opar1", "ogdr")


def _settings() -> Settings:
    return Settings(topic_prefix=f"test-scaleout-{uuid.uuid4().hex[:10]}")


def _options(**overrides: object) -> WorkerOptions:
    base = {
        "algos": ALGOS,
        "group": "g",
        "per_partition": True,
        "scaler_rows": 300,
        "checkpoint_records": 400,
        "exit_when_idle": 0.3,
        "poll_ms": 20,
        "max_poll_records": 2,
        "partitions": PARTITIONS,
        "mix_seconds": 3600.0,
    }
    base.update(overrides)
    return WorkerOptions(**base)  # type: ignore[arg-type]


def _produce(settings: Settings) -> None:
    """Different seeded blocks into every partition (explicit partitions)."""
    transport = embedded_transport()
    transport.ensure_topics({settings.triplets_topic: PARTITIONS})
    producer = transport.producer()
    blocks = list(TripletGenerator(seed=5).blocks(PARTITIONS * BLOCKS_PER_PARTITION * BLOCK, BLOCK))
    for i, block in enumerate(blocks):
        producer.send(settings.triplets_topic, encode_triplets(block), partition=i % PARTITIONS)


def _partition_models(settings: Settings) -> dict[str, tuple[str, int, dict]]:
    store = open_store(settings)
    out = {}
    for algo in ALGOS:
        for p in range(PARTITIONS):
            stored = store.load(partition_model_name(algo, p))
            assert stored is not None, (algo, p)
            out[stored.name] = (
                weights_sha256(stored.arrays["weights"]),
                stored.meta["triplets_seen"],
                stored.offsets[settings.triplets_topic],
            )
    return out


def _poll_some(worker: OnlineWorker, polls: int) -> None:
    assert worker.consumer is not None
    for _ in range(polls):
        worker.process(worker.consumer.poll(timeout_ms=20, max_records=2))


def test_partition_model_names_round_trip() -> None:
    assert partition_model_name("opar1", 3) == "opar1.p3"
    assert parse_partition_model_name("opar1.p3") == ("opar1", 3)
    assert parse_partition_model_name("opar1") is None
    with pytest.raises(ValueError, match="partition"):
        partition_model_name("opr", -1)


def test_per_partition_needs_a_group() -> None:
    with pytest.raises(ValueError, match="consumer group"):
        WorkerOptions(per_partition=True)


def test_rebalances_keep_every_partition_model_exact_and_the_mix_is_its_formula() -> None:
    reference = _settings()
    _produce(reference)
    assert OnlineWorker(reference, _options(group="solo")).run() == EXIT_OK
    expected = _partition_models(reference)
    total = PARTITIONS * BLOCKS_PER_PARTITION * BLOCK
    assert sum(seen for _, seen, _ in expected.values()) == len(ALGOS) * total

    settings = _settings()
    _produce(settings)
    a = OnlineWorker(settings, _options())
    a.start()
    _poll_some(a, 6)  # a owns all 4 partitions; 12 blocks in, one checkpoint at 400 rows
    assert sorted(a.handler.by_partition) == [0, 1, 2, 3]  # type: ignore[attr-defined]
    a.checkpoint()

    b = OnlineWorker(settings, _options())
    b.start()  # joins: a is revoked (checkpoints) and keeps 0-1, b loads 2-3 from the store
    _poll_some(a, 2)
    _poll_some(b, 2)
    assert (sorted(a.handler.by_partition), sorted(b.handler.by_partition)) == ([0, 1], [2, 3])  # type: ignore[attr-defined]
    _poll_some(a, 3)  # learned past a's last checkpoint, then a dies without saving
    a.consumer.close()  # type: ignore[union-attr]  # leaves the group, like a session timeout

    c = OnlineWorker(settings, _options())
    c.start()  # range assignment over [b, c]: b -> 0-1 (a's checkpoint), c -> 2-3
    _poll_some(b, 2)
    assert b.checkpoint()
    assert b.run() == EXIT_OK  # clean stop: final checkpoint; c takes all four
    assert c.run() == EXIT_OK
    assert _partition_models(settings) == expected

    store = open_store(settings)
    mixed = store.load("opar1")  # c owned partition 0 at its clean stop: it published
    assert mixed is not None and mixed.meta["writer"] == c.writer
    assert mixed.meta["triplets_seen"] == total
    assert publish_mix(store, settings.triplets_topic, "opar1", range(PARTITIONS), "t") is None
    inputs = [store.load(partition_model_name("opar1", p)) for p in range(PARTITIONS)]
    n = np.array([m.meta["triplets_seen"] for m in inputs], dtype=float)  # type: ignore[union-attr]
    raw = [m.arrays["weights"] / m.arrays["scaler.std"] for m in inputs]  # type: ignore[union-attr]
    formula = sum(nk / n.sum() * v for nk, v in zip(n, raw, strict=True))
    np.testing.assert_allclose(
        mixed.arrays["weights"] / mixed.arrays["scaler.std"], formula, rtol=1e-12, atol=1e-15
    )
    assert mixed.offsets == {
        settings.triplets_topic: {p: BLOCKS_PER_PARTITION for p in range(PARTITIONS)}
    }
    assert mixed.meta["mixed_from"] == {m.name: m.version for m in inputs}  # type: ignore[union-attr]


def test_mixed_scores_are_the_weighted_mean_of_partition_scores_up_to_a_constant() -> None:
    rng = np.random.default_rng(0)
    rankers = []
    for k in range(3):
        scaler = Standardizer().fit(rng.normal(k, 1 + k, size=(50, 5)))
        ranker = OnlineRanker(algo="opar2", scaler=scaler, warm_start=rng.normal(size=5))
        ranker.n_seen = 10 * (k + 1)
        rankers.append(ranker)
    mixed = mix_rankers(rankers)
    phi = rng.normal(size=(8, 5))
    share = np.array([10, 20, 30]) / 60
    expected = sum(a * r.score(phi) for a, r in zip(share, rankers, strict=True))
    difference = mixed.score(phi) - expected
    np.testing.assert_allclose(difference, difference[0], atol=1e-12)
    assert mixed.n_seen == 60


def test_mixing_refuses_what_cannot_be_mixed() -> None:
    scaler = Standardizer().fit(np.eye(3))
    opr = OnlineRanker(algo="opr", scaler=scaler, warm_start=np.ones(3))
    ogdr = OnlineRanker(algo="ogdr", scaler=scaler, warm_start=np.ones(3))
    opr.n_seen = ogdr.n_seen = 1
    with pytest.raises(ValueError, match="different algorithms"):
        mix_rankers([opr, ogdr])
    with pytest.raises(ValueError, match="nothing to mix"):
        mix_rankers([])
    with pytest.raises(ValueError, match="scaler"):
        mix_rankers([OnlineRanker(algo="opr", warm_start=np.ones(3))])


def test_a_failed_assignment_stops_the_worker_instead_of_idling() -> None:
    settings = _settings()
    worker = OnlineWorker(settings, _options())

    def corrupt(name: str) -> None:
        raise ValueError(f"model {name!r}: corrupt envelope")

    worker.store.load = corrupt  # type: ignore[method-assign]
    with pytest.raises(ValueError, match="corrupt"):  # Kafka swallows this inside poll ...
        worker._on_assign([(settings.triplets_topic, 0)])
    with pytest.raises(RuntimeError, match="loading assigned partitions failed"):
        worker._raise_callback_failure()  # ... so the worker loop raises it on its next turn
    assert worker._stop.is_set()
