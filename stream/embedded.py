"""In-process transport: append-only partition logs with Kafka's offset semantics.

Used when no Kafka broker is configured (the embedded default) and by tests. One
process-wide `EmbeddedTransport` is shared by every producer and consumer opened through
`open_transport`, so a simulator thread and a worker thread in the same process see
the same topics; `reset_embedded()` gives tests a clean slate.

Partitioning (documented, deterministic, not Kafka's murmur2): an explicit partition
wins; otherwise a keyed record goes to `zlib.crc32(key) % n_partitions`, and an unkeyed
record round-robins per producer. Sending to a topic nobody created auto-creates it
with one partition, like a broker with `auto.create.topics.enable` and `num.partitions=1`.

Consumer groups use a static range assignment: whenever a member joins or leaves, the
sorted partitions of the subscribed topics are split into contiguous ranges over the
members in join order; each member learns of its new share on its next `poll`, which
calls `on_revoke` then `on_assign`. Nothing is auto-committed: a newly assigned
partition starts at its beginning unless the callback seeks (offsets live in the model
store, next to the state they produced).
"""

from __future__ import annotations

import itertools
import threading
import time
import zlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from rankstream.stream.transport import (
    Consumer,
    Message,
    Producer,
    Rebalance,
    TopicPartition,
    check_topic_name,
)

_DEFAULT_AUTO_PARTITIONS = 1


def partition_for_key(key: bytes, n_partitions: int) -> int:
    """The embedded partitioner: CRC-32 of the key bytes modulo the partition count."""
    return zlib.crc32(key) % n_partitions


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


@dataclass
class _Group:
    """Members (in join order) and their subscriptions; `generation` bumps on change."""

    members: list[int] = field(default_factory=list)
    topics: dict[int, tuple[str, ...]] = field(default_factory=dict)
    generation: int = 0


class EmbeddedTransport:
    """Thread-safe in-memory topics; one instance is shared per process."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._logs: dict[str, list[list[Message]]] = {}
        self._groups: dict[str, _Group] = {}
        self._member_ids = itertools.count(1)

    # -- Transport -------------------------------------------------------------------
    def producer(self) -> EmbeddedProducer:
        return EmbeddedProducer(self)

    def consumer(self, group_id: str | None = None) -> EmbeddedConsumer:
        return EmbeddedConsumer(self, group_id)

    def ensure_topics(self, topics: Mapping[str, int]) -> None:
        """Create missing topics; an existing topic keeps its partitions (like Kafka)."""
        with self._cond:
            for name, partitions in topics.items():
                check_topic_name(name)
                if int(partitions) < 1:
                    raise ValueError(f"topic {name!r}: partitions must be >= 1, got {partitions}")
                if name not in self._logs:
                    self._logs[name] = [[] for _ in range(int(partitions))]
            self._cond.notify_all()

    def delete_topics(self, topics: Sequence[str]) -> None:
        """Drop these topics' logs; unknown names are ignored (like the Kafka transport)."""
        with self._cond:
            for name in topics:
                check_topic_name(name)
                self._logs.pop(name, None)
            self._cond.notify_all()

    def partitions_for(self, topic: str) -> list[int]:
        with self._cond:
            return list(range(len(self._logs.get(topic, []))))

    def partition_for(self, topic: str, key: bytes) -> int:
        """Where a record keyed `key` goes (`partition_for_key`); the topic must exist."""
        with self._cond:
            if topic not in self._logs:
                raise ValueError(f"unknown topic {topic!r}")
            return partition_for_key(bytes(key), len(self._logs[topic]))

    def beginning_offsets(self, topic: str) -> dict[int, int]:
        with self._cond:
            return {p: 0 for p in range(len(self._logs.get(topic, [])))}

    def end_offsets(self, topic: str) -> dict[int, int]:
        with self._cond:
            return {p: len(log) for p, log in enumerate(self._logs.get(topic, []))}

    def close(self) -> None:
        """The shared log outlives any one user; `reset_embedded` clears it."""

    # -- used by producers and consumers ---------------------------------------------
    def _append(
        self,
        topic: str,
        partition: int | None,
        key: bytes | None,
        value: bytes,
        round_robin: itertools.count,
    ) -> None:
        """Append one message `Producer.send` has checked."""
        with self._cond:
            if topic not in self._logs:
                self._logs[topic] = [[] for _ in range(_DEFAULT_AUTO_PARTITIONS)]
            logs = self._logs[topic]
            if partition is None:
                partition = (
                    partition_for_key(bytes(key), len(logs))
                    if key is not None
                    else next(round_robin) % len(logs)
                )
            elif not 0 <= partition < len(logs):
                raise ValueError(f"topic {topic!r} has no partition {partition}")
            log = logs[partition]
            log.append(
                Message(
                    topic,
                    partition,
                    len(log),
                    None if key is None else bytes(key),
                    bytes(value),
                    _now_ms(),
                )
            )
            self._cond.notify_all()

    def _join(self, group_id: str, member: int, topics: tuple[str, ...]) -> None:
        with self._cond:
            group = self._groups.setdefault(group_id, _Group())
            if member not in group.members:
                group.members.append(member)
            group.topics[member] = topics
            group.generation += 1

    def _leave(self, group_id: str, member: int) -> None:
        with self._cond:
            group = self._groups.get(group_id)
            if group is not None and member in group.members:
                group.members.remove(member)
                group.topics.pop(member, None)
                group.generation += 1

    def _group_share(self, group_id: str, member: int) -> tuple[int, list[TopicPartition]]:
        """This member's range of every topic it subscribed to, and the generation."""
        with self._cond:
            group = self._groups[group_id]
            share: list[TopicPartition] = []
            for topic in group.topics.get(member, ()):
                subscribers = [m for m in group.members if topic in group.topics[m]]
                parts = list(range(len(self._logs.get(topic, []))))
                index, count = subscribers.index(member), len(subscribers)
                per, extra = divmod(len(parts), count)
                start = index * per + min(index, extra)
                stop = start + per + (1 if index < extra else 0)
                share.extend((topic, p) for p in parts[start:stop])
            return group.generation, share


