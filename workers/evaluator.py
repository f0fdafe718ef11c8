"""The evaluator: every judged query scored by every model at the versions it was served with.

A judged query carries `model_versions`, the version of every model current when it
was served. Each model is scored with *that* version (`store.load_version`, cached in
an LRU): never a newer one, which may already have learned from this query's
feedback. A model whose stamped version the store has trimmed is skipped for that
query and counted (`rankstream_evaluator_skipped_total{reason="missing_version"}`).

Per model the evaluator keeps NDCG@50 (graded gains, `ranking.metrics.ndcg_at_k`) and
average precision over its last W scored queries; their rolling means are exported as
`rankstream_ndcg_at_50{model}` / `rankstream_map{model}`, and a bounded per-query
history stays in memory for reports. Candidates arrive in served order, so a model's
ties keep the served order (the metrics' stable sort).

The rolling scores and the champion (`workers.serving.ChampionPolicy`) are published
to the store as the model `evaluator` (kind "scores"): meta {"rolling_ndcg",
"rolling_map", "counts", "window", "champion", "queries_evaluated"}, the window values
as arrays ("ndcg.<model>", "ap.<model>") and the queries-topic offsets they cover. The
simulator serves the champion named there; a restarted evaluator restores its windows
and resumes after the last published query. Queries evaluated after the last publish
are evaluated again on restart, which only repeats values already in the window's
place (the window is restored as published, then those queries are re-added).

`Evaluator.process(messages)` is the whole per-message step and `step()` one poll of
it plus a publish when due, so the embedded demo can drive it without threads; `run()`
loops `step()` with idle exit, signals and back-off on transient transport/store errors.
"""

from __future__ import annotations

import logging
import signal
import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np

from rankstream.ranking.metrics import average_precision, ndcg_at_k
from rankstream.stream.connect import open_store, open_transport
from rankstream.stream.schema import EVALUATION_FAILED, JudgedQuery, SchemaError, decode_query
from rankstream.stream.settings import Settings
from rankstream.stream.store import Fence, FencingError, ModelStore, fenced_save
from rankstream.stream.transport import Consumer, Message, Producer, Transport
from rankstream.workers import metrics
from rankstream.workers.deadletters import send_dead_letter
from rankstream.workers.logging import get_logger, log_event
from rankstream.workers.online import EXIT_FENCED, EXIT_OK
from rankstream.workers.resilience import (
    Backoff,
    poll_or_back_off,
    retry_until_stopped,
    transient_errors,
)
from rankstream.workers.serving import EVALUATOR_RECORD, SCORES_KIND, ChampionPolicy, ScorerCache

NDCG_K = 50
MISSING_VERSION, NO_SCORER, SCORE_ERROR = "missing_version", "no_scorer", "score_error"

log = get_logger("rankstream.worker.evaluator")


@dataclass(frozen=True)
class EvaluatorOptions:
    """What `rankstream worker evaluator` can be told, beyond the environment's Settings."""

    window: int = 200
    exit_when_idle: float | None = None
    publish_every: int = 20  # queries between publishes of the scores record
    publish_seconds: float = 2.0  # ... or this often while there is something new
    history: int = 10_000  # per-query results kept in memory for reports
    cache_size: int = 64  # (model, version) scorers kept loaded
    poll_ms: int = 200
    max_poll_records: int = 100
    policy: ChampionPolicy = field(default_factory=ChampionPolicy)

    def __post_init__(self) -> None:
        if self.window < 1 or self.publish_every < 1 or self.history < 0:
            raise ValueError("window and publish_every must be >= 1, history >= 0")
        if self.exit_when_idle is not None and not self.exit_when_idle > 0:
            raise ValueError(f"exit_when_idle must be > 0 seconds, got {self.exit_when_idle}")
        if not self.publish_seconds > 0:
            raise ValueError(f"publish_seconds must be > 0, got {self.publish_seconds}")


@dataclass(frozen=True)
class QueryScores:
    """One judged query's result: each scored model's NDCG@50 and AP, and who was skipped."""

    seq: int
    query_id: int
    served_by: str
    served_version: int
    ndcg: dict[str, float]
    ap: dict[str, float]
    skipped: dict[str, str]  # model -> reason


