"""The stream runtime: one application loop for every long-running rankstream process.

Modelled on Quix Streams' `Application` and `Checkpoint`: the runtime owns the
transport and store, topic creation, assignment and seeking, poll with back-off, idle
exit, signals, the checkpoint cadence and what a failed save means; a *handler*
(`workers.online_worker`, `workers.batch_worker`, `workers.evaluator`, `workers.recorder`,
`workers.simulator`) holds only its own state and answers a few calls:

    topics()              {topic: partitions to create} it consumes; {} for a source
    extra_topics()        topics it only writes to (dead letters, a source's output)
    load(runtime)         read its stored state (retried while the services are away)
    positions(tps)        where each partition resumes: the next offset, None = beginning
    process(rt, msgs)     apply messages; returns the records they held
    produce(rt)           a source's unit of work (one served query); returns records
    done                  a source has nothing more to produce
    checkpoint(rt)        save state with the offsets it covers; returns what it saved
    tick(rt)              its own periodic work (a refit, a parameter mix)
    on_assign(rt, tps)    partitions just assigned by the group (before they are sought)
    on_revoke(rt, tps)    before partitions move to another member of the group
    on_stop(rt)           after the final checkpoint of a clean stop
    close()

What rankstream keeps from its own design, where Quix commits consumer-group offsets:
offsets live in the store *next to the state they produced* (per model), every save is
fenced on version + write id, and a restart seeks to the stored offsets, so a resumed
process is exact. Scale-out is a property of the runtime: given `per_partition`, a
factory of handlers, it keeps one handler per assigned partition (`PerPartition`),
loads it on assignment and checkpoints it on revocation.

Errors: a `FencingError` from a save (a newer writer owns the state) stops the runtime
at once, with no further saves (`run` returns `EXIT_FENCED`; a supervisor restarts
the process, which loads the newer state). A transient error (`stream.errors`: a
service is away) backs off and the work is retried: checkpoints keep their state
dirty, polls return nothing. Anything else propagates.

Cadences: `Cadence(records=N, seconds=T)` is due every N records or T seconds,
whichever comes first; `Cadence.on_demand()` never by itself (the embedded demo calls
`checkpoint()` when it wants one).
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
from typing import Any, ClassVar, Generic, Protocol, TypeVar, get_args, get_origin, overload

from rankstream.stream.connect import open_store, open_transport
from rankstream.stream.errors import TRANSIENT
from rankstream.stream.settings import Settings
from rankstream.stream.store import FencingError, ModelStore
from rankstream.stream.transport import Consumer, Message, Producer, TopicPartition, Transport
from rankstream.telemetry import prometheus_metrics as metrics
from rankstream.telemetry.structured_log import get_logger, log_event
from rankstream.workers.deadletters import send_dead_letter
from rankstream.workers.resilience import (
    Backoff,
    final_save,
    poll_or_back_off,
    retry_until_stopped,
)
from rankstream.workers.runtime_options import CadenceTimer, RuntimeOptions

EXIT_OK = 0
EXIT_FENCED = 3
_LAG_REFRESH_SECONDS = 2.0

log = get_logger("rankstream.runtime")


# --- the handler contract -------------------------------------------------------------------
class Handler:
    """What a long-running process does with its stream (see the module docstring).

    Every method has a do-nothing default, so a handler writes only what it needs.
    """

    name = "handler"

    def topics(self) -> dict[str, int]:
        return {}

    def extra_topics(self) -> dict[str, int]:
        return {}

    def load(self, runtime: StreamRuntime) -> None:
        pass

    def positions(self, partitions: Sequence[TopicPartition]) -> dict[TopicPartition, int | None]:
        return dict.fromkeys(partitions)

    def process(self, runtime: StreamRuntime, messages: Sequence[Message]) -> int:
        return 0

    def produce(self, runtime: StreamRuntime) -> int:
        return 0

    @property
    def done(self) -> bool:
        return False

    def checkpoint(self, runtime: StreamRuntime) -> dict[str, Any]:
        return {}

    def tick(self, runtime: StreamRuntime) -> None:
        pass

    def on_assign(self, runtime: StreamRuntime, partitions: Sequence[TopicPartition]) -> None:
        pass

    def on_revoke(self, runtime: StreamRuntime, partitions: Sequence[TopicPartition]) -> None:
        pass

    def on_stop(self, runtime: StreamRuntime) -> None:
        pass

    def close(self) -> None:
        pass

    def summary(self) -> dict[str, Any]:
        return {}


T = TypeVar("T")


class FromHandler(Generic[T]):
    """A read-only attribute of a worker that reads its handler's attribute of the same
    name: the workers (`BatchWorker`, `Evaluator`, `Recorder`, `Simulation`) show their
    handler's state to the commands and tests, one line an attribute."""

    def __set_name__(self, owner: type, name: str) -> None:
        self.name = name

    @overload
    def __get__(self, instance: None, owner: type | None = None) -> FromHandler[T]: ...

    @overload
    def __get__(self, instance: object, owner: type | None = None) -> T: ...

    def __get__(self, instance: object | None, owner: type | None = None) -> Any:
        if instance is None:
            return self
        return getattr(instance.handler, self.name)  # type: ignore[attr-defined]

    def __set__(self, instance: object, value: object) -> None:
        raise AttributeError(f"{self.name} is the handler's; set it there")


