"""POST /v1/feedback's and /v1/clicks' delivery: once per idempotency key, acknowledged
only once on the broker.

Retries are the normal answer to a timeout, so a retried feedback must not train twice.
Like Stripe's idempotency keys, each feedback has a key (the `Idempotency-Key` header, by
default its `query_id`) and the store remembers the first answer under it for the
retention window (`Settings.idempotency_retention_s`): a repeat is answered that first
answer with `"duplicate": true`, and nothing is published.

The race (two serve processes, or a client retrying while its first attempt is still
in flight) is settled by claiming the key before publishing: `claim_key` sets a
pending token only if the key is free (SET NX on Redis), so exactly one attempt
publishes; the others are told it is in progress (409) or get its answer. The claim
then ends one of three ways:

* the broker acknowledged within the deadline: the answer replaces the claim;
* publishing failed before anything was handed over: the claim is released, a retry
  may publish (the producer is opened before the key is claimed, so a broker that does
  not answer the bootstrap holds no key: its retries get 503, not 409);
* the broker did not answer within the deadline (a stall): the request answers 503,
  but its messages sit in the producer and may still be delivered, so the claim is
  handed to a settler thread that waits for the producer's outcome: delivered, the
  answer is stored (a retry then gets it, and publishes nothing); a delivery failure
  after the client's own retries and delivery timeout (`stream.kafka_transport`), the
  claim is released. A claim nobody settles (the process died) expires after
  `PENDING_CLAIM_S`.

One desk serves each route: `FeedbackDesk(settings, store)` publishes judged queries with
a `FeedbackProducer`; `FeedbackDesk(settings, store, ClickProducer.open, publish_clicks)`
publishes clicks with a `ClickProducer` (their keys are apart: `serve.app` prefixes them).

Everything here runs on worker threads; the HTTP layer bounds how long a request waits
for it (`Settings.api_deadline_s`).
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import orjson

from rankstream.producers.candidate_checks import FieldError
from rankstream.producers.click_producer import ClickProducer, by_impression
from rankstream.producers.feedback_producer import Feedback, FeedbackProducer, Receipt
from rankstream.stream.click_schema import Click
from rankstream.stream.errors import TRANSIENT
from rankstream.stream.settings import Settings
from rankstream.stream.store import ModelStore
from rankstream.telemetry.structured_log import get_logger, log_event

log = get_logger("rankstream.serve.feedback")

PENDING = b"pending:"  # a claim's token starts so; an answer is a JSON object
# Longer than the producer's delivery timeout (60 s) plus a deadline or two: a pending
# claim outlives any delivery it waits for, and no longer.
PENDING_CLAIM_S = 180.0
_SETTLE_EVERY_S = 0.5


class InProgress(Exception):  # noqa: N818 (an HTTP answer: 409)
    """Another attempt with this key is being delivered; retry after a while."""


Publisher = FeedbackProducer | ClickProducer


@dataclass
class _Unsettled:
    producer: Publisher  # the one it was sent with
    key: str
    token: bytes
    answer: dict[str, Any] | None  # None: the send failed after queueing (no receipt)
    failures_before: int  # the producer's failure count before this feedback was sent
    since: float


def receipt_document(receipt: Receipt) -> dict[str, Any]:
    return {
        "query_id": receipt.query_id,
        "seq": receipt.seq,
        "triplets": receipt.triplets,
        "judged": receipt.judged,
        "distinct_grades": receipt.distinct_grades,
        "duplicate": False,
    }


def publish_feedback(producer: FeedbackProducer, feedback: Feedback) -> dict[str, Any]:
    """Queue one judged query; its answer (a FieldError before anything is queued)."""
    return receipt_document(producer.send(feedback))


def publish_clicks(producer: ClickProducer, clicks: Sequence[Click]) -> dict[str, Any]:
    """Hand a request's clicks over; its answer: impressions, clicks, rows."""
    rows = producer.send(clicks)
    clicked = sum(click.clicked for click in clicks)
    return {"impressions": len(by_impression(clicks)), "clicks": clicked, "rows": rows,
            "duplicate": False}  # fmt: skip


