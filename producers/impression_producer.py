"""Impression logging: every served ranking onto the impressions topic, never in its way.

An engine that posts clicks needs to have told rankstream what it showed, so `rankstream
serve` logs each ranking it answers as an `Impression` (`stream.click_schema`) without
any other step on the engine's side (`Settings.impression_logging`, on by default).

Ranking must never wait on the broker, so a ranking only *offers* its impression to a
bounded queue (`Settings.impression_queue`) and returns; one background thread drains
it, builds each impression (serve's own rankings as `ServedImpression`s, whose arrays
serve checked once and which are gathered only when encoded; `served_impression`, the same
checked in full, for everything else) and hands it to the transport. Like a Kafka
producer's linger, the thread waits `LINGER_S` after the first impression it finds, and
what was queued by then goes together: one message per partition holds all of it bound
there (up to `BATCH_MAX` impressions, `MESSAGE_BYTES` of phi), sent to the partition
each impression's key (`impression_key`) maps to under the transport's rule
(`Transport.partition_for`), keyed by its first impression, so an impression and its
clicks share a partition number as before. Batching is what keeps logging cheap beside
ranking in one process (one GIL): encoding and producing cost mostly per message, and
each wake-up of this thread takes the GIL from the ranking
(docs/results/serving-cost.md).

What cannot be written is dropped, never silently: counted in
`rankstream_impressions_dropped_total{reason}` and logged (the first drop at once, then
at most one line every `LOG_EVERY_S` with the count since the last):

* `queue_full`: the thread fell behind (a stalled or slow broker); the ranking was
  answered anyway;
* `send_failed`: the transport refused the message (the producer is replaced, as the
  feedback desk does after a failure);
* `delivery_failed`: the broker did not acknowledge it after the client's retries, or its
  producer was retired (after such a failure) before it did: counted per impression;
* `invalid`: the ranking did not make a valid impression (an id no record takes);
* `shutdown`: still queued when the server stopped and the grace was over.

Written impressions are counted in `rankstream_impressions_logged_total` when handed to
the transport; `rankstream_impressions_waiting` is the queue's length.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from rankstream.stream.click_schema import (
    Impression,
    InvalidRecordError,
    ServedImpression,
    encode_impressions,
    impression_key,
)
from rankstream.stream.connect import open_transport
from rankstream.stream.errors import TRANSIENT
from rankstream.stream.message_groups import by_partition, within_budget
from rankstream.stream.settings import Settings
from rankstream.stream.transport import Producer, Transport
from rankstream.telemetry import prometheus_metrics as metrics
from rankstream.telemetry.structured_log import get_logger, log_event

log = get_logger("rankstream.impressions")
LOG_EVERY_S = 10.0  # at most one drop line this often (the counter has every drop)
BATCH_MAX = 64  # impressions taken from the queue at once
LINGER_S = 0.05  # after the first, wait this long for more (closing ends the wait at once)
MESSAGE_BYTES = 512 * 1024  # phi + ids a message at most: beyond, fresh pages cost per row
DROP_REASONS = ("queue_full", "send_failed", "delivery_failed", "invalid", "shutdown")
Logged = Impression | ServedImpression  # what the log writes: both encode alike


def served_impression(
    impression_id: str,
    candidate_ids: np.ndarray,
    phi: np.ndarray,
    order: np.ndarray,
    model: str,
    version: int,
    model_versions: Mapping[str, int],
    *,
    time: float,
    query_id: int | None = None,
    request_id: str | None = None,
    shown_probability: float | None = None,
    intervention: str | None = None,
    teams: np.ndarray | None = None,
    team_models: tuple[str, ...] = (),
    engine_scores: np.ndarray | None = None,
) -> Impression:
    """The impression of one served ranking: `candidate_ids`, `phi` and the engine's own
    scores (if sent) in the request's order, `order` the displayed order as indices into
    them (top first). A randomized logging policy or an interleaved list sets
    `shown_probability`, `intervention`, `teams` (per displayed position) and
    `team_models` (`stream.click_schema`). Checked in full: `InvalidRecordError`."""
    return ServedImpression(
        impression_id, time, model, version, model_versions, candidate_ids, phi, order,
        query_id, request_id, shown_probability, intervention, teams, team_models,
        engine_scores,
    ).impression()  # fmt: skip


def message_groups(impressions: list[Logged]) -> list[list[Logged]]:
    """`impressions` cut into messages of at most `MESSAGE_BYTES` of phi and ids each (one
    impression a message at least), in order."""
    return within_budget(impressions, _impression_bytes, MESSAGE_BYTES)


def _impression_bytes(imp: Logged) -> int:
    """Its phi (float32) and ids (int64) in a message."""
    return imp.shown * (imp.width * 4 + 8)


class ImpressionLog:
    """A bounded queue of impressions to write and the thread that writes them."""

    def __init__(self, settings: Settings, capacity: int | None = None) -> None:
        self.settings = settings
        self._queue: queue.Queue[Callable[[], Logged]] = queue.Queue(
            maxsize=capacity or settings.impression_queue
        )
        self.written = 0
        self.dropped: dict[str, int] = dict.fromkeys(DROP_REASONS, 0)
        self._unlogged: dict[str, int] = {}  # drops not yet in a log line
        self._last_line = -LOG_EVERY_S
        self._drop_lock = threading.Lock()
        self._transport: Transport | None = None
        self._producer: Producer | None = None
        self._failures_seen = 0
        self._handed = 0  # impressions handed to the current producer
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._drain, name="impression-log", daemon=True)
        self._thread.start()
        if not metrics.MULTIPROCESS:  # else the writer thread writes it (`_drain`)
            metrics.IMPRESSIONS_WAITING.set_function(self._queue.qsize)  # read when scraped

    # --- the ranking's side: never blocks --------------------------------------------------
    def offer(self, make: Callable[[], Logged]) -> bool:
        """Queue an impression (built later, on the writer thread, by `make`); False, and
        counted as dropped, when the queue is full or the log is closed."""
        if self._stop.is_set():
            self._drop("shutdown")
            return False
        try:
            self._queue.put_nowait(make)
        except queue.Full:
            self._drop("queue_full")
            return False
        return True

    @property
    def waiting(self) -> int:
        return self._queue.qsize()

    # --- the writer thread ---------------------------------------------------------------
    def _drain(self) -> None:
        """Write until closed and empty (what was queued before `close` still goes): each
        pass takes what is queued (up to `BATCH_MAX`) and writes it as few messages."""
        while True:
            if metrics.MULTIPROCESS:  # the scrape reads a file: write the queue's size
                metrics.IMPRESSIONS_WAITING.set(self._queue.qsize())
            try:
                makes = [self._queue.get(timeout=0.1)]
            except queue.Empty:
                if self._stop.is_set():
                    return
                continue
            if self._queue.qsize() < BATCH_MAX - 1:
                self._stop.wait(LINGER_S)  # let more come: one wake-up and message for many
            while len(makes) < BATCH_MAX:
                try:
                    makes.append(self._queue.get_nowait())
                except queue.Empty:
                    break
            impressions = []
            for make in makes:
                try:
                    impressions.append(make())
                except InvalidRecordError as exc:
                    self._drop("invalid", str(exc))
            if impressions:
                self._write(impressions)
            if self._queue.empty():
                self._check_deliveries()

    def _write(self, impressions: list[Logged]) -> None:
        """Send `impressions` as one message per partition they belong to (by each one's
        key, the transport's rule: an impression and its clicks stay co-partitioned),
        keyed by the message's first impression."""
        topic = self.settings.impressions_topic
        try:
            self._open()
            partitions = by_partition(self._transport, topic, impressions,  # type: ignore[arg-type]
                                      lambda imp: impression_key(imp.impression_id))  # fmt: skip
        except Exception as exc:  # a stalled broker, refused credentials, ...: this thread
            # must outlive anything it meets; every impression is counted and logged
            self._drop("send_failed", repr(exc), count=len(impressions))
            self._retire()
            return
        for partition, group in partitions.items():
            for message in message_groups(group):
                self._send(topic, partition, message)

    def _send(self, topic: str, partition: int, impressions: list[Logged]) -> None:
        try:
            producer = self._open()
            value = encode_impressions(impressions)
            key = impression_key(impressions[0].impression_id)
            producer.send(topic, value, key=key, partition=partition, records=len(impressions))
        except Exception as exc:  # as in `_write`: counted, logged, a new producer next
            self._drop("send_failed", repr(exc), count=len(impressions))
            self._retire()
            return
        self.written += len(impressions)
        self._handed += len(impressions)
        metrics.IMPRESSIONS_LOGGED.inc(len(impressions))

    def _open(self) -> Producer:
        if self._producer is None:
            transport = open_transport(self.settings)
            try:
                transport.ensure_topics({self.settings.impressions_topic: 1})
                producer = transport.producer()
            except BaseException:
                transport.close()
                raise
            self._transport, self._producer = transport, producer
            self._failures_seen = self._handed = 0
        return self._producer

    def _retire(self) -> None:
        """Drop the producer after a failure (a new one starts clean), counting what it
        gave up on, closing included: every impression handed to it that it neither
        delivered nor already counted as failed (a close that times out in a stall
        abandons its queued batches without failing them one by one)."""
        producer, transport = self._producer, self._transport
        self._producer = self._transport = None
        if producer is None or transport is None:
            return
        try:
            producer.close(0.0)
            transport.close()
        except Exception as exc:  # closing a failed producer: logged, moved on
            log_event(log, "impression producer closed", error=repr(exc)[:200])
        delivered = int(getattr(producer, "delivered", self._handed))
        unaccounted = self._handed - delivered - self._failures_seen
        if unaccounted > 0:
            self._drop("delivery_failed", count=unaccounted)

    def _check_deliveries(self) -> None:
        """Count the impressions the transport gave up on since the last look (the
        embedded transport never does), and then retire the producer: kafka-python's
        idempotent producer, once a batch expired in a long stall, holds the later ones
        back (as `serve.delivery` found), so they would be neither on the topic nor
        counted; closing it fails them, and they are counted as dropped."""
        failures = int(getattr(self._producer, "failures", 0))
        if failures > self._failures_seen:
            self._drop("delivery_failed", count=failures - self._failures_seen)
            self._failures_seen = failures
            self._retire()

    def _drop(self, reason: str, detail: str = "", count: int = 1) -> None:
        metrics.IMPRESSIONS_DROPPED.labels(reason=reason).inc(count)
        with self._drop_lock:
            self.dropped[reason] += count
            self._unlogged[reason] = self._unlogged.get(reason, 0) + count
            now = time.monotonic()
            if now - self._last_line < LOG_EVERY_S:
                return
            self._last_line, unlogged, self._unlogged = now, self._unlogged, {}
        log_event(log, "impressions dropped", level=logging.WARNING, dropped=unlogged,
                  detail=detail[:200] or None)  # fmt: skip

    def close(self, timeout: float) -> dict[str, Any]:
        """Write what is queued and flush, within `timeout` seconds; what is left then is
        dropped as `shutdown`. Returns the counts."""
        until = time.monotonic() + timeout
        self._stop.set()
        self._thread.join(max(timeout, 0.0))
        left = 0
        while True:
            try:
                self._queue.get_nowait()
            except queue.Empty:
                break
            left += 1
        if left:
            self._drop("shutdown", count=left)
        if not self._thread.is_alive() and self._producer is not None:
            try:
                self._producer.flush(max(until - time.monotonic(), 0.0))
            except TRANSIENT as exc:
                log_event(log, "impressions not flushed", level=logging.WARNING,
                          error=repr(exc)[:200])  # fmt: skip
            self._check_deliveries()
            self._retire()
        with self._drop_lock:
            unlogged, self._unlogged = self._unlogged, {}
        if unlogged:
            log_event(log, "impressions dropped", level=logging.WARNING, dropped=unlogged)
        return {"written": self.written, "dropped": dict(self.dropped)}
