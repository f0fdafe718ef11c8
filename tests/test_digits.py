"""The digits CBIR test bed: shapes, names, triplet rows consistent with phi, splits."""

from __future__ import annotations

import numpy as np
import pytest

from rankstream.simulators.cbir_testbed import build_cbir_testbed, fold_split
from rankstream.simulators.digits import digit_descriptors, load_digits_testbed

SMALL = {"train_rows": 3_000, "max_val_queries": 12, "max_test_queries": 10}


@pytest.fixture(scope="module")
def testbed():
    return load_digits_testbed(seed=3, **SMALL)


def test_shapes_and_names(testbed) -> None:
    assert len(testbed.feature_names) == 36 == len(set(testbed.feature_names))
    assert testbed.feature_names[0] == "raw_pixels:euclidean"
    assert testbed.train_X.shape == (3_000, 36)
    assert testbed.train_y.shape == (3_000,)
    assert set(np.unique(testbed.train_y)) == {-1.0, 1.0}
    assert testbed.train_phi.shape[1] == 36
    assert testbed.query_counts == {"train": 1077, "val": 12, "test": 10}
    for phi, relevance in testbed.val_queries + testbed.test_queries:
        assert phi.shape == (1796, 36) and relevance.shape == (1796,)
        assert np.all(np.isfinite(phi))
        assert set(np.unique(relevance)) == {0, 1}


def test_triplet_rows_are_phi_differences(testbed) -> None:
    _, labels = digit_descriptors()
    rows = np.random.default_rng(0).choice(len(testbed.train_y), size=25, replace=False)
    for i in rows:
        query, first, second = testbed.train_triplets[i]
        phi = testbed.phi(int(query), np.array([first, second]))
        np.testing.assert_allclose(testbed.train_X[i], phi[0] - phi[1], rtol=1e-9, atol=1e-12)
        # y = +1 exactly when the first image is the relevant one
        first_relevant = labels[first] == labels[query]
        assert first_relevant != (labels[second] == labels[query])
        assert testbed.train_y[i] == (1.0 if first_relevant else -1.0)
        assert query in testbed.train_query_ids


def test_every_relevant_image_is_used_when_the_budget_allows() -> None:
    descriptors, labels = digit_descriptors()
    subset = {name: matrix[:300] for name, matrix in descriptors.items()}
    labels = labels[:300]
    bed = build_cbir_testbed("digits-300", subset, labels, train_rows=180 * 45, max_test_queries=1)
    assert bed.query_counts == {"train": 180, "val": 60, "test": 1}
    query = bed.train_query_ids[0]
    mine = bed.train_triplets[bed.train_triplets[:, 0] == query]
    used = set(mine[:, 1]) | set(mine[:, 2])
    relevant = set(np.flatnonzero(labels == labels[query])) - {query}
    assert relevant <= used


def test_splits_are_disjoint_folds(testbed) -> None:
    train, val, test = fold_split(np.arange(1797), np.random.default_rng(3), None, None)
    assert not (set(train) & set(val) or set(train) & set(test) or set(val) & set(test))
    assert train.size + val.size + test.size == 1797
    assert abs(val.size - 1797 / 5) < 1 and abs(test.size - 1797 / 5) < 1
    # the test bed with the same seed takes its queries from these folds
    np.testing.assert_array_equal(testbed.train_query_ids, train)
    assert set(testbed.val_query_ids) <= set(val) and set(testbed.test_query_ids) <= set(test)


def test_deterministic_from_seed(testbed) -> None:
    again = load_digits_testbed(seed=3, **SMALL)
    np.testing.assert_array_equal(testbed.train_X, again.train_X)
    np.testing.assert_array_equal(testbed.train_y, again.train_y)
    np.testing.assert_array_equal(testbed.test_query_ids, again.test_query_ids)
    other = load_digits_testbed(seed=4, **SMALL)
    assert not np.array_equal(testbed.test_query_ids, other.test_query_ids)


def test_bad_arguments_raise() -> None:
    descriptors, labels = digit_descriptors()
    with pytest.raises(ValueError, match="train_rows"):
        build_cbir_testbed("digits", descriptors, labels, train_rows=0)
    with pytest.raises(ValueError, match="labels"):
        build_cbir_testbed("digits", descriptors, labels[:-1])
