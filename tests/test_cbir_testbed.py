"""The generic CBIR test bed with graded relevance, and the synthetic collection's one."""

from __future__ import annotations

import numpy as np
import pytest

from rankstream.evals.cbir import mean_ap, mean_ndcg_at_50
from rankstream.simulators.cbir_testbed import (
    QueryCandidates,
    build_testbed,
    load_synthetic_testbed,
    sample_graded_pairs,
)

N_IMAGES = 60


def toy_relevance(query: int, ids: np.ndarray) -> np.ndarray:
    return ((query + ids) % 3).astype(np.int8)  # graded 0/1/2, every level in every query


def toy_phi(query: int, ids: np.ndarray) -> np.ndarray:
    """Column 0 = relevance; column 1 ranks the 1s above the 2s (above the 0s); column 2 noise."""
    rel = toy_relevance(query, ids)
    ones_first = np.select([rel == 1, rel == 2], [2.0, 1.0], 0.0)
    noise = np.sin(query * 7.0 + ids * 13.0)
    return np.column_stack([rel.astype(float), ones_first, noise])


def toy_source(query: int) -> QueryCandidates:
    ids = np.delete(np.arange(N_IMAGES), query)
    return QueryCandidates(ids, toy_relevance(query, ids))


@pytest.fixture(scope="module")
def toy_bed():
    return build_testbed(
        "toy",
        ["rel", "ones_first", "noise"],
        toy_phi,
        toy_source,
        np.arange(N_IMAGES),
        seed=2,
        train_rows=3000,
    )


def test_graded_relevance_flows_to_ndcg_but_not_to_ap(toy_bed) -> None:
    assert {int(v) for q in toy_bed.test_queries for v in np.unique(q.relevance)} == {0, 1, 2}
    by_relevance = lambda phi: phi[:, 0]  # noqa: E731
    ones_first = lambda phi: phi[:, 1]  # noqa: E731
    assert mean_ndcg_at_50(by_relevance, toy_bed.test_queries) == pytest.approx(1.0)
    # AP counts rel > 0 as relevant: both orders put every relevant image first
    assert mean_ap(by_relevance, toy_bed.test_queries) == pytest.approx(1.0)
    assert mean_ap(ones_first, toy_bed.test_queries) == pytest.approx(1.0)
    # NDCG's gains 2^rel - 1 see that the 2s come after the 1s
    assert mean_ndcg_at_50(ones_first, toy_bed.test_queries) < 0.9


def test_training_rows_order_differently_relevant_pairs(toy_bed) -> None:
    assert toy_bed.train_X.shape == (3000, 3)
    levels = set()
    for (query, first, second), x, y in zip(
        toy_bed.train_triplets, toy_bed.train_X, toy_bed.train_y, strict=True
    ):
        rel = toy_relevance(int(query), np.array([first, second]))
        assert rel[0] != rel[1]
        assert y == (1.0 if rel[0] > rel[1] else -1.0)
        np.testing.assert_allclose(
            x,
            toy_phi(int(query), np.array([first]))[0] - toy_phi(int(query), np.array([second]))[0],
        )
        levels.add((int(rel.max()), int(rel.min())))
    assert levels == {(2, 1), (2, 0), (1, 0)}
    assert set(np.unique(toy_bed.train_y)) == {-1.0, 1.0}


def test_pair_sampler_cycles_through_the_more_relevant_candidates() -> None:
    rel = np.array([0, 2, 0, 1, 0, 2, 0])
    first, second = sample_graded_pairs(rel, 9, np.random.default_rng(0))
    assert (rel[first] > rel[second]).all()
    assert np.bincount(first, minlength=7)[[1, 3, 5]].tolist() == [3, 3, 3]
    empty = sample_graded_pairs(np.ones(5), 4, np.random.default_rng(0))
    assert empty[0].size == 0 == empty[1].size


def test_no_pairs_at_all_is_an_error() -> None:
    def flat(query: int) -> QueryCandidates:
        ids = np.delete(np.arange(N_IMAGES), query)
        return QueryCandidates(ids, np.zeros(ids.size, dtype=np.int8))

    with pytest.raises(ValueError, match="differing relevance"):
        build_testbed("flat", ["a", "b", "c"], toy_phi, flat, np.arange(N_IMAGES))
    with pytest.raises(ValueError, match="train_rows"):
        build_testbed("toy", ["a"], toy_phi, toy_source, np.arange(N_IMAGES), train_rows=0)


SYNTHETIC_SMALL = {
    "n_images": 3000,
    "candidates": 100,
    "train_rows": 2000,
    "max_val_queries": 6,
    "max_test_queries": 5,
}


@pytest.fixture(scope="module")
def synthetic_cache(tmp_path_factory) -> str:
    return str(tmp_path_factory.mktemp("collections"))


def test_synthetic_testbed_queries_candidates_and_rows(synthetic_cache) -> None:
    from rankstream.simulators.collection import Collection

    bed = load_synthetic_testbed(seed=1, cache_dir=synthetic_cache, **SYNTHETIC_SMALL)
    collection = Collection.load_or_build(synthetic_cache, progress=False, n_images=3000, seed=0)
    ground_truth = collection.ground_truth_ids
    assert bed.name == "synthetic" and len(bed.feature_names) == 36
    assert bed.query_counts == {"train": ground_truth.size * 3 // 5, "val": 6, "test": 5}
    queries = np.concatenate([bed.train_query_ids, bed.val_query_ids, bed.test_query_ids])
    assert set(queries) <= set(ground_truth)
    for phi, relevance in bed.val_queries + bed.test_queries:
        assert phi.shape == (100, 36) and relevance.shape == (100,)
        assert set(np.unique(relevance)) <= {0, 1, 2}
    assert 2 in {int(v) for q in bed.test_queries for v in q.relevance}
    assert bed.train_X.shape == (2000, 36)
    rows = np.random.default_rng(0).choice(2000, size=10, replace=False)
    for i in rows:
        query, first, second = (int(v) for v in bed.train_triplets[i])
        pair = np.array([first, second])
        np.testing.assert_allclose(bed.train_X[i], np.subtract(*bed.phi(query, pair)), atol=1e-6)
        rel = collection.relevance(query, pair)
        assert bed.train_y[i] == np.sign(int(rel[0]) - int(rel[1]))
    again = load_synthetic_testbed(seed=1, cache_dir=synthetic_cache, **SYNTHETIC_SMALL)
    np.testing.assert_array_equal(again.train_X, bed.train_X)