class DeadLetterCount(Protocol):
    dead_letters: int


@dataclass
class RuntimeStats:
    polled: int = 0  # messages read from the consumer (replays after a restart included)
    messages: int = 0  # messages handed to the handler
    records: int = 0  # records the handler reported processing or producing
    checkpoints: int = 0
    dead_letters: int = 0
    lag_records: dict[int, int] = field(default_factory=dict)


class StreamRuntime:
    """Runs one handler on a transport and store until stopped, idle, done or fenced."""

    def __init__(
        self,
        settings: Settings,
        handler: Handler,
        options: RuntimeOptions | None = None,
        *,
        transport: Transport | None = None,
        store: ModelStore | None = None,
    ) -> None:
        self.settings = settings
        self.handler = handler
        self.run_options = options or RuntimeOptions()
        self.transport = transport if transport is not None else open_transport(settings)
        self._store = store
        # closed by close(); the Kafka transport reopens its clients lazily if used again
        self._owned: list[Any] = [self.transport] if transport is None else []
        self.writer = f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"
        self.fenced = False
        self.stats = RuntimeStats()
        self.consumer: Consumer | None = None
        self._producer: Producer | None = None
        self._stop = threading.Event()
        self._started = False
        self._due = CadenceTimer(self.run_options.checkpoint)
        self._checkpoint_backoff = Backoff()
        self._poll_backoff = Backoff()
        self._last_lag = 0.0
        self._callback_failure: BaseException | None = None

    # --- lifecycle ---------------------------------------------------------------------
    def start(self) -> None:
        """Create topics, load the handler's stored state, assign and seek; idempotent."""
        if self._started:
            return
        topics = {**self.handler.extra_topics(), **self.handler.topics()}
        if topics:
            self.retry("ensure topics", lambda: self.transport.ensure_topics(topics))
        self.retry("load state", lambda: self.handler.load(self))
        if self.handler.topics():
            self.retry("connect", self._connect)
        self._started = True

    def run(self, until: Callable[[StreamRuntime], bool] | None = None) -> int:
        """Loop until stopped, idle for `exit_when_idle`, done, `until(self)` or fenced;
        then a final checkpoint (unless fenced) and close. Returns the exit code."""
        self.start()
        idle_since = time.monotonic()
        clean = False
        try:
            while not self._stop.is_set() and not self.fenced and not self.handler.done:
                polled = self.stats.polled
                self.step()
                if self.stats.polled != polled or self._awaiting_partitions():
                    idle_since = time.monotonic()
                if until is not None and until(self):
                    break
                idle = self.run_options.exit_when_idle
                if idle is not None and time.monotonic() - idle_since >= idle:
                    log_event(log, "idle, exiting", worker=self.handler.name, idle_seconds=idle)
                    break
            clean = True
        finally:
            self.close(final_checkpoint=clean)
        log_event(log, "worker stopped", **self.report())
        return EXIT_FENCED if self.fenced else EXIT_OK

    def report(self) -> dict[str, Any]:
        """What this run did: its "worker stopped" log line, and the workers' `--json`."""
        return {
            "worker": self.handler.name,
            "records": self.stats.records,
            "messages": self.stats.messages,
            "checkpoints": self.stats.checkpoints,
            "dead_letters": self.stats.dead_letters,
            "fenced": self.fenced,
            **self.handler.summary(),
        }

    def step(self, timeout_ms: int | None = None) -> int:
        """One poll (or one unit of a source's work), a checkpoint when due, the handler's
        tick; returns the records handled. The body of `run`, public so a caller can
        interleave runtimes without threads (the embedded demo)."""
        self.start()
        before = self.stats.records
        if not self.handler.topics():
            if not self.handler.done:
                self._count(self.handler.produce(self))
            self._maybe_checkpoint()
        else:
            messages = self.poll(timeout_ms)
            for message in messages:  # a checkpoint may fall due between any two messages
                if self.fenced:
                    break
                self.process([message])
                self._maybe_checkpoint()
            if not messages:
                self._maybe_checkpoint()
            self._raise_callback_failure()
        if not self.fenced:
            self.guarded("tick", lambda: self.handler.tick(self))
        self._maybe_report_lag()
        return self.stats.records - before

    def stop(self) -> None:
        """Ask `run` to finish: a final checkpoint, then it returns (signal-safe)."""
        self._stop.set()

    @property
    def stopping(self) -> bool:
        return self._stop.is_set()

    def install_signal_handlers(self) -> None:
        """SIGTERM/SIGINT -> clean stop (main thread only)."""
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, lambda *_: self.stop())

    def close(self, final_checkpoint: bool = False) -> None:
        """Close the handler, consumer, producer and what was opened here; idempotent.

        With `final_checkpoint` (and not fenced) unsaved state is saved first, with a
        few retries: a restart resumes from the previous save if they all fail.
        """
        if final_checkpoint and self._started and not self.fenced:
            final_save(
                "checkpoint",
                self.checkpoint,
                lambda: self.fenced,
                self._checkpoint_backoff,
                log,
            )
            if not self.fenced:
                self.guarded("final work", lambda: self.handler.on_stop(self))
        self.handler.close()
        for closable in (self.consumer, self._producer, *self._owned):
            if closable is not None:
                try:
                    closable.close()
                except TRANSIENT as exc:
                    log_event(log, "close failed", level=logging.WARNING, error=repr(exc))
        self.consumer = self._producer = None
        self._owned = []
        self._started = False

    # --- services ----------------------------------------------------------------------
    @property
    def store(self) -> ModelStore:
        """The model store, opened on first use (a handler that stores nothing opens none)."""
        if self._store is None:
            self._store = open_store(self.settings)
            self._owned.append(self._store)
        return self._store

    @property
    def producer(self) -> Producer:
        """The runtime's one producer (dead letters, a source's output), opened on first use."""
        if self._producer is None:
            self._producer = self.transport.producer()
        return self._producer

    def retry(self, what: str, action: Callable[[], None]) -> None:
        """Run `action` until it succeeds, backing off while a service is away."""
        retry_until_stopped(what, action, self._stop, TRANSIENT, log)

    def guarded(self, what: str, action: Callable[[], Any]) -> bool:
        """Run a saving action: fencing stops the runtime, a transient error is logged,
        counted and backed off (the caller tries again later). True if it completed."""
        try:
            action()
        except FencingError as exc:
            self.fenced = True
            metrics.FENCING_ERRORS.labels(model=exc.name).inc()
            log_event(
                log,
                "fenced: a newer writer owns the state; stopping",
                level=logging.ERROR,
                worker=self.handler.name,
                model=exc.name,
                expected=exc.expected,
                actual=exc.actual,
            )
            return False
        except TRANSIENT as exc:
            metrics.CHECKPOINT_FAILURES.inc()
            delay = self._checkpoint_backoff.failed()
            log_event(
                log,
                f"{what} failed; will retry",
                level=logging.WARNING,
                worker=self.handler.name,
                error=repr(exc),
                retry_in_s=delay,
            )
            return False
        return True

    def may_save(self) -> bool:
        """Not fenced, and not backing off after a failed save."""
        return not self.fenced and self._checkpoint_backoff.ready()

    def dead_letter(
        self,
        message: Message,
        reason: str,
        detail: str,
        rows: list[int] | None = None,
        counted_in: DeadLetterCount | None = None,
    ) -> None:
        """Send a message that could not be used to the dead-letter topic (counted, logged);
        `counted_in`: the handler's counters, when they keep their own count (saved with
        its state, so it survives a restart, where `stats` is this process's)."""
        self.stats.dead_letters += 1
        if counted_in is not None:
            counted_in.dead_letters += 1
        send_dead_letter(
            self.producer,
            self.settings.dead_letter_topic,
            message,
            reason,
            detail,
            transient=TRANSIENT,
            logger=log,
            rows=rows,
        )

    # --- consuming ---------------------------------------------------------------------
    def _connect(self) -> None:
        """Open the consumer: assign every partition, or join the group; seek."""
        if self.consumer is None:
            self.consumer = self.transport.consumer(self.run_options.group)
        topics = list(self.handler.topics())
        if self.run_options.group is None:
            partitions = [(t, p) for t in topics for p in self.transport.partitions_for(t)]
            self.consumer.assign(partitions)
            self._seek(partitions)
        else:
            self.consumer.subscribe(topics, on_assign=self._on_assign, on_revoke=self._on_revoke)

    def _on_assign(self, partitions: list[TopicPartition]) -> None:
        """Called by the consumer inside `poll`. kafka-python logs and swallows what a
        rebalance callback raises, which would leave partitions assigned but never
        processed; so a failure is kept, the runtime stops, and `step` re-raises it."""
        try:
            self.handler.on_assign(self, partitions)
            self._seek(partitions)
        except BaseException as exc:
            self._callback_failure = exc
            self.stop()
            raise

    def _on_revoke(self, partitions: list[TopicPartition]) -> None:
        if not self.fenced:
            self.handler.on_revoke(self, partitions)

    def _raise_callback_failure(self) -> None:
        if self._callback_failure is not None:
            raise RuntimeError(
                f"loading assigned partitions failed: {self._callback_failure!r}"
            ) from self._callback_failure

    def _seek(self, partitions: Sequence[TopicPartition]) -> None:
        assert self.consumer is not None
        for (topic, partition), offset in self.handler.positions(partitions).items():
            if offset is None:
                self.consumer.seek_to_beginning(topic, partition)
            else:
                self.consumer.seek(topic, partition, offset)
            log_event(
                log,
                "seek",
                worker=self.handler.name,
                topic=topic,
                partition=partition,
                offset="beginning" if offset is None else offset,
            )

    def _awaiting_partitions(self) -> bool:
        """A group member that owns no partition yet is not idle: it waits for a rebalance."""
        return (
            self.run_options.group is not None
            and self.consumer is not None
            and not self.consumer.assignment()
        )

    def poll(self, timeout_ms: int | None = None) -> list[Message]:
        """Messages from the consumer (waiting up to `timeout_ms`, default the options'
        `poll_ms`); [] after a back-off when the broker is away."""
        self.start()
        assert self.consumer is not None, "this handler consumes no topic"
        wait = self.run_options.poll_ms if timeout_ms is None else timeout_ms
        messages = poll_or_back_off(
            self.consumer,
            wait,
            self.run_options.max_poll_records,
            TRANSIENT,
            self._poll_backoff,
            self._stop,
            log,
        )
        self.stats.polled += len(messages)
        metrics.LAST_POLL_TIMESTAMP.labels(worker=self.handler.name).set_to_current_time()
        return messages

    def process(self, messages: Sequence[Message]) -> int:
        """Hand messages to the handler (no checkpoint: `step` decides that)."""
        self.start()
        self.stats.messages += len(messages)
        return self._count(self.handler.process(self, messages))

    def _count(self, records: int) -> int:
        self.stats.records += records
        self._due.add(records)
        return records

    # --- checkpoints -------------------------------------------------------------------
    def request_checkpoint(self) -> None:
        """Make a checkpoint due at the next check (e.g. a new champion to publish)."""
        self._due.force()

    def _maybe_checkpoint(self) -> None:
        if self._due.due() and self._checkpoint_backoff.ready() and not self.fenced:
            self.checkpoint()

    def checkpoint(self) -> bool:
        """Save the handler's state now; False if fenced or a transient error deferred it."""
        self._due.reset()
        if self.fenced:
            return False
        started = time.perf_counter()
        saved: dict[str, Any] = {}

        def save() -> None:
            saved.update(self.handler.checkpoint(self))

        if not self.guarded("checkpoint", save):
            return False
        self._checkpoint_backoff.succeeded()
        if saved:
            seconds = time.perf_counter() - started
            metrics.CHECKPOINT_SECONDS.observe(seconds)
            self.stats.checkpoints += 1
            log_event(
                log, "checkpoint", worker=self.handler.name, saved=saved, seconds=round(seconds, 4)
            )
        return True

    # --- lag ---------------------------------------------------------------------------
    def _maybe_report_lag(self) -> None:
        """Consumer lag in records: message lag times the mean records per message seen
        so far (an estimate: blocks vary)."""
        now = time.monotonic()
        if not self.run_options.report_lag or self.consumer is None:
            return
        if now - self._last_lag < _LAG_REFRESH_SECONDS:
            return
        self._last_lag = now
        try:
            per_message = self.stats.records / max(self.stats.messages, 1)
            ends: dict[str, Mapping[int, int]] = {}
            for topic, partition in self.consumer.assignment():
                if topic not in ends:
                    ends[topic] = self.transport.end_offsets(topic)
                end = ends[topic].get(partition, 0)
                lag = max(0, end - self.consumer.position(topic, partition))
                records = round(lag * per_message)
                self.stats.lag_records[partition] = records
                metrics.CONSUMER_LAG_RECORDS.labels(topic=topic, partition=str(partition)).set(
                    records
                )
        except TRANSIENT as exc:
            log_event(log, "lag refresh failed", level=logging.WARNING, error=repr(exc))


