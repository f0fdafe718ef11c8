"""The batch worker: a restart-proof reservoir of the triplet stream, refit into batch models.

One consumer reads every partition of `settings.triplets_topic` and offers each good
triplet row to a `ranking.reservoir.Reservoir` (Algorithm R). Every `refit_records`
triplets or `refit_seconds` (whichever comes first, and only when new triplets arrived)
the reservoir is turned into cMDS-DML and RankMKL models (`workers.batch_models`) and
each is published as a new version of the model of the same name and kind ("cmds_dml",
"rankmkl"), with the offsets its training sample covers.

Exact resume: the reservoir (rows + generator state) is saved as model `reservoir`
(kind "reservoir") together with the offsets it covers, every `persist_seconds`, before
each refit, and on a clean stop. On start it is loaded and every partition is sought to
its stored next-offset (the beginning when nothing is stored); messages below that
offset are skipped. Algorithm R consumes one draw per row past the fill whatever the
batch boundaries, so a restarted worker ends with bit-identical reservoir rows to an
uninterrupted one, as long as the order of messages is the same: always within a
partition, so single-partition topics resume exactly (as in `workers.online`).

Fencing: every save names the version this worker last loaded or saved and that
save's `write_id` (`stream.store`); a FencingError means another batch worker wrote
since (even under a version number a lost write let it reuse), so this one is stale:
it stops without further saves and `run` returns EXIT_FENCED. A save whose reply was
lost is recognised by the store from its `write_id`, and adopted.

Bad input: a message that fails to decode is skipped (logged), and rejected rows are
left out; the online worker owns the dead-letter topic, so this worker does not send
the same dead letters a second time. It counts neither `rankstream_triplets_consumed_total`
nor consumer lag, which are the online worker's (one process may run both).

Step-wise use (the embedded demo interleaves workers without threads):
`start()`, then `step()` (poll + process + persist/refit when due) or `process(messages)`
and `refit()` directly, then `close()`.
"""

from __future__ import annotations

import logging
import os
import signal
import socket
import threading
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from rankstream.ranking.reservoir import Reservoir
from rankstream.stream.connect import open_store, open_transport
from rankstream.stream.schema import SchemaError, decode_triplets
from rankstream.stream.settings import Settings
from rankstream.stream.store import Fence, FencingError, ModelStore, fenced_save
from rankstream.stream.transport import Consumer, Message, Transport
from rankstream.workers import metrics
from rankstream.workers.batch_models import (
    BATCH_KINDS,
    CMDS_DML,
    RANKMKL,
    CMDSDMLParams,
    RankMKLParams,
    TripletSample,
    fit_cmds_dml,
    fit_rankmkl,
)
from rankstream.workers.logging import get_logger, log_event
from rankstream.workers.resilience import (
    Backoff,
    final_save,
    poll_or_back_off,
    retry_until_stopped,
    transient_errors,
)

EXIT_OK = 0
EXIT_FENCED = 3
RESERVOIR_NAME = "reservoir"
RESERVOIR_KIND = "reservoir"

log = get_logger("rankstream.worker.batch")


@dataclass(frozen=True)
class BatchOptions:
    """What `rankstream worker batch` can be told, beyond the environment's Settings."""

    reservoir: int = 5000
    refit_seconds: float = 60.0
    refit_records: int = 5000
    exit_when_idle: float | None = None
    models: tuple[str, ...] = BATCH_KINDS
    seed: int = 0  # the reservoir's sampling seed and RankMKL's pair sampling
    min_triplets: int = 50  # no refit before the reservoir holds this many rows
    persist_seconds: float = 5.0
    keep_reservoir_versions: int = 2  # reservoirs are big; keep few snapshots
    cmds_dml: CMDSDMLParams = field(default_factory=CMDSDMLParams)
    rankmkl: RankMKLParams = field(default_factory=RankMKLParams)
    poll_ms: int = 200
    max_poll_records: int = 500
    partitions: int = 1  # created with this many partitions when the topic is missing

    def __post_init__(self) -> None:
        if self.reservoir < 1:
            raise ValueError(f"reservoir must be >= 1, got {self.reservoir}")
        if (
            not self.models
            or set(self.models) - set(BATCH_KINDS)
            or len(set(self.models)) != len(self.models)
        ):
            raise ValueError(f"models must be distinct names from {BATCH_KINDS}, got {self.models}")
        if self.refit_records < 1 or not self.refit_seconds > 0 or not self.persist_seconds > 0:
            raise ValueError("refit_records must be >= 1; refit_seconds and persist_seconds > 0")
        if self.exit_when_idle is not None and not self.exit_when_idle > 0:
            raise ValueError(f"exit_when_idle must be > 0 seconds, got {self.exit_when_idle}")
        if self.min_triplets < 1:
            raise ValueError(f"min_triplets must be >= 1, got {self.min_triplets}")


