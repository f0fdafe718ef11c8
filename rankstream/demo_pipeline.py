"""The whole pipeline in one process, no services: the embedded demo behind `rankstream demo`.

The real pieces, wired through a fresh in-process transport and model store
(`stream.embedded`, `stream.embedded_store`: the same classes `open_transport` /
`open_store` return when no Kafka/Redis is configured, but private to this run, so a
demo never sees another run's topics or models), each driven through its public
step API:

    Simulation.step()       serve one query with the champion, judge its top 50,
                            publish its triplet block and its stamped judged query
    Evaluator.step()        score every model on that query at the stamped versions;
                            publish the rolling scores and champion every
                            `publish_every` queries and at once on a new champion
    OnlineWorker.step()     one worker, five models (OPR, OPAR-I, OPAR-II, OGDR, AROW),
                            learns the triplets; checkpoint() publishes new versions
    BatchWorker.step()      reservoir sample; refit() every `refit_every` queries
                            publishes cMDS-DML and RankMKL

The click demo (`DemoOptions.feedback` "clicks:<model>", `rankstream demo --feedback
clicks:MODEL`) sends no judgment at all: nobody grades, and the evaluator (the judged
race) is not run. Its loop instead:

    Simulation.step()       serve one query as an engine would: the champion's ranking,
                            or on `interleaving_share` of them (default 0.5) its team
                            draft with a challenger (`selection.click_race`, as `rankstream
                            serve` does); users of the click model click on its top 50;
                            publish the impression (with its teams) and the clicks
    ClickJoin.step()        join them into weighted click-pair triplets and credit the
                            clicks of an interleaved impression to its teams (the
                            interleaving race, `selection.click_race`); checkpoint() sends
                            the triplets and writes a decided switch to the champion
                            record, which the next query is served by
    OnlineWorker.step(), BatchWorker.step()   as above, learning from the join's triplets

The simulator also measures the true NDCG@50 of every list it showed from the
collection's ground truth (`StepResult.shown_ndcg`): the report's measurement, never
sent to the system. `rankstream.click_history` keeps the champion's history and the
interleaving evidence; `rankstream.click_demo` runs the click demo and builds its report.

The demo is the loop: each worker reads its own topic through its own consumer, polled
without waiting, and nothing runs on a thread, so one query is evaluated before any
worker has learned from its feedback (the stamps guarantee that in a distributed run
too) and a run is deterministic given its options. The workers' time-based cadences
are switched off; the demo checkpoints, refits and publishes by query count.

Learning time (Fig. 4): the online worker measures it per model itself
(`OnlineWorker.learn_seconds`: CPU time of the learning thread, the fused linear pass
split equally among the four linear models, AROW and scaler fits charged to their own
model), after the learners were run once on a throwaway block (`compile_learners`), so
numba's compile or on-disk cache load is not charged to whichever model learns first;
that first call is timed and reported on its own (`learners_first_call`). A batch
refit fits both models in one `refit()`; its CPU time is split between them in
proportion to the `refit_seconds` the batch worker stores with each model version. CPU
rather than wall time, like the paper's Fig. 4: wall time on a shared machine mostly
measures the other tenants.
"""

from __future__ import annotations

import dataclasses
import sys
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from rankstream.click_history import ClickHistory, rounded_mean
from rankstream.harness.generator import TripletGenerator
from rankstream.ranking import learners
from rankstream.ranking.baselines import UNI_CON as BASELINE
from rankstream.ranking.batch_models import BATCH_KINDS, CMDSDMLParams, RankMKLParams
from rankstream.selection.engine_ranking import ENGINE
from rankstream.simulators.click_models import FEEDBACK_JUDGED, feedback_click_model
from rankstream.simulators.engine_rankers import NO_ENGINE
from rankstream.simulators.images import CandidateRetriever, ImageCollection
from rankstream.simulators.judged_feedback import CALIBRATION_QUERIES
from rankstream.stream.embedded import EmbeddedTransport
from rankstream.stream.embedded_store import EmbeddedModelStore
from rankstream.stream.schema import decode_triplets, encode_triplets
from rankstream.stream.settings import INTERLEAVING_METHODS, TEAM_DRAFT, Settings
from rankstream.telemetry.structured_log import configure_logging
from rankstream.workers.batch_worker import BatchOptions, BatchWorker
from rankstream.workers.checkpoint import TrackedModel, learn_together
from rankstream.workers.click_join import ClickJoin
from rankstream.workers.click_join_options import NONE, JoinOptions
from rankstream.workers.evaluator import Evaluator, EvaluatorOptions
from rankstream.workers.online_worker import OnlineWorker, WorkerOptions
from rankstream.workers.simulator import SimulateOptions, Simulation, load_collection