class RollingScores:
    """Per model, the NDCG@50 and AP of its last W scored queries."""

    def __init__(self, window: int) -> None:
        self.window = window
        self.ndcg: dict[str, deque[float]] = {}
        self.ap: dict[str, deque[float]] = {}

    def add(self, model: str, ndcg: float, ap: float) -> None:
        self.ndcg.setdefault(model, deque(maxlen=self.window)).append(ndcg)
        self.ap.setdefault(model, deque(maxlen=self.window)).append(ap)

    def means(self) -> tuple[dict[str, float], dict[str, float]]:
        return (
            {m: float(np.mean(v)) for m, v in sorted(self.ndcg.items())},
            {m: float(np.mean(v)) for m, v in sorted(self.ap.items())},
        )

    def counts(self) -> dict[str, int]:
        return {m: len(v) for m, v in sorted(self.ndcg.items())}

    def to_arrays(self) -> dict[str, np.ndarray]:
        out = {f"ndcg.{m}": np.array(v, dtype=np.float64) for m, v in self.ndcg.items()}
        out.update({f"ap.{m}": np.array(v, dtype=np.float64) for m, v in self.ap.items()})
        return out

    @classmethod
    def from_arrays(cls, window: int, arrays: dict[str, np.ndarray]) -> RollingScores:
        rolling = cls(window)
        for key, values in arrays.items():
            kind, _, model = key.partition(".")
            target = {"ndcg": rolling.ndcg, "ap": rolling.ap}.get(kind)
            if target is not None and model:
                target[model] = deque(np.asarray(values, dtype=np.float64).tolist(), maxlen=window)
        return rolling


