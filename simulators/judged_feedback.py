"""The relevance-feedback loop of §5.5 of the online-LTR paper, as plain numpy records.

A simulated search engine receives query images one after another. For each it
retrieves K candidates (`simulators.retrieval`), computes their 36-d phi, ranks them
with the *serving model* (any callable `score_fn(phi) -> scores`), and the simulated
user judges the top `judged` (50). Every ordered pair of judged images with different
graded relevance becomes a triplet; ties are never emitted. The next query is then
served by whatever model has learned from these triplets.

Choices where the paper is silent (each is tested):

* **Queries** are ImageCLEF (ground-truth) images, never distractors: the paper draws
  2,000 random images whose relevance is known. The simulator walks a seeded random
  permutation of the ground-truth images and reshuffles when it runs out, so the first
  `len(ground_truth)` queries are distinct. The query image itself is never a candidate.
* **Judged queries** list the K candidates in *served order* (the serving model's
  ranking, ties kept in retrieval order): the judged images are the first `n_judged`.
  `relevance` covers all K, so an evaluator can score any other model's top 50 among them.
* **Triplets** come from `ranking.judgments.feedback_triplets`, the pair construction
  the ingestion API shares: every pair of judged candidates with different grades, each
  once, oriented by a fair coin (y = sign(rel1 - rel2) takes both values), shuffled.
* **Determinism**: query order, orientation coins and shuffles come from separate child
  streams of the seed, so the records depend only on the seed and the scores returned.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Protocol

import numpy as np

from rankstream.ranking import learners
from rankstream.ranking.baselines import UNI_CON as BASELINE
from rankstream.ranking.baselines import UniCon
from rankstream.ranking.judgments import feedback_triplets
from rankstream.ranking.metrics import NDCG_K, average_precision, ndcg_at_k, ranked_order
from rankstream.ranking.online import OnlineRanker
from rankstream.ranking.scaling import Standardizer
from rankstream.ranking.triplets import TripletBlock
from rankstream.simulators.images import SERVED_CANDIDATES, CandidateRetriever, ImageCollection
from rankstream.simulators.progress_bar import progress_bar
from rankstream.simulators.retrieval import CandidateIndex

JUDGED = 50  # the candidates a user judges: the served top 50 (§5.5)
CALIBRATION_QUERIES = 50  # queries whose candidates fit an experiment's scaler

ScoreFn = Callable[[np.ndarray], np.ndarray]


@dataclass(frozen=True)
class RetrievedQuery:
    """One query's candidates before ranking: ids in retrieval order, their phi and relevance."""

    query_id: int  # sequence number of the query in the stream
    image_id: int  # the query image
    candidate_ids: np.ndarray  # (K,) int64
    phi: np.ndarray  # (K, 36) float32
    relevance: np.ndarray  # (K,) int8 ground-truth graded relevance


@dataclass(frozen=True)
class JudgedQueryRecord:
    """The `rankstream.queries` record: candidates in served order, the first n_judged judged."""

    query_id: int
    image_id: int
    candidate_ids: np.ndarray  # (K,) int64, served order
    phi: np.ndarray  # (K, 36) float32, same order
    relevance: np.ndarray  # (K,) int8, same order
    n_judged: int


def judge(
    query: RetrievedQuery,
    scores: np.ndarray,
    n_judged: int,
    first_seq: int,
    rng: np.random.Generator,
) -> tuple[JudgedQueryRecord, TripletBlock]:
    """Rank candidates by `scores`, judge the top `n_judged`, emit all non-tied pairs."""
    k = len(query.candidate_ids)
    scores = np.asarray(scores, dtype=np.float64)
    if scores.shape != (k,):
        raise ValueError(f"score_fn must return shape ({k},), got {scores.shape}")
    if not np.isfinite(scores).all():
        raise ValueError("score_fn returned NaN or Inf scores")
    order = ranked_order(scores)  # the metric's own order: stable, ties keep retrieval order
    ids, phi, rel = query.candidate_ids[order], query.phi[order], query.relevance[order]
    judged = np.arange(k) < min(n_judged, k)  # the user judges the served top n_judged
    triplets = feedback_triplets(query.query_id, ids, phi, rel, judged, first_seq, rng)
    record = JudgedQueryRecord(query.query_id, query.image_id, ids, phi, rel, int(judged.sum()))
    return record, triplets


