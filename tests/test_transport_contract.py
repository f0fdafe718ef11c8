"""The transport contract, run against the embedded log and (marked services) real Kafka."""

from __future__ import annotations

import time

import numpy as np
import pytest

from rankstream.stream.connect import open_transport
from rankstream.stream.embedded import reset_embedded
from rankstream.stream.transport import Message, Rebalance, Transport


@pytest.fixture(params=["embedded", pytest.param("kafka", marks=pytest.mark.services)])
def transport(request):
    if request.param == "embedded":
        reset_embedded()
        settings = request.getfixturevalue("embedded_settings")
    else:
        settings = request.getfixturevalue("service_settings")
        assert settings.kafka_bootstrap
    t = open_transport(settings)
    t.prefix = settings.topic_prefix  # type: ignore[attr-defined]
    yield t
    t.close()


def _topic(transport: Transport, name: str) -> str:
    return f"{transport.prefix}.{name}"  # type: ignore[attr-defined]


def _drain(consumer, n: int, timeout_s: float = 30.0) -> list[Message]:
    got: list[Message] = []
    deadline = time.monotonic() + timeout_s
    while len(got) < n and time.monotonic() < deadline:
        got.extend(consumer.poll(timeout_ms=200, max_records=500))
    return got


def test_ensure_topics_is_idempotent_and_offsets_start_at_zero(transport):
    topic = _topic(transport, "a")
    transport.ensure_topics({topic: 3})
    transport.ensure_topics({topic: 3})
    assert transport.partitions_for(topic) == [0, 1, 2]
    assert transport.beginning_offsets(topic) == {0: 0, 1: 0, 2: 0}
    assert transport.end_offsets(topic) == {0: 0, 1: 0, 2: 0}


def test_records_come_back_in_order_per_partition_with_consecutive_offsets(transport):
    topic = _topic(transport, "order")
    transport.ensure_topics({topic: 2})
    producer = transport.producer()
    for i in range(30):
        producer.send(topic, f"v{i}".encode(), key=f"k{i}".encode(), partition=i % 2)
    producer.flush()
    assert transport.end_offsets(topic) == {0: 15, 1: 15}

    consumer = transport.consumer()
    consumer.assign([(topic, 0), (topic, 1)])
    got = _drain(consumer, 30)
    assert len(got) == 30
    for p in (0, 1):
        mine = [m for m in got if m.partition == p]
        assert [m.offset for m in mine] == list(range(15))
        assert [m.value for m in mine] == [f"v{i}".encode() for i in range(p, 30, 2)]
        assert [m.key for m in mine] == [f"k{i}".encode() for i in range(p, 30, 2)]
        assert all(m.topic == topic and m.timestamp_ms > 0 for m in mine)
        assert consumer.position(topic, p) == 15
    assert sorted(consumer.assignment()) == [(topic, 0), (topic, 1)]
    assert consumer.poll(timeout_ms=100) == []
    consumer.close()
    producer.close()


def test_seek_and_seek_to_beginning_replay_from_the_requested_offset(transport):
    topic = _topic(transport, "seek")
    transport.ensure_topics({topic: 1})
    producer = transport.producer()
    for i in range(10):
        producer.send(topic, bytes([i]), partition=0)
    producer.flush()
    consumer = transport.consumer()
    consumer.assign([(topic, 0)])
    consumer.seek(topic, 0, 7)
    assert consumer.position(topic, 0) == 7
    assert [m.value for m in _drain(consumer, 3)] == [bytes([7]), bytes([8]), bytes([9])]
    consumer.seek_to_beginning(topic, 0)
    assert [m.offset for m in _drain(consumer, 10)] == list(range(10))
    consumer.close()
    producer.close()


def test_max_records_bounds_one_poll(transport):
    topic = _topic(transport, "max")
    transport.ensure_topics({topic: 1})
    producer = transport.producer()
    for i in range(20):
        producer.send(topic, bytes([i]), partition=0)
    producer.flush()
    consumer = transport.consumer()
    consumer.assign([(topic, 0)])
    _drain(consumer, 0)
    first: list[Message] = []
    deadline = time.monotonic() + 30
    while not first and time.monotonic() < deadline:
        first = consumer.poll(timeout_ms=200, max_records=5)
    assert 1 <= len(first) <= 5
    rest = _drain(consumer, 20 - len(first))
    assert [m.offset for m in first + rest] == list(range(20))
    consumer.close()
    producer.close()


def test_same_key_always_lands_on_the_same_partition(transport):
    topic = _topic(transport, "keys")
    transport.ensure_topics({topic: 4})
    producer = transport.producer()
    keys = [str(q).encode() for q in range(12)]
    for _round in range(3):
        for key in keys:
            producer.send(topic, key, key=key)
    producer.flush()
    consumer = transport.consumer()
    consumer.assign([(topic, p) for p in range(4)])
    got = _drain(consumer, 36)
    assert len(got) == 36
    partitions_of: dict[bytes, set[int]] = {}
    for m in got:
        assert m.value == m.key
        partitions_of.setdefault(m.key, set()).add(m.partition)
    assert all(len(parts) == 1 for parts in partitions_of.values())
    consumer.close()
    producer.close()


