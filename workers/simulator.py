"""The simulated search engine on the transport: serve, judge, publish triplets and judged queries.

`Simulation` wraps `simulators.judged_feedback.FeedbackSimulator` (the §5.5 loop, pure numpy)
with the stream: each `step()` is one query, ranked by the serving model read from the
store (`selection.what_serves.ServingModel`: a named model or the evaluator's champion,
re-read every query with one cheap `latest_versions()` call), whose judged top 50
becomes one triplet block and one judged query stamped with the serving model and the
version of every scorable model current at serving time. They are sent by
`producers.feedback_producer.FeedbackProducer` (the library the ingestion API shares), which packs
`SimulateOptions.queries_per_message` queries' blocks into one message on
`settings.triplets_topic` (key = the first query's id) before their judged queries on
`settings.queries_topic`; a query waits at most `SimulateOptions.linger_s` (0.1 s) for
company, and never across the rate limit's sleep. A clean stop (a signal included) hands over and
flushes what is pending; closing after an error still hands it over.

The collection served is one of `simulators.catalog.COLLECTIONS`, by name
(`SimulateOptions.collection`: the synthetic ImageCLEF/Flickr one by default, or
Fashion-MNIST's 70,000 photos), built or read under `settings.data_dir`.

Before the first query Uni-Con (equal weights on standardized phi) is published as
`uni_con` (kind "linear") unless the store has it; its Standardizer is fitted on
`FeedbackSimulator.calibration_phi`, candidate phi of queries from a seed stream of
their own, never from the queries that are served and evaluated.

`SimulatorHandler` is the producer's own part, a *source* for the stream runtime
(`workers.runtime`: it consumes nothing; each of the runtime's steps serves one query).
`Simulation` runs it: `run()` steps until enough triplets are out (with signals and
the runtime's clean close), the embedded demo calls `step()` itself.

Determinism: the records depend only on the seed, the collection and the sequence of
serving models (the feedback loop's own guarantee); the rate limit only delays sends.
Which queries share a message also depends on time (the linger), unless `linger_s` is
infinite.

Clicks (`SimulateOptions.feedback` "clicks:<model>"): nobody grades. Each query's top
`judged` (50) is shown to a user of that click model (`workers.simulator_clicking_users`), and the
simulator sends what an engine's logging and its `POST /v1/clicks` would: the
`Impression` on `settings.impressions_topic` and its `Click` rows, then the "session
over" row, on `settings.clicks_topic`, both keyed by the impression id
(`stream.click_schema`). No triplet and no judged query comes from it: the click join
turns impressions and clicks into the learners' triplets. It stops after
`SimulateOptions.queries` impressions; its rate limit counts clicks. Serving the
champion, it interleaves as `rankstream serve` does (`selection.click_race`): a share
`Settings.interleaving_share` of its rankings is the champion's team draft with a
challenger (or all of them, `Settings.interleaving_method`), the impression records the
teams, and the click join's race can move the champion on these clicks alone (the click
demo). Each step also measures the true NDCG@50 of what it showed from the collection's
ground truth (`StepResult.shown_ndcg`, `summary()`'s `shown_ndcg_at_50`): the
simulator's own measurement for reports, never sent.

An engine ranker of its own (`SimulateOptions.engine_ranker`, `simulators.engine_rankers`:
one phi column alone, weaker than Uni-Con, or the true grades plus noise, stronger than
every learner) scores every query's candidates on its own child stream of the seed; each
step measures the true NDCG@50 of that ranking too (`StepResult.engine_ndcg`, `summary()`'s
`engine_ndcg_at_50`: the incumbent a learned model must beat).

Width: the simulated collection's phi is the paper's 36 features; a deployment of
another width (`Settings.phi_dim`) cannot run it (`Simulation` refuses to start).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from rankstream.producers.feedback_producer import FeedbackProducer
from rankstream.ranking import DEFAULT_PHI_DIM
from rankstream.ranking.metrics import ranked_order
from rankstream.selection import unicon_baseline as baseline
from rankstream.selection.click_race import Interleaver
from rankstream.selection.engine_ranking import ENGINE, adopt_engine
from rankstream.selection.scoring import logged_order, served_order
from rankstream.selection.what_serves import CHAMPION, Served, ServingModel
from rankstream.simulators import catalog
from rankstream.simulators.click_feedback import order_scores
from rankstream.simulators.engine_rankers import engine_ranker
from rankstream.simulators.images import CandidateRetriever, ImageCollection, ServedCollection
from rankstream.simulators.judged_feedback import FeedbackSimulator, RetrievedQuery, served_ndcg
from rankstream.stream.click_schema import encode_clicks, encode_impressions, impression_key
from rankstream.stream.errors import TRANSIENT
from rankstream.stream.schema import JudgedQuery
from rankstream.stream.settings import Settings
from rankstream.stream.store import ModelStore
from rankstream.stream.transport import Transport
from rankstream.telemetry import prometheus_metrics as metrics
from rankstream.telemetry.structured_log import get_logger, log_event
from rankstream.workers.runtime import FromHandler, Handler, StreamRuntime
from rankstream.workers.runtime_options import Cadence, RuntimeOptions
from rankstream.workers.simulator_clicking_users import feedback_users, impression_and_clicks
from rankstream.workers.simulator_options import SimulateOptions

log = get_logger("rankstream.workers.simulator")
CLICKS_STREAM = 26
"""The simulated users' clicks and impression ids: the seed's own child stream."""
INTERLEAVING_STREAM = 27
"""Which rankings are interleaved and the team drafts' coins: another child stream."""
ENGINE_STREAM = 28
"""The simulated engine's own ranker's noise (`simulators.engine_rankers`): a third one."""


