"""Embedded-only semantics: the shared registry, partitioner, groups, threads."""

from __future__ import annotations

import threading

import pytest

from rankstream.stream.connect import open_transport
from rankstream.stream.embedded import embedded_transport, partition_for_key, reset_embedded
from rankstream.stream.settings import Settings


@pytest.fixture(autouse=True)
def _fresh():
    reset_embedded()
    yield
    reset_embedded()


def test_open_transport_without_kafka_shares_one_process_wide_log():
    a, b = open_transport(Settings()), open_transport(Settings())
    assert a is b is embedded_transport()
    a.producer().send("x", b"1")
    assert b.end_offsets("x") == {0: 1}  # auto-created with one partition
    reset_embedded()
    assert embedded_transport().partitions_for("x") == []


def test_keyed_records_follow_the_documented_crc32_partitioner():
    t = embedded_transport()
    t.ensure_topics({"k": 5})
    producer = t.producer()
    for q in range(40):
        producer.send("k", b"v", key=str(q).encode())
    counts = t.end_offsets("k")
    expected = {p: 0 for p in range(5)}
    for q in range(40):
        expected[partition_for_key(str(q).encode(), 5)] += 1
        assert t.partition_for("k", str(q).encode()) == partition_for_key(str(q).encode(), 5)
    assert counts == expected


def test_unkeyed_records_round_robin_and_bad_partition_is_rejected():
    t = embedded_transport()
    t.ensure_topics({"r": 3})
    producer = t.producer()
    for _ in range(6):
        producer.send("r", b"v")
    assert t.end_offsets("r") == {0: 2, 1: 2, 2: 2}
    with pytest.raises(ValueError, match="no partition 3"):
        producer.send("r", b"v", partition=3)
    with pytest.raises(TypeError):
        producer.send("r", "not bytes")  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        t.ensure_topics({"z": 0})


def test_group_members_split_partitions_and_rebalance_when_one_leaves():
    t = embedded_transport()
    t.ensure_topics({"g": 4})
    events: dict[str, list] = {"a": [], "b": []}
    a, b = t.consumer("grp"), t.consumer("grp")
    a.subscribe(
        ["g"],
        on_assign=lambda tps: events["a"].append(("assign", tps)),
        on_revoke=lambda tps: events["a"].append(("revoke", tps)),
    )
    assert a.assignment() == [("g", p) for p in range(4)]
    b.subscribe(["g"], on_assign=lambda tps: events["b"].append(("assign", tps)))
    share_a, share_b = a.assignment(), b.assignment()
    assert share_a == [("g", 0), ("g", 1)] and share_b == [("g", 2), ("g", 3)]
    assert events["a"][-2:] == [("revoke", [("g", p) for p in range(4)]), ("assign", share_a)]
    producer = t.producer()
    for i in range(8):
        producer.send("g", bytes([i]), partition=i % 4)
    got_a = a.poll(timeout_ms=50, max_records=100)
    got_b = b.poll(timeout_ms=50, max_records=100)
    assert {m.partition for m in got_a} == {0, 1} and {m.partition for m in got_b} == {2, 3}
    b.close()
    assert a.assignment() == [("g", p) for p in range(4)]
    with pytest.raises(RuntimeError):
        a.assign([("g", 0)])


def test_poll_wakes_when_another_thread_produces():
    t = embedded_transport()
    t.ensure_topics({"w": 1})
    consumer = t.consumer()
    consumer.assign([("w", 0)])

    def produce():
        p = t.producer()
        for i in range(200):
            p.send("w", i.to_bytes(2, "big"))

    thread = threading.Thread(target=produce)
    thread.start()
    got = []
    while len(got) < 200:
        batch = consumer.poll(timeout_ms=5000, max_records=64)
        assert batch, "poll timed out although records were being produced"
        got.extend(batch)
    thread.join()
    assert [int.from_bytes(m.value, "big") for m in got] == list(range(200))
    assert [m.offset for m in got] == list(range(200))


def test_subscribe_needs_a_group_and_closed_clients_refuse_work():
    t = embedded_transport()
    consumer = t.consumer()
    with pytest.raises(ValueError, match="group_id"):
        consumer.subscribe(["x"])
    consumer.close()
    with pytest.raises(RuntimeError):
        consumer.poll(timeout_ms=0)
    producer = t.producer()
    producer.close()
    with pytest.raises(RuntimeError):
        producer.send("x", b"1")
