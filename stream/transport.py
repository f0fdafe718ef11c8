"""The one transport interface both Kafka and the embedded in-process log implement.

Workers are written against these protocols only, so the same code runs on a real
broker and, with no services, inside one process. Offsets follow Kafka's meaning: a
consumer's position is the *next* offset it will read, per (topic, partition).
Failures surface as `stream.errors` types only (`TransportError` when the broker is
away, `CredentialsError` when it refuses us), never as a client library's exceptions.
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

TopicPartition = tuple[str, int]
RebalanceCallback = Callable[[list[TopicPartition]], None]


@dataclass(frozen=True)
class Message:
    """One record read from a partition log."""

    topic: str
    partition: int
    offset: int
    key: bytes | None
    value: bytes
    timestamp_ms: int


def check_topic_name(name: str) -> None:
    if not isinstance(name, str) or not name:
        raise ValueError(f"topic name must be a non-empty string, got {name!r}")


def _count(what: str, value: int) -> int:
    """`value` as an int >= 0 (numpy integers too); TypeError or ValueError otherwise."""
    try:
        number = operator.index(value)
    except TypeError:
        raise TypeError(f"{what} must be an integer, got {type(value).__name__}") from None
    if number < 0:
        raise ValueError(f"{what} must be >= 0, got {number}")
    return number


_BYTES = (bytes, bytearray, memoryview)


class Producer(Protocol):
    """What every producer offers. Both transports' producers subclass it to share
    `send`'s argument checks (a protocol's default implementation, PEP 544), so a bad
    argument is refused the same way, before anything is sent, on either transport; each
    puts the checked message on its log or broker its own way (`_send`)."""

    def send(
        self,
        topic: str,
        value: bytes,
        key: bytes | None = None,
        partition: int | None = None,
        records: int = 1,
    ) -> None:
        """Queue one message; `records`: the rows it carries, what a producer that counts
        its undelivered messages (`failures`) adds when this one is not delivered.

        Refused here: a topic that is not a non-empty string (ValueError); a value, or a
        key other than None, that is not bytes (TypeError); a partition or `records`
        that is not an integer (TypeError) or is negative (ValueError). A partition the
        topic does not have is the transport's to refuse.
        """
        check_topic_name(topic)
        if not isinstance(value, _BYTES):
            raise TypeError(f"value must be bytes, got {type(value).__name__}")
        if key is not None and not isinstance(key, _BYTES):
            raise TypeError(f"key must be bytes or None, got {type(key).__name__}")
        partition = None if partition is None else _count("partition", partition)
        self._send(topic, value, key, partition, _count("records", records))

    def _send(
        self, topic: str, value: bytes, key: bytes | None, partition: int | None, records: int
    ) -> None:
        """`send` once its arguments are checked."""
        ...

    def flush(self, timeout: float | None = None) -> None: ...

    def close(self, timeout: float | None = None) -> None:
        """Flush (at most `timeout` seconds; None: until done) and release the producer."""
        ...


@dataclass(frozen=True)
class Rebalance:
    """A group member's callbacks and the one rule both transports call them by: on a
    change of share, `on_revoke` with the partitions taken away (not called when there
    were none), then `on_assign` with the new share (called even when it is empty),
    each sorted."""

    on_assign: RebalanceCallback | None = None
    on_revoke: RebalanceCallback | None = None

    def revoked(self, partitions: Iterable[TopicPartition]) -> None:
        taken = sorted(partitions)
        if self.on_revoke is not None and taken:
            self.on_revoke(taken)

    def assigned(self, partitions: Iterable[TopicPartition]) -> None:
        if self.on_assign is not None:
            self.on_assign(sorted(partitions))


class Consumer(Protocol):
    """What every consumer offers. Both transports' consumers subclass it to share
    `subscribe`'s checks and its callbacks' rule (`Rebalance`); each joins its group its
    own way (`_subscribe`)."""

    _group_id: str | None  # the group `subscribe` joins; None: a consumer that only assigns

    def assign(self, partitions: Sequence[TopicPartition]) -> None: ...

    def subscribe(
        self,
        topics: Sequence[str],
        on_assign: RebalanceCallback | None = None,
        on_revoke: RebalanceCallback | None = None,
    ) -> None:
        """Join the consumer's group for a share of `topics`' partitions, told of every
        change of share through the callbacks (`Rebalance`). ValueError for a consumer
        opened without a group_id, or a topic name that is not a non-empty string."""
        if self._group_id is None:
            raise ValueError("subscribe needs a consumer opened with a group_id")
        names = list(topics)
        for name in names:
            check_topic_name(name)
        self._subscribe(names, Rebalance(on_assign, on_revoke))

    def _subscribe(self, topics: list[str], rebalance: Rebalance) -> None:
        """`subscribe` once its arguments are checked."""
        ...

    def assignment(self) -> list[TopicPartition]: ...

    def seek(self, topic: str, partition: int, offset: int) -> None: ...

    def seek_to_beginning(self, topic: str, partition: int) -> None: ...

    def position(self, topic: str, partition: int) -> int: ...

    def poll(self, timeout_ms: int = 1000, max_records: int = 500) -> list[Message]: ...

    def close(self) -> None: ...


class Transport(Protocol):
    def producer(self) -> Producer: ...

    def consumer(self, group_id: str | None = None) -> Consumer: ...

    def ensure_topics(self, topics: Mapping[str, int]) -> None: ...

    def delete_topics(self, topics: Sequence[str]) -> None:
        """Delete these topics and their records; unknown names are ignored."""
        ...

    def partitions_for(self, topic: str) -> list[int]: ...

    def partition_for(self, topic: str, key: bytes) -> int:
        """The partition this transport's producers send a record keyed `key` to (its one
        partitioning rule), so a writer that puts several keyed records in one message
        can send it where each of them would have gone alone."""
        ...

    def beginning_offsets(self, topic: str) -> dict[int, int]: ...

    def end_offsets(self, topic: str) -> dict[int, int]: ...

    def close(self) -> None: ...