Fitter = Callable[[TripletSample, BatchOptions], tuple[dict[str, Any], dict[str, np.ndarray]]]
FITTERS: dict[str, Fitter] = {
    CMDS_DML: lambda sample, options: fit_cmds_dml(sample, options.cmds_dml),
    RANKMKL: lambda sample, options: fit_rankmkl(sample, options.rankmkl),
}


@dataclass
class BatchCounters:
    records: int = 0  # good rows offered to the reservoir by this process
    messages: int = 0
    skipped_messages: int = 0  # undecodable
    rejected_rows: int = 0
    persists: int = 0
    refits: int = 0
    refit_failures: int = 0
    since_refit: int = 0


class BatchWorker:
    """Reservoir + periodic refits + fenced publishing (see the module docstring)."""

    def __init__(
        self,
        settings: Settings,
        options: BatchOptions,
        *,
        transport: Transport | None = None,
        store: ModelStore | None = None,
    ) -> None:
        self.settings = settings
        self.options = options
        self.transport = transport if transport is not None else open_transport(settings)
        self._owns_transport = transport is None  # closed by close(); it reopens lazily
        self.store = store if store is not None else open_store(settings)
        self.writer = f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"
        self.reservoir = Reservoir(options.reservoir, seed=options.seed)
        self.offsets: dict[str, dict[int, int]] = {}
        self.fences: dict[str, Fence] = {}  # per stored name: the save we last loaded or made
        self.counters = BatchCounters()
        self.fenced = False
        self.dirty = False
        self._refitted_at_n_seen = -1
        self._stop = threading.Event()
        self._transient = transient_errors()
        self._consumer: Consumer | None = None
        self._poll_backoff = Backoff()
        self._persist_backoff = Backoff()
        self._last_persist = time.monotonic()
        self._last_refit = time.monotonic()

    # --- lifecycle ------------------------------------------------------------------
    def stop(self) -> None:
        """Ask `run` to finish: the reservoir is persisted, then `run` returns."""
        self._stop.set()

    def install_signal_handlers(self) -> None:
        """SIGTERM/SIGINT -> clean stop (main thread only)."""
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, lambda *_: self.stop())

    def start(self) -> None:
        """Create the topic, load the reservoir with its offsets, and seek there."""
        topic = self.settings.triplets_topic
        self._retry(
            "ensure topics", lambda: self.transport.ensure_topics({topic: self.options.partitions})
        )
        self._retry("load reservoir", self._load)
        self._consumer = self.transport.consumer(None)
        partitions = self.transport.partitions_for(topic)
        self._consumer.assign([(topic, p) for p in partitions])
        for partition in partitions:
            next_offset = self.offsets.get(topic, {}).get(partition)
            if next_offset is None:
                self._consumer.seek_to_beginning(topic, partition)
            else:
                self._consumer.seek(topic, partition, next_offset)
            log_event(
                log,
                "seek",
                topic=topic,
                partition=partition,
                offset="beginning" if next_offset is None else next_offset,
            )

    @property
    def reservoir_version(self) -> int:
        return self.fences.get(RESERVOIR_NAME, Fence()).version

    @property
    def model_versions(self) -> dict[str, int]:
        """The version of every batch model this worker last loaded or published."""
        return {name: self.fences.get(name, Fence()).version for name in self.options.models}

    def _load(self) -> None:
        stored = self.store.load(RESERVOIR_NAME)
        if stored is not None:
            if stored.kind != RESERVOIR_KIND:
                raise ValueError(
                    f"model {RESERVOIR_NAME!r} has kind {stored.kind!r}, not {RESERVOIR_KIND!r}"
                )
            self.reservoir = Reservoir.from_state(stored.meta, stored.arrays)
            self.offsets = {t: dict(parts) for t, parts in stored.offsets.items()}
            self.fences[RESERVOIR_NAME] = Fence.of(stored)
        for name in self.options.models:
            self.fences[name] = Fence.of(self.store.load(name))
        for name, version in self.model_versions.items():
            metrics.MODEL_VERSION.labels(model=name).set(version)
        log_event(
            log,
            "reservoir loaded",
            version=self.reservoir_version,
            n_seen=self.reservoir.n_seen,
            size=self.reservoir.size,
            capacity=self.reservoir.capacity,
            models=self.model_versions,
        )

    def run(self, until: Callable[[BatchWorker], bool] | None = None) -> int:
        """Loop until stopped, idle for `exit_when_idle`, `until(self)` or fenced."""
        if self._consumer is None:
            self.start()
        idle_since = time.monotonic()
        try:
            while not self._stop.is_set() and not self.fenced:
                if self.step():
                    idle_since = time.monotonic()
                if until is not None and until(self):
                    break
                idle = self.options.exit_when_idle
                if idle is not None and time.monotonic() - idle_since >= idle:
                    log_event(log, "idle, exiting", idle_seconds=idle)
                    break
            if not self.fenced:
                self._final_persist()
        finally:
            self.close()
        log_event(
            log,
            "worker stopped",
            records=self.counters.records,
            n_seen=self.reservoir.n_seen,
            refits=self.counters.refits,
            fenced=self.fenced,
        )
        return EXIT_FENCED if self.fenced else EXIT_OK

    def step(self) -> int:
        """One poll, its processing, and a persist/refit when due; returns messages read."""
        messages = self.poll()
        if messages:
            self.process(messages)
        if self.refit_due():
            self.refit()
        elif self._persist_due():
            self.persist()
        return len(messages)

    def close(self) -> None:
        """Close the consumer and (if opened here) the transport: an open Kafka client
        keeps refreshing metadata, and logging errors, after its broker is gone."""
        owned = [self.transport] if self._owns_transport else []
        for closable in (self._consumer, *owned):
            if closable is not None:
                try:
                    closable.close()
                except self._transient as exc:
                    log_event(log, "close failed", level=logging.WARNING, error=repr(exc))
        self._consumer = None

    def _retry(self, what: str, action: Callable[[], None]) -> None:
        retry_until_stopped(what, action, self._stop, self._transient, log)

    # --- consuming ------------------------------------------------------------------
    def poll(self) -> list[Message]:
        """Messages from the consumer; [] (after a back-off) when the broker is away."""
        assert self._consumer is not None, "call start() first"
        return poll_or_back_off(
            self._consumer,
            self.options.poll_ms,
            self.options.max_poll_records,
            self._transient,
            self._poll_backoff,
            self._stop,
            log,
        )

    def covers(self, topic: str, partition: int, offset: int) -> bool:
        next_offset = self.offsets.get(topic, {}).get(partition)
        return next_offset is not None and offset < next_offset

    def process(self, messages: Sequence[Message]) -> int:
        """Offer each new message's good rows to the reservoir; returns rows offered."""
        offered = 0
        for message in messages:
            if self.covers(message.topic, message.partition, message.offset):
                continue  # replayed after a restart; already in the reservoir
            self.counters.messages += 1
            try:
                block = decode_triplets(message.value)
            except SchemaError as exc:
                self.counters.skipped_messages += 1
                log_event(
                    log,
                    "undecodable message skipped",
                    level=logging.WARNING,
                    reason=exc.reason,
                    topic=message.topic,
                    partition=message.partition,
                    offset=message.offset,
                )
            else:
                self.counters.rejected_rows += len(block.rejects)
                if len(block):
                    self.reservoir.add_many(
                        block.query_id,
                        block.p1_id,
                        block.p2_id,
                        block.rel1,
                        block.rel2,
                        block.phi1,
                        block.phi2,
                    )
                offered += len(block)
            self.offsets.setdefault(message.topic, {})[message.partition] = message.offset + 1
            self.dirty = True
        self.counters.records += offered
        self.counters.since_refit += offered
        return offered

    # --- persisting -----------------------------------------------------------------
    def _persist_due(self) -> bool:
        return (
            self.dirty
            and self._persist_backoff.ready()
            and time.monotonic() - self._last_persist >= self.options.persist_seconds
        )

    def persist(self) -> bool:
        """Save the reservoir with its offsets (fenced); False if not saved."""
        self._last_persist = time.monotonic()
        if not self.dirty:
            return True
        meta, arrays = self.reservoir.to_state()
        started = time.perf_counter()
        version = self._save(
            RESERVOIR_NAME, RESERVOIR_KIND, meta, arrays, self.options.keep_reservoir_versions
        )
        if version is None:
            self._persist_backoff.failed()
            return False
        self._persist_backoff.succeeded()
        self.dirty = False
        self.counters.persists += 1
        log_event(
            log,
            "reservoir persisted",
            version=version,
            n_seen=self.reservoir.n_seen,
            size=self.reservoir.size,
            seconds=round(time.perf_counter() - started, 4),
        )
        return True

    def _final_persist(self) -> None:
        final_save("persist", self.persist, lambda: self.fenced, self._persist_backoff, log)

    def _save(
        self,
        name: str,
        kind: str,
        meta: dict[str, Any],
        arrays: Mapping[str, np.ndarray],
        keep_versions: int | None = None,
    ) -> int | None:
        """Fenced save with the current offsets; None on a transient error or when fenced."""
        meta = {**meta, "writer": self.writer, "saved_ms": time.time_ns() // 1_000_000}
        try:
            version = fenced_save(
                self.store,
                name,
                self.fences.setdefault(name, Fence()),
                kind=kind,
                meta=meta,
                arrays=arrays,
                offsets=self.offsets,
                keep_versions=keep_versions,
            )
            metrics.mark_checkpoint(name)
            return version
        except FencingError as exc:
            self.fenced = True
            metrics.FENCING_ERRORS.labels(model=name).inc()
            log_event(
                log,
                "fenced: a newer writer owns the model; stopping",
                level=logging.ERROR,
                model=name,
                expected=exc.expected,
                actual=exc.actual,
            )
        except self._transient as exc:
            metrics.CHECKPOINT_FAILURES.inc()
            log_event(
                log, "save failed; will retry", level=logging.WARNING, model=name, error=repr(exc)
            )
        return None

    # --- refitting ------------------------------------------------------------------
    def refit_due(self) -> bool:
        if self.fenced or self.reservoir.size < self.options.min_triplets:
            return False
        if self.reservoir.n_seen == self._refitted_at_n_seen or not self._persist_backoff.ready():
            return False
        return (
            self.counters.since_refit >= self.options.refit_records
            or time.monotonic() - self._last_refit >= self.options.refit_seconds
        )

    def refit(self) -> dict[str, int]:
        """Persist the reservoir, fit every model on it and publish; {model: new version}.

        A model whose fit fails on this sample (e.g. one relevance grade only) is
        skipped with a warning and tried again at the next refit.
        """
        self._last_refit = time.monotonic()
        self.counters.since_refit = 0
        if self.reservoir.size < 1 or not self.persist():
            return {}
        from threadpoolctl import threadpool_limits

        self._refitted_at_n_seen = self.reservoir.n_seen
        sample = TripletSample.from_columns(self.reservoir.columns)
        published: dict[str, int] = {}
        for name in self.options.models:
            started = time.perf_counter()
            try:
                # One BLAS thread: the fits multiply thin (n x 36) matrices, where extra
                # threads only fight the other workers for the cores (measured: a 3.6 s
                # CPU refit took 9-129 s wall with default threads on a loaded 2-core box).
                with threadpool_limits(1):
                    meta, arrays = FITTERS[name](sample, self.options)
            except ValueError as exc:
                self.counters.refit_failures += 1
                log_event(log, "refit failed", level=logging.WARNING, model=name, error=str(exc))
                continue
            seconds = time.perf_counter() - started
            metrics.REFIT_SECONDS.labels(model=name).observe(seconds)
            meta.update(
                reservoir_n_seen=self.reservoir.n_seen,
                reservoir_version=self.reservoir_version,
                refit_seconds=round(seconds, 4),
            )
            version = self._save(name, name, meta, arrays)
            if version is None:
                if self.fenced:
                    break
                continue
            metrics.MODEL_VERSION.labels(model=name).set(version)
            published[name] = version
            log_event(
                log,
                "model published",
                model=name,
                version=version,
                refit_seconds=round(seconds, 3),
                n_triplets=len(sample),
                n_seen=self.reservoir.n_seen,
            )
        self.counters.refits += 1
        return published