BATCH_MODELS = BATCH_KINDS


def report_models() -> tuple[str, ...]:
    """The models a run reports: Uni-Con, every online learner registered now
    (`ranking.learners`), the batch models."""
    return (BASELINE, *learners.names(), *BATCH_MODELS)


_POLL_RECORDS = 100_000  # one poll takes everything one query produced
CLICK_DEMO_INTERLEAVING_SHARE = 0.5  # the click demo's share of interleaved rankings


@dataclass(frozen=True)
class DemoOptions:
    """Size and cadence of one demo run (defaults finish in about two minutes on 2 cores)."""

    queries: int = 2000  # the paper's 2,000 sequential queries
    triplets: int | None = None  # also stop once at least this many triplets were produced
    collection: str = "synthetic"  # a name of `simulators.catalog.COLLECTIONS`
    images: int | None = None  # synthetic only (None: the paper's 1,007,157)
    seed: int = 0  # query stream, reservoir and RankMKL pair sampling
    collection_seed: int | None = None  # synthetic only
    # the online learners' hyper-parameters over `ranking.learners.HYPERPARAMETERS`'
    # defaults (validated on both collections' streams; docs/results/stream.md)
    hyper: Mapping[str, float] = field(default_factory=dict)
    checkpoint_every: int = 1  # queries between online checkpoints (new servable versions)
    refit_every: int = 500  # queries between batch refits
    reservoir: int = 2000  # triplets in the batch worker's sample
    # The batch worker's budget: one descent per refit, its stopping tol validated on
    # held-out reservoir queries (ranking.batch_models.CMDSDMLParams: c collapses within
    # a few dozen fixed-step iterations here, so the validated stops fall in the first 30).
    cmds_dml_iterations: int = 30
    rankmkl_pairs: int = 500
    publish_every: int = 10  # queries between evaluator score records (and on a new champion)
    window: int = 200  # evaluator's rolling window (champion choice)
    scaler_rows: int = 2000  # triplets an online model holds back to fit its scaler
    calibration_queries: int = CALIBRATION_QUERIES
    # judged (the paper's setting), or clicks:<model>: the click demo (module docstring)
    feedback: str = FEEDBACK_JUDGED
    interleaving_share: float = CLICK_DEMO_INTERLEAVING_SHARE  # the click demo's
    interleaving_method: str = TEAM_DRAFT  # the click demo's (`Settings.interleaving_method`)
    # the simulated engine's own ranker (`simulators.engine_rankers`): none, or the
    # incumbent sent as engine_scores with every query
    engine_ranker: str = NO_ENGINE

    def __post_init__(self) -> None:
        positive = (
            "queries",
            "checkpoint_every",
            "refit_every",
            "reservoir",
            "cmds_dml_iterations",
            "rankmkl_pairs",
            "publish_every",
            "window",
            "scaler_rows",
            "calibration_queries",
        )
        for name in positive:
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")
        if self.triplets is not None and self.triplets < 1:
            raise ValueError(f"triplets must be >= 1, got {self.triplets}")
        if not 0.0 <= self.interleaving_share <= 1.0:
            raise ValueError(
                f"interleaving_share must lie in [0, 1], got {self.interleaving_share}"
            )
        if self.interleaving_method not in INTERLEAVING_METHODS:
            raise ValueError(
                f"interleaving_method must be one of {INTERLEAVING_METHODS}, "
                f"got {self.interleaving_method!r}"
            )
        object.__setattr__(self, "hyper", learners.hyperparameters(self.hyper))
        self.simulate_options()  # the collection, its options and the feedback are checked there

    @property
    def clicks(self) -> bool:
        """True for the click demo (`feedback` "clicks:<model>")."""
        return feedback_click_model(self.feedback) is not None

    def simulate_options(self, **overrides: Any) -> SimulateOptions:
        """The simulator's options for this run: its collection, seeds and size."""
        fields = {
            "triplets": self.triplets,
            "seed": self.seed,
            "collection": self.collection,
            "images": self.images,
            "collection_seed": self.collection_seed,
            "calibration_queries": self.calibration_queries,
            # each query evaluated before any worker learns from it, one query a step:
            # its triplets and judged query are on the stream when `step()` returns
            "queries_per_message": 1,
            "feedback": self.feedback,
            "queries": self.queries,
            "engine_ranker": self.engine_ranker,
        }
        return SimulateOptions(**{**fields, **overrides})

    # The demo drives every cadence itself (checkpoint, refit, persist, publish) by query
    # count, with no timers, so a run is deterministic: the workers' own timers are off.
    def online_options(self) -> WorkerOptions:
        """The online worker's: every online learner, this run's hyper-parameters."""
        return WorkerOptions(
            algos=learners.names(),  # every registered online learner
            hyper=self.hyper,
            checkpoint_records=None,
            checkpoint_seconds=None,
            scaler_rows=self.scaler_rows,
            poll_ms=0,
            max_poll_records=_POLL_RECORDS,
        )

    def batch_options(self) -> BatchOptions:
        """The batch worker's: its reservoir, cMDS-DML's budget, RankMKL's pairs."""
        return BatchOptions(
            reservoir=self.reservoir,
            refit_records=None,
            refit_seconds=None,
            persist_seconds=None,
            models=BATCH_MODELS,
            seed=self.seed,
            poll_ms=0,
            max_poll_records=_POLL_RECORDS,
            cmds_dml=CMDSDMLParams(max_iter=self.cmds_dml_iterations),
            rankmkl=RankMKLParams(max_pairs=self.rankmkl_pairs, seed=self.seed),
        )

    def join_options(self) -> JoinOptions:
        """The click join's: checkpointed (its triplets sent, a switch published) by the
        demo. It teaches no PDGD here: the demo's race on interleaved clicks is the online
        learners' against Uni-Con, and a PDGD still near its Uni-Con start would take a
        sixth of the turns (`rankstream serve` and the compose join teach it)."""
        return JoinOptions(
            checkpoint_records=None, checkpoint_seconds=None, poll_ms=0, learn=(NONE,)
        )

    def evaluator_options(self) -> EvaluatorOptions:
        """The evaluator's: its window, and a score record every `publish_every` queries."""
        return EvaluatorOptions(
            window=self.window,
            history=self.queries,
            publish_every=self.publish_every,
            publish_seconds=None,
            poll_ms=0,
            max_poll_records=_POLL_RECORDS,
        )


