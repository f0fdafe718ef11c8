"""The transport on a real Kafka broker (kafka-python 3.0).

Messages are blocks of thousands of records (0.6-3 MiB each), so client limits are set
for big messages (the broker accepts record batches of up to 16 MiB,
`stream.schema.MAX_MESSAGE_BYTES`): producer batches of up to 8 MiB (several blocks per
produce request, half the broker's limit so a batch plus its header always fits), a
few milliseconds of linger, 8 MiB socket buffers, fetches of several MiB. Compression
is off: float features barely compress and the CPU is better spent elsewhere.
kafka-python checks record-batch CRCs with the `crc32c` C extension when it is installed.

Exactly-once needs the idempotent producer (acks=all, kafka-python's default
`enable_idempotence=True`): a produce request retried after a lost reply would
otherwise append the same block twice, and the workers would learn it twice (their
stored offsets make *consuming* exactly-once, not producing).

Offsets are never auto-committed: a worker's position lives in the model store next to
the state it produced, and it seeks there on assignment. Brokers come and go: `poll`
logs and backs off on a transient failure instead of raising into the worker loop
(kafka-python reconnects by itself), while `send`/`flush` raise `TransportError` once the
client's own retries and delivery timeout are spent.
"""

from __future__ import annotations

import logging
import socket
import ssl
import struct
import threading
import time
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import kafka.errors
from kafka import KafkaAdminClient, KafkaConsumer, KafkaProducer, TopicPartition
from kafka.consumer.subscription_state import ConsumerRebalanceListener
from kafka.errors import (
    IllegalStateError,
    KafkaError,
    TopicAlreadyExistsError,
    UnknownTopicOrPartitionError,
)
from kafka.partitioner.default import murmur2

from rankstream.stream.errors import (
    TransportError,
    credentials_refused,
    translate_public_methods,
    translating,
)
from rankstream.stream.schema import MAX_MESSAGE_BYTES
from rankstream.stream.transport import Consumer, Message, Producer, Rebalance

if TYPE_CHECKING:
    from rankstream.stream.settings import Settings

log = logging.getLogger(__name__)

MIB = 1024 * 1024
PRODUCER_TUNING: dict[str, Any] = {
    "acks": "all",
    "enable_idempotence": True,  # retries never duplicate a block (module doc)
    "linger_ms": 5,
    "batch_size": 8 * MIB,
    "max_request_size": MAX_MESSAGE_BYTES,
    "send_buffer_bytes": 8 * MIB,
    "compression_type": None,  # float features barely compress; CPU matters more here
    "max_block_ms": 30_000,
    "delivery_timeout_ms": 60_000,
    "request_timeout_ms": 20_000,
}
CONSUMER_TUNING: dict[str, Any] = {
    "enable_auto_commit": False,
    "auto_offset_reset": "earliest",
    "max_partition_fetch_bytes": 8 * MIB,
    "fetch_max_bytes": 32 * MIB,
    "fetch_max_wait_ms": 100,
    "receive_buffer_bytes": 4 * MIB,
    "check_crcs": True,
    "session_timeout_ms": 10_000,
    "heartbeat_interval_ms": 1_000,
    # A group member whose first join found no metadata for a new topic gets nothing
    # assigned; a metadata change makes the group rebalance, so refresh it every 10 s
    # rather than kafka-python's 5 minutes.
    "metadata_max_age_ms": 10_000,
}
_POLL_BACKOFF_MAX_S = 5.0
_TOPIC_VISIBLE_S = 30.0  # a created topic's partitions reach every broker's metadata
# SASL/ACL refusals: raised at once as CredentialsError, never backed off
_REFUSED = (
    kafka.errors.SaslAuthenticationFailedError,
    kafka.errors.UnsupportedSaslMechanismError,
    kafka.errors.AuthorizationError,
)
# Every public call: client failures become TransportError, refusals CredentialsError.
kafka_call = translating("kafka", TransportError, lambda: (KafkaError, OSError), lambda: _REFUSED)
_translated = translate_public_methods(kafka_call)


def _transport_error(what: str, exc: BaseException) -> RuntimeError:
    """A failed call as TransportError (retried), or CredentialsError when refused (not)."""
    if isinstance(exc, _REFUSED):
        return credentials_refused("kafka", exc)
    return TransportError(f"{what}: {exc}")


