"""The online worker: triplets from the stream -> every online ranker -> fenced checkpoints.

One consumer reads `settings.triplets_topic`; each message is decoded once and applied
to every named model (one `learn_many` per model). Each model's weights are saved with
the offsets they cover (`workers.checkpoint`), every `checkpoint_records` triplets or
`checkpoint_seconds`, and on a clean stop (SIGTERM/SIGINT, `exit_when_idle`).

Exact resume: on start each model is loaded with its offsets, and every partition is
sought to the *minimum* next-offset over the models (the beginning when any model has
no stored position). A message is then applied only to the models whose next-offset
for that partition is <= the message's offset, so models checkpointed at different
offsets (a crash between their saves) each see every triplet exactly once. Weights are
bit-identical to an uninterrupted run when the per-model order of messages is the same;
that holds within a partition, so single-partition topics give bit-identical resumes,
while across partitions the interleaving depends on fetch timing (still exactly once).

Scale-out (`per_partition`, in a consumer group): each partition k has its own models
`{algo}.p{k}`, loaded on assignment and checkpointed on revocation, and the owner of
partition 0 publishes their parameter mix as `{algo}` (see `workers.scaleout`).

Fencing: a FencingError means another worker saved the model after us, so this worker
is stale. It stops at once (no further saves of any model), logs and counts it, and
`run` returns EXIT_FENCED; its supervisor restarts it, and the restart loads the newer
checkpoint. Reloading in place would let two live workers keep taking turns.

Dead letters: a message that fails to decode is sent to `settings.dead_letter_topic`
with the reason and its source offset, and every model moves past it. Row-level
rejects (NaN/Inf, bad labels) are learned around: the good rows are applied and the
message is dead-lettered with the bad rows' indices. A message is dead-lettered only
when it lies beyond every model's stored position at start-up; messages between the
last checkpoint and a crash may be dead-lettered twice, which is why a dead letter's
key is "topic:partition:offset" (consumers can deduplicate on it).

Consumer lag is reported in records: message lag (end offset - position) times the
mean records per message this worker has decoded so far (an estimate: blocks vary).

Transient errors (broker or Redis unreachable) never kill the worker: polls back off
and retry, and a failed checkpoint keeps its models dirty and is retried after a back-
off, the stored offsets never moving without the weights they belong to.
"""

from __future__ import annotations

import logging
import os
import signal
import socket
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from rankstream.stream.connect import open_store, open_transport
from rankstream.stream.schema import NON_FINITE, SchemaError, TripletBlock, decode_triplets
from rankstream.stream.settings import Settings
from rankstream.stream.store import FencingError, ModelStore
from rankstream.stream.transport import Consumer, Message, Producer, Transport
from rankstream.workers import metrics
from rankstream.workers.checkpoint import (
    DEFAULT_SCALER_ROWS,
    TrackedModel,
    learn_together,
    load_or_create,
    save_checkpoint,
)
from rankstream.workers.deadletters import send_dead_letter
from rankstream.workers.logging import get_logger, log_event
from rankstream.workers.resilience import Backoff as _Backoff
from rankstream.workers.resilience import (
    final_save,
    poll_or_back_off,
    retry_until_stopped,
    transient_errors,
)
from rankstream.workers.scaleout import PartitionModels

EXIT_OK = 0
EXIT_FENCED = 3
LINEAR_ALGOS = ("opr", "opar1", "opar2", "ogdr")
_LAG_REFRESH_SECONDS = 2.0

log = get_logger("rankstream.worker.online")