@dataclass
class DemoResult:
    """Per-query curves and totals of one run; `report()` is DIR/report.json."""

    options: DemoOptions
    collection: str  # the collection's catalog name
    images: int
    triplets: int
    seconds: float  # wall time including the collection build or load
    cpu_seconds: float  # this process's CPU time (wall time grows on a shared machine)
    collection_seconds: float
    ndcg: dict[str, np.ndarray]  # model -> (queries,) NDCG@50, NaN where not scored
    ap: dict[str, np.ndarray]  # model -> (queries,) AP over the K candidates, same queries
    learning_seconds: dict[str, np.ndarray]  # model -> (queries,) cumulative CPU seconds
    served_by: list[str]
    champion: str
    champion_switches: int
    refits: int
    rolling_ndcg: dict[str, float]
    first_call: dict[str, float] = field(default_factory=dict)  # compile_learners' seconds
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def queries(self) -> int:
        return len(self.served_by)

    def report(self) -> dict[str, Any]:
        scored = {m: np.isfinite(v) for m, v in self.ndcg.items()}

        def improvement(curves: dict[str, np.ndarray], model: str) -> float | None:
            both = scored[model] & scored[BASELINE]
            gain = curves[model][both] - curves[BASELINE][both]
            return rounded_mean(gain) if both.any() else None

        served: dict[str, int] = {}
        for name in self.served_by:
            served[name] = served.get(name, 0) + 1
        return {
            "queries": self.queries,
            "triplets": self.triplets,
            "seconds": round(self.seconds, 2),
            "cpu_seconds": round(self.cpu_seconds, 2),
            "collection_seconds": round(self.collection_seconds, 2),
            "collection": self.collection,
            "images": self.images,
            "seed": self.options.seed,
            "ndcg_at_50": {m: rounded_mean(v[scored[m]]) for m, v in self.ndcg.items()},
            "improvement_over_uni_con": {
                m: improvement(self.ndcg, m) for m in self.ndcg if m != BASELINE
            },
            "map": {m: rounded_mean(v[scored[m]]) for m, v in self.ap.items()},
            "map_improvement_over_uni_con": {
                m: improvement(self.ap, m) for m in self.ap if m != BASELINE
            },
            "scored_queries": {m: int(s.sum()) for m, s in scored.items()},
            "rolling_ndcg_at_50": {m: round(v, 4) for m, v in self.rolling_ndcg.items()},
            "learning_seconds": {
                m: round(float(v[-1]), 4) if len(v) else 0.0
                for m, v in self.learning_seconds.items()
            },
            "learners_first_call": self.first_call,
            "champion": self.champion,
            "champion_switches": self.champion_switches,
            "served_by": dict(sorted(served.items())),
            "refits": self.refits,
            "options": dataclasses.asdict(self.options),
            **self.extra,
        }


