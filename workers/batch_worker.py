"""The batch worker: a restart-proof reservoir of the triplet stream, refit into batch models.

One consumer reads every partition of `settings.triplets_topic` and offers each good
triplet to a `ranking.reservoir.TripletReservoir` (Algorithm R over triplets, holding
the normalized form the wire carries: each sampled (query, image) point's phi once).
Every `refit_records` triplets or `refit_seconds` (whichever comes first, and only
when new triplets arrived) the reservoir is turned into cMDS-DML and RankMKL models
(`ranking.batch_models`) and each is published as a new version of the model of the
same name and kind ("cmds_dml", "rankmkl"), with the offsets its training sample covers.

Exact resume: the reservoir (slots, points, generator state and width) is saved as
model `reservoir` (kind "reservoir") together with the offsets it covers, every
`persist_seconds`, before each refit, and on a clean stop. On start it is loaded and
every partition is sought to its stored next-offset (the beginning when nothing is
stored); messages below that offset are skipped (a reservoir saved per row in the pair
layout, before the normalized form, is read and continued). Algorithm R consumes one
draw per triplet past the fill whatever the batch boundaries, so a restarted worker
ends with a bit-identical sample to an uninterrupted one, as long as the order of
messages is the same: always within a partition, so single-partition topics resume
exactly (as in `workers.online_worker`). A stored reservoir of another feature width than
the deployment's stops the worker at load (`WrongWidthError`).

Fencing: every save names the version this worker last loaded or saved and that
save's `write_id` (`stream.store`); a FencingError means another batch worker wrote
since (even under a version number a lost write let it reuse), so this one is stale:
the runtime stops it without further saves and `run` returns EXIT_FENCED. A save whose
reply was lost is recognised by the store from its `write_id`, and adopted. A transient
store error during a refit leaves it to be retried after the runtime's back-off.

Bad input: a message that fails to decode is skipped (logged), and rejected rows are
left out; the online worker owns the dead-letter topic, so this worker does not send
the same dead letters a second time. It counts neither `rankstream_triplets_consumed_total`
nor consumer lag, which are the online worker's (one process may run both).

`BatchHandler` is the worker's own part, run by the stream runtime (`workers.runtime`):
the runtime's checkpoint is the reservoir's persist, and the refit is the handler's own
periodic work (`tick`). Step-wise use (the embedded demo interleaves workers without
threads): `start()`, then `step()` or `process(messages)` and `refit()`, then `close()`.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from threadpoolctl import threadpool_limits

from rankstream.ranking.batch_models import (
    CMDS_DML,
    RANKMKL,
    fit_cmds_dml,
    fit_rankmkl,
)
from rankstream.ranking.reservoir import TripletReservoir
from rankstream.ranking.triplets import TripletBlock
from rankstream.stream.schema import SchemaError, decode_triplets
from rankstream.stream.settings import Settings
from rankstream.stream.store import Fence, check_kind, check_width, fenced_save
from rankstream.stream.transport import Message, TopicPartition
from rankstream.telemetry import prometheus_metrics as metrics
from rankstream.telemetry.structured_log import get_logger, log_event
from rankstream.workers.batch_worker_options import BatchOptions
from rankstream.workers.runtime import (
    FromHandler,
    Handler,
    OptionsRuntime,
    StreamRuntime,
)
from rankstream.workers.runtime_options import CadenceTimer

__all__ = ["BatchHandler", "BatchOptions", "BatchWorker"]

RESERVOIR_NAME = "reservoir"
RESERVOIR_KIND = "reservoir"

log = get_logger("rankstream.worker.batch")


Fitter = Callable[[TripletBlock, BatchOptions], tuple[dict[str, Any], dict[str, np.ndarray]]]
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
    since_refit: int = 0  # rows offered since the last refit


class BatchHandler(Handler):
    """Reservoir + periodic refits + fenced publishing (see the module docstring)."""

    name = "batch"

    def __init__(self, settings: Settings, options: BatchOptions) -> None:
        self.settings = settings
        self.options = options
        self.reservoir = TripletReservoir(
            options.reservoir, seed=options.seed, width=settings.phi_dim
        )
        self.offsets: dict[str, dict[int, int]] = {}
        self.fences: dict[str, Fence] = {}  # per stored name: the save we last loaded or made
        self.counters = BatchCounters()
        self.dirty = False
        self._refit_due = CadenceTimer(options.refit_cadence())
        self._refitted_at_n_seen = -1

    @property
    def reservoir_version(self) -> int:
        return self.fences.get(RESERVOIR_NAME, Fence()).version

    @property
    def model_versions(self) -> dict[str, int]:
        """The version of every batch model this worker last loaded or published."""
        return {name: self.fences.get(name, Fence()).version for name in self.options.models}

    # --- the runtime's calls --------------------------------------------------------------
    def topics(self) -> dict[str, int]:
        return {self.settings.triplets_topic: self.options.partitions}

    def load(self, runtime: StreamRuntime) -> None:
        """The stored reservoir with its offsets, and the version of every batch model."""
        stored = runtime.store.load(RESERVOIR_NAME)
        if stored is not None:
            check_width(check_kind(stored, RESERVOIR_KIND), self.settings.phi_dim)
            self.reservoir = TripletReservoir.from_state(stored.meta, stored.arrays)
            self.offsets = {t: dict(parts) for t, parts in stored.offsets.items()}
            self.fences[RESERVOIR_NAME] = Fence.of(stored)
        for name in self.options.models:
            self.fences[name] = Fence.of(runtime.store.load(name))
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

    def positions(self, partitions: Sequence[TopicPartition]) -> dict[TopicPartition, int | None]:
        return {(t, p): self.offsets.get(t, {}).get(p) for t, p in partitions}

    def covers(self, topic: str, partition: int, offset: int) -> bool:
        next_offset = self.offsets.get(topic, {}).get(partition)
        return next_offset is not None and offset < next_offset

    def process(self, runtime: StreamRuntime, messages: Sequence[Message]) -> int:
        """Offer each new message's good rows to the reservoir; returns rows offered."""
        offered = 0
        for message in messages:
            if self.covers(message.topic, message.partition, message.offset):
                continue  # replayed after a restart; already in the reservoir
            self.counters.messages += 1
            offered += self._offer(message)
            self.offsets.setdefault(message.topic, {})[message.partition] = message.offset + 1
            self.dirty = True
        self.counters.records += offered
        self.counters.since_refit += offered
        self._refit_due.add(offered)
        return offered

    def _offer(self, message: Message) -> int:
        try:
            block = decode_triplets(message.value, width=self.settings.phi_dim)
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
            return 0
        self.counters.rejected_rows += len(block.rejects)
        self.reservoir.add_block(block)
        return len(block)

    def checkpoint(self, runtime: StreamRuntime) -> dict[str, Any]:
        """Persist the reservoir with its offsets (fenced), when it changed."""
        if not self.dirty:
            return {}
        meta, arrays = self.reservoir.to_state()
        version = self._save(
            runtime, RESERVOIR_NAME, RESERVOIR_KIND, meta, arrays,
            self.options.keep_reservoir_versions,
        )  # fmt: skip
        self.dirty = False
        self.counters.persists += 1
        log_event(
            log,
            "reservoir persisted",
            version=version,
            n_seen=self.reservoir.n_seen,
            size=self.reservoir.size,
        )
        return {RESERVOIR_NAME: version}

    def tick(self, runtime: StreamRuntime) -> None:
        if self.refit_due() and runtime.may_save():
            self.refit(runtime)

    # --- refitting ------------------------------------------------------------------------
    def refit_due(self) -> bool:
        if self.reservoir.size < self.options.min_triplets:
            return False
        if self.reservoir.n_seen == self._refitted_at_n_seen:
            return False
        return self._refit_due.due()

    def refit(self, runtime: StreamRuntime) -> dict[str, int]:
        """Persist the reservoir, fit every model on it and publish; {model: new version}.

        A model whose fit fails on this sample (e.g. one relevance grade only) is
        skipped with a warning and tried again at the next refit. A store error
        propagates (the runtime backs off, or stops when fenced).
        """
        self._refit_due.reset()
        self.counters.since_refit = 0
        if self.reservoir.size < 1:
            return {}
        self.checkpoint(runtime)

        sample = self.reservoir.sample()
        published: dict[str, int] = {}
        for name in self.options.models:
            started = time.perf_counter()
            try:
                # One BLAS thread: the fits multiply thin (n x d) matrices, where extra
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
            version = self._save(runtime, name, name, meta, arrays)
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
        self._refitted_at_n_seen = self.reservoir.n_seen
        self.counters.refits += 1
        return published

    def _save(
        self,
        runtime: StreamRuntime,
        name: str,
        kind: str,
        meta: dict[str, Any],
        arrays: Mapping[str, np.ndarray],
        keep_versions: int | None = None,
    ) -> int:
        """Fenced save with the current offsets (FencingError / transient errors raise)."""
        meta = {**meta, "writer": runtime.writer, "saved_ms": time.time_ns() // 1_000_000}
        version = fenced_save(
            runtime.store,
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

    def summary(self) -> dict[str, Any]:
        return {"n_seen": self.reservoir.n_seen, "refits": self.counters.refits}


class BatchWorker(OptionsRuntime[BatchOptions, BatchHandler]):
    """The stream runtime running the batch handler (its other state: `handler`)."""

    reservoir = FromHandler[TripletReservoir]()
    counters = FromHandler[BatchCounters]()

    def build_handler(self, settings: Settings, options: BatchOptions) -> BatchHandler:
        return BatchHandler(settings, options)

    def refit_due(self) -> bool:
        return self.handler.refit_due()

    def covers(self, topic: str, partition: int, offset: int) -> bool:
        return self.handler.covers(topic, partition, offset)

    def refit(self) -> dict[str, int]:
        """Refit now (persisting the reservoir first); {model: new version}."""
        self.start()
        published: dict[str, int] = {}
        self.guarded("refit", lambda: published.update(self.handler.refit(self)))
        return published

    def persist(self) -> bool:
        """Persist the reservoir now; False if fenced or a transient error deferred it."""
        return self.checkpoint()
