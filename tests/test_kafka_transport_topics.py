"""KafkaTransport topic administration (unknown topics, deletion) and its producer limits."""

from __future__ import annotations

import time

import pytest

from rankstream.stream.kafka_transport import MIB, PRODUCER_TUNING, KafkaTransport
from rankstream.stream.schema import MAX_MESSAGE_BYTES
from rankstream.stream.settings import Settings


class _NoMetadata:
    """A metadata client that knows no topic, as kafka-python < 3 answered (None)."""

    def partitions_for_topic(self, topic: str) -> None:
        return None


def test_an_unknown_topic_has_no_partitions_even_when_the_client_says_none() -> None:
    transport = KafkaTransport(Settings(kafka_bootstrap="127.0.0.1:1"))
    transport._meta = _NoMetadata()  # type: ignore[assignment]
    assert transport.partitions_for("nowhere") == []
    assert transport.end_offsets("nowhere") == {}
    assert transport.beginning_offsets("nowhere") == {}


def test_producer_batches_fit_the_broker_and_stay_exactly_once() -> None:
    assert PRODUCER_TUNING["batch_size"] >= 4 * MIB  # several 1-3 MiB blocks per request
    assert PRODUCER_TUNING["batch_size"] <= MAX_MESSAGE_BYTES // 2  # a batch + header fits
    assert PRODUCER_TUNING["max_request_size"] == MAX_MESSAGE_BYTES
    assert PRODUCER_TUNING["acks"] == "all" and PRODUCER_TUNING["enable_idempotence"] is True
    assert PRODUCER_TUNING["compression_type"] is None


@pytest.mark.services
def test_unknown_topics_are_empty_and_not_created(service_settings: Settings) -> None:
    transport = KafkaTransport(service_settings)
    topic = f"{service_settings.topic_prefix}.missing"
    try:
        assert transport.partitions_for(topic) == []
        assert transport.end_offsets(topic) == {}
        transport.ensure_topics({f"{service_settings.topic_prefix}.other": 1})
        assert transport.partitions_for(topic) == []  # asking never auto-created it
    finally:
        transport.close()


@pytest.mark.services
def test_delete_topics_removes_them_and_ignores_missing_ones(service_settings: Settings) -> None:
    transport = KafkaTransport(service_settings)
    keep, gone = (f"{service_settings.topic_prefix}.{n}" for n in ("keep", "gone"))
    try:
        transport.ensure_topics({keep: 1, gone: 2})
        producer = transport.producer()
        producer.send(gone, b"data", key=b"k")
        producer.flush(timeout=30)
        producer.close()
        transport.delete_topics([gone, f"{service_settings.topic_prefix}.never"])
        deadline = time.monotonic() + 30
        while transport.partitions_for(gone) and time.monotonic() < deadline:
            time.sleep(0.2)  # metadata catches up with the deletion
        assert transport.partitions_for(gone) == []
        assert transport.partitions_for(keep) == [0]
        transport.delete_topics([gone])  # already gone: nothing to do
    finally:
        transport.close()


@pytest.mark.services
def test_partition_for_is_where_the_producer_sends_a_keyed_record(
    service_settings: Settings,
) -> None:
    """Keyed records sent without a partition land where `partition_for` says (the
    murmur2 rule an impressions message relies on to sit with its clicks)."""
    transport = KafkaTransport(service_settings)
    topic = f"{service_settings.topic_prefix}.keyed"
    keys = [f"impression-{i}".encode() for i in range(30)]
    try:
        transport.ensure_topics({topic: 3})
        producer = transport.producer()
        for key in keys:
            producer.send(topic, b"v", key=key)
        producer.flush(timeout=30)
        producer.close()
        consumer = transport.consumer()
        consumer.assign([(topic, p) for p in transport.partitions_for(topic)])
        for p in transport.partitions_for(topic):
            consumer.seek_to_beginning(topic, p)
        seen: dict[bytes, int] = {}
        deadline = time.monotonic() + 60  # a hang guard
        while len(seen) < len(keys) and time.monotonic() < deadline:
            seen.update((m.key, m.partition) for m in consumer.poll(timeout_ms=200))
        consumer.close()
        assert seen == {key: transport.partition_for(topic, key) for key in keys}
        assert len(set(seen.values())) == 3  # the keys spread: the rule was exercised
    finally:
        transport.delete_topics([topic])
        transport.close()