class LearningClock:
    """Cumulative learning seconds of every report model, snapshotted after every query."""

    def __init__(self, models: tuple[str, ...]) -> None:
        self.curves: dict[str, list[float]] = {m: [] for m in models}

    def snapshot(self, totals: Mapping[str, float]) -> None:
        """Append each model's running total (0 for models that never learn, Uni-Con)."""
        for model, curve in self.curves.items():
            curve.append(float(totals.get(model, 0.0)))

    def arrays(self) -> dict[str, np.ndarray]:
        return {m: np.asarray(v, dtype=np.float64) for m, v in self.curves.items()}


def _drain(step: Callable[[], int]) -> None:
    """Call a worker's non-blocking `step` until a poll brings nothing new."""
    while step():
        pass


def compile_learners(algos: tuple[str, ...]) -> dict[str, float]:
    """Run the online learners' compiled kernels once, on throwaway models and a block
    that went through the wire schema (so numba sees the very array types a decoded
    message has: another specialisation would compile on the first real message and be
    charged to whichever model learned it first), together as the worker runs them (the
    fused linear pass, AROW on its own). Returns this first call's wall and CPU seconds:
    numba's compile, or its on-disk cache load, reported on its own, not as learning."""
    started, cpu_started = time.perf_counter(), time.thread_time()
    block = decode_triplets(encode_triplets(TripletGenerator(seed=0).block(4)))
    models = [TrackedModel(name=algo, algo=algo, scaler_rows=1) for algo in algos]
    for offset in range(2):  # the first fits each scaler, the second learns together
        learn_together(models, "compile", 0, offset, block)
    return {
        "seconds": round(time.perf_counter() - started, 4),
        "cpu_seconds": round(time.thread_time() - cpu_started, 4),
    }


