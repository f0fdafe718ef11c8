"""Surviving unreachable services: which errors are transient, back-off, retry loops.

Shared by every long-running worker (online, batch, evaluator), so "a broker or Redis
went away" is recognised and retried the same way everywhere instead of each worker
keeping its own copy.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from rankstream.stream.errors import TRANSIENT
from rankstream.telemetry.structured_log import log_event

if TYPE_CHECKING:
    from rankstream.stream.transport import Consumer, Message

MAX_BACKOFF_SECONDS = 10.0


@dataclass
class Backoff:
    """Exponential back-off for retries after transient errors."""

    delay: float = 0.0
    not_before: float = 0.0

    def failed(self) -> float:
        self.delay = min(MAX_BACKOFF_SECONDS, max(0.1, self.delay * 2))
        self.not_before = time.monotonic() + self.delay
        return self.delay

    def succeeded(self) -> None:
        self.delay, self.not_before = 0.0, 0.0

    def ready(self) -> bool:
        return time.monotonic() >= self.not_before


def transient_errors() -> tuple[type[BaseException], ...]:
    """Errors that mean "a service is unreachable for now": retry, never crash.

    `stream` translates the client libraries' exceptions into these (`stream.errors`);
    refused credentials become `CredentialsError`, which is none of them, so no retry
    path here can swallow a wrong password.
    """
    return TRANSIENT


def retry_until_stopped(
    what: str,
    action: Callable[[], None],
    stop: threading.Event,
    transient: tuple[type[BaseException], ...],
    logger: logging.Logger,
) -> None:
    """Run `action` until it succeeds, backing off on transient errors.

    Once `stop` is set a transient error is re-raised instead of retried, so a worker
    asked to shut down while its services are away does not hang. Refused credentials
    (`CredentialsError`, not transient) propagate at once: no retry can fix them.
    """
    backoff = Backoff()
    while True:
        try:
            action()
            return
        except transient as exc:
            if stop.is_set():
                raise
            delay = backoff.failed()
            log_event(
                logger,
                f"{what} failed; retrying",
                level=logging.WARNING,
                error=repr(exc),
                retry_in_s=delay,
            )
            stop.wait(delay)


def poll_or_back_off(
    consumer: Consumer,
    timeout_ms: int,
    max_records: int,
    transient: tuple[type[BaseException], ...],
    backoff: Backoff,
    stop: threading.Event,
    logger: logging.Logger,
) -> list[Message]:
    """One consumer poll; [] after a back-off (cut short by `stop`) when the broker is away."""
    try:
        messages = consumer.poll(timeout_ms=timeout_ms, max_records=max_records)
    except transient as exc:
        delay = backoff.failed()
        log_event(
            logger,
            "poll failed; retrying",
            level=logging.WARNING,
            error=repr(exc),
            retry_in_s=delay,
        )
        stop.wait(delay)
        return []
    backoff.succeeded()
    return messages


def final_save(
    what: str,
    save: Callable[[], bool],
    fenced: Callable[[], bool],
    backoff: Backoff,
    logger: logging.Logger,
    attempts: int = 5,
) -> None:
    """A worker's last save on the way out: a few tries, then give up (the stored state
    stays valid, so a restart resumes from the previous save)."""
    for _ in range(attempts):
        if save() or fenced():
            return
        time.sleep(backoff.delay)
    log_event(
        logger, f"final {what} failed; a restart resumes from the previous one", level=logging.ERROR
    )