OptionsT = TypeVar("OptionsT")
HandlerT = TypeVar("HandlerT", bound=Handler)


class OptionsRuntime(StreamRuntime, Generic[OptionsT, HandlerT]):
    """A worker's runtime built from its options dataclass, one way for every worker:
    `options_type()` when none are given, its `runtime()` cadence, and the handler from
    `build_handler` (called once the store is known: a handler may need it).
    `services`: `transport=` and/or `store=` to use instead of opening the configured.

    A worker names its options and handler types once, as the class's parameters
    (`class BatchWorker(OptionsRuntime[BatchOptions, BatchHandler])`); `options_type` is
    read from them."""

    options_type: ClassVar[type]
    options: OptionsT
    handler: HandlerT

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        for base in getattr(cls, "__orig_bases__", ()):
            if get_origin(base) is OptionsRuntime:
                cls.options_type = get_args(base)[0]

    def __init__(
        self, settings: Settings, options: OptionsT | None = None, **services: Any
    ) -> None:
        chosen = options if options is not None else self.options_type()
        super().__init__(settings, Handler(), chosen.runtime(), **services)
        self.options = chosen
        self.handler = self.build_handler(settings, chosen)

    def build_handler(self, settings: Settings, options: OptionsT) -> HandlerT:
        raise NotImplementedError


