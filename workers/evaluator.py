"""The evaluator: every judged query scored by every model at the versions it was served with.

A judged query carries `model_versions`, the version of every model current when it
was served. Each model is scored with *that* version (`store.load_version`, cached in
an LRU): never a newer one, which may already have learned from this query's
feedback. A model whose stamped version the store has trimmed is skipped for that
query and counted (`rankstream_evaluator_skipped_total{reason="missing_version"}`).
Queries and models must have the deployment's feature width (`Settings.phi_dim`): a
query of another width is dead-lettered (`wrong_width`), a model of another width is
not scored (logged, counted as `score_error`).

The engine's own ranking (`selection.engine_ranking`, the model `engine`) is scored on
every judged query that carries its scores (`engine_scores`, queries wire version 3):
its order is those scores, ties in the given order; a query without them does not score
it (so the engine's race pairs are the queries it ranked, like every model's).

Per model the evaluator keeps NDCG@50 (graded gains, `ranking.metrics.ndcg_at_k`) and
average precision over its last W scored queries. Both are computed over the candidates
whose grade is known (`JudgedQuery.graded`): a model scores every candidate, and its
ranking *of the graded ones among themselves* is compared with their ideal order. The
simulator knows every candidate's ground truth, so there that is all K; an engine's
users judge only some, so there NDCG@50 is over the judged candidates, the only ones
whose relevance anyone knows. A query with no graded candidate cannot be scored: it is
skipped and counted (`rankstream_judged_queries_total{judgments="none"}`; "all" and
"partial" count the others). A query whose graded candidates share one grade is scored
like any other (every model gets the same value, 0.0 when that grade is 0: the metric's
convention) and counted as `single_grade` in `summary()`; their rolling means are exported as
`rankstream_ndcg_at_50{model}` / `rankstream_map{model}`, and a bounded per-query
history stays in memory for reports. Candidates arrive in served order, so a model's
ties keep the served order (the metrics' stable sort).

The champion is chosen by a paired sequential test per challenger, not by the rolling
means (`selection.judged_race.ChampionRace`: each query's NDCG@50 differences against the
incumbent, on the queries both were scored on); the rolling means are a trend to watch.
The rolling scores, the race and the champion are published
to the store as the model `evaluator` (kind "scores"): meta {"rolling_ndcg",
"rolling_map", "counts", "window", "champion", "queries_evaluated", "race" (each
challenger's evidence), "race_state" (each race's test state)}, the window values
as arrays ("ndcg.<model>", "ap.<model>") and the queries-topic offsets they cover. The
simulator serves the champion named there; a restarted evaluator restores its windows
and resumes after the last published query. Queries evaluated after the last publish
are evaluated again on restart, which only repeats values already in the window's
place (the window is restored as published, then those queries are re-added).

`EvaluatorHandler` is the evaluator's own part, run by the stream runtime
(`workers.runtime`): the runtime's checkpoint is the publish of the scores record
(every `publish_every` queries or `publish_seconds`, and at once on a new champion).
`Evaluator.process(messages)` is the whole per-message step and `step()` one poll of it
plus a publish when due, so the embedded demo can drive it without threads; `run()`
loops `step()` with idle exit, signals and back-off on transient transport/store errors
(a query whose scoring met a store outage is scored again once the store is back).
"""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from rankstream.ranking.metrics import NDCG_K, average_precision, ndcg_at_k
from rankstream.selection.engine_ranking import ENGINE, guardrail_evidence
from rankstream.selection.judged_race import (
    FALLBACK,
    JUDGED,
    ChampionPolicy,
    ChampionRace,
    publish_champion,
    stored_champion,
)
from rankstream.selection.scoring import EVALUATOR_RECORD, SCORES_KIND, ScorerCache
from rankstream.stream.errors import TRANSIENT
from rankstream.stream.schema import EVALUATION_FAILED, JudgedQuery, SchemaError, decode_query
from rankstream.stream.settings import Settings
from rankstream.stream.store import Fence, ModelStore, check_kind, fenced_save
from rankstream.stream.transport import Message, TopicPartition
from rankstream.telemetry import prometheus_metrics as metrics
from rankstream.telemetry.structured_log import get_logger, log_event
from rankstream.workers.evaluator_options import EvaluatorOptions
from rankstream.workers.runtime import (
    FromHandler,
    Handler,
    OptionsRuntime,
    StreamRuntime,
)

__all__ = ["Evaluator", "EvaluatorHandler", "EvaluatorOptions"]