@dataclass(frozen=True)
class WorkerOptions:
    """What `rankstream worker online` can be told, beyond the environment's Settings."""

    algos: tuple[str, ...] = LINEAR_ALGOS
    checkpoint_records: int = 100_000
    checkpoint_seconds: float = 5.0
    exit_when_idle: float | None = None  # in a group, counted only while partitions are owned
    group: str | None = None
    scaler_rows: int = DEFAULT_SCALER_ROWS
    C: float = 0.1
    eta: float = 0.01
    poll_ms: int = 200
    max_poll_records: int = 500
    partitions: int = 1  # created with this many partitions when the topic is missing
    per_partition: bool = False  # group scale-out: models {algo}.p{k}, mixed (workers.scaleout)
    mix_seconds: float = 10.0  # how often the owner of partition 0 publishes the mix

    def __post_init__(self) -> None:
        if self.per_partition and self.group is None:
            raise ValueError("per_partition models need a consumer group (group=...)")
        if not self.mix_seconds > 0:
            raise ValueError(f"mix_seconds must be > 0, got {self.mix_seconds}")
        if not self.algos or len(set(self.algos)) != len(self.algos):
            raise ValueError(f"algos must be distinct and non-empty, got {self.algos}")
        if self.checkpoint_records < 1 or not self.checkpoint_seconds > 0:
            raise ValueError("checkpoint_records must be >= 1 and checkpoint_seconds > 0")
        if self.exit_when_idle is not None and not self.exit_when_idle > 0:
            raise ValueError(f"exit_when_idle must be > 0 seconds, got {self.exit_when_idle}")
        if self.scaler_rows < 1:
            raise ValueError(f"scaler_rows must be >= 1, got {self.scaler_rows}")


BlockObserver = Callable[[Message, object], None]


@dataclass
class _Counters:
    records: int = 0
    messages: int = 0  # messages applied to at least one model
    polled: int = 0  # messages read from the consumer (replays included)
    since_checkpoint: int = 0
    checkpoints: int = 0
    dead_letters: int = 0
    lag_records: dict[int, int] = field(default_factory=dict)