class EmbeddedProducer(Producer):
    """Appends synchronously, so `flush` has nothing to wait for."""

    def __init__(self, transport: EmbeddedTransport) -> None:
        self._transport = transport
        self._round_robin = itertools.count()
        self._closed = False
        self.delivered = 0  # rows (`send`'s records) in the log, ever

    def _send(
        self, topic: str, value: bytes, key: bytes | None, partition: int | None, records: int
    ) -> None:
        if self._closed:
            raise RuntimeError("producer is closed")
        self._transport._append(topic, partition, key, value, self._round_robin)
        self.delivered += records  # in the log at once

    def flush(self, timeout: float | None = None) -> None:
        return None

    def close(self, timeout: float | None = None) -> None:
        self._closed = True


class EmbeddedConsumer(Consumer):
    """Reads assigned partitions from its own positions; never commits anything."""

    def __init__(self, transport: EmbeddedTransport, group_id: str | None) -> None:
        self._transport = transport
        self._group_id = group_id
        self._member = next(transport._member_ids)
        self._positions: dict[TopicPartition, int] = {}
        self._subscribed = False
        self._generation = -1
        self._rebalance = Rebalance()
        self._next_start = 0  # round-robin start among partitions, for fairness
        self._closed = False

    def assign(self, partitions: Sequence[TopicPartition]) -> None:
        if self._subscribed:
            raise RuntimeError("consumer is subscribed to a group; cannot also assign")
        self._positions = {(t, int(p)): 0 for t, p in partitions}

    def _subscribe(self, topics: list[str], rebalance: Rebalance) -> None:
        if self._positions and not self._subscribed:
            raise RuntimeError("consumer has manual assignments; cannot also subscribe")
        self._subscribed = True
        self._rebalance = rebalance
        self._transport._join(self._group_id, self._member, tuple(topics))

    def assignment(self) -> list[TopicPartition]:
        self._rebalance_if_needed()
        return sorted(self._positions)

    def seek(self, topic: str, partition: int, offset: int) -> None:
        tp = self._assigned(topic, partition)
        if offset < 0:
            raise ValueError(f"offset must be >= 0, got {offset}")
        self._positions[tp] = int(offset)

    def seek_to_beginning(self, topic: str, partition: int) -> None:
        self._positions[self._assigned(topic, partition)] = 0

    def position(self, topic: str, partition: int) -> int:
        return self._positions[self._assigned(topic, partition)]

    def poll(self, timeout_ms: int = 1000, max_records: int = 500) -> list[Message]:
        """Up to `max_records`, in offset order within each partition; waits for data."""
        if self._closed:
            raise RuntimeError("consumer is closed")
        deadline = time.monotonic() + max(timeout_ms, 0) / 1000
        cond = self._transport._cond
        while True:
            self._rebalance_if_needed()
            with cond:
                out = self._take(max_records)
                remaining = deadline - time.monotonic()
                if out or remaining <= 0:
                    return out
                cond.wait(min(remaining, 0.1))  # short waits so rebalances are noticed

    def close(self) -> None:
        if not self._closed and self._subscribed and self._group_id is not None:
            self._transport._leave(self._group_id, self._member)
        self._closed = True
        self._positions = {}

    def _take(self, max_records: int) -> list[Message]:
        logs = self._transport._logs
        tps = sorted(self._positions)
        out: list[Message] = []
        if not tps:
            return out
        start = self._next_start % len(tps)
        self._next_start += 1
        for tp in tps[start:] + tps[:start]:
            if len(out) >= max_records:
                break
            partitions = logs.get(tp[0], [])
            if tp[1] >= len(partitions):
                continue
            log, pos = partitions[tp[1]], self._positions[tp]
            chunk = log[pos : pos + max_records - len(out)]
            out.extend(chunk)
            self._positions[tp] = pos + len(chunk)
        return out

    def _rebalance_if_needed(self) -> None:
        if not self._subscribed or self._group_id is None or self._closed:
            return
        generation, share = self._transport._group_share(self._group_id, self._member)
        if generation == self._generation and set(share) == set(self._positions):
            return
        self._generation = generation
        old = sorted(self._positions)
        if set(share) == set(old):
            return
        self._rebalance.revoked(old)
        self._positions = {tp: 0 for tp in share}
        self._rebalance.assigned(share)

    def _assigned(self, topic: str, partition: int) -> TopicPartition:
        self._rebalance_if_needed()
        tp = (topic, int(partition))
        if tp not in self._positions:
            raise ValueError(f"partition {tp} is not assigned to this consumer")
        return tp


_shared_lock = threading.Lock()
_shared: EmbeddedTransport | None = None


def embedded_transport() -> EmbeddedTransport:
    """The process-wide embedded transport (created on first use)."""
    global _shared
    with _shared_lock:
        if _shared is None:
            _shared = EmbeddedTransport()
        return _shared


def reset_embedded() -> None:
    """Forget every embedded topic and group (tests)."""
    global _shared
    with _shared_lock:
        _shared = None
