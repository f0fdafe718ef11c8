"""Open the configured transport and model store: the services, or the embedded default.

The one place that chooses an implementation, kept apart from the interfaces
(`stream.transport`, `stream.store`) so that the implementations can import those
without importing each other back.
"""

from __future__ import annotations

import logging

from rankstream.stream.embedded import embedded_transport
from rankstream.stream.embedded_store import embedded_store
from rankstream.stream.settings import Settings
from rankstream.stream.store import DEFAULT_KEEP_VERSIONS, ModelStore
from rankstream.stream.transport import Transport

log = logging.getLogger("rankstream.stream")
_NOTICED: set[str] = set()


def _notice_embedded(what: str, variable: str) -> None:
    """Say once per process that the embedded (in-process, not shared) one is in use."""
    if what not in _NOTICED:
        _NOTICED.add(what)
        log.warning(
            "%s is unset: using the embedded %s (this process only; nothing is shared with "
            "other processes or kept after exit)",
            variable,
            what,
        )


def open_transport(settings: Settings) -> Transport:
    """Kafka when `settings.kafka_bootstrap` is set, else the process-wide embedded log."""
    if settings.kafka_bootstrap:
        # only the configured client: kafka-python +0.8 s at import, redis +0.5 s
        from rankstream.stream.kafka_transport import KafkaTransport

        return KafkaTransport(settings)

    _notice_embedded("transport", "RANKSTREAM_KAFKA_BOOTSTRAP")
    return embedded_transport()


def open_store(settings: Settings, keep_versions: int = DEFAULT_KEEP_VERSIONS) -> ModelStore:
    """Redis when `settings.redis_url` is set, else the process-wide embedded store."""
    if settings.redis_url:
        # see open_transport
        from rankstream.stream.redis_store import RedisModelStore

        return RedisModelStore(settings, keep_versions=keep_versions)

    _notice_embedded("model store", "RANKSTREAM_REDIS_URL")
    return embedded_store(settings.topic_prefix, keep_versions=keep_versions)


def probe_transport(settings: Settings, timeout_s: float) -> None:
    """Return once the configured broker answers within `timeout_s`, else raise
    TransportError (the embedded transport, in this process, always answers)."""
    if settings.kafka_bootstrap:
        # see open_transport
        from rankstream.stream.kafka_transport import probe_broker

        probe_broker(settings, timeout_s)
