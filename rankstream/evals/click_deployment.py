"""One learner deployed as the product runs it, fed by simulated users: `eval clicks`' arms.

A `ClickDeployment` is the click demo's pipeline (`rankstream.demo_pipeline`) cut down to one
learner, on its own embedded transport and store (`stream.embedded`,
`stream.embedded_store`): the simulated engine (`workers.simulator.Simulation`, serving
the champion as serve does: its `served_order`, serve's randomized logging policy
`selection.scoring.logged_order`, the impression an engine would log, its users' clicks
and "session over" row), the click join (`workers.click_join`: pairs, IPS weights from
its own propensity estimate, PDGD taught in the join from the stored Uni-Con) and, for
OPR..AROW, the online worker (`workers.online_worker`: its scaler fitted on its first
`scaler_rows` triplets, its start, its hyper-parameters). Nothing here learns: every
weight comes from the product's code with the product's options.

The champion is the measured learner (`learner`), named in the store's champion record
at the start; until the learner has a model (the online worker saves none before its
scaler is fitted) the engine serves Uni-Con, as `rankstream serve` serves a champion it
cannot load yet. Each impression is joined, checkpointed and learned before the next
one is served (the demo's order, no timers), so a run is a function of its seed.

The engine serves the query the eval's own loop drew (`simulators.judged_feedback.run_arms`),
so every arm ranks the same candidates (and the collection is searched once a query,
not once an arm: `_GivenQueries`); `serve` returns what was shown as scores
(`click_feedback.order_scores`).
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np

from rankstream.ranking import learners
from rankstream.ranking.baselines import UNI_CON
from rankstream.selection.judged_race import publish_champion
from rankstream.simulators.click_feedback import order_scores
from rankstream.simulators.images import CandidateRetriever, ImageCollection
from rankstream.simulators.judged_feedback import (
    CALIBRATION_QUERIES,
    FeedbackSimulator,
    RetrievedQuery,
)
from rankstream.stream.embedded import EmbeddedTransport
from rankstream.stream.embedded_store import EmbeddedModelStore
from rankstream.stream.settings import Settings
from rankstream.workers.click_join import ClickJoin
from rankstream.workers.click_join_options import NONE, JoinOptions
from rankstream.workers.online_worker import OnlineWorker, WorkerOptions
from rankstream.workers.simulator import Simulation
from rankstream.workers.simulator_options import SimulateOptions

ASSIGNED = "assigned"
"""The champion record's `decided_by` here: the eval names the learner it measures."""
_POLL_RECORDS = 100_000  # one poll takes everything one impression produced


def eval_settings(intervention_share: float, settings: Settings | None = None) -> Settings:
    """A deployment's settings: the environment's (the window, the intervention kind, ...)
    with no services (embedded), no interleaving (each arm serves its own learner) and
    serve's randomized share `intervention_share`."""
    if not 0.0 <= intervention_share <= 1.0:
        raise ValueError(f"intervention_share must lie in [0, 1], got {intervention_share}")
    return dataclasses.replace(
        settings or Settings.from_env(),
        kafka_bootstrap=None,
        redis_url=None,
        interleaving_share=0.0,
        intervention_share=intervention_share,
    )


class _GivenQueries:
    """The engine's simulator (`simulators.judged_feedback.FeedbackSimulator`: its calibration
    queries, its display) serving the queries it is given instead of drawing its own."""

    def __init__(self, simulator: FeedbackSimulator) -> None:
        self._simulator = simulator
        self.query: RetrievedQuery | None = None

    def next_query(self) -> RetrievedQuery:
        if self.query is None:
            raise RuntimeError("no query given to serve")
        query, self.query = self.query, None
        return query

    def __getattr__(self, name: str) -> Any:
        return getattr(self._simulator, name)


def _drain(step: Any) -> None:
    while step(timeout_ms=0):
        pass


class ClickDeployment:
    """The product learning `learner` from the clicks of `feedback` users (module doc).

    `learner` is an online learner (OPR..AROW: learned by the online worker from the
    join's triplets) or an impression learner (PDGD: taught by the join); `join` the
    join's options (its defaults, or a variant such as naive pairs), their cadence and
    its taught learners set here."""

    def __init__(
        self,
        learner: str,
        feedback: str,
        collection: ImageCollection,
        index: CandidateRetriever,
        seed: int,
        impressions: int,
        settings: Settings,
        join: JoinOptions | None = None,
        online: WorkerOptions | None = None,
    ) -> None:
        self.learner = learner
        self.settings = settings
        self.transport = EmbeddedTransport()
        self.store = EmbeddedModelStore()
        taught = learners.learner(learner).learns_from == "impressions"
        self.options = dataclasses.replace(
            join or JoinOptions(),
            learn=(learner,) if taught else (NONE,),
            checkpoint_records=None,
            checkpoint_seconds=None,
            poll_ms=0,
        )
        self.simulation = Simulation(
            settings,
            SimulateOptions(
                feedback=feedback,
                queries=impressions,
                seed=seed,
                collection=collection.name,
                calibration_queries=CALIBRATION_QUERIES,
            ),
            transport=self.transport,
            store=self.store,
            collection=collection,
            index=index,
        )
        self.queries = _GivenQueries(self.simulation.handler.simulator)
        self.simulation.handler.simulator = self.queries  # type: ignore[assignment]
        self.join = ClickJoin(settings, self.options, transport=self.transport, store=self.store)
        self.online: OnlineWorker | None = None
        if not taught:
            worker = dataclasses.replace(
                online or WorkerOptions(),
                algos=(learner,),
                checkpoint_records=None,
                checkpoint_seconds=None,
                poll_ms=0,
                max_poll_records=_POLL_RECORDS,
            )
            self.online = OnlineWorker(settings, worker, transport=self.transport, store=self.store)
        self.simulation.start()  # topics and Uni-Con
        publish_champion(self.store, learner, previous=UNI_CON, decided_by=ASSIGNED,
                         evidence={})  # fmt: skip
        self.join.start()
        if self.online is not None:
            self.online.start()
        self.served_by_learner = 0  # impressions its own model served (not Uni-Con)

    def serve(self, query: RetrievedQuery) -> np.ndarray:
        """Serve `query` as the engine would: scores whose ranked order starts with what
        was shown."""
        self.queries.query = query
        result = self.simulation.step()
        assert result.shown is not None and result.query_id == query.query_id
        self.served_by_learner += result.served.name == self.learner
        return order_scores(result.shown, len(query.candidate_ids))

    def learn(self, query: RetrievedQuery, served: np.ndarray) -> None:
        """The impression's clicks joined and learned before the next one is served."""
        _drain(self.join.step)
        self.join.checkpoint()  # sends the triplets; publishes PDGD and the propensities
        if self.online is not None:
            _drain(self.online.step)
            self.online.checkpoint()  # a new version of the learner's model

    def summary(self) -> dict[str, Any]:
        """What the product did: the join's counters, the triplets learned, its estimate."""
        join = self.join.handler
        counters = join.counters.to_json()
        return {
            "learner": self.learner,
            "join": {
                "losers": self.options.losers,
                "min_propensity": self.options.min_propensity,
                **{k: counters[k] for k in ("sessions", "triplets", "learned", "refused")},
                "propensities": [round(p, 4) for p in join.propensities().tolist()],
            },
            "learned_triplets": None if self.online is None else self.online.counters.records,
            "served_by_learner": self.served_by_learner,
        }

    def close(self) -> None:
        if self.online is not None:
            self.online.close()
        self.join.close()
        self.simulation.close()