class FeedbackSimulator:
    """The search engine and its users over a collection (see the module docstring).

    Any `simulators.catalog.ImageCollection` serves (the synthetic one, Fashion-MNIST);
    without an `index` the collection's own `CandidateIndex` is built in memory.

    >>> from simulators.collection import build_collection
    >>> sim = FeedbackSimulator(build_collection(n_images=3000, progress=False), seed=1)
    >>> judged, triplets = sim.step(lambda phi: phi.sum(axis=1))
    >>> judged.phi.shape, bool((triplets.rel1 != triplets.rel2).all())
    ((300, 36), True)
    """

    def __init__(
        self,
        collection: ImageCollection,
        seed: int = 0,
        candidates: int = SERVED_CANDIDATES,
        judged: int = JUDGED,
        index: CandidateRetriever | None = None,
    ) -> None:
        if not 1 <= judged <= candidates < collection.n_images:
            raise ValueError(
                f"need 1 <= judged <= candidates < n_images, got {judged}, {candidates}"
            )
        self.collection = collection
        self.seed = seed
        self.n_candidates = candidates
        self.n_judged = judged
        self.index = (
            index
            if index is not None
            else CandidateIndex.build(collection, seed=seed, progress=False)
        )
        order_seed, judge_seed, calibration_seed = np.random.SeedSequence(seed).spawn(3)
        self._order_rng = np.random.default_rng(order_seed)
        self._judge_rng = np.random.default_rng(judge_seed)
        self._calibration_seed = calibration_seed
        self._ground_truth = collection.ground_truth_ids
        self._pending: np.ndarray = np.empty(0, dtype=np.int64)
        self.queries_served = 0
        self.triplets_emitted = 0

    def next_query(self) -> RetrievedQuery:
        """Draw the next query image and retrieve its candidates (model-independent)."""
        if len(self._pending) == 0:
            self._pending = self._order_rng.permutation(self._ground_truth)
        image, self._pending = int(self._pending[0]), self._pending[1:]
        query = self.retrieve(image, self.queries_served)
        self.queries_served += 1
        return query

    def retrieve(self, image_id: int, query_id: int = -1) -> RetrievedQuery:
        """Candidates, phi and relevance for one query image."""
        ids = self.index.candidates(image_id, self.n_candidates)
        return RetrievedQuery(
            query_id=query_id,
            image_id=image_id,
            candidate_ids=ids,
            phi=self.collection.phi(image_id, ids),
            relevance=self.collection.relevance(image_id, ids),
        )

    def judge(
        self, query: RetrievedQuery, scores: np.ndarray
    ) -> tuple[JudgedQueryRecord, TripletBlock]:
        """The user's feedback on `query` ranked by `scores`; advances the triplet seq."""
        records = judge(query, scores, self.n_judged, self.triplets_emitted, self._judge_rng)
        self.triplets_emitted += len(records[1])
        return records

    def step(self, score_fn: ScoreFn) -> tuple[JudgedQueryRecord, TripletBlock]:
        """One query of the loop: retrieve, rank with `score_fn(phi)`, judge, emit."""
        query = self.next_query()
        return self.judge(query, score_fn(query.phi))

    def calibration_phi(self, n_queries: int = CALIBRATION_QUERIES) -> np.ndarray:
        """Candidate phi (n_queries * K, 36) of queries from their own seed stream.

        For fitting a feature Standardizer: label-free, and drawn independently of the
        query stream, so no model is scaled with the queries it is scored on.
        """
        rng = np.random.default_rng(self._calibration_seed)
        images = rng.choice(
            self._ground_truth, size=min(n_queries, len(self._ground_truth)), replace=False
        )
        return np.concatenate([self.retrieve(int(i)).phi for i in images])


Variant = tuple[str, Mapping[str, float]]  # (learner name, its hyper-parameters)


class Arm(Protocol):
    """One engine in an online experiment: it serves each query and learns from it."""

    def serve(self, query: RetrievedQuery) -> np.ndarray:
        """Scores (K,) whose order (`ranked_order`) is the ranking shown for `query`."""
        ...

    def learn(self, query: RetrievedQuery, served: np.ndarray) -> None:
        """Learn from the users' feedback on `query` shown in the order of `served`."""
        ...


class StaticArm:
    """A model that only serves (Uni-Con)."""

    def __init__(self, score: ScoreFn) -> None:
        self.score = score

    def serve(self, query: RetrievedQuery) -> np.ndarray:
        return self.score(query.phi)

    def learn(self, query: RetrievedQuery, served: np.ndarray) -> None:
        return None


class JudgedArm:
    """§5.5's engine: serves by its ranker, learns the triplets of its judged top 50."""

    def __init__(self, ranker: OnlineRanker, judged: int, rng: np.random.Generator) -> None:
        self.ranker, self.judged, self.rng = ranker, judged, rng

    def serve(self, query: RetrievedQuery) -> np.ndarray:
        return self.ranker.score(query.phi)

    def learn(self, query: RetrievedQuery, served: np.ndarray) -> None:
        _, triplets = judge(query, served, self.judged, 0, self.rng)
        if len(triplets):
            self.ranker.learn_many(triplets.x(), triplets.y())