class DemoPipeline:
    """Simulator, online worker, batch worker and evaluator on one embedded transport/store
    (the click demo: the click join instead of the evaluator)."""

    def __init__(
        self,
        options: DemoOptions,
        settings: Settings | None = None,
        *,
        collection: ImageCollection | None = None,
        index: CandidateRetriever | None = None,
    ) -> None:
        # no services, whatever the environment says: the demo is the embedded pipeline
        services: dict[str, Any] = {"kafka_bootstrap": None, "redis_url": None}
        if options.clicks:  # the demo sets the share of interleaved rankings
            services["interleaving_share"] = options.interleaving_share
            services["interleaving_method"] = options.interleaving_method
        self.settings = dataclasses.replace(settings or Settings.from_env(), **services)
        self.options = options
        self.transport = EmbeddedTransport()
        self.store = EmbeddedModelStore()
        # the cadences are the demo's own (see DemoOptions.online_options)
        self.simulation = Simulation(
            self.settings,
            options.simulate_options(),
            transport=self.transport,
            store=self.store,
            collection=collection,
            index=index,
        )
        self.online = OnlineWorker(
            self.settings, options.online_options(), transport=self.transport, store=self.store
        )
        self.batch = BatchWorker(
            self.settings, options.batch_options(), transport=self.transport, store=self.store
        )
        # judged: the evaluator scores and races; clicks: the join joins and races
        self.evaluator: Evaluator | None = None
        self.join: ClickJoin | None = None
        self.clicks: ClickHistory | None = None
        if options.clicks:
            self.join = ClickJoin(
                self.settings, options.join_options(), transport=self.transport, store=self.store
            )
            self.clicks = ClickHistory(self.store)
        else:
            self.evaluator = Evaluator(
                self.settings,
                options.evaluator_options(),
                transport=self.transport,
                store=self.store,
            )
        # with an engine ranker, the engine's own order is scored and reported beside them
        engine = (ENGINE,) if options.engine_ranker != NO_ENGINE else ()
        self.models = (*report_models(), *engine)
        self.clock = LearningClock(self.models)
        self.first_call: dict[str, float] = {}  # the learners' compile or cache load
        self.refit_seconds = dict.fromkeys(BATCH_MODELS, 0.0)  # CPU seconds per batch model
        self.served_by: list[str] = []
        self.champion_switches = 0

    def start(self) -> None:
        """Topics, Uni-Con, each worker's stored state (none: a fresh store), compiled learners."""
        for worker in self._workers():
            worker.start()
        self.first_call = compile_learners(self.online.options.algos)

    @property
    def done(self) -> bool:
        return len(self.served_by) >= self.options.queries or self.simulation.done

    @property
    def champion(self) -> str:
        """The champion the next query is served by."""
        if self.evaluator is not None:
            return self.evaluator.champion
        assert self.clicks is not None
        return self.clicks.champion

    @property
    def learning_seconds(self) -> dict[str, float]:
        """Cumulative CPU seconds each model has spent learning so far (Fig. 4)."""
        return {**self.online.learn_seconds, **self.refit_seconds}

    def step(self) -> str:
        """One query through the whole pipeline; returns the model that served it."""
        result = self.simulation.step()
        served = result.served.name
        self.served_by.append(served)
        n = len(self.served_by)
        champion = self.champion
        if self.evaluator is not None:
            evaluator = self.evaluator
            _drain(lambda: evaluator.step(timeout_ms=0))  # scored before anyone learns
        else:
            assert self.join is not None and self.clicks is not None
            join = self.join
            _drain(lambda: join.step(timeout_ms=0))  # joined and credited before anyone learns
            join.checkpoint()  # sends its triplets; writes a decided switch to the record
            self.clicks.step(result, join.handler.race)
        if self.champion != champion:
            self.champion_switches += 1
        _drain(lambda: self.online.step(timeout_ms=0))
        _drain(self.batch.step)
        if n % self.options.checkpoint_every == 0:
            self.online.checkpoint()
        if n % self.options.refit_every == 0 and n < self.options.queries:
            self.refit()  # not after the last query: no query would be served by it
        self.clock.snapshot(self.learning_seconds)
        return served

    def refit(self) -> dict[str, int]:
        """Refit the batch models on the reservoir; split the CPU time by their fit times."""
        started = time.thread_time()
        published = self.batch.refit()
        cpu = time.thread_time() - started
        fit_seconds = {}
        for name, version in published.items():
            stored = self.store.load_version(name, version)
            if stored is not None:
                fit_seconds[name] = max(float(stored.meta.get("refit_seconds", 0.0)), 0.0)
        total = sum(fit_seconds.values())
        for name, seconds in fit_seconds.items():
            self.refit_seconds[name] += cpu * (
                seconds / total if total > 0 else 1 / len(fit_seconds)
            )
        return published

    def close(self) -> None:
        """Close every worker's consumer and producer (their state is already saved)."""
        for worker in self._workers():
            worker.close()

    def _workers(self) -> list[Simulation | OnlineWorker | BatchWorker | Evaluator | ClickJoin]:
        """This run's workers, the simulator first (it creates the topics the others read)."""
        workers = (self.simulation, self.online, self.batch, self.evaluator, self.join)
        return [worker for worker in workers if worker is not None]

    def score_curves(self, metric: str = "ndcg") -> dict[str, np.ndarray]:
        """Per-query NDCG@50 ("ndcg") or AP over the candidates ("ap") of every report
        model from the evaluator's history; NaN where a model was not scored."""
        n = len(self.served_by)
        curves = {m: np.full(n, np.nan) for m in self.models}
        assert self.evaluator is not None, "the click demo scores no model on judgments"
        for scores in self.evaluator.history:
            for model, value in getattr(scores, metric).items():
                if model in curves and 0 <= scores.seq < n:
                    curves[model][scores.seq] = value
        return curves


