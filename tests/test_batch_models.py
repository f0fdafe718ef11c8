"""Reservoir triplets -> training sets -> cMDS-DML / RankMKL -> stored -> scorers (no services)."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import numpy as np
import pytest
from scipy.spatial import cKDTree

from rankstream.harness.generator import TripletGenerator
from rankstream.ranking.baselines import UniCon
from rankstream.ranking.batch_models import (
    CMDSDMLParams,
    CMDSDMLScorer,
    RankMKLParams,
    check_sample,
    descriptor_groups,
    fit_cmds_dml,
    fit_rankmkl,
    ranked_points,
    sample_pairs,
    scorer_from_state,
)
from rankstream.ranking.triplets import TRIPLET_COLUMNS, TripletBlock
from rankstream.selection.scoring import SCORERS, scorer_for
from rankstream.simulators.collection import build_collection
from rankstream.simulators.judged_feedback import (
    FeedbackSimulator,
    RetrievedQuery,
    served_ndcg,
)
from rankstream.stream.embedded_store import EmbeddedModelStore
from rankstream.stream.store import WrongWidthError

D = 36


def _sample(n: int = 400, seed: int = 0, width: int = D) -> TripletBlock:
    """Generator triplets (query-independent phi): enough for shapes and state checks."""
    generator = TripletGenerator(seed=seed, n_images=50_000, width=width)
    return generator.block(n, query_ids=np.arange(n) % 40)


@dataclass(frozen=True)
class Feedback:
    """Triplets of judged queries served by Uni-Con, and held-out queries to rank."""

    triplets: list[TripletBlock]
    held_out: list[RetrievedQuery]

    def sample(self) -> TripletBlock:
        return TripletBlock.concatenate(self.triplets)

    def mean_ndcg(self, score) -> float:
        return float(np.mean([served_ndcg(q, score(q.phi)) for q in self.held_out]))

    def random_ndcg(self, repeats: int = 5) -> float:
        rng = np.random.default_rng(0)
        return float(
            np.mean(
                [
                    served_ndcg(q, rng.random(len(q.phi)))
                    for q in self.held_out
                    for _ in range(repeats)
                ]
            )
        )


def simulated_feedback(n_queries: int = 40, n_held_out: int = 10) -> Feedback:
    """The simulator at small scale (4,000 images, 200 candidates, top 50 judged)."""
    sim = FeedbackSimulator(
        build_collection(n_images=4000, progress=False, seed=0), seed=1, candidates=200
    )
    unicon = UniCon().fit(sim.calibration_phi(10))
    blocks = [sim.step(unicon.score)[1] for _ in range(n_queries)]
    # a query whose judged top 50 all tie yields no triplets, and the simulator sends nothing
    triplets = [block for block in blocks if len(block)]
    return Feedback(triplets, [sim.next_query() for _ in range(n_held_out)])


@pytest.fixture(scope="module")
def feedback() -> Feedback:
    return simulated_feedback()


def test_points_are_deduplicated_per_query_and_image_and_pairs_point_better_first() -> None:
    phi = np.arange(4 * D, dtype=np.float32).reshape(4, D)
    sample = TripletBlock.from_pairs(
        seq=np.arange(3),
        query_id=np.array([7, 7, 8]),
        p1_id=np.array([1, 2, 1]),
        p2_id=np.array([2, 3, 2]),
        rel1=np.array([2, 1, 1], np.int8),
        rel2=np.array([1, 0, 0], np.int8),
        phi1=phi[[0, 1, 2]],
        phi2=phi[[1, 3, 3]],
    )
    points = ranked_points(sample)
    # (7,1) (7,2) (7,3) (8,1) (8,2): image 1 under two queries is two points
    assert points.keys.tolist() == [[7, 1], [7, 2], [7, 3], [8, 1], [8, 2]]
    assert points.labels.tolist() == [2.0, 1.0, 0.0, 1.0, 0.0]
    np.testing.assert_array_equal(points.phi[1], phi[1])  # first occurrence of (7, 2)
    assert points.pairs.tolist() == [[0, 1], [1, 2], [3, 4]]
    assert (points.labels[points.pairs[:, 0]] > points.labels[points.pairs[:, 1]]).all()
    normalized = ranked_points(sample.compact())  # the same triplets over a shared table
    assert np.array_equal(normalized.phi, points.phi) and np.array_equal(
        normalized.pairs, points.pairs
    )


def test_bad_samples_raise_clear_errors() -> None:
    sample = _sample(10)
    phi = sample.phi.copy()
    phi[3, 5] = np.nan
    with pytest.raises(ValueError, match="phi"):
        check_sample(
            TripletBlock(*(getattr(sample, n) for n in TRIPLET_COLUMNS), sample.image_id, phi)
        )
    with pytest.raises(ValueError, match="tied"):
        check_sample(dataclasses.replace(sample, rel2=sample.rel1))
    with pytest.raises(ValueError, match="no triplets"):
        check_sample(sample.select(slice(0, 0)))


def test_descriptor_groups_are_runs_of_four_columns_at_any_width() -> None:
    assert descriptor_groups(36) == tuple(slice(4 * g, 4 * g + 4) for g in range(9))
    assert descriptor_groups(10) == (slice(0, 4), slice(4, 8), slice(8, 10))
    assert descriptor_groups(3) == (slice(0, 3),)
    with pytest.raises(ValueError, match="width"):
        descriptor_groups(0)


@pytest.mark.parametrize("fit", [fit_cmds_dml, fit_rankmkl])
def test_a_batch_model_of_another_width_scores_at_its_width_and_is_refused_at_others(fit):
    sample = _sample(300, width=8)
    meta, arrays = fit(sample)
    kind = meta["kind"]
    assert meta["phi_dim"] == 8
    store = EmbeddedModelStore()
    store.save(kind, kind=kind, meta=meta, arrays=arrays, offsets={}, expected_version=0)
    scores = scorer_for(store.load(kind), width=8).score(sample.phi)
    assert scores.shape == (len(sample.phi),) and np.isfinite(scores).all()
    with pytest.raises(WrongWidthError, match=r"8-wide phi.*width .* is 36"):
        scorer_for(store.load(kind))
    with pytest.raises(ValueError, match="8"):
        scorer_for(store.load(kind), width=8).score(np.zeros((3, 36)))


def test_sample_pairs_bounds_and_is_reproducible() -> None:
    pairs = np.random.default_rng(0).integers(0, 500, size=(300, 2))
    a, b = sample_pairs(pairs, 50, seed=3), sample_pairs(pairs, 50, seed=3)
    assert len(a) == 50 and np.array_equal(a, b)
    assert {tuple(p) for p in a} <= {tuple(p) for p in pairs}
    assert len(sample_pairs(pairs[:20], 50, seed=3)) == len(np.unique(pairs[:20], axis=0))


@pytest.mark.parametrize(
    ("kind", "fit", "params"),
    [
        ("cmds_dml", fit_cmds_dml, CMDSDMLParams()),
        ("rankmkl", fit_rankmkl, RankMKLParams(max_pairs=300)),
        ("rankmkl", fit_rankmkl, RankMKLParams(kernel="chi2", max_pairs=200)),
    ],
)
def test_stored_batch_models_score_through_serving_and_beat_random(
    kind, fit, params, feedback
) -> None:
    meta, arrays = fit(feedback.sample(), params)
    store = EmbeddedModelStore()
    store.save(kind, kind=kind, meta=meta, arrays=arrays, offsets={}, expected_version=0)
    served = scorer_for(store.load(kind))
    direct = scorer_from_state(kind, meta, arrays)
    phi = np.random.default_rng(1).random((30, D), dtype=np.float32)
    np.testing.assert_array_equal(served.score(phi), direct.score(phi))
    assert feedback.mean_ndcg(served.score) > feedback.random_ndcg() + 0.2
    assert {"cmds_dml", "rankmkl"} <= set(SCORERS)


def test_cmds_dml_score_orders_by_neighbour_grade_first_then_closeness() -> None:
    sample = _sample(300)
    scorer = CMDSDMLScorer.from_state(
        *fit_cmds_dml(sample, CMDSDMLParams(n_neighbors=7, max_iter=50))
    )
    phi = np.random.default_rng(2).random((200, D), dtype=np.float32)
    k = scorer.n_neighbors  # validated among `score_neighbors`
    # an independent exact search: the scorer's brute-force neighbours must be these
    distances, neighbors = cKDTree(scorer.reference).query(scorer.embed(phi), k=k)
    mean_grade = scorer.labels[neighbors].mean(axis=1)
    scores = scorer.score(phi)
    higher = mean_grade[:, None] > mean_grade[None, :] + 1e-9
    assert (scores[:, None] > scores[None, :])[higher].all()
    same = np.abs(mean_grade[:, None] - mean_grade[None, :]) < 1e-9
    closer = distances.mean(axis=1)[:, None] < distances.mean(axis=1)[None, :]
    assert (scores[:, None] > scores[None, :])[same & closer].all()


def test_bad_states_raise_value_errors() -> None:
    sample = _sample(200)
    meta, arrays = fit_cmds_dml(sample, CMDSDMLParams(n_neighbors=5, max_iter=20))
    with pytest.raises(ValueError, match="not a batch model"):
        scorer_from_state("online", meta, arrays)
    with pytest.raises(ValueError, match="is not 'rankmkl'"):
        scorer_from_state("rankmkl", meta, arrays)
    broken = dict(arrays, labels=arrays["labels"][:-1])
    with pytest.raises(ValueError, match="disagree"):
        scorer_from_state("cmds_dml", meta, broken)
    scorer = scorer_from_state("cmds_dml", meta, arrays)
    with pytest.raises(ValueError, match="36"):
        scorer.score(np.zeros((3, 35)))