def client_config(settings: Settings) -> dict[str, Any]:
    """Bootstrap and security settings shared by producer, consumer and admin clients."""
    config: dict[str, Any] = {
        "bootstrap_servers": settings.kafka_bootstrap.split(","),  # type: ignore[union-attr]
        "security_protocol": settings.kafka_security_protocol,
        "reconnect_backoff_max_ms": 5_000,
    }
    optional = {
        "sasl_mechanism": settings.kafka_sasl_mechanism,
        "sasl_plain_username": settings.kafka_sasl_username,
        "sasl_plain_password": settings.kafka_sasl_password,
        "ssl_cafile": settings.kafka_ssl_cafile,
        "ssl_certfile": settings.kafka_ssl_certfile,  # mutual TLS: the client's certificate
        "ssl_keyfile": settings.kafka_ssl_keyfile,
    }
    config.update({k: v for k, v in optional.items() if v is not None})
    return config


_PROBE_ID = 0x52534B  # the probe's correlation id
# ApiVersions (key 18) v0: header (key, version, correlation id, client id), no body
_API_VERSIONS = struct.pack(">hhih", 18, 0, _PROBE_ID, 10) + b"rankstream"


def probe_broker(settings: Settings, timeout_s: float) -> None:
    """Return once a bootstrap broker answers an ApiVersions request within `timeout_s`;
    raise TransportError otherwise.

    A paused broker still completes TCP handshakes (the kernel does), so only an answer
    proves it serves. ApiVersions is what every client sends first, before SASL, so it
    needs no credentials; TLS listeners get a TLS connection with the configured files.
    """
    deadline = time.monotonic() + timeout_s
    failures = []
    for server in settings.kafka_bootstrap.split(","):  # type: ignore[union-attr]
        host, _, port = server.strip().rpartition(":")
        try:
            _ask_api_versions(host.strip("[]"), int(port), settings, deadline)
            return
        except (OSError, ValueError) as exc:
            failures.append(f"{server}: {exc or type(exc).__name__}")
    raise TransportError(f"no broker answered within {timeout_s:g}s ({'; '.join(failures)})")


def _ask_api_versions(host: str, port: int, settings: Settings, deadline: float) -> None:
    def left() -> float:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise TimeoutError("timed out")
        return remaining

    with socket.create_connection((host, port), timeout=left()) as raw:
        sock: socket.socket = raw
        if settings.kafka_security_protocol in ("SSL", "SASL_SSL"):
            context = ssl.create_default_context(cafile=settings.kafka_ssl_cafile)
            if settings.kafka_ssl_certfile:
                context.load_cert_chain(settings.kafka_ssl_certfile, settings.kafka_ssl_keyfile)
            sock = context.wrap_socket(raw, server_hostname=host)
        sock.settimeout(left())
        sock.sendall(struct.pack(">i", len(_API_VERSIONS)) + _API_VERSIONS)
        answer = b""
        while len(answer) < 8:  # size, then the correlation id
            sock.settimeout(left())
            chunk = sock.recv(8 - len(answer))
            if not chunk:
                raise ConnectionError("the broker closed the connection")
            answer += chunk
        if struct.unpack(">i", answer[4:8])[0] != _PROBE_ID:
            raise ValueError("not a Kafka ApiVersions answer")


