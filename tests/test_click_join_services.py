"""The click join on the real Kafka broker and Redis (conftest's `services`): what it emits
equals the embedded join's output byte for byte, with Redis paused (SIGSTOP) mid-stream;
its dead letters reach Kafka with their reasons and its propensities reach Redis."""

from __future__ import annotations

import dataclasses
import os
import signal
import threading
import time

from rankstream.harness.chaos_join import JoinChaosPlan, StreamProducer, join_stream
from rankstream.stream.click_schema import Click, encode_clicks
from rankstream.stream.connect import open_store, open_transport
from rankstream.stream.embedded import EmbeddedTransport
from rankstream.stream.embedded_store import EmbeddedModelStore
from rankstream.stream.schema import decode_dead_letter
from rankstream.stream.settings import Settings
from rankstream.workers.click_join import PROPENSITIES_MODEL, ClickJoin
from rankstream.workers.click_join_options import JoinOptions

OPTIONS = JoinOptions(checkpoint_records=100, checkpoint_seconds=1.0, exit_when_idle=3.0)


def _messages(width: int) -> list:
    messages = join_stream(JoinChaosPlan(impressions=600, kills=0, seed=2), width)
    messages.insert(5, ("click", b"x", b"not an arrow stream"))
    messages.insert(7, ("click", b"f" * 32, encode_clicks([Click("f" * 32, 3, time=1.0)])))
    return messages


def _read(transport, topic: str) -> list:  # type: ignore[no-untyped-def]
    ends = transport.end_offsets(topic)
    consumer = transport.consumer(None)
    consumer.assign([(topic, p) for p in ends])
    for p in ends:
        consumer.seek_to_beginning(topic, p)
    found, deadline = [], time.monotonic() + 60  # a hang guard
    while any(consumer.position(topic, p) < e for p, e in ends.items()):
        assert time.monotonic() < deadline, f"reading {topic} timed out"
        found += consumer.poll(timeout_ms=200, max_records=500)
    consumer.close()
    return found


def _embedded_output(settings: Settings, messages: list) -> list[tuple[bytes, bytes]]:
    transport = EmbeddedTransport()
    producer = transport.producer()
    topics = {"imp": settings.impressions_topic, "click": settings.clicks_topic}
    for kind, key, value in messages:
        producer.send(topics[kind], value, key=key)
    join = ClickJoin(settings, OPTIONS, transport=transport, store=EmbeddedModelStore())
    assert join.run() == 0
    return [(m.key, m.value) for m in _read(transport, settings.triplets_topic)]


def test_the_join_on_kafka_and_redis_survives_a_paused_redis(services, service_settings) -> None:
    settings = service_settings
    messages = _messages(settings.phi_dim)
    expected = _embedded_output(dataclasses.replace(settings, kafka_bootstrap=None), messages)
    assert len(expected) > 50

    transport = open_transport(settings)
    kinds = ("impressions", "clicks", "triplets", "dead-letter")
    transport.ensure_topics({settings.topic(kind): 1 for kind in kinds})
    producer = StreamProducer(settings, messages, rate=None)
    producer.run()
    assert producer.error is None
    join = ClickJoin(settings, OPTIONS)
    exit_code: list[int] = []
    runner = threading.Thread(target=lambda: exit_code.append(join.run()), daemon=True)
    store = open_store(settings)
    runner.start()
    deadline = time.monotonic() + 120  # hang guards only
    while store.load(OPTIONS.name) is None:
        assert time.monotonic() < deadline, "the join never checkpointed"
        time.sleep(0.05)
    redis_pid = services.manager.status()["redis"]["pid"]
    os.kill(redis_pid, signal.SIGSTOP)
    try:
        time.sleep(4.0)  # saves time out and back off; nothing is sent before its save
    finally:
        os.kill(redis_pid, signal.SIGCONT)
    runner.join(timeout=180)
    assert exit_code == [0]

    found = [(m.key, m.value) for m in _read(transport, settings.triplets_topic)]
    assert found == expected  # every message once, in order, byte for byte
    reasons = sorted(
        decode_dead_letter(m.value).reason for m in _read(transport, settings.dead_letter_topic)
    )
    assert reasons == ["bad_bytes", "unknown_impression"]
    stored = store.load(PROPENSITIES_MODEL)
    assert stored is not None and stored.arrays["propensity"].shape == (10,)
    assert stored.arrays["propensity"][0] == 1.0
    assert join.report()["sessions"] == 600
    store.close()
    transport.close()