class OnlineWorker:
    """Consume triplets, update every named model, checkpoint with offsets (see module doc)."""

    def __init__(
        self,
        settings: Settings,
        options: WorkerOptions,
        *,
        transport: Transport | None = None,
        store: ModelStore | None = None,
        on_block: BlockObserver | None = None,
    ) -> None:
        self.settings = settings
        self.options = options
        self.transport = transport if transport is not None else open_transport(settings)
        self._owns_transport = transport is None  # closed by close(); it reopens lazily
        self.store = store if store is not None else open_store(settings)
        self.writer = f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"
        self.models: list[TrackedModel] = []
        self.counters = _Counters()
        # CPU seconds each model spent learning in this process (see `_learn_timed`)
        self.learn_seconds: dict[str, float] = (
            {} if options.per_partition else dict.fromkeys(options.algos, 0.0)
        )
        self.fenced = False
        self._on_block = on_block
        self._stop = threading.Event()
        self._transient = transient_errors()
        self._consumer: Consumer | None = None
        self._producer: Producer | None = None
        self._dead_letter_from: dict[int, int] = {}
        self._checkpoint_backoff = _Backoff()
        self._poll_backoff = _Backoff()
        self._last_checkpoint = time.monotonic()
        self._last_lag = 0.0
        self._partitioned: PartitionModels | None = (
            PartitionModels(self, options.mix_seconds, self._retry_until_stopped)
            if options.per_partition
            else None
        )

    # --- lifecycle ------------------------------------------------------------------
    def stop(self) -> None:
        """Ask the loop to finish: a final checkpoint, then `run` returns."""
        self._stop.set()

    def install_signal_handlers(self) -> None:
        """SIGTERM/SIGINT -> clean stop (main thread only)."""
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, lambda *_: self.stop())

    def run(self, until: Callable[[OnlineWorker], bool] | None = None) -> int:
        """Loop until stopped, idle for `exit_when_idle`, `until(self)` or fenced.

        Starts the worker first unless `start()` was already called.
        """
        if self._consumer is None:
            self.start()
        idle_since = time.monotonic()
        clean = False
        try:
            while not self._stop.is_set() and not self.fenced:
                polled = self.counters.polled
                self.step()
                if self.counters.polled != polled or self._awaiting_partitions():
                    idle_since = time.monotonic()
                if until is not None and until(self):
                    break
                idle = self.options.exit_when_idle
                if idle is not None and time.monotonic() - idle_since >= idle:
                    log_event(log, "idle, exiting", idle_seconds=idle)
                    break
            clean = True
        finally:
            self.close(final_checkpoint=clean)
        log_event(
            log,
            "worker stopped",
            records=self.counters.records,
            checkpoints=self.counters.checkpoints,
            fenced=self.fenced,
        )
        return EXIT_FENCED if self.fenced else EXIT_OK

    def _awaiting_partitions(self) -> bool:
        """A group member that owns no partition yet is not idle: it waits for a rebalance."""
        return self.options.group is not None and not self._consumer.assignment()

    def step(self, timeout_ms: int | None = None) -> int:
        """One poll, its processing and a checkpoint when due; returns records learned.

        The body of `run`, public so a caller can interleave workers without threads
        (the embedded demo). Checkpoints are considered after every message, so they
        come every `checkpoint_records` records, not every N polls.
        """
        before = self.counters.records
        messages = self.poll(timeout_ms)
        for message in messages:
            if self.fenced:
                break
            self.process([message])
            self._maybe_checkpoint()
        if not messages:
            self._maybe_checkpoint()
        self._maybe_report_lag()
        if self._partitioned is not None:
            self._partitioned.tick()
        return self.counters.records - before

    def close(self, final_checkpoint: bool = False) -> None:
        """Close the consumer, producer and (if opened here) the transport; idempotent.

        With `final_checkpoint` (and not fenced) every model with unsaved progress is
        saved first, and in scale-out the parameter mix is published once more.
        """
        if final_checkpoint and not self.fenced and self._consumer is not None:
            self._final_checkpoint()
            if self._partitioned is not None:
                self._partitioned.maybe_mix(force=True)
        owned = [self.transport] if self._owns_transport else []
        for closable in (self._consumer, self._producer, *owned):
            if closable is not None:
                try:
                    closable.close()
                except self._transient as exc:
                    log_event(log, "close failed", level=logging.WARNING, error=repr(exc))
        self._consumer = self._producer = None

    def start(self) -> None:
        """Create topics, load every model with its offsets, and seek the consumer there."""
        opts = self.options
        topic = self.settings.triplets_topic
        self._retry_until_stopped(
            "ensure topics",
            lambda: self.transport.ensure_topics(
                {topic: opts.partitions, self.settings.dead_letter_topic: 1}
            ),
        )

        def load_all() -> None:
            params = {"C": opts.C, "eta": opts.eta}
            self.models = [
                load_or_create(self.store, name, params, opts.scaler_rows) for name in opts.algos
            ]

        if self._partitioned is None:  # else each partition's models load on assignment
            self._retry_until_stopped("load models", load_all)
        for model in self.models:
            metrics.MODEL_VERSION.labels(model=model.name).set(model.version)
            log_event(
                log,
                "model loaded",
                model=model.name,
                version=model.version,
                triplets_seen=model.triplets_seen,
                offsets={str(p): o for p, o in model.offsets.get(topic, {}).items()},
            )
        self._retry_until_stopped("connect", self._connect)

    def _connect(self) -> None:
        """Open the producer (dead letters) and the consumer at the models' positions."""
        topic = self.settings.triplets_topic
        if self._producer is None:
            self._producer = self.transport.producer()
        if self._consumer is None:
            self._consumer = self.transport.consumer(self.options.group)
        consumer = self._consumer
        if self.options.group is None:
            partitions = [(topic, p) for p in self.transport.partitions_for(topic)]
            consumer.assign(partitions)
            self._seek_to_models(partitions)
        elif self._partitioned is not None:
            consumer.subscribe(
                [topic],
                on_assign=self._partitioned.on_assign,
                on_revoke=self._partitioned.on_revoke,
            )
        else:
            consumer.subscribe([topic], on_assign=self._seek_to_models)

    def _seek_to_models(self, partitions: Sequence[tuple[str, int]]) -> None:
        """Seek each partition to the earliest position any model still needs."""
        assert self._consumer is not None
        for topic, partition in partitions:
            positions = [m.next_offset(topic, partition) for m in self._models_for(partition)]
            stored = [p for p in positions if p is not None]
            self._dead_letter_from[partition] = max(stored, default=0)
            if len(stored) < len(positions):
                self._consumer.seek_to_beginning(topic, partition)
                where = "beginning"
            else:
                self._consumer.seek(topic, partition, min(stored))
                where = min(stored)
            log_event(log, "seek", topic=topic, partition=partition, offset=where)

    def _models_for(self, partition: int) -> list[TrackedModel]:
        """The models that learn this partition: all of them, or its own in scale-out."""
        if self._partitioned is None:
            return self.models
        return self._partitioned.models_for(partition)

    def _retry_until_stopped(self, what: str, action: Callable[[], None]) -> None:
        retry_until_stopped(what, action, self._stop, self._transient, log)

    # --- consuming ------------------------------------------------------------------
    def poll(self, timeout_ms: int | None = None) -> list[Message]:
        """Messages from the consumer (waiting up to `timeout_ms`, default the options'
        `poll_ms`); [] after a back-off when the broker is away."""
        assert self._consumer is not None, "call start() first"
        wait = self.options.poll_ms if timeout_ms is None else timeout_ms
        messages = poll_or_back_off(
            self._consumer,
            wait,
            self.options.max_poll_records,
            self._transient,
            self._poll_backoff,
            self._stop,
            log,
        )
        self.counters.polled += len(messages)
        return messages

    def process(self, messages: Sequence[Message]) -> None:
        """Decode each message once and apply it to every model that has not covered it."""
        for message in messages:
            targets = [
                m
                for m in self._models_for(message.partition)
                if not m.covers(message.topic, message.partition, message.offset)
            ]
            if not targets:
                continue  # replayed after a crash; every model already has it
            self.counters.messages += 1
            try:
                block = decode_triplets(message.value)
            except SchemaError as exc:
                self._dead_letter(message, exc.reason, exc.detail)
                for model in targets:
                    model.skip(message.topic, message.partition, message.offset)
                continue
            if block.rejects:
                self._dead_letter_rows(message, block.rejects)
            self._learn(message, block, targets)
            if self._on_block is not None:
                self._on_block(message, block)

    def _learn(self, message: Message, block: TripletBlock, targets: list[TrackedModel]) -> None:
        """Every model learns the block in one compiled pass; a model that refuses it skips it."""
        n = len(block)
        self.counters.records += n
        self.counters.since_checkpoint += n
        metrics.TRIPLETS_CONSUMED.inc(n)
        results = self._learn_timed(targets, message, block)
        refused: list[str] = []
        for model, result in zip(targets, results, strict=True):
            if isinstance(result, ValueError):  # the ranker refused the batch; model unchanged
                refused.append(f"{model.name}: {result}")
                model.skip(message.topic, message.partition, message.offset)
                continue
            metrics.MODEL_UPDATES.labels(model=model.name).inc(result)
        if refused:
            self._dead_letter(message, NON_FINITE, "; ".join(refused))

    def _learn_timed(
        self, targets: list[TrackedModel], message: Message, block: TripletBlock
    ) -> list[int | ValueError]:
        """`learn_together` per group of models that share work, charging each its time.

        Time is CPU time of this thread (`time.thread_time`): what learning costs,
        whatever the other tenants of the machine or the client's I/O threads do.
        The linear models whose scaler is fitted share one compiled pass (x formed once
        per row, then every model's margin and update), so that pass is timed once and
        split equally among them: each does the same per-row work on the shared x.
        AROW learns on its own (its own kernel), and a model still holding messages for
        its scaler learns alone too (it may fit the scaler and replay what it held);
        each is charged its own time. Splitting the call changes no weights: models are
        independent inside `learn_together`.
        """
        shared = [m for m in targets if m.ranker is not None and m.algo != "arow"]
        shared_ids = {id(m) for m in shared}
        groups = ([shared] if shared else []) + [[m] for m in targets if id(m) not in shared_ids]
        y = block.y()
        results: dict[int, int | ValueError] = {}
        for group in groups:
            started = time.thread_time()
            found = learn_together(
                group, message.topic, message.partition, message.offset, block.phi1, block.phi2, y
            )
            share = (time.thread_time() - started) / len(group)
            for model, result in zip(group, found, strict=True):
                results[id(model)] = result
                self.learn_seconds[model.name] = self.learn_seconds.get(model.name, 0.0) + share
                metrics.LEARN_SECONDS.labels(model=model.name).inc(share)
        return [results[id(m)] for m in targets]

    def _dead_letter_rows(self, message: Message, rejects: list[tuple[int, str]]) -> None:
        reasons = Counter(reason for _, reason in rejects)
        detail = f"{len(rejects)} rejected rows: " + ", ".join(
            f"{count} {reason}" for reason, count in reasons.most_common()
        )
        self._dead_letter(
            message, reasons.most_common(1)[0][0], detail, rows=[row for row, _ in rejects]
        )

    def _dead_letter(
        self, message: Message, reason: str, detail: str, rows: list[int] | None = None
    ) -> None:
        """Send the original bytes, reason and source offset to the dead-letter topic."""
        if message.offset < self._dead_letter_from.get(message.partition, 0):
            return  # a previous worker already dead-lettered it (covered by a checkpoint)
        assert self._producer is not None
        send_dead_letter(
            self._producer,
            self.settings.dead_letter_topic,
            message,
            reason,
            detail,
            transient=self._transient,
            logger=log,
            rows=rows,
        )
        self.counters.dead_letters += 1

    # --- checkpoints ----------------------------------------------------------------
    def _maybe_checkpoint(self) -> None:
        due = (
            self.counters.since_checkpoint >= self.options.checkpoint_records
            or time.monotonic() - self._last_checkpoint >= self.options.checkpoint_seconds
        )
        if due and self._checkpoint_backoff.ready():
            self.checkpoint()

    def checkpoint(self) -> bool:
        """Save every model with unsaved progress; False if a transient error deferred it."""
        dirty = [m for m in self.models if m.checkpointable]
        self._last_checkpoint = time.monotonic()
        if not dirty:
            self.counters.since_checkpoint = 0
            return True
        started = time.perf_counter()
        try:
            for model in dirty:
                version = save_checkpoint(self.store, model, self.writer)
                metrics.MODEL_VERSION.labels(model=model.name).set(version)
        except FencingError as exc:
            self.fenced = True
            metrics.FENCING_ERRORS.labels(model=exc.name).inc()
            log_event(
                log,
                "fenced: a newer writer owns the model; stopping",
                level=logging.ERROR,
                model=exc.name,
                expected=exc.expected,
                actual=exc.actual,
            )
            return False
        except self._transient as exc:
            metrics.CHECKPOINT_FAILURES.inc()
            delay = self._checkpoint_backoff.failed()
            log_event(
                log,
                "checkpoint failed; will retry",
                level=logging.WARNING,
                error=repr(exc),
                retry_in_s=delay,
            )
            return False
        self._checkpoint_backoff.succeeded()
        metrics.CHECKPOINT_SECONDS.observe(time.perf_counter() - started)
        self.counters.checkpoints += 1
        self.counters.since_checkpoint = 0
        log_event(
            log,
            "checkpoint",
            models={m.name: m.version for m in dirty},
            seconds=round(time.perf_counter() - started, 4),
        )
        return True

    def _final_checkpoint(self) -> None:
        final_save(
            "checkpoint", self.checkpoint, lambda: self.fenced, self._checkpoint_backoff, log
        )

    # --- lag --------------------------------------------------------------------------
    def _maybe_report_lag(self) -> None:
        now = time.monotonic()
        if now - self._last_lag < _LAG_REFRESH_SECONDS or self._consumer is None:
            return
        self._last_lag = now
        topic = self.settings.triplets_topic
        try:
            ends = self.transport.end_offsets(topic)
            assignment = self._consumer.assignment()
            per_message = self.counters.records / max(self.counters.messages, 1)
            for t, partition in assignment:
                lag = max(0, ends.get(partition, 0) - self._consumer.position(t, partition))
                records = round(lag * per_message)
                self.counters.lag_records[partition] = records
                metrics.CONSUMER_LAG_RECORDS.labels(topic=t, partition=str(partition)).set(records)
        except self._transient as exc:
            log_event(log, "lag refresh failed", level=logging.WARNING, error=repr(exc))
