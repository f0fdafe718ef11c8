"""The one transport interface both Kafka and the embedded in-process log implement.

Workers are written against these protocols only, so the same code runs on a real
broker and, with no services, inside one process. Offsets follow Kafka's meaning: a
consumer's position is the *next* offset it will read, per (topic, partition).
Failures surface as `stream.errors` types only (`TransportError` when the broker is
away, `CredentialsError` when it refuses us), never as a client library's exceptions.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
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


class Producer(Protocol):
    def send(
        self,
        topic: str,
        value: bytes,
        key: bytes | None = None,
        partition: int | None = None,
        records: int = 1,
    ) -> None:
        """Queue one message; `records`: the rows it carries, what a producer that counts
        its undelivered messages (`failures`) adds when this one is not delivered."""
        ...

    def flush(self, timeout: float | None = None) -> None: ...

    def close(self, timeout: float | None = None) -> None:
        """Flush (at most `timeout` seconds; None: until done) and release the producer."""
        ...


class Consumer(Protocol):
    def assign(self, partitions: Sequence[TopicPartition]) -> None: ...

    def subscribe(
        self,
        topics: Sequence[str],
        on_assign: RebalanceCallback | None = None,
        on_revoke: RebalanceCallback | None = None,
    ) -> None: ...

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