@_translated
class KafkaTransport:
    """Factory for producers/consumers plus topic administration and offset lookups."""

    def __init__(self, settings: Settings) -> None:
        if not settings.kafka_bootstrap:
            raise ValueError("KafkaTransport needs settings.kafka_bootstrap")
        self._config = client_config(settings)
        self._lock = threading.Lock()  # the metadata consumer is not thread-safe
        self._meta: KafkaConsumer | None = None
        self._admin: KafkaAdminClient | None = None

    def producer(self) -> KafkaTransportProducer:
        return KafkaTransportProducer(self._config)

    def consumer(self, group_id: str | None = None) -> KafkaTransportConsumer:
        return KafkaTransportConsumer(self._config, group_id)

    def ensure_topics(self, topics: Mapping[str, int]) -> None:
        """Create missing topics (broker-default replication); existing ones are kept."""
        for name, partitions in topics.items():
            if int(partitions) < 1:
                raise ValueError(f"topic {name!r}: partitions must be >= 1, got {partitions}")
        with self._lock:
            if self._admin is None:
                self._admin = KafkaAdminClient(**self._config)
            missing = {
                name: {"num_partitions": int(n), "replication_factor": -1}
                for name, n in topics.items()
                if name not in self._admin.list_topics()
            }
            if not missing:
                return
            try:
                self._admin.create_topics(missing, wait_for_metadata=True)
            except TopicAlreadyExistsError:
                pass  # created concurrently by another process: that is the goal
            except KafkaError as exc:
                raise TransportError(f"could not create topics {sorted(missing)}: {exc}") from exc
            self._await_partitions(sorted(missing))

    def _await_partitions(self, topics: list[str]) -> None:
        """Return once the metadata client sees every topic's partitions.

        On a cluster the admin's broker knows a new topic before the others: a worker
        that asked another one at once got no partitions, assigned nothing and consumed
        nothing. (`partitions_for_topic` asks the cluster again while a topic is unknown.)
        """
        deadline = time.monotonic() + _TOPIC_VISIBLE_S
        for topic in topics:
            while not self._partitions(topic):
                if time.monotonic() > deadline:
                    raise TransportError(
                        f"topic {topic!r} created but its partitions not visible "
                        f"after {_TOPIC_VISIBLE_S:.0f} s"
                    )
                time.sleep(0.1)

    def partitions_for(self, topic: str) -> list[int]:
        """The topic's partitions; [] when the broker does not know the topic.

        Same answer as the embedded transport. (kafka-python before 3.0 returned None
        for an unknown topic, which used to end in `sorted(None)`.)
        """
        with self._lock:
            return self._partitions(topic)

    def partition_for(self, topic: str, key: bytes) -> int:
        """Where kafka-python's (and the Java client's) default partitioner sends a record
        keyed `key`: positive murmur2 of the key modulo the topic's partition count."""
        partitions = self.partitions_for(topic)
        if not partitions:
            raise TransportError(f"topic {topic!r} unknown to the broker")
        return partitions[(murmur2(bytes(key)) & 0x7FFFFFFF) % len(partitions)]

    def delete_topics(self, topics: Sequence[str]) -> None:
        """Delete these topics and their data; missing ones are ignored (benchmark clean-up)."""
        with self._lock:
            if self._admin is None:
                self._admin = KafkaAdminClient(**self._config)
            existing = [t for t in topics if t in self._admin.list_topics()]
            if not existing:
                return
            try:
                self._admin.delete_topics(existing)
            except UnknownTopicOrPartitionError:
                pass  # deleted concurrently: that is the goal
            except KafkaError as exc:
                raise TransportError(f"could not delete topics {existing}: {exc}") from exc
            # The metadata client's cache still lists them (it asks the cluster again
            # only for a topic it does not know): start it afresh.
            if self._meta is not None:
                meta, self._meta = self._meta, None
                meta.close()

    def beginning_offsets(self, topic: str) -> dict[int, int]:
        return self._offsets(topic, "beginning_offsets")

    def end_offsets(self, topic: str) -> dict[int, int]:
        return self._offsets(topic, "end_offsets")

    def close(self) -> None:
        """Close the metadata and admin clients (each even if the other's close raises).

        An unclosed kafka-python client keeps a metadata-refresh loop running, which
        logs errors forever once its broker is gone.
        """
        with self._lock:
            meta, admin, self._meta, self._admin = self._meta, self._admin, None, None
            try:
                if meta is not None:
                    meta.close()
            finally:
                if admin is not None:
                    admin.close()

    def _metadata(self) -> KafkaConsumer:
        if self._meta is None:
            self._meta = KafkaConsumer(**self._config, enable_auto_commit=False)
        return self._meta

    def _partitions(self, topic: str) -> list[int]:
        return sorted(self._metadata().partitions_for_topic(topic) or ())

    def _offsets(self, topic: str, which: str) -> dict[int, int]:
        with self._lock:
            tps = [TopicPartition(topic, p) for p in self._partitions(topic)]
            if not tps:
                return {}
            return {tp.partition: int(o) for tp, o in getattr(self._meta, which)(tps).items()}


