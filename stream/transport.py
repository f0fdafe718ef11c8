"""The one transport interface both Kafka and the embedded in-process log implement.

Workers are written against these protocols only, so the same code runs on a real
broker and, with no services, inside one process. Offsets follow Kafka's meaning: a
consumer's position is the *next* offset it will read, per (topic, partition).
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


class TransportError(RuntimeError):
    """A send or admin operation failed after the client's own retries."""


class CredentialsError(RuntimeError):
    """Kafka or Redis refused our credentials (authentication or authorization).

    Deliberately *not* a ConnectionError/TransportError: retrying cannot fix a wrong
    password or a missing ACL, so no retry path catches it and the process stops with
    this message instead of retrying forever.
    """


def credential_errors() -> tuple[type[BaseException], ...]:
    """Client errors that mean "refused credentials", wherever a client raises them.

    redis-py's AuthenticationError/AuthorizationError subclass its ConnectionError (so
    redis-py and `workers.resilience.transient_errors` would retry them), and Kafka's
    SASL/ACL failures are KafkaErrors; every retry path checks this tuple first.
    """
    import kafka.errors
    import redis.exceptions

    return (
        redis.exceptions.AuthenticationError,
        redis.exceptions.AuthorizationError,
        kafka.errors.SaslAuthenticationFailedError,
        kafka.errors.UnsupportedSaslMechanismError,
        kafka.errors.AuthorizationError,
    )


def credentials_refused(service: str, exc: BaseException) -> CredentialsError:
    """The one message for refused credentials: what refused, why, and what to check."""
    return CredentialsError(
        f"{service} refused the credentials ({type(exc).__name__}: {exc}); not retrying: "
        f"check the RANKSTREAM_{service.upper()}_* user/password settings and ACLs"
    )


class Producer(Protocol):
    def send(
        self, topic: str, value: bytes, key: bytes | None = None, partition: int | None = None
    ) -> None: ...

    def flush(self, timeout: float | None = None) -> None: ...

    def close(self) -> None: ...


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

    def beginning_offsets(self, topic: str) -> dict[int, int]: ...

    def end_offsets(self, topic: str) -> dict[int, int]: ...

    def close(self) -> None: ...
