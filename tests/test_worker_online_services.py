"""The online worker on the real Kafka broker and Redis (see conftest's `services`).

SIGKILL mid-stream and restart: bit-identical weights; embedded and Kafka transports
give identical weights for the same stream; fencing and dead letters on Redis/Kafka.
"""

from __future__ import annotations

import dataclasses
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from rankstream.harness.generator import TripletGenerator
from rankstream.stream.connect import open_store, open_transport
from rankstream.stream.schema import decode_dead_letter, encode_triplets
from rankstream.stream.settings import Settings
from rankstream.workers.checkpoint import weights_sha256
from rankstream.workers.online_worker import LINEAR_ALGOS, OnlineWorker, WorkerOptions
from rankstream.workers.runtime import EXIT_OK

BLOCK, HALF_BLOCKS = 2000, 15  # 60,000 triplets in two halves of 30,000
OPTIONS = WorkerOptions(
    scaler_rows=2000,
    checkpoint_records=7000,
    checkpoint_seconds=1000.0,
    exit_when_idle=1.5,
    poll_ms=100,
)


def _stream() -> list[bytes]:
    return [
        encode_triplets(b) for b in TripletGenerator(seed=11).blocks(2 * HALF_BLOCKS * BLOCK, BLOCK)
    ]


def _produce(settings: Settings, values: list[bytes]) -> None:
    transport = open_transport(settings)
    transport.ensure_topics({settings.triplets_topic: 1, settings.dead_letter_topic: 1})
    producer = transport.producer()
    for value in values:
        producer.send(settings.triplets_topic, value)
    producer.flush()
    producer.close()
    transport.close()


def _final(settings: Settings) -> dict[str, tuple[str, int]]:
    store = open_store(settings)
    out = {}
    for name in LINEAR_ALGOS:
        stored = store.load(name)
        assert stored is not None, name
        out[name] = (weights_sha256(stored.arrays["weights"]), stored.meta["triplets_seen"])
    return out


def _worker_process(settings: Settings, log: Path, *extra: str) -> subprocess.Popen[bytes]:
    env = dict(
        os.environ,
        RANKSTREAM_KAFKA_BOOTSTRAP=settings.kafka_bootstrap or "",
        RANKSTREAM_REDIS_URL=settings.redis_url or "",
        RANKSTREAM_TOPIC_PREFIX=settings.topic_prefix,
    )
    env.pop("RANKSTREAM_METRICS_PORT", None)
    command = [
        sys.executable,
        "-m",
        "rankstream.cli",
        "worker",
        "online",
        "--scaler-rows",
        "2000",
        "--checkpoint-records",
        "7000",
        "--checkpoint-seconds",
        "1000",
        *extra,
    ]
    with log.open("ab") as stderr:  # the JSON log, shown when an assertion fails
        return subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL, stderr=stderr)


def _wait_for(condition, timeout: float = 120.0) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.1)


def test_sigkill_and_restart_is_bit_identical_and_matches_embedded(
    service_settings: Settings, embedded_settings: Settings, tmp_path: Path
) -> None:
    values = _stream()
    total = len(values) * BLOCK

    reference = dataclasses.replace(
        service_settings, topic_prefix=service_settings.topic_prefix + "-ref"
    )
    _produce(reference, values)
    assert OnlineWorker(reference, OPTIONS).run() == EXIT_OK
    expected = _final(reference)
    assert {seen for _, seen in expected.values()} == {total}

    _produce(embedded_settings, values)
    assert OnlineWorker(embedded_settings, OPTIONS).run() == EXIT_OK
    assert _final(embedded_settings) == expected  # same stream, same weights, any transport

    _produce(service_settings, values[:HALF_BLOCKS])
    store = open_store(service_settings)
    log = tmp_path / "worker.log"
    victim = _worker_process(service_settings, log)
    try:
        # Checkpoints every 7,000 triplets (4 blocks): the last one covers 24,000 of the
        # 30,000 produced, so the kill loses 6,000 learned-but-unsaved triplets.
        _wait_for(
            lambda: all(
                (m := store.load(n)) is not None and m.meta["triplets_seen"] >= 24_000
                for n in LINEAR_ALGOS
            )
        )
        time.sleep(0.5)
    finally:
        victim.send_signal(signal.SIGKILL)
        victim.wait(timeout=30)
    assert victim.returncode == -signal.SIGKILL
    assert {m.meta["triplets_seen"] for n in LINEAR_ALGOS if (m := store.load(n))} == {24_000}

    _produce(service_settings, values[HALF_BLOCKS:])
    restarted = _worker_process(service_settings, log, "--exit-when-idle", "2")
    assert restarted.wait(timeout=180) == 0, log.read_text()[-3000:]
    assert _final(service_settings) == expected


def test_stale_worker_cannot_overwrite_a_newer_checkpoint_in_redis(
    service_settings: Settings,
) -> None:
    values = _stream()[:6]
    _produce(service_settings, values[:3])
    options = dataclasses.replace(OPTIONS, scaler_rows=500)
    stale = OnlineWorker(service_settings, options)
    stale.start()
    _wait_for(
        lambda: (
            stale.process(stale.consumer.poll(timeout_ms=200))  # type: ignore[union-attr]
            or stale.counters.records >= 3 * BLOCK
        )
    )
    assert stale.checkpoint()
    _produce(service_settings, values[3:5])
    newer = OnlineWorker(service_settings, options)
    assert newer.run() == EXIT_OK
    _produce(service_settings, values[5:])
    assert stale.run() != EXIT_OK and stale.fenced
    stored = open_store(service_settings).load("opar1")
    assert stored is not None and stored.version == 2 and stored.meta["writer"] == newer.writer


def test_malformed_messages_are_dead_lettered_on_kafka(service_settings: Settings) -> None:
    good = _stream()[:2]
    _produce(service_settings, [good[0], b"garbage", good[1]])
    options = dataclasses.replace(OPTIONS, scaler_rows=500)
    assert OnlineWorker(service_settings, options).run() == EXIT_OK
    transport = open_transport(service_settings)
    consumer = transport.consumer()
    consumer.assign([(service_settings.dead_letter_topic, 0)])
    consumer.seek_to_beginning(service_settings.dead_letter_topic, 0)
    letters = []
    try:
        _wait_for(lambda: letters.extend(consumer.poll(timeout_ms=200)) or letters, timeout=30)
    finally:
        consumer.close()
        transport.close()
    (letter,) = [decode_dead_letter(m.value) for m in letters]
    assert (letter.reason, letter.source_offset, letter.original) == ("bad_bytes", 1, b"garbage")
    assert letters[0].key == f"{service_settings.triplets_topic}:0:1".encode()
    assert {seen for _, seen in _final(service_settings).values()} == {2 * BLOCK}


pytestmark = pytest.mark.timeout(300)
