"""The online worker: triplets from the stream -> every online ranker -> fenced checkpoints.

`OnlineHandler` is the worker's own part, run by the stream runtime (`workers.runtime`):
each message is decoded once and applied to every named model (`ranking.learners` names
them; one compiled pass for the linear ones), and each model is saved with the offsets
it covers (`workers.checkpoint`) when the runtime's checkpoint cadence says so
(`checkpoint_records` triplets or `checkpoint_seconds`), and on a clean stop.

Exact resume: on start each model is loaded with its offsets, and every partition is
sought to the *minimum* next-offset over the models (the beginning when any model has
no stored position). A message is then applied only to the models whose next-offset
for that partition is <= the message's offset, so models checkpointed at different
offsets (a crash between their saves) each see every triplet exactly once. Weights are
bit-identical to an uninterrupted run when the per-model order of messages is the same;
that holds within a partition, so single-partition topics give bit-identical resumes,
while across partitions the interleaving depends on fetch timing (still exactly once).

Scale-out (`per_partition`, in a consumer group): the runtime keeps one handler per
partition k with its own models `{algo}.p{k}` (`workers.runtime.PerPartition`), and the
handler of partition 0 publishes their parameter mix as `{algo}` (`workers.scaleout`).

Fencing: a FencingError on a save means another worker saved the model after us, so
this worker is stale; the runtime stops it at once (no further saves) and it exits
with EXIT_FENCED; its supervisor restarts it, which loads the newer checkpoint.

Width: messages are decoded at the deployment's width (`Settings.phi_dim`); one of
another width is dead-lettered as `wrong_width`, and a stored model of another width
stops the worker at load (`WrongWidthError`) instead of learning from misread rows.

Dead letters: a message that fails to decode is sent to the dead-letter topic with the
reason and its source offset, and every model moves past it. Row-level rejects
(NaN/Inf, tied relevance) are learned around: the good rows are applied and the
message is dead-lettered with the bad rows' indices. A message is dead-lettered only
when it lies beyond every model's stored position at start-up; messages between the
last checkpoint and a crash may be dead-lettered twice, which is why a dead letter's
key is "topic:partition:offset" (consumers can deduplicate on it).
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from rankstream.ranking import learners
from rankstream.stream.schema import NON_FINITE, SchemaError, TripletBlock, decode_triplets
from rankstream.stream.settings import Settings
from rankstream.stream.store import ModelStore, WrongWidthError
from rankstream.stream.transport import Message, TopicPartition, Transport
from rankstream.telemetry import prometheus_metrics as metrics
from rankstream.telemetry.structured_log import get_logger, log_event
from rankstream.workers.checkpoint import (
    TrackedModel,
    learn_together,
    load_or_create,
    save_checkpoint,
)
from rankstream.workers.online_worker_options import LINEAR_ALGOS, WorkerOptions
from rankstream.workers.runtime import Handler, PerPartition, StreamRuntime
from rankstream.workers.scaleout import MIXER_PARTITION, partition_model_name, publish_mix

__all__ = [
    "LINEAR_ALGOS",
    "OnlineHandler",
    "OnlineWorker",
    "WorkerOptions",
]


log = get_logger("rankstream.worker.online")


BlockObserver = Callable[[Message, TripletBlock], None]


@dataclass
class OnlineCounters:
    records: int = 0  # triplets learned (decoded rows of messages some model still needed)
    messages: int = 0  # messages applied to at least one model
    dead_letters: int = 0


class OnlineHandler(Handler):
    """Every named online model, learning the triplets topic (see the module docstring).

    `partition` set: the handler of one partition in scale-out, with models
    `{algo}.p{partition}`; the one of partition 0 also publishes the parameter mix.
    """

    name = "online"

    def __init__(
        self,
        settings: Settings,
        options: WorkerOptions,
        partition: int | None = None,
        on_block: BlockObserver | None = None,
    ) -> None:
        self.settings = settings
        self.options = options
        self.partition = partition
        self.models: list[TrackedModel] = []
        self.counters = OnlineCounters()
        # CPU seconds each model spent learning in this process (see `_learn_timed`)
        self.learn_seconds: dict[str, float] = dict.fromkeys(self._names(), 0.0)
        self._on_block = on_block
        self._dead_letter_from: dict[int, int] = {}
        self._last_mix = time.monotonic()

    def _names(self) -> list[str]:
        if self.partition is None:
            return list(self.options.algos)
        return [partition_model_name(a, self.partition) for a in self.options.algos]

    # --- the runtime's calls --------------------------------------------------------------
    def topics(self) -> dict[str, int]:
        return {self.settings.triplets_topic: self.options.partitions}

    def extra_topics(self) -> dict[str, int]:
        return {self.settings.dead_letter_topic: 1}

    def load(self, runtime: StreamRuntime) -> None:
        """Each model with its offsets, or a fresh one that starts at the beginning."""
        self.models = [
            load_or_create(
                runtime.store, name, self.options.hyper, self.options.scaler_rows, algo=algo
            )
            for name, algo in zip(self._names(), self.options.algos, strict=True)
        ]
        for model in self.models:
            width = None if model.ranker is None else model.ranker.width
            if width is not None and width != self.settings.phi_dim:
                raise WrongWidthError(model.name, width, self.settings.phi_dim)
        topic = self.settings.triplets_topic
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

    def positions(self, partitions: Sequence[TopicPartition]) -> dict[TopicPartition, int | None]:
        """The earliest position any model still needs (None: some model has none)."""
        found: dict[TopicPartition, int | None] = {}
        for topic, partition in partitions:
            stored = [m.next_offset(topic, partition) for m in self.models]
            known = [o for o in stored if o is not None]
            self._dead_letter_from[partition] = max(known, default=0)
            found[(topic, partition)] = min(known) if len(known) == len(stored) else None
        return found

    def process(self, runtime: StreamRuntime, messages: Sequence[Message]) -> int:
        """Decode each message once and apply it to every model that has not covered it."""
        learned = 0
        for message in messages:
            targets = [
                m
                for m in self.models
                if not m.covers(message.topic, message.partition, message.offset)
            ]
            if not targets:
                continue  # replayed after a crash; every model already has it
            self.counters.messages += 1
            try:
                block = decode_triplets(message.value, width=self.settings.phi_dim)
            except SchemaError as exc:
                self._dead_letter(runtime, message, exc.reason, exc.detail)
                for model in targets:
                    model.skip(message.topic, message.partition, message.offset)
                continue
            if block.rejects:
                self._dead_letter_rows(runtime, message, block.rejects)
            learned += self._learn(runtime, message, block, targets)
            if self._on_block is not None:
                self._on_block(message, block)
        return learned

    def checkpoint(self, runtime: StreamRuntime) -> dict[str, Any]:
        """Save every model with unsaved progress (fenced); {name: new version}."""
        saved: dict[str, int] = {}
        for model in self.models:
            if model.checkpointable:
                version = save_checkpoint(runtime.store, model, runtime.writer)
                metrics.MODEL_VERSION.labels(model=model.name).set(version)
                saved[model.name] = version
        return saved

    def tick(self, runtime: StreamRuntime) -> None:
        """In scale-out, the handler of partition 0 publishes the mix when it is due."""
        if self.partition == MIXER_PARTITION:
            now = time.monotonic()
            if now - self._last_mix >= self.options.mix_seconds:
                self._last_mix = now
                self.publish_mix(runtime)

    def on_stop(self, runtime: StreamRuntime) -> None:
        """The last mix on the way out (the partition models were just saved)."""
        if self.partition == MIXER_PARTITION:
            self.publish_mix(runtime)

    def publish_mix(self, runtime: StreamRuntime) -> None:
        topic = self.settings.triplets_topic
        partitions = runtime.transport.partitions_for(topic)
        versions = {
            algo: publish_mix(runtime.store, topic, algo, partitions, runtime.writer)
            for algo in self.options.algos
        }
        published = {a: v for a, v in versions.items() if v is not None}
        if published:
            log_event(log, "mix published", versions=published)

    def summary(self) -> dict[str, Any]:
        return {"learned": self.counters.records}

    # --- learning -------------------------------------------------------------------------
    def _learn(
        self,
        runtime: StreamRuntime,
        message: Message,
        block: TripletBlock,
        targets: list[TrackedModel],
    ) -> int:
        """Every model learns the block in one compiled pass; a model that refuses it skips it."""
        n = len(block)
        self.counters.records += n
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
            self._dead_letter(runtime, message, NON_FINITE, "; ".join(refused))
        return n

    def _learn_timed(
        self, targets: list[TrackedModel], message: Message, block: TripletBlock
    ) -> list[int | ValueError]:
        """`learn_together` per group of models that share work, charging each its time.

        Time is CPU time of this thread (`time.thread_time`): what learning costs,
        whatever the other tenants of the machine or the client's I/O threads do.
        The linear models whose scaler is fitted share one compiled pass (x formed once
        per row, then every model's margin and update), so that pass is timed once and
        split equally among them: each does the same per-row work on the shared x.
        A learner with a kernel of its own (AROW) learns on its own, and a model still
        holding messages for its scaler learns alone too (it may fit the scaler and
        replay what it held); each is charged its own time. Splitting the call changes
        no weights: models are independent inside `learn_together`.
        """
        shared = [
            m
            for m in targets
            if m.ranker is not None and learners.learner(m.algo).linear_rule is not None
        ]
        shared_ids = {id(m) for m in shared}
        groups = ([shared] if shared else []) + [[m] for m in targets if id(m) not in shared_ids]
        results: dict[int, int | ValueError] = {}
        for group in groups:
            started = time.thread_time()
            found = learn_together(group, message.topic, message.partition, message.offset, block)
            share = (time.thread_time() - started) / len(group)
            for model, result in zip(group, found, strict=True):
                results[id(model)] = result
                self.learn_seconds[model.name] = self.learn_seconds.get(model.name, 0.0) + share
                metrics.LEARN_SECONDS.labels(model=model.name).inc(share)
        return [results[id(m)] for m in targets]

    # --- dead letters ---------------------------------------------------------------------
    def _dead_letter_rows(
        self, runtime: StreamRuntime, message: Message, rejects: list[tuple[int, str]]
    ) -> None:
        reasons = Counter(reason for _, reason in rejects)
        detail = f"{len(rejects)} rejected rows: " + ", ".join(
            f"{count} {reason}" for reason, count in reasons.most_common()
        )
        rows = [row for row, _ in rejects]
        self._dead_letter(runtime, message, reasons.most_common(1)[0][0], detail, rows)

    def _dead_letter(
        self,
        runtime: StreamRuntime,
        message: Message,
        reason: str,
        detail: str,
        rows: list[int] | None = None,
    ) -> None:
        """Dead-letter a message, unless a previous worker already did (before its save)."""
        if message.offset >= self._dead_letter_from.get(message.partition, 0):
            runtime.dead_letter(message, reason, detail, rows, counted_in=self.counters)


class OnlineWorker(StreamRuntime):
    """The stream runtime running the online handler (one per partition in scale-out)."""

    def __init__(
        self,
        settings: Settings,
        options: WorkerOptions | None = None,
        *,
        transport: Transport | None = None,
        store: ModelStore | None = None,
        on_block: BlockObserver | None = None,
    ) -> None:
        options = options or WorkerOptions()
        handler: Handler
        if options.per_partition:
            handler = PerPartition(
                "online",
                {settings.triplets_topic: options.partitions},
                lambda k: OnlineHandler(settings, options, partition=k, on_block=on_block),
                extra_topics={settings.dead_letter_topic: 1},
            )
        else:
            handler = OnlineHandler(settings, options, on_block=on_block)
        super().__init__(settings, handler, options.runtime(), transport=transport, store=store)
        self.options = options

    def _handlers(self) -> list[OnlineHandler]:
        if isinstance(self.handler, PerPartition):
            return [h for _, h in sorted(self.handler.by_partition.items())]  # type: ignore[misc]
        return [self.handler]  # type: ignore[list-item]

    @property
    def models(self) -> list[TrackedModel]:
        """Every model this worker learns now (in scale-out: of the partitions it owns)."""
        return [m for h in self._handlers() for m in h.models]

    @property
    def counters(self) -> OnlineCounters:
        handlers = self._handlers()
        return OnlineCounters(
            records=sum(h.counters.records for h in handlers),
            messages=sum(h.counters.messages for h in handlers),
            dead_letters=sum(h.counters.dead_letters for h in handlers),
        )

    @property
    def learn_seconds(self) -> dict[str, float]:
        return {k: v for h in self._handlers() for k, v in h.learn_seconds.items()}