class TokenBucket:
    """Average `rate` tokens/s with bursts up to `capacity`; `take(n)` may borrow ahead.

    A query's block is sent whole: `take(n)` waits until the bucket is not in debt, then
    subtracts n (going negative), so a block larger than the capacity still passes and
    the next one waits for the debt to be repaid. The clock and sleep are injectable.
    """

    def __init__(
        self,
        rate: float,
        capacity: float | None = None,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        if not rate > 0:
            raise ValueError(f"rate must be > 0, got {rate}")
        self.rate = float(rate)
        self.capacity = float(capacity if capacity is not None else rate)
        self._clock, self._sleep = clock, sleep
        self._tokens = self.capacity
        self._at = clock()

    def _refill(self) -> None:
        now = self._clock()
        self._tokens = min(self.capacity, self._tokens + (now - self._at) * self.rate)
        self._at = now

    def wait_s(self) -> float:
        """The seconds the next `take` will sleep (0 unless the bucket is in debt)."""
        self._refill()
        return max(0.0, -self._tokens / self.rate)

    def take(self, n: int) -> float:
        """Block until allowed, spend n tokens; returns the seconds waited."""
        waited = self.wait_s()
        if waited:
            self._sleep(waited)
            self._refill()
        self._tokens -= n
        return waited


def load_collection(
    settings: Settings, options: SimulateOptions, progress: bool = True
) -> ServedCollection:
    """The options' collection and its candidate index, cached under `settings.data_dir`."""
    cache = Path(settings.data_dir) / "collections"
    return catalog.load_collection(
        options.collection, cache, progress=progress, **options.collection_options()
    )


def publish_unicon(
    store: ModelStore, simulator: FeedbackSimulator, calibration_queries: int
) -> int:
    """Publish Uni-Con (`selection.unicon_baseline`) unless the store has a final one; its version.

    Scaled on the candidates of `calibration_queries` simulated queries: the simulator's
    own sample, so its count is the calibration target.
    """
    phi = simulator.calibration_phi(calibration_queries)
    return baseline.publish_unicon(
        store, phi, phi.shape[1], phi.shape[0], f"{calibration_queries} simulated queries"
    )


@dataclass(frozen=True)
class StepResult:
    """One served query: who ranked it and how many triplets it produced; with clicks,
    the clicks, the teams of an interleaved list (champion first; () when not) and the
    true NDCG@50 of what was shown (the simulator's measurement, never sent) and what was
    shown: indices into the query's candidates, in displayed order."""

    query_id: int
    triplets: int
    served: Served
    clicks: int = 0
    team_models: tuple[str, ...] = ()
    shown_ndcg: float | None = None
    shown: np.ndarray | None = None
    engine_ndcg: float | None = None


class SimulatorHandler(Handler):
    """The search engine and its users: a source that serves one query per step."""

    name = "simulator"

    def __init__(
        self,
        settings: Settings,
        options: SimulateOptions,
        simulator: FeedbackSimulator,
        store: ModelStore,
    ) -> None:
        self.settings = settings
        self.options = options
        self.simulator = simulator
        self.serving = ServingModel(store, options.serving, width=settings.phi_dim)
        self.bucket = TokenBucket(options.rate) if options.rate is not None else None
        self.users = feedback_users(options.feedback)
        self.click_rng = np.random.default_rng([options.seed, CLICKS_STREAM])
        self.interleaver = Interleaver(
            settings, np.random.default_rng([options.seed, INTERLEAVING_STREAM])
        )
        self.engine = engine_ranker(options.engine_ranker)
        self.engine.check_width(settings.phi_dim)
        self.engine_rng = np.random.default_rng([options.seed, ENGINE_STREAM])
        self.engine_ndcg_total = 0.0
        self._engine_scores: np.ndarray | None = None  # the engine's, for the query now served
        self.engine_adopted = False  # its record stored (`selection.engine_ranking.adopt_engine`)
        self.triplets_produced = 0
        self.queries_produced = 0
        self.clicks_produced = 0
        self.interleaved_produced = 0
        self.shown_ndcg_total = 0.0
        self.served_by: dict[str, int] = {}
        self.last: StepResult | None = None
        self.feedback: FeedbackProducer | None = None
        self.on_step: Callable[[StepResult], None] | None = None

    def extra_topics(self) -> dict[str, int]:
        parts = self.options.partitions
        if self.users is not None:
            return {self.settings.impressions_topic: parts, self.settings.clicks_topic: parts}
        return {self.settings.triplets_topic: parts, self.settings.queries_topic: parts}

    def load(self, runtime: StreamRuntime) -> None:
        """Publish Uni-Con unless the store has it."""
        publish_unicon(runtime.store, self.simulator, self.options.calibration_queries)

    @property
    def done(self) -> bool:
        triplets, queries = self.options.triplets, self.options.queries
        return (triplets is not None and self.triplets_produced >= triplets) or (
            queries is not None and self.queries_produced >= queries
        )

    def produce(self, runtime: StreamRuntime) -> int:
        """Serve one query and publish its feedback: judged, its triplet block, then its
        judged query; with clicks, its impression and its clicks."""
        query = self.simulator.next_query()
        engine = self._engine_scores = self.engine.scores(
            query.phi, query.relevance, self.engine_rng
        )
        if engine is not None and not self.engine_adopted:  # as serve's first such request
            adopt_engine(runtime.store, "the simulated engine")
            self.engine_adopted = True
        served = self.serving.refresh(engine, engine_first=self.settings.shadow)
        if self.users is not None:
            return self._produce_clicks(runtime, served, query)
        scores = served.scorer.score(query.phi)
        record, triplets = self.simulator.judge(query, scores)
        n = len(triplets)
        feedback = self._feedback(runtime)
        if self.bucket is not None and n:
            if self.bucket.wait_s():  # what waits for company would wait out the sleep too
                feedback.send_pending()
            self.bucket.take(n)
        judged = JudgedQuery(
            seq=self.queries_produced,
            query_id=record.query_id,
            candidate_ids=record.candidate_ids,
            phi=record.phi,
            relevance=record.relevance,
            served_by=served.name,
            served_version=served.version,
            model_versions=served.model_versions,
            judged=record.n_judged,
            engine_scores=None if engine is None else engine[ranked_order(scores)],
        )
        feedback.send_records(judged, triplets)
        self.triplets_produced += n
        self._served(query, n, served)
        return n

    def _produce_clicks(self, runtime: StreamRuntime, served: Served, query: RetrievedQuery) -> int:
        """Show the top `judged` of the champion's ranking, or of its interleaved list, to
        a clicking user; send the impression, then its clicks."""
        assert self.users is not None
        scores = served.scorer.score(query.phi)
        order, drafted = served_order(served.scorer, scores, self.click_rng), {}
        engine_first = self.settings.shadow or self.serving.engine_pinned
        challengers = (
            self.interleaver.challengers(
                self.serving.others(served), served.name, self.serving.refused(served.name)
            )
            if self.interleaver.enabled
            and self.options.serving == CHAMPION
            and not (engine_first and served.name == ENGINE)  # shadow, kill switch: as serve
            else []
        )
        if challengers:
            merged = self.interleaver.interleave(
                served, order, scores[order], challengers, query.phi
            )
            order = merged.order
            drafted = {"teams": merged.teams, "team_models": merged.team_models}
        else:  # serve's randomized logging policy (`selection.scoring.logged_order`)
            settings = self.settings
            order, intervention, probability = logged_order(
                served.scorer, scores, order, self.click_rng,
                settings.intervention, settings.intervention_share,
            )  # fmt: skip
            drafted = {"intervention": intervention, "shown_probability": probability}
        display = self.simulator.n_judged
        impression, clicks = impression_and_clicks(
            query,
            order,
            self.users,
            self.click_rng,
            served_by=served.name,
            version=served.version,
            model_versions=served.model_versions,
            time=time.time(),
            display=display,
            engine_scores=self._engine_scores,
            **drafted,
        )
        n = sum(click.clicked for click in clicks)
        if self.bucket is not None and n:
            self.bucket.take(n)
        key = impression_key(impression.impression_id)
        runtime.producer.send(
            self.settings.impressions_topic, encode_impressions([impression]), key
        )
        runtime.producer.send(self.settings.clicks_topic, encode_clicks(clicks), key)
        self.clicks_produced += n
        metrics.CLICKS_PRODUCED.inc(len(clicks))
        self.interleaved_produced += bool(challengers)
        shown = served_ndcg(query, order_scores(order[:display], len(order)))
        self.shown_ndcg_total += shown
        self._served(query, 0, served, n, impression.team_models, shown, order[:display])
        return 1 + len(clicks)  # records sent: the impression and its click rows

    def _served(
        self,
        query: RetrievedQuery,
        triplets: int,
        served: Served,
        clicks: int = 0,
        team_models: tuple[str, ...] = (),
        shown_ndcg: float | None = None,
        shown: np.ndarray | None = None,
    ) -> None:
        self.queries_produced += 1
        self.served_by[served.name] = self.served_by.get(served.name, 0) + 1
        engine_ndcg = None
        if self._engine_scores is not None:
            engine_ndcg = served_ndcg(query, self._engine_scores)
            self.engine_ndcg_total += engine_ndcg
        self.last = StepResult(
            query.query_id, triplets, served, clicks, team_models, shown_ndcg, shown, engine_ndcg
        )
        if self.on_step is not None:
            self.on_step(self.last)

    def _feedback(self, runtime: StreamRuntime) -> FeedbackProducer:
        """The feedback library on the runtime's producer (the one it flushes and closes)."""
        if self.feedback is None or self.feedback.producer is not runtime.producer:
            self.feedback = FeedbackProducer(
                self.settings,
                runtime.producer,
                queries_per_message=self.options.queries_per_message,
                linger_s=self.options.linger_s,
            )
        return self.feedback

    def on_stop(self, runtime: StreamRuntime) -> None:
        """Everything produced is acknowledged before the process reports success: the
        queries still pending are handed over first."""
        self._hand_over_pending()
        runtime.producer.flush()

    def close(self) -> None:
        """Hand the pending queries to the producer before the runtime closes it (after an
        error, too: a query served is a query sent, if the transport takes it)."""
        try:
            self._hand_over_pending()
        except TRANSIENT as exc:
            lost = self.feedback.pending if self.feedback is not None else 0
            log_event(
                log, "pending feedback lost", level=logging.WARNING, queries=lost, error=repr(exc)
            )

    def _hand_over_pending(self) -> None:
        if self.feedback is not None:
            self.feedback.send_pending()

    def summary(self) -> dict:
        return {
            "feedback": self.options.feedback,
            "triplets": self.triplets_produced,
            "queries": self.queries_produced,
            "clicks": self.clicks_produced,
            **self._click_summary(),
            "served_by": dict(sorted(self.served_by.items())),
            **self.engine_summary(),
            "serving_switches": self.serving.switches,
            "seed": self.options.seed,
            "collection": self.simulator.collection.name,
            "images": self.simulator.collection.n_images,
        }

    def engine_summary(self) -> dict:
        """With an engine ranker: its spec and the mean true NDCG@50 of its own ranking
        of every query served (the simulator's measurement, never sent)."""
        if not self.engine.enabled:
            return {}
        n = self.queries_produced
        return {
            "engine_ranker": self.engine.spec,
            "engine_ndcg_at_50": round(self.engine_ndcg_total / n, 4) if n else None,
        }

    def _click_summary(self) -> dict:
        """With clicks: the interleaved impressions and the mean true NDCG@50 of what was
        shown (the simulator's measurement from the ground truth, never sent)."""
        if self.users is None:
            return {}
        n = self.queries_produced
        return {
            "interleaved": self.interleaved_produced,
            "shown_ndcg_at_50": round(self.shown_ndcg_total / n, 4) if n else None,
        }


class Simulation:
    """The simulator handler on a stream runtime; `step()` serves one query."""

    simulator = FromHandler[FeedbackSimulator]()
    served_by = FromHandler[dict[str, int]]()
    serving = FromHandler[ServingModel]()
    triplets_produced = FromHandler[int]()
    queries_produced = FromHandler[int]()
    done = FromHandler[bool]()

    def __init__(
        self,
        settings: Settings,
        options: SimulateOptions,
        *,
        transport: Transport | None = None,
        store: ModelStore | None = None,
        collection: ImageCollection | None = None,
        index: CandidateRetriever | None = None,
        progress: bool = False,
    ) -> None:
        """`collection` (and its `index`) given: served instead of the options' one."""
        self.settings = settings
        self.options = options
        if settings.phi_dim != DEFAULT_PHI_DIM:
            raise ValueError(
                f"the simulator's phi is {DEFAULT_PHI_DIM} features wide; this deployment's width "
                f"(RANKSTREAM_PHI_DIM) is {settings.phi_dim}"
            )
        if collection is None:
            served = load_collection(settings, options, progress)
            collection, index = served.collection, served.index
        elif collection.name != options.collection:
            raise ValueError(
                f"collection {collection.name!r} given for options naming {options.collection!r}"
            )
        simulator = FeedbackSimulator(
            collection,
            seed=options.seed,
            candidates=options.candidates,
            judged=options.judged,
            index=index,
        )
        self.runtime = StreamRuntime(
            settings,
            Handler(),
            RuntimeOptions(checkpoint=Cadence.on_demand()),
            transport=transport,
            store=store,
        )
        self.handler = SimulatorHandler(settings, options, simulator, self.runtime.store)
        self.runtime.handler = self.handler

    @property
    def store(self) -> ModelStore:
        return self.runtime.store

    @property
    def transport(self) -> Transport:
        return self.runtime.transport

    def start(self) -> None:
        """Create the topics and publish Uni-Con; idempotent."""
        self.runtime.start()

    def step(self) -> StepResult:
        """Serve, judge and publish one query."""
        self.runtime.step()
        assert self.handler.last is not None
        return self.handler.last

    def run(self, on_step: Callable[[StepResult], None] | None = None) -> dict:
        """Step until at least `options.triplets` triplets are out; flush; return a summary."""
        started = time.perf_counter()
        self.handler.on_step = on_step
        self.runtime.run()
        seconds = time.perf_counter() - started
        summary = self.summary()
        summary["seconds"] = round(seconds, 3)
        summary["triplets_per_s"] = round(self.triplets_produced / seconds, 1) if seconds else None
        log_event(log, "simulation finished", **summary)
        return summary

    def summary(self) -> dict:
        return self.handler.summary()

    def close(self) -> None:
        """Flush what was sent; close the producer, and the transport/store if opened here."""
        self.runtime.close(final_checkpoint=True)