@_translated
class KafkaTransportProducer(Producer):
    """Asynchronous sends; the first delivery failure is raised by the next call."""

    def __init__(self, config: Mapping[str, Any]) -> None:
        self._producer = KafkaProducer(**config, **PRODUCER_TUNING)
        self._failure: BaseException | None = None
        self.failures = 0  # rows (`send`'s records) not delivered after retries, ever
        self.delivered = 0  # rows the broker acknowledged, ever

    def _send(
        self, topic: str, value: bytes, key: bytes | None, partition: int | None, records: int
    ) -> None:
        self._raise_failure()
        if len(value) > MAX_MESSAGE_BYTES:
            raise ValueError(f"message of {len(value)} bytes exceeds {MAX_MESSAGE_BYTES}")
        try:
            future = self._producer.send(topic, value=value, key=key, partition=partition)
        except KafkaError as exc:
            raise _transport_error(f"send to {topic!r} failed", exc) from exc
        future.add_callback(lambda _: self._record_delivery(records))
        future.add_errback(lambda exc: self._record_failure(exc, records))

    def flush(self, timeout: float | None = None) -> None:
        try:
            self._producer.flush(timeout=timeout)
        except KafkaError as exc:
            raise _transport_error("flush failed", exc) from exc
        self._raise_failure()

    def close(self, timeout: float | None = None) -> None:
        """Flush for at most `timeout` seconds (None: until done), then close: what is
        still unacknowledged by then is dropped (its senders were told it failed)."""
        self._producer.close(timeout=timeout)

    def _record_delivery(self, records: int) -> None:
        self.delivered += records

    def _record_failure(self, exc: BaseException, records: int = 1) -> None:
        self.failures += records
        if self._failure is None:
            self._failure = exc

    def _raise_failure(self) -> None:
        if self._failure is not None:
            exc, self._failure = self._failure, None
            raise _transport_error("delivery failed after retries", exc) from exc


class _Listener(ConsumerRebalanceListener):
    """kafka-python's rebalance events, as (topic, partition) pairs, to a `Rebalance`."""

    def __init__(self, rebalance: Rebalance) -> None:
        self._rebalance = rebalance

    def on_partitions_revoked(self, revoked: Any) -> None:
        self._rebalance.revoked((tp.topic, tp.partition) for tp in revoked)

    def on_partitions_assigned(self, assigned: Any) -> None:
        self._rebalance.assigned((tp.topic, tp.partition) for tp in assigned)


@_translated
class KafkaTransportConsumer(Consumer):
    """kafka-python's consumer behind the `Consumer` protocol; positions are explicit."""

    def __init__(self, config: Mapping[str, Any], group_id: str | None) -> None:
        self._group_id = group_id
        self._consumer = KafkaConsumer(**config, **CONSUMER_TUNING, group_id=group_id)
        self._backoff_s = 0.0

    def assign(self, partitions: Sequence[tuple[str, int]]) -> None:
        try:
            self._consumer.assign([TopicPartition(t, int(p)) for t, p in partitions])
        except IllegalStateError as exc:
            raise RuntimeError(f"cannot assign: {exc}") from exc

    def _subscribe(self, topics: list[str], rebalance: Rebalance) -> None:
        for topic in topics:
            # Fill the metadata cache first: a group leader whose first join lacks the
            # topic's partitions assigns nothing (kafka-python warns "No partition
            # metadata"), and a member left with nothing was seen to stall its rebalance.
            self._consumer.partitions_for_topic(topic)
        try:
            self._consumer.subscribe(topics, listener=_Listener(rebalance))
        except IllegalStateError as exc:
            raise RuntimeError(f"cannot subscribe: {exc}") from exc

    def assignment(self) -> list[tuple[str, int]]:
        return sorted((tp.topic, tp.partition) for tp in self._consumer.assignment())

    def seek(self, topic: str, partition: int, offset: int) -> None:
        if offset < 0:
            raise ValueError(f"offset must be >= 0, got {offset}")
        tp = self._assigned(topic, partition)
        self._consumer.seek(tp, int(offset))

    def seek_to_beginning(self, topic: str, partition: int) -> None:
        self._consumer.seek_to_beginning(self._assigned(topic, partition))

    def position(self, topic: str, partition: int) -> int:
        return int(self._consumer.position(self._assigned(topic, partition)))

    def poll(self, timeout_ms: int = 1000, max_records: int = 500) -> list[Message]:
        """Records in offset order per partition; [] (logged, backed off) on broker trouble."""
        try:
            batches = self._consumer.poll(timeout_ms=timeout_ms, max_records=max_records)
        except _REFUSED as exc:
            raise credentials_refused("kafka", exc) from exc
        except KafkaError as exc:
            self._backoff_s = min(max(2 * self._backoff_s, 0.1), _POLL_BACKOFF_MAX_S)
            log.warning("kafka poll failed (%s); retrying in %.1fs", exc, self._backoff_s)
            time.sleep(self._backoff_s)
            return []
        self._backoff_s = 0.0
        return [
            Message(r.topic, r.partition, r.offset, r.key, r.value, r.timestamp)
            for records in batches.values()
            for r in records
        ]

    def close(self) -> None:
        self._consumer.close(autocommit=False)

    def _assigned(self, topic: str, partition: int) -> TopicPartition:
        tp = TopicPartition(topic, int(partition))
        if tp not in self._consumer.assignment():
            raise ValueError(f"partition {(topic, partition)} is not assigned to this consumer")
        return tp