MISSING_VERSION, NO_SCORER, SCORE_ERROR = "missing_version", "no_scorer", "score_error"
NOT_JUDGED = "unjudged"  # a query with no graded candidate: no model can be scored on it
# How much of a query was judged (`rankstream_judged_queries_total{judgments}`), and the
# summary's count of scored queries whose graded candidates share one grade.
JUDGMENTS_ALL, JUDGMENTS_PARTIAL, JUDGMENTS_NONE = "all", "partial", "none"
SINGLE_GRADE = "single_grade"

log = get_logger("rankstream.worker.evaluator")


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


def judgments_of(query: JudgedQuery) -> str:
    """How much of the query carries a grade: all, partial or none."""
    graded = query.graded
    if graded.all():
        return JUDGMENTS_ALL
    return JUDGMENTS_PARTIAL if graded.any() else JUDGMENTS_NONE


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


class EvaluatorHandler(Handler):
    """Score judged queries, keep rolling scores and the champion (module docstring)."""

    name = "evaluator"

    def __init__(self, settings: Settings, options: EvaluatorOptions, store: ModelStore) -> None:
        self.settings = settings
        self.options = options
        self.cache = ScorerCache(store, options.cache_size, settings.phi_dim)
        self.rolling = RollingScores(options.window)
        self.history: deque[QueryScores] = deque(maxlen=options.history)
        self.policy = options.policy or ChampionPolicy.from_settings(settings)
        self.race = ChampionRace(self.policy)
        self.queries_evaluated = 0
        self.judgments = dict.fromkeys(
            (JUDGMENTS_ALL, JUDGMENTS_PARTIAL, JUDGMENTS_NONE, SINGLE_GRADE), 0
        )
        self.dead_letters = 0
        self.offsets: dict[int, int] = {}  # queries-topic partition -> next offset
        self._record_fence = Fence()  # the record last loaded or published here
        self._dirty = False  # evaluated or moved past a message since the last publish
        self._champion_changed = False
        self._pending_switch: tuple[str, str, dict] | None = None  # for the champion record

    # --- scoring (pure given the store) -----------------------------------------------
    def evaluate(self, query: JudgedQuery) -> QueryScores:
        """Score `query` with every stamped model at its stamped version; update the windows."""
        ndcg: dict[str, float] = {}
        ap: dict[str, float] = {}
        skipped: dict[str, str] = {}
        judgments = judgments_of(query)
        for model, version in sorted(query.model_versions.items()):
            if model == ENGINE:
                continue  # the engine is scored by the scores it sent, below, or not at all
            if judgments == JUDGMENTS_NONE:
                skipped[model] = NOT_JUDGED  # counted once, as the query's judgments
                continue
            reason = self._score(model, version, query, ndcg, ap)
            if reason is not None:
                skipped[model] = reason
        if query.engine_scores is not None and judgments != JUDGMENTS_NONE:
            graded = query.graded  # the engine's order: its scores, ties in the given order
            relevance = query.relevance[graded]
            ndcg[ENGINE] = ndcg_at_k(query.engine_scores[graded], relevance, NDCG_K)
            ap[ENGINE] = average_precision(query.engine_scores[graded], relevance)
        # only once every model scored: a raise leaves no partial query, counts included
        for model in ndcg:
            self.rolling.add(model, ndcg[model], ap[model])
        for reason in skipped.values():
            if reason != NOT_JUDGED:
                metrics.EVALUATOR_SKIPPED.labels(reason=reason).inc()
        self._count(query, judgments)
        result = QueryScores(
            query.seq, query.query_id, query.served_by, query.served_version, ndcg, ap, skipped
        )
        self.history.append(result)
        self.queries_evaluated += 1
        self._dirty = True
        metrics.QUERIES_EVALUATED.inc()
        self._export(ndcg)
        self._choose_champion(ndcg)
        return result

    def _count(self, query: JudgedQuery, judgments: str) -> None:
        self.judgments[judgments] += 1
        metrics.JUDGED_QUERIES.labels(judgments=judgments).inc()
        graded = query.graded
        if graded.any() and np.unique(query.relevance[graded]).size < 2:
            self.judgments[SINGLE_GRADE] += 1

    def _score(
        self,
        model: str,
        version: int,
        query: JudgedQuery,
        ndcg: dict[str, float],
        ap: dict[str, float],
    ) -> str | None:
        """One model's NDCG@50 and AP into `ndcg`/`ap`; else why it was skipped."""
        if self.cache.scorable(model) is False:
            return NO_SCORER
        try:
            scorer = self.cache.get(model, version)
            if scorer is None:
                return MISSING_VERSION
            scores = scorer.score(query.phi)[query.graded]
        except ValueError as exc:
            log_event(
                log,
                "model not scored",
                level=logging.WARNING,
                model=model,
                version=version,
                error=str(exc)[:200],
            )
            return NO_SCORER if self.cache.scorable(model) is False else SCORE_ERROR
        relevance = query.relevance[query.graded]
        ndcg[model] = ndcg_at_k(scores, relevance, NDCG_K)
        ap[model] = average_precision(scores, relevance)
        return None

    def _export(self, changed: dict[str, float] | dict[str, deque[float]]) -> None:
        ndcg, ap = self.rolling.means()
        for model in changed:
            metrics.NDCG_AT_50.labels(model=model).set(ndcg[model])
            metrics.MEAN_AVERAGE_PRECISION.labels(model=model).set(ap[model])

    @property
    def champion(self) -> str:
        return self.race.incumbent

    def _choose_champion(self, ndcg: dict[str, float]) -> None:
        """This query's paired differences into the race; a new champion is published.

        An incumbent not scored on the query is looked up in the store: gone (or no
        longer scorable), the race falls back to Uni-Con as serving does
        (`ChampionRace.fall_back`).
        """
        before = self.race.incumbent
        if self._incumbent_gone(ndcg) and self.race.fall_back(self.queries_evaluated):
            self._champion_changed = True
            self._switch(before, FALLBACK, {"reason": "not in the store"})
        winner = self.race.observe(ndcg, self.queries_evaluated)
        if winner is not None:
            self._champion_changed = True  # published at once (`process`)
            self._switch(before, JUDGED, guardrail_evidence(before, winner, self.race.decided,
                                                            JUDGED))  # fmt: skip

    def _switch(self, previous: str, decided_by: str, evidence: dict) -> None:
        """A switch for the champion record, written by `publish_switch` (outside
        `evaluate`, which a store outage repeats: it must change nothing before it ends)."""
        if self._pending_switch is not None:  # several in one batch: the first one's previous
            previous = self._pending_switch[0]
        self._pending_switch = (previous, decided_by, evidence)

    def publish_switch(self) -> None:
        """The store's champion record (`selection.judged_race.publish_champion`); when the
        click race switched first, this race follows that champion instead."""
        if self._pending_switch is None:
            return
        previous, decided_by, evidence = self._pending_switch
        stored, _ = publish_champion(
            self.cache.store, self.race.incumbent, previous=previous,
            decided_by=decided_by, evidence=evidence,
        )  # fmt: skip
        self._pending_switch = None
        self.race.follow(stored)

    def follow_stored_champion(self) -> None:
        """Start every race over when another race (the click join's) switched the champion."""
        if self._pending_switch is not None:
            return  # this race's own switch is not in the record yet
        stored = stored_champion(self.cache.store)
        if stored is not None and self.race.follow(stored):
            self._dirty = True

    def _incumbent_gone(self, ndcg: dict[str, float]) -> bool:
        """Not scored on this query, and not (or no longer scorable) in the store."""
        incumbent = self.race.incumbent
        if incumbent in ndcg:
            return False
        stored = incumbent in self.cache.store.latest_versions()
        if incumbent == ENGINE:  # scored only on queries carrying its scores: not gone
            return not stored
        return not stored or self.cache.scorable(incumbent) is False

    def summary(self) -> dict[str, Any]:
        """Rolling NDCG@50/MAP per model, counts and the champion (for reports and --json)."""
        ndcg, ap = self.rolling.means()
        return {
            "queries_evaluated": self.queries_evaluated,
            "champion": self.champion,
            "window": self.options.window,
            "rolling_ndcg": ndcg,
            "rolling_map": ap,
            "counts": self.rolling.counts(),
            "race": self.race.summary(),
            "judgments": dict(self.judgments),
            "dead_letters": self.dead_letters,
        }

    # --- the runtime's calls --------------------------------------------------------------
    def topics(self) -> dict[str, int]:
        return {self.settings.queries_topic: 1}

    def extra_topics(self) -> dict[str, int]:
        return {self.settings.dead_letter_topic: 1}

    def load(self, runtime: StreamRuntime) -> None:
        """Restore the published scores record: windows, champion and the offsets it covers."""
        record = runtime.store.load(EVALUATOR_RECORD)
        if record is not None:
            check_kind(record, SCORES_KIND)
            self._record_fence = Fence.of(record)
            self.rolling = RollingScores.from_arrays(self.options.window, record.arrays)
            state = record.meta.get("race_state") or {"incumbent": record.meta.get("champion")}
            self.race = ChampionRace.from_state(self.policy, state)
            self.queries_evaluated = int(record.meta.get("queries_evaluated", 0))
            self.judgments.update(record.meta.get("judgments", {}))
            self.offsets = dict(record.offsets.get(self.settings.queries_topic, {}))
            self._export(self.rolling.ndcg)
        self.follow_stored_champion()
        log_event(
            log,
            "evaluator started",
            champion=self.champion,
            window=self.options.window,
            resumed_from={str(p): o for p, o in self.offsets.items()},
        )

    def positions(self, partitions: Sequence[TopicPartition]) -> dict[TopicPartition, int | None]:
        return {(t, p): self.offsets.get(p) for t, p in partitions}

    def process(self, runtime: StreamRuntime, messages: Sequence[Message]) -> int:
        """Decode and evaluate each message; bad ones go to the dead-letter topic.

        A query that decodes but cannot be evaluated (anything but a transient
        store/transport error, e.g. a corrupt stored model whose scorer raises) is
        dead-lettered as `evaluation_failed`, so it cannot kill the evaluator; during a
        store outage the query is scored again, with back-off, until the store answers.
        """
        evaluated = 0
        if messages:
            runtime.retry("champion", self.follow_stored_champion)
        for message in messages:
            try:
                query = decode_query(message.value, width=self.settings.phi_dim)
            except SchemaError as exc:
                self._dead_letter(runtime, message, exc.reason, exc.detail)
                self.offsets[message.partition] = message.offset + 1
                self._dirty = True
                continue
            try:
                runtime.retry("evaluate", lambda q=query: self.evaluate(q))
            except TRANSIENT:
                raise  # stopping while the store is away: the query is read again on restart
            except Exception as exc:  # one poison query must not stop the evaluator
                detail = f"{type(exc).__name__}: {exc}"
                self._dead_letter(runtime, message, EVALUATION_FAILED, detail)
            else:
                evaluated += 1
            self.offsets[message.partition] = message.offset + 1
            self._dirty = True
        if self._champion_changed:
            self._champion_changed = False
            runtime.retry("champion", self.publish_switch)
            runtime.request_checkpoint()
        return evaluated

    def _dead_letter(
        self, runtime: StreamRuntime, message: Message, reason: str, detail: str
    ) -> None:
        self.dead_letters += 1
        runtime.dead_letter(message, reason, detail)

    def checkpoint(self, runtime: StreamRuntime) -> dict[str, Any]:
        """Publish the scores record (fenced) when something new was read."""
        self.publish_switch()  # (a switch of `evaluate` called directly, as the demo does)
        if not self._dirty:
            return {}
        ndcg, ap = self.rolling.means()
        meta = {**self.summary(), "rolling_ndcg": ndcg, "rolling_map": ap}
        meta["race_state"] = self.race.to_state()
        meta.pop("dead_letters")
        version = fenced_save(
            runtime.store,
            EVALUATOR_RECORD,
            self._record_fence,
            kind=SCORES_KIND,
            meta=meta,
            arrays=self.rolling.to_arrays(),
            offsets={self.settings.queries_topic: self.offsets},
        )
        self._dirty = False
        return {EVALUATOR_RECORD: version}


class Evaluator(OptionsRuntime[EvaluatorOptions, EvaluatorHandler]):
    """The stream runtime running the evaluator handler."""

    champion = FromHandler[str]()
    rolling = FromHandler[RollingScores]()
    history = FromHandler[deque[QueryScores]]()
    queries_evaluated = FromHandler[int]()
    dead_letters = FromHandler[int]()
    cache = FromHandler[ScorerCache]()
    offsets = FromHandler[dict[int, int]]()

    def build_handler(self, settings: Settings, options: EvaluatorOptions) -> EvaluatorHandler:
        return EvaluatorHandler(settings, options, self.store)  # the scorers' store

    def evaluate(self, query: JudgedQuery) -> QueryScores:
        return self.handler.evaluate(query)

    def summary(self) -> dict[str, Any]:
        return self.handler.summary()

    def publish(self) -> bool:
        """Publish the scores record now; False if fenced or a transient error deferred it."""
        return self.checkpoint()
