"""Sending a message that could not be used to the dead-letter topic, one way for every worker.

A dead letter carries the original bytes, the reason, a detail and the source
topic/partition/offset (`stream.schema.dead_letter`); its key is
"topic:partition:offset", so a consumer of the dead-letter topic can drop the
duplicates a restarted worker may send for messages it re-reads after a crash.

Sending must never stop a worker: a transient failure is logged and the message is
still counted (`rankstream_dead_letters_total{reason}`), because the worker moves past
it either way.
"""

from __future__ import annotations

import logging

from rankstream.stream.schema import dead_letter
from rankstream.stream.transport import Message, Producer
from rankstream.telemetry import prometheus_metrics as metrics
from rankstream.telemetry.structured_log import log_event


def dead_letter_key(message: Message) -> bytes:
    """The key a dead letter is sent with: its source position, unique per message."""
    return f"{message.topic}:{message.partition}:{message.offset}".encode()


def send_dead_letter(
    producer: Producer | None,
    topic: str,
    message: Message,
    reason: str,
    detail: str,
    *,
    transient: tuple[type[BaseException], ...],
    logger: logging.Logger,
    rows: list[int] | None = None,
) -> None:
    """Count, log and (when there is a producer) send one dead letter to `topic`.

    `rows` names the rejected rows of a block whose other rows were used. Errors in
    `transient` are logged, not raised: the worker carries on past the message.
    """
    metrics.DEAD_LETTERS.labels(reason=metrics.bounded_reason(reason)).inc()
    log_event(
        logger,
        "dead letter",
        level=logging.WARNING,
        reason=reason,
        detail=detail[:200],
        topic=message.topic,
        partition=message.partition,
        offset=message.offset,
    )
    if producer is None:
        return
    value = dead_letter(message.value, reason, detail, message, rows)
    try:
        producer.send(topic, value, key=dead_letter_key(message))
    except transient as exc:
        log_event(
            logger,
            "dead-letter send failed",
            level=logging.ERROR,
            error=repr(exc),
            offset=message.offset,
        )