def run_arms(
    sim: FeedbackSimulator,
    arms: Mapping[str, Arm],
    n_queries: int,
    progress: bool | str = False,
) -> dict[str, dict[str, np.ndarray]]:
    """The online loop: every arm serves the same query sequence (its own ranking of the
    same candidates), is scored on what it served (NDCG@50, NDCG@10 and AP over all K, AP
    counting relevance > 0 as relevant), then learns from it before the next query.
    Returns {"ndcg": {name: (n_queries,)}, "ndcg10": {...}, "ap": {...}}; a string
    `progress` labels the bar."""
    metrics = ("ndcg", "ndcg10", "ap")
    scores = {metric: {n: np.empty(n_queries) for n in arms} for metric in metrics}
    label = progress if isinstance(progress, str) else "online experiment"
    with progress_bar(bool(progress), label, n_queries) as advance:
        for t in range(n_queries):
            query = sim.next_query()
            for name, arm in arms.items():
                served = arm.serve(query)
                scores["ndcg"][name][t] = served_ndcg(query, served)
                scores["ndcg10"][name][t] = ndcg_at_k(served, query.relevance, 10)
                scores["ap"][name][t] = average_precision(served, query.relevance)
                arm.learn(query, served)
            advance()
    return scores


def online_experiment_scores(
    collection: ImageCollection,
    variants: Mapping[str, Variant],
    n_queries: int = 2000,
    seed: int = 0,
    index: CandidateRetriever | None = None,
    calibration_queries: int = CALIBRATION_QUERIES,
    progress: bool | str = False,
) -> dict[str, dict[str, np.ndarray]]:
    """§5.5: per-query NDCG@50 and AP of Uni-Con and of each online ranker serving its own loop.

    `variants` names each ranker: name -> (learner, hyper-parameters), so one learner
    can run at several settings side by side. Every ranker sees the same query
    sequence and candidates; each ranks with its current model (zero weights at first:
    ties keep retrieval order), is scored on that ranking, learns from the triplets of
    its own judged top 50, and serves the next query with the updated model. Uni-Con
    (equal weights on standardized phi) is scored on the same queries. Features are
    standardized with a scaler fitted on `calibration_phi` (`run_arms` runs the loop).
    Returns {"ndcg": {"uni_con": (n_queries,), name: ...}, "ap": {...}}; a string
    `progress` labels the progress bar.
    """
    if BASELINE in variants:
        raise ValueError(f"{BASELINE!r} names the baseline; pick another variant name")
    sim, scaler, arms = experiment_setup(collection, seed, index, calibration_queries)
    judge_rngs = np.random.SeedSequence([seed, 1]).spawn(len(variants))
    for (name, (algo, params)), rng_seed in zip(variants.items(), judge_rngs, strict=True):
        ranker = OnlineRanker(algo=algo, scaler=scaler, **params)
        arms[name] = JudgedArm(ranker, sim.n_judged, np.random.default_rng(rng_seed))
    return run_arms(sim, arms, n_queries, progress)


def experiment_setup(
    collection: ImageCollection,
    seed: int,
    index: CandidateRetriever | None,
    calibration_queries: int = CALIBRATION_QUERIES,
) -> tuple[FeedbackSimulator, Standardizer, dict[str, Arm]]:
    """The simulator of a seed, the scaler fitted on its calibration queries, and the
    arms every experiment starts with: {"uni_con": Uni-Con on that scaler}."""
    sim = FeedbackSimulator(collection, seed=seed, index=index)
    scaler = Standardizer().fit(sim.calibration_phi(calibration_queries))
    return sim, scaler, {BASELINE: StaticArm(UniCon(scaler=scaler).score)}


def run_online_experiment(
    collection: ImageCollection,
    algos: Iterable[str] = learners.worker_defaults(),
    n_queries: int = 2000,
    seed: int = 0,
    index: CandidateRetriever | None = None,
    ranker_params: Mapping[str, Mapping[str, float]] | None = None,
    calibration_queries: int = CALIBRATION_QUERIES,
    progress: bool = False,
) -> dict[str, np.ndarray]:
    """Per-query NDCG@50 of Uni-Con and of each learner in `algos` (hyper-parameters from
    `ranker_params`, else the defaults) serving its own loop (`online_experiment_scores`).
    Returns {"uni_con": (n_queries,), algo: (n_queries,), ...}."""
    params = ranker_params or {}
    variants = {algo: (algo, params.get(algo, {})) for algo in algos}
    return online_experiment_scores(
        collection, variants, n_queries, seed, index, calibration_queries, progress
    )["ndcg"]


def served_ndcg(query: RetrievedQuery, scores: np.ndarray) -> float:
    """NDCG@50 of the candidates ranked by `scores` (ideal = best order of all K)."""
    return ndcg_at_k(scores, query.relevance, NDCG_K)
