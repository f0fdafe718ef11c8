"""Kafka-only behaviour of the transport: crc32c, limits, groups of two, broker restarts."""

from __future__ import annotations

import time

import pytest

from rankstream.stream.kafka_transport import KafkaTransport
from rankstream.stream.schema import MAX_MESSAGE_BYTES


def test_kafka_python_checks_crcs_with_the_crc32c_c_extension():
    import crc32c
    from kafka.record import util

    assert util._crc32c is crc32c.crc32c


@pytest.mark.services
def test_oversized_messages_are_refused_before_sending(service_settings):
    transport = KafkaTransport(service_settings)
    producer = transport.producer()
    with pytest.raises(ValueError, match="exceeds"):
        producer.send(f"{service_settings.topic_prefix}.x", b"\0" * (MAX_MESSAGE_BYTES + 1))
    producer.close()
    transport.close()


@pytest.mark.services
def test_two_group_members_split_the_partitions(service_settings):
    transport = KafkaTransport(service_settings)
    topic = f"{service_settings.topic_prefix}.g"
    transport.ensure_topics({topic: 4})
    group = f"{service_settings.topic_prefix}-grp"
    a, b = transport.consumer(group), transport.consumer(group)
    a.subscribe([topic])
    b.subscribe([topic])
    deadline = time.monotonic() + 120  # a loaded 2-core box can need several rebalances
    while time.monotonic() < deadline:
        a.poll(timeout_ms=100)
        b.poll(timeout_ms=100)
        share_a, share_b = set(a.assignment()), set(b.assignment())
        if share_a and share_b and not share_a & share_b and len(share_a | share_b) == 4:
            break
    assert share_a | share_b == {(topic, p) for p in range(4)} and not share_a & share_b
    a.close()
    b.close()
    transport.close()


@pytest.mark.services
def test_poll_and_send_survive_a_broker_restart(services, service_settings):
    transport = KafkaTransport(service_settings)
    topic = f"{service_settings.topic_prefix}.restart"
    transport.ensure_topics({topic: 1})
    producer = transport.producer()
    consumer = transport.consumer()
    consumer.assign([(topic, 0)])
    for i in range(5):
        producer.send(topic, bytes([i]))
    producer.flush()
    got = []
    while len(got) < 5:
        got.extend(consumer.poll(timeout_ms=500))
    services.manager.restart("kafka")
    for _ in range(10):
        consumer.poll(timeout_ms=200)  # must not raise while the broker comes back
    for i in range(5, 10):
        producer.send(topic, bytes([i]))
    producer.flush(timeout=60)
    deadline = time.monotonic() + 60
    while len(got) < 10 and time.monotonic() < deadline:
        got.extend(consumer.poll(timeout_ms=500))
    assert [m.value for m in got] == [bytes([i]) for i in range(10)]
    assert [m.offset for m in got] == list(range(10))
    producer.close()
    consumer.close()
    transport.close()
