"""Scale-out on the real Kafka broker and Redis: worker processes join, SIGTERM, SIGKILL.

Two `rankstream worker online --group G --per-partition` processes share a 4-partition
topic; one is stopped with SIGTERM (it checkpoints on revocation and leaves), a third
joins, and the second is SIGKILLed mid-stream (no revocation: the group notices after
the session timeout). Every `{algo}.p{k}` must end bit-identical to a single worker that
read each partition alone, and `{algo}` must be their mix.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from rankstream.harness.generator import TripletGenerator
from rankstream.stream.connect import open_store, open_transport
from rankstream.stream.schema import encode_triplets
from rankstream.stream.settings import Settings
from rankstream.stream.store import ModelStore
from rankstream.workers.checkpoint import weights_sha256
from rankstream.workers.online_worker import OnlineWorker, WorkerOptions
from rankstream.workers.runtime import EXIT_OK
from rankstream.workers.scaleout import partition_model_name

PARTITIONS, BLOCK, BLOCKS_PER_QUARTER = 4, 1000, 12  # 4 quarters x 12,000 triplets
ALGOS = ("opr", "opar1", "opar2", "ogdr")
WORKER_ARGS = (
    "--group",
    "g",
    "--per-partition",
    "--partitions",
    str(PARTITIONS),
    "--scaler-rows",
    "1500",
    "--checkpoint-records",
    "5000",
    "--checkpoint-seconds",
    "1000",
    "--mix-seconds",
    "1",
)


def _quarters() -> list[list[tuple[int, bytes]]]:
    blocks = TripletGenerator(seed=23).blocks(4 * BLOCKS_PER_QUARTER * BLOCK, BLOCK)
    sends = [(i % PARTITIONS, encode_triplets(b)) for i, b in enumerate(blocks)]
    return [sends[q * BLOCKS_PER_QUARTER : (q + 1) * BLOCKS_PER_QUARTER] for q in range(4)]


def _produce(settings: Settings, sends: list[tuple[int, bytes]]) -> None:
    transport = open_transport(settings)
    transport.ensure_topics({settings.triplets_topic: PARTITIONS, settings.dead_letter_topic: 1})
    producer = transport.producer()
    for partition, value in sends:
        producer.send(settings.triplets_topic, value, partition=partition)
    producer.flush()
    producer.close()
    transport.close()


def _worker(settings: Settings, log: Path, *extra: str) -> subprocess.Popen[bytes]:
    env = dict(
        os.environ,
        RANKSTREAM_KAFKA_BOOTSTRAP=settings.kafka_bootstrap or "",
        RANKSTREAM_REDIS_URL=settings.redis_url or "",
        RANKSTREAM_TOPIC_PREFIX=settings.topic_prefix,
    )
    env.pop("RANKSTREAM_METRICS_PORT", None)
    command = [sys.executable, "-m", "rankstream.cli", "worker", "online", *WORKER_ARGS, *extra]
    with log.open("ab") as stderr:
        return subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL, stderr=stderr)


def _wait_for(condition, what: str, timeout: float = 180.0) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.1)


def _assigned(log: Path) -> bool:
    return log.exists() and b'"partition assigned"' in log.read_bytes()


def _partition_models(store: ModelStore, topic: str) -> dict[str, tuple[str, int, dict]]:
    out = {}
    for algo in ALGOS:
        for p in range(PARTITIONS):
            stored = store.load(partition_model_name(algo, p))
            assert stored is not None, (algo, p)
            out[stored.name] = (
                weights_sha256(stored.arrays["weights"]),
                stored.meta["triplets_seen"],
                stored.offsets[topic],
            )
    return out


def test_workers_join_and_die_and_every_partition_model_stays_exact(
    service_settings: Settings, embedded_settings: Settings, tmp_path: Path
) -> None:
    quarters = _quarters()
    settings, topic = service_settings, service_settings.triplets_topic
    store = open_store(settings)
    _produce(settings, quarters[0])
    a, b = (_worker(settings, tmp_path / f"{n}.log") for n in "ab")
    c: subprocess.Popen[bytes] | None = None
    try:
        _wait_for(
            lambda: _assigned(tmp_path / "a.log") and _assigned(tmp_path / "b.log"),
            "a and b to share the partitions",
        )
        _produce(settings, quarters[1])
        a.send_signal(signal.SIGTERM)  # clean: final checkpoint, revocation, leave
        assert a.wait(timeout=60) == EXIT_OK
        c = _worker(settings, tmp_path / "c.log", "--exit-when-idle", "15")
        _wait_for(lambda: _assigned(tmp_path / "c.log"), "c to join")
        _produce(settings, quarters[2])
        # b has checkpointed past the first half, and is mid-way through the third quarter
        _wait_for(
            lambda: all(
                (m := store.load(partition_model_name("opr", p))) is not None
                and m.meta["triplets_seen"] >= 6000
                for p in range(PARTITIONS)
            ),
            "checkpoints past the first half",
        )
        b.send_signal(signal.SIGKILL)
        assert b.wait(timeout=30) == -signal.SIGKILL
        _produce(settings, quarters[3])
        assert c.wait(timeout=120) == EXIT_OK, (tmp_path / "c.log").read_text()[-3000:]
    finally:
        for process in (a, b, c):
            if process is not None and process.poll() is None:
                process.kill()
                process.wait(timeout=30)
    log_c = (tmp_path / "c.log").read_bytes()
    assert log_c.count(b'"partition assigned"') > 2  # joined, then took over b's partitions

    # The reference: one worker reads the same topic alone (own group, own store).
    reference = OnlineWorker(
        settings,
        WorkerOptions(
            algos=ALGOS,
            group="reference",
            per_partition=True,
            partitions=PARTITIONS,
            scaler_rows=1500,
            checkpoint_records=10**6,
            exit_when_idle=3.0,
            poll_ms=100,
        ),
        store=open_store(embedded_settings),
    )
    assert reference.run() == EXIT_OK
    expected = _partition_models(open_store(embedded_settings), topic)
    total = 4 * BLOCKS_PER_QUARTER * BLOCK
    assert sum(seen for name, (_, seen, _) in expected.items() if name.startswith("opr.")) == total
    assert _partition_models(store, topic) == expected

    for algo in ALGOS:  # c owned partition 0 at its clean stop and published the last mix
        mixed = store.load(algo)
        inputs = [store.load(partition_model_name(algo, p)) for p in range(PARTITIONS)]
        assert mixed is not None and mixed.meta["triplets_seen"] == total
        assert mixed.meta["mixed_from"] == {m.name: m.version for m in inputs}  # type: ignore[union-attr]
        n = np.array([m.meta["triplets_seen"] for m in inputs], dtype=float)  # type: ignore[union-attr]
        raw = sum(
            nk / n.sum() * m.arrays["weights"] / m.arrays["scaler.std"]  # type: ignore[union-attr]
            for nk, m in zip(n, inputs, strict=True)
        )
        np.testing.assert_allclose(
            mixed.arrays["weights"] / mixed.arrays["scaler.std"], raw, rtol=1e-12, atol=1e-15
        )


pytestmark = pytest.mark.timeout(300)