class FeedbackDesk:
    """Takes feedback (judged queries, or clicks) for the API: claims its key, produces
    it, settles the key."""

    def __init__(
        self,
        settings: Settings,
        store: ModelStore,
        open_producer: Callable[[Settings], Any] = FeedbackProducer.open,
        publish: Callable[[Any, Any], dict[str, Any]] = publish_feedback,
    ) -> None:
        self.settings = settings
        self.store = store
        self._open_producer = open_producer
        self._publish = publish
        self._producer: Publisher | None = None
        self._retired: list[Publisher] = []  # replaced after a failure; closed soon
        self._open_lock = threading.Lock()
        self._unsettled: list[_Unsettled] = []
        self._unsettled_lock = threading.Lock()
        self._stop = threading.Event()
        self._settler = threading.Thread(target=self._settle_loop, name="feedback-settler",
                                         daemon=True)  # fmt: skip
        self._settler.start()

    # --- one request (a worker thread) -------------------------------------------------
    def accept(self, key: str, feedback: Any) -> dict[str, Any]:
        """The answer for this feedback: its receipt once on the broker, or the first
        answer for `key` marked duplicate. Raises InProgress, or a TRANSIENT error when
        the broker or the store did not answer within the deadline."""
        # Opened before the key is claimed: opening (bootstrap, topics) can outlast the
        # request's deadline by the client's request timeout while the broker does not
        # answer, and a claim held meanwhile would answer the client's retries 409 "in
        # progress" for an attempt that was answered 503 and has handed nothing over.
        producer = self._open()
        token = PENDING + uuid.uuid4().hex.encode()
        retention = self.settings.idempotency_retention_s
        held = self.store.claim_key(key, token, min(PENDING_CLAIM_S, retention))
        if held is not None:
            if held.startswith(PENDING):
                raise InProgress(f"feedback with key {key!r} is being delivered")
            return {**orjson.loads(held), "duplicate": True}
        failures_before = _failures(producer)
        answer: dict[str, Any] | None = None
        try:
            # a FieldError is raised before anything is queued; a transport error after:
            # the query then stays queued and goes out with the next send (`ingest`)
            answer = self._publish(producer, feedback)
            producer.flush(self.settings.api_deadline_s)
        except FieldError:
            self._release(key, token)
            raise
        except TRANSIENT:
            with self._unsettled_lock:  # maybe delivered later: the settler decides
                self._unsettled.append(
                    _Unsettled(producer, key, token, answer, failures_before, time.monotonic())
                )
            raise
        self._store_answer(key, answer)
        return answer

    def _open(self) -> Publisher:
        """The producer; a new one once a delivery failed. (kafka-python's idempotent
        producer, once a batch expired in a long broker stall, was seen to hold every
        later batch of that partition back well after the broker came back; a new
        producer has a new producer id and none of that state.)"""
        with self._open_lock:
            if self._producer is not None and _failures(self._producer):
                log_event(log, "feedback producer replaced after a failed delivery",
                          level=logging.WARNING)  # fmt: skip
                self._retired.append(self._producer)
                self._producer = None
            if self._producer is None:
                self._producer = self._open_producer(self.settings)
            return self._producer

    def _release(self, key: str, token: bytes) -> None:
        try:
            self.store.release_key(key, token)
        except TRANSIENT as exc:  # it expires by itself after PENDING_CLAIM_S
            log_event(log, "idempotency claim not released", level=logging.WARNING,
                      key=key[:200], error=repr(exc)[:200])  # fmt: skip

    def _store_answer(self, key: str, answer: dict[str, Any]) -> bool:
        try:
            self.store.settle_key(key, orjson.dumps(answer), self.settings.idempotency_retention_s)
            return True
        except TRANSIENT as exc:
            log_event(log, "idempotency answer not stored yet", level=logging.WARNING,
                      key=key[:200], error=repr(exc)[:200])  # fmt: skip
            return False

    # --- the settler thread -------------------------------------------------------------
    def _settle_loop(self) -> None:
        while not self._stop.wait(_SETTLE_EVERY_S):
            with self._unsettled_lock:
                waiting = list(self._unsettled)
            for producer in {id(e.producer): e.producer for e in waiting}.values():
                self._settle(producer, [e for e in waiting if e.producer is producer])
            with self._open_lock:
                retired = [p for p in self._retired if all(e.producer is not p for e in waiting)]
                self._retired = [p for p in self._retired if p not in retired]
            for producer in retired:  # nothing of it left to settle
                try:
                    producer.close(0.0)
                except TRANSIENT as exc:
                    log_event(log, "retired producer closed", error=repr(exc)[:200])

    def _settle(self, producer: Publisher, waiting: list[_Unsettled]) -> None:
        try:
            producer.flush(self.settings.api_deadline_s)
            flushed = True
        except TRANSIENT:
            flushed = False  # still stalled, or a delivery failed: the count tells
        failures = _failures(producer)
        done = []
        for entry in waiting:
            if failures > entry.failures_before:
                # some delivery failed since this one was sent: it may be this one, so
                # the claim goes (its sender was answered 503 and may retry)
                self._release(entry.key, entry.token)
                done.append(entry)
            elif entry.answer is None:
                # queued, outcome unknown, no answer to store: the claim stays pending
                # until it expires, so a retry can never publish it a second time
                done.append(entry)
            elif flushed and self._store_answer(entry.key, entry.answer):
                log_event(log, "feedback delivered after its deadline", key=entry.key[:200])
                done.append(entry)
            elif time.monotonic() - entry.since > PENDING_CLAIM_S:
                done.append(entry)  # the claim has expired in the store by now
        with self._unsettled_lock:
            self._unsettled = [e for e in self._unsettled if e not in done]

    def close(self, timeout: float) -> None:
        """Stop the settler; flush and close the producers within `timeout` seconds."""
        until = time.monotonic() + timeout
        self._stop.set()
        self._settler.join(timeout=min(timeout, 1.0))
        with self._open_lock:
            producers = [*self._retired, *([self._producer] if self._producer else [])]
        for producer in producers:
            try:
                producer.close(max(until - time.monotonic(), 0.0))
            except TRANSIENT as exc:
                log_event(log, "feedback producer closed unflushed", level=logging.WARNING,
                          error=repr(exc)[:200])  # fmt: skip


def _failures(producer: Publisher) -> int:
    """Deliveries the transport gave up on so far (the embedded one never does)."""
    return int(getattr(producer.producer, "failures", 0))