@dataclass
class FinishedRun:
    """A finished pipeline and what its run took."""

    pipeline: DemoPipeline
    collection: ImageCollection
    seconds: float
    cpu_seconds: float
    collection_seconds: float


def run_pipeline(
    options: DemoOptions,
    settings: Settings | None,
    collection: ImageCollection | None,
    index: CandidateRetriever | None,
    progress: bool,
) -> FinishedRun:
    """Build or load the collection, run the pipeline for the options' queries."""
    configure_logging("WARNING")  # workers log every checkpoint at INFO; keep stderr readable
    started, cpu_started = time.perf_counter(), time.process_time()
    settings = settings or Settings.from_env()
    if collection is None:
        served = load_collection(settings, options.simulate_options(), progress)
        collection, index = served.collection, served.index
    collection_seconds = time.perf_counter() - started
    pipeline = DemoPipeline(options, settings, collection=collection, index=index)
    pipeline.start()
    try:
        with _progress(progress, options.queries) as advance:
            while not pipeline.done:
                pipeline.step()
                advance(pipeline)
    finally:
        pipeline.close()
    return FinishedRun(
        pipeline,
        collection,
        time.perf_counter() - started,
        time.process_time() - cpu_started,
        collection_seconds,
    )


def run_demo(
    options: DemoOptions,
    settings: Settings | None = None,
    *,
    collection: ImageCollection | None = None,
    index: CandidateRetriever | None = None,
    progress: bool = True,
) -> DemoResult:
    """The judged demo: build or load the collection, run the pipeline for the options'
    queries, collect (`run_click_demo` for clicks).

    `collection` (and its `index`) given: served instead of the options' collection.
    """
    if options.clicks:
        raise ValueError(f"feedback {options.feedback!r}: that is the click demo, run_click_demo")
    run = run_pipeline(options, settings, collection, index, progress)
    pipeline = run.pipeline
    assert pipeline.evaluator is not None
    summary = pipeline.evaluator.summary()
    return DemoResult(
        options=options,
        collection=run.collection.name,
        images=run.collection.n_images,
        triplets=pipeline.simulation.triplets_produced,
        seconds=run.seconds,
        cpu_seconds=run.cpu_seconds,
        collection_seconds=run.collection_seconds,
        ndcg=pipeline.score_curves("ndcg"),
        ap=pipeline.score_curves("ap"),
        learning_seconds=pipeline.clock.arrays(),
        served_by=pipeline.served_by,
        champion=pipeline.evaluator.champion,
        champion_switches=pipeline.champion_switches,
        refits=pipeline.batch.counters.refits,
        rolling_ndcg=summary["rolling_ndcg"],
        first_call=pipeline.first_call,
        extra=pipeline.simulation.handler.engine_summary(),
    )


@contextmanager
def _progress(enabled: bool, total: int) -> Iterator[Callable[[DemoPipeline], None]]:
    """A rich progress bar on stderr showing queries, triplets, the server and refits."""
    if not enabled:
        yield lambda _pipeline: None
        return

    columns = (
        TextColumn("demo"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("queries [dim]{task.fields[status]}"),
        TimeElapsedColumn(),
    )
    with Progress(*columns, console=Console(file=sys.stderr), transient=True) as bar:
        task = bar.add_task("demo", total=total, status="")

        def advance(pipeline: DemoPipeline) -> None:
            bar.update(
                task,
                completed=len(pipeline.served_by),
                status=(
                    f"{_produced(pipeline)}, "
                    f"serving {pipeline.served_by[-1]}, refits {pipeline.batch.counters.refits}"
                ),
            )

        yield advance


def _produced(pipeline: DemoPipeline) -> str:
    """What the run has produced so far: triplets (judged), or clicks and the champion."""
    if pipeline.clicks is None:
        return f"{pipeline.simulation.triplets_produced:,} triplets"
    clicks = sum(pipeline.clicks.clicks)
    return f"{clicks:,} clicks, champion {pipeline.champion}"