class Evaluator:
    """Consume judged queries, score every stamped model, publish rolling scores (module doc)."""

    def __init__(
        self,
        settings: Settings,
        options: EvaluatorOptions | None = None,
        *,
        transport: Transport | None = None,
        store: ModelStore | None = None,
    ) -> None:
        self.settings = settings
        self.options = options or EvaluatorOptions()
        self.transport = transport if transport is not None else open_transport(settings)
        self.store = store if store is not None else open_store(settings)
        self._owned = ([self.transport] if transport is None else []) + (
            [self.store] if store is None else []
        )
        self.cache = ScorerCache(self.store, self.options.cache_size)
        self.rolling = RollingScores(self.options.window)
        self.history: deque[QueryScores] = deque(maxlen=self.options.history)
        self.champion = self.options.policy.default
        self.queries_evaluated = 0
        self.dead_letters = 0
        self.fenced = False
        self.offsets: dict[int, int] = {}  # queries-topic partition -> next offset
        self._record_fence = Fence()  # the record last loaded or published here
        self._unpublished = 0
        self._last_publish = time.monotonic()
        self._stop = threading.Event()
        self._transient = transient_errors()
        self._consumer: Consumer | None = None
        self._producer: Producer | None = None
        self._poll_backoff = Backoff()
        self._publish_backoff = Backoff()
        self._polled_last = False  # the last step read messages (dead letters included)

    # --- scoring (pure given the store) -----------------------------------------------
    def evaluate(self, query: JudgedQuery) -> QueryScores:
        """Score `query` with every stamped model at its stamped version; update the windows."""
        ndcg: dict[str, float] = {}
        ap: dict[str, float] = {}
        skipped: dict[str, str] = {}
        for model, version in sorted(query.model_versions.items()):
            if self.cache.scorable(model) is False:
                skipped[model] = NO_SCORER
                continue
            try:
                scorer = self.cache.get(model, version)
                if scorer is None:
                    skipped[model] = MISSING_VERSION
                    continue
                scores = scorer.score(query.phi)
            except ValueError as exc:
                skipped[model] = NO_SCORER if self.cache.scorable(model) is False else SCORE_ERROR
                log_event(
                    log,
                    "model not scored",
                    level=logging.WARNING,
                    model=model,
                    version=version,
                    error=str(exc)[:200],
                )
                continue
            ndcg[model] = ndcg_at_k(scores, query.relevance, NDCG_K)
            ap[model] = average_precision(scores, query.relevance)
        for model in ndcg:  # only once every model scored: a raise leaves no partial query
            self.rolling.add(model, ndcg[model], ap[model])
        for reason in skipped.values():
            metrics.EVALUATOR_SKIPPED.labels(reason=reason).inc()
        result = QueryScores(
            query.seq, query.query_id, query.served_by, query.served_version, ndcg, ap, skipped
        )
        self.history.append(result)
        self.queries_evaluated += 1
        self._unpublished += 1
        metrics.QUERIES_EVALUATED.inc()
        self._export(ndcg)
        self._choose_champion()
        return result

    def _export(self, changed: dict[str, float]) -> None:
        ndcg, ap = self.rolling.means()
        for model in changed:
            metrics.NDCG_AT_50.labels(model=model).set(ndcg[model])
            metrics.MEAN_AVERAGE_PRECISION.labels(model=model).set(ap[model])

    def _choose_champion(self) -> None:
        ndcg, _ = self.rolling.means()
        choice = self.options.policy.choose(self.champion, ndcg, self.rolling.counts())
        if choice == self.champion:
            return
        log_event(
            log,
            "champion switched",
            previous=self.champion,
            champion=choice,
            previous_ndcg=ndcg.get(self.champion),
            ndcg=ndcg.get(choice),
            queries=self.queries_evaluated,
        )
        metrics.CHAMPION_SWITCHES.inc()
        self.champion = choice
        self._publish_soon()

    def _publish_soon(self) -> None:
        self._unpublished = max(self._unpublished, self.options.publish_every)

    def summary(self) -> dict:
        """Rolling NDCG@50/MAP per model, counts and the champion (for reports and --json)."""
        ndcg, ap = self.rolling.means()
        return {
            "queries_evaluated": self.queries_evaluated,
            "champion": self.champion,
            "window": self.options.window,
            "rolling_ndcg": ndcg,
            "rolling_map": ap,
            "counts": self.rolling.counts(),
            "dead_letters": self.dead_letters,
        }

    # --- the scores record ----------------------------------------------------------------
    def restore(self) -> None:
        """Load the published scores record: windows, champion and the offsets it covers."""
        record = self.store.load(EVALUATOR_RECORD)
        if record is None:
            return
        if record.kind != SCORES_KIND:
            raise ValueError(
                f"model {EVALUATOR_RECORD!r} has kind {record.kind!r}, not {SCORES_KIND!r}"
            )
        self._record_fence = Fence.of(record)
        self.rolling = RollingScores.from_arrays(self.options.window, record.arrays)
        self.champion = str(record.meta.get("champion", self.champion))
        self.queries_evaluated = int(record.meta.get("queries_evaluated", 0))
        self.offsets = dict(record.offsets.get(self.settings.queries_topic, {}))
        self._export(self.rolling.ndcg)

    def publish(self) -> bool:
        """Save the scores record (fenced); False if a transient error deferred it."""
        ndcg, ap = self.rolling.means()
        meta = {**self.summary(), "rolling_ndcg": ndcg, "rolling_map": ap}
        meta.pop("dead_letters")
        try:
            fenced_save(
                self.store,
                EVALUATOR_RECORD,
                self._record_fence,
                kind=SCORES_KIND,
                meta=meta,
                arrays=self.rolling.to_arrays(),
                offsets={self.settings.queries_topic: self.offsets},
            )
        except FencingError as exc:
            self.fenced = True
            log_event(
                log,
                "fenced: another evaluator publishes scores; stopping",
                level=logging.ERROR,
                expected=exc.expected,
                actual=exc.actual,
            )
            return False
        except self._transient as exc:
            delay = self._publish_backoff.failed()
            log_event(
                log,
                "publish failed; will retry",
                level=logging.WARNING,
                error=repr(exc),
                retry_in_s=delay,
            )
            return False
        self._publish_backoff.succeeded()
        self._unpublished = 0
        self._last_publish = time.monotonic()
        return True

    def _maybe_publish(self) -> None:
        due = self._unpublished >= self.options.publish_every or (
            self._unpublished
            and time.monotonic() - self._last_publish >= self.options.publish_seconds
        )
        if due and self._publish_backoff.ready():
            self.publish()

    # --- consuming ----------------------------------------------------------------------
    def start(self) -> None:
        """Create topics, restore the published record, and seek past what it covers."""
        topic = self.settings.queries_topic
        self._retry(
            "ensure topics",
            lambda: self.transport.ensure_topics({topic: 1, self.settings.dead_letter_topic: 1}),
        )
        self._retry("restore scores", self.restore)
        self._producer = self.transport.producer()
        self._consumer = self.transport.consumer()
        partitions = self.transport.partitions_for(topic)
        self._consumer.assign([(topic, p) for p in partitions])
        for p in partitions:
            if p in self.offsets:
                self._consumer.seek(topic, p, self.offsets[p])
            else:
                self._consumer.seek_to_beginning(topic, p)
        log_event(
            log,
            "evaluator started",
            topic=topic,
            champion=self.champion,
            window=self.options.window,
            resumed_from={str(p): o for p, o in self.offsets.items()},
        )

    def process(self, messages: Sequence[Message]) -> int:
        """Decode and evaluate each message; bad ones go to the dead-letter topic.

        A query that decodes but cannot be evaluated (anything but a transient
        store/transport error, e.g. a corrupt stored model whose scorer raises) is
        dead-lettered as `evaluation_failed`, so it cannot kill the evaluator.
        """
        evaluated = 0
        for message in messages:
            try:
                query = decode_query(message.value)
            except SchemaError as exc:
                self._dead_letter(message, exc.reason, exc.detail)
                self.offsets[message.partition] = message.offset + 1
                continue
            try:
                self.evaluate(query)
            except self._transient:
                raise  # a store/broker outage: run() backs off and this query is retried
            except Exception as exc:  # one poison query must not stop the evaluator
                self._dead_letter(message, EVALUATION_FAILED, f"{type(exc).__name__}: {exc}")
            else:
                evaluated += 1
            self.offsets[message.partition] = message.offset + 1
        return evaluated

    def _dead_letter(self, message: Message, reason: str, detail: str) -> None:
        self.dead_letters += 1
        send_dead_letter(
            self._producer,
            self.settings.dead_letter_topic,
            message,
            reason,
            detail,
            transient=self._transient,
            logger=log,
        )

    def stop(self) -> None:
        self._stop.set()

    def install_signal_handlers(self) -> None:
        """SIGTERM/SIGINT -> publish once more and return (main thread only)."""
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, lambda *_: self.stop())

    def run(self, until: Callable[[Evaluator], bool] | None = None) -> int:
        """Poll, evaluate and publish until stopped, idle, `until(self)` or fenced."""
        if self._consumer is None:
            self.start()
        idle_since = time.monotonic()
        try:
            while not self._stop.is_set() and not self.fenced:
                self.step()
                if self._polled_last:
                    idle_since = time.monotonic()
                if until is not None and until(self):
                    break
                idle = self.options.exit_when_idle
                if idle is not None and time.monotonic() - idle_since >= idle:
                    log_event(log, "idle, exiting", idle_seconds=idle)
                    break
            if not self.fenced and self._unpublished:
                for _ in range(5):
                    if self.publish() or self.fenced:
                        break
                    time.sleep(self._publish_backoff.delay)
        finally:
            self.close()
        log_event(log, "evaluator stopped", **self.summary())
        return EXIT_FENCED if self.fenced else EXIT_OK

    def step(self, timeout_ms: int | None = None) -> int:
        """One poll, its evaluation and a publish when due; returns queries evaluated.

        The body of `run`, public so a caller can interleave workers without threads.
        """
        messages = self.poll(timeout_ms)
        self._polled_last = bool(messages)
        evaluated = self.process(messages) if messages else 0
        self._maybe_publish()
        return evaluated

    def poll(self, timeout_ms: int | None = None) -> list[Message]:
        """Messages from the consumer (waiting up to `timeout_ms`, default `poll_ms`);
        [] after a back-off when the broker is away."""
        assert self._consumer is not None, "call start() first"
        wait = self.options.poll_ms if timeout_ms is None else timeout_ms
        return poll_or_back_off(
            self._consumer,
            wait,
            self.options.max_poll_records,
            self._transient,
            self._poll_backoff,
            self._stop,
            log,
        )

    def _retry(self, what: str, action: Callable[[], None]) -> None:
        retry_until_stopped(what, action, self._stop, self._transient, log)

    def close(self) -> None:
        """Close the consumer and producer, and the transport/store if opened here."""
        for closable in (self._consumer, self._producer, *self._owned):
            if closable is not None:
                try:
                    closable.close()
                except self._transient as exc:
                    log_event(log, "close failed", level=logging.WARNING, error=repr(exc))
        self._consumer = self._producer = None
        self._owned = []