def test_a_lone_group_member_is_assigned_every_partition(transport):
    topic = _topic(transport, "group")
    transport.ensure_topics({topic: 2})
    producer = transport.producer()
    for i in range(6):
        producer.send(topic, bytes([i]), partition=i % 2)
    producer.flush()
    assigned: list[list[tuple[str, int]]] = []
    consumer = transport.consumer(group_id=f"{transport.prefix}-g")  # type: ignore[attr-defined]
    consumer.subscribe([topic], on_assign=lambda tps: assigned.append(sorted(tps)))
    got = _drain(consumer, 6)
    assert sorted(m.value for m in got) == [bytes([i]) for i in range(6)]
    assert assigned and assigned[-1] == [(topic, 0), (topic, 1)]
    assert sorted(consumer.assignment()) == [(topic, 0), (topic, 1)]
    consumer.close()
    producer.close()


@pytest.mark.parametrize(
    ("arguments", "error", "words"),
    [
        ({"topic": ""}, ValueError, "topic name must be a non-empty string"),
        ({"value": "text"}, TypeError, "value must be bytes, got str"),
        ({"value": None}, TypeError, "value must be bytes, got NoneType"),
        ({"key": "k"}, TypeError, "key must be bytes or None, got str"),
        ({"partition": -1}, ValueError, "partition must be >= 0, got -1"),
        ({"partition": 0.5}, TypeError, "partition must be an integer, got float"),
        ({"records": -2}, ValueError, "records must be >= 0, got -2"),
    ],
)
def test_bad_send_arguments_are_refused_alike_and_nothing_is_sent(
    transport, arguments, error, words
):
    topic = _topic(transport, "refused")
    transport.ensure_topics({topic: 1})
    producer = transport.producer()
    call = {"topic": topic, "value": b"v", **arguments}
    with pytest.raises(error, match=words):
        producer.send(call.pop("topic"), call.pop("value"), **call)
    producer.send(topic, b"kept", partition=np.int64(0), records=np.int64(3))
    producer.flush()
    assert transport.end_offsets(topic) == {0: 1}  # only the good message
    assert producer.delivered == 3
    producer.close()


def test_subscribe_refuses_a_consumer_without_a_group_and_an_empty_topic(transport):
    with pytest.raises(ValueError, match="group_id"):
        transport.consumer().subscribe([_topic(transport, "x")])
    consumer = transport.consumer(group_id=f"{transport.prefix}-e")  # type: ignore[attr-defined]
    with pytest.raises(ValueError, match="topic name"):
        consumer.subscribe([_topic(transport, "x"), ""])
    consumer.close()


def test_rebalance_revokes_only_what_there_was_and_always_assigns():
    calls: list[tuple[str, list]] = []
    rebalance = Rebalance(
        on_assign=lambda tps: calls.append(("assign", tps)),
        on_revoke=lambda tps: calls.append(("revoke", tps)),
    )
    rebalance.revoked([])
    rebalance.assigned([])
    rebalance.revoked(iter([("t", 1), ("t", 0)]))
    rebalance.assigned({("t", 2)})
    assert calls == [("assign", []), ("revoke", [("t", 0), ("t", 1)]), ("assign", [("t", 2)])]
    Rebalance().revoked([("t", 0)])  # no callbacks: nothing to call
    Rebalance().assigned([("t", 0)])


def test_seek_in_the_assign_callback_resumes_from_a_stored_offset(transport):
    topic = _topic(transport, "resume")
    transport.ensure_topics({topic: 1})
    producer = transport.producer()
    for i in range(8):
        producer.send(topic, bytes([i]), partition=0)
    producer.flush()
    consumer = transport.consumer(group_id=f"{transport.prefix}-r")  # type: ignore[attr-defined]

    def resume(tps):
        for t, p in tps:
            consumer.seek(t, p, 5)

    consumer.subscribe([topic], on_assign=resume)
    assert [m.offset for m in _drain(consumer, 3)] == [5, 6, 7]
    consumer.close()
    producer.close()


def test_unassigned_partition_and_negative_offset_are_rejected(transport):
    topic = _topic(transport, "bad")
    transport.ensure_topics({topic: 1})
    consumer = transport.consumer()
    consumer.assign([(topic, 0)])
    with pytest.raises(ValueError):
        consumer.seek(topic, 0, -1)
    with pytest.raises((ValueError, AssertionError, KeyError)):
        consumer.position(topic, 5)
    consumer.close()


def test_delete_topics_drops_the_topic_and_ignores_unknown_names(transport):
    keep, gone = _topic(transport, "keep"), _topic(transport, "gone")
    transport.ensure_topics({keep: 1, gone: 2})
    producer = transport.producer()
    producer.send(gone, b"data", key=b"k")
    producer.flush()
    producer.close()
    transport.delete_topics([gone, _topic(transport, "never-created")])
    deadline = time.monotonic() + 30
    while transport.partitions_for(gone) and time.monotonic() < deadline:
        time.sleep(0.2)  # Kafka's metadata catches up with the deletion
    assert transport.partitions_for(gone) == []
    assert transport.end_offsets(gone) == {}
    assert transport.partitions_for(keep) == [0]
    transport.delete_topics([gone])  # already gone: nothing to do