# --- scale-out: one handler per partition -----------------------------------------------------
class PerPartition(Handler):
    """A handler per assigned partition, made by `factory(partition)`; for consumer groups.

    On assignment each new partition's handler loads its state (retried while the store
    is away) and the partition seeks to its position; on revocation the partitions'
    state is checkpointed (through the runtime, so fencing and transient errors are
    handled as for any save) and their handlers dropped. A partition still owned after a
    rebalance keeps its in-memory handler, which is ahead of the store.
    """

    def __init__(
        self,
        name: str,
        topics: dict[str, int],
        factory: Callable[[int], Handler],
        extra_topics: dict[str, int] | None = None,
    ) -> None:
        self.name = name
        self._topics = dict(topics)
        self._extra = dict(extra_topics or {})
        self._factory = factory
        self.by_partition: dict[int, Handler] = {}

    def topics(self) -> dict[str, int]:
        return dict(self._topics)

    def extra_topics(self) -> dict[str, int]:
        return dict(self._extra)

    def on_assign(self, runtime: StreamRuntime, partitions: Sequence[TopicPartition]) -> None:
        for _, partition in partitions:
            if partition in self.by_partition:
                continue  # still ours (not revoked): in-memory state is ahead of the store
            handler = self._factory(partition)
            runtime.retry(f"load partition {partition}", lambda h=handler: h.load(runtime))
            self.by_partition[partition] = handler
            log_event(log, "partition assigned", worker=self.name, partition=partition)

    def positions(self, partitions: Sequence[TopicPartition]) -> dict[TopicPartition, int | None]:
        found: dict[TopicPartition, int | None] = {}
        for tp in partitions:
            found.update(self.by_partition[tp[1]].positions([tp]))
        return found

    def process(self, runtime: StreamRuntime, messages: Sequence[Message]) -> int:
        records = 0
        for message in messages:
            handler = self.by_partition.get(message.partition)
            if handler is not None:
                records += handler.process(runtime, [message])
        return records

    def checkpoint(self, runtime: StreamRuntime) -> dict[str, Any]:
        saved: dict[str, Any] = {}
        for handler in self.by_partition.values():
            saved.update(handler.checkpoint(runtime))
        return saved

    def tick(self, runtime: StreamRuntime) -> None:
        for handler in list(self.by_partition.values()):
            handler.tick(runtime)

    def on_revoke(self, runtime: StreamRuntime, partitions: Sequence[TopicPartition]) -> None:
        """Checkpoint before releasing; a failed checkpoint still releases (the next owner
        resumes from the last save that succeeded)."""
        runtime.checkpoint()
        for _, partition in partitions:
            handler = self.by_partition.pop(partition, None)
            if handler is not None:
                handler.close()
                log_event(log, "partition revoked", worker=self.name, partition=partition)

    def on_stop(self, runtime: StreamRuntime) -> None:
        for handler in self.by_partition.values():
            handler.on_stop(runtime)

    def close(self) -> None:
        for handler in self.by_partition.values():
            handler.close()

    def summary(self) -> dict[str, Any]:
        return {"partitions": sorted(self.by_partition)}
