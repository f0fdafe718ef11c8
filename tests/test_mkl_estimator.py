"""RankMKL as a scikit-learn estimator: labels -> pairs, clone, pipelines, grid search."""

from __future__ import annotations

import numpy as np
import pytest
import sklearn
from sklearn.base import clone
from sklearn.model_selection import GridSearchCV, GroupKFold, KFold
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import MinMaxScaler

from rankstream.ranking.metrics import pairwise_accuracy
from rankstream.ranking.mkl import RankMKL, concat_groups
from rankstream.ranking.pairs import check_pairs, preference_pairs, sample_pairs


def grouped_data(n: int, seed: int) -> tuple[np.ndarray, np.ndarray, tuple[int, ...]]:
    """Two non-negative groups: the first carries the graded target, the second is noise."""
    rng = np.random.default_rng(seed)
    signal, noise = rng.random((n, 3)), rng.random((n, 4))
    grade = np.digitize(signal[:, 0] + 0.5 * signal[:, 1], [0.4, 0.8, 1.2])
    return np.hstack([signal, noise]), grade.astype(float), (3, 4)


def test_preference_pairs_follow_the_labels_within_each_query():
    y = np.array([1.0, 3.0, 3.0, 0.0, 2.0])
    pairs = preference_pairs(y)
    expected = {(i, j) for i in range(5) for j in range(5) if y[i] > y[j]}
    assert {tuple(p) for p in pairs.tolist()} == expected and len(pairs) == len(expected)
    query = np.array([5, 5, 9, 9, 9])
    within = preference_pairs(y, query)
    assert {tuple(p) for p in within.tolist()} == {(1, 0), (2, 3), (2, 4), (4, 3)}
    with pytest.raises(ValueError, match="one id per label"):
        preference_pairs(y, query[:3])
    with pytest.raises(ValueError, match="NaN"):
        preference_pairs([1.0, np.nan])


def test_sample_pairs_is_uniform_reproducible_and_keeps_order():
    pairs = preference_pairs(np.arange(30.0))
    a = sample_pairs(pairs, 50, np.random.default_rng(3))
    b = sample_pairs(pairs, 50, np.random.default_rng(3))
    np.testing.assert_array_equal(a, b)
    assert len(a) == 50 and len(np.unique(a, axis=0)) == 50
    assert np.all(np.diff(np.flatnonzero((pairs[:, None] == a[None]).all(-1).any(1))) > 0)
    assert sample_pairs(pairs, None, np.random.default_rng(0)) is pairs
    assert check_pairs(a, 30).dtype == np.int64


def test_fit_on_labels_is_fit_pairs_on_the_pairs_the_labels_imply():
    X, y, sizes = grouped_data(50, seed=1)
    from_labels = RankMKL(group_sizes=sizes, C=3.0).fit(X, y)
    from_pairs = RankMKL(group_sizes=sizes, C=3.0).fit_pairs(X, preference_pairs(y))
    groups = RankMKL.from_groups([X[:, :3], X[:, 3:]], preference_pairs(y), C=3.0)
    for other in (from_pairs, groups):
        np.testing.assert_array_equal(other.weights_, from_labels.weights_)
        np.testing.assert_array_equal(other.decision_function(X), from_labels.decision_function(X))
    assert from_labels.n_pairs_ == len(preference_pairs(y))
    assert groups.get_params()["group_sizes"] == sizes
    np.testing.assert_array_equal(concat_groups([X[:, :3], X[:, 3:]])[0], X)


def test_max_pairs_subsamples_reproducibly_from_random_state():
    X, y, sizes = grouped_data(60, seed=2)
    a = RankMKL(group_sizes=sizes, max_pairs=200, random_state=4).fit(X, y)
    b = RankMKL(group_sizes=sizes, max_pairs=200, random_state=4).fit(X, y)
    assert a.n_pairs_ == 200
    np.testing.assert_array_equal(a.decision_function(X), b.decision_function(X))
    c = RankMKL(group_sizes=sizes, max_pairs=200, random_state=5).fit(X, y)
    assert not np.array_equal(a.decision_function(X), c.decision_function(X))


def test_score_is_pairwise_accuracy_on_the_implied_pairs():
    X, y, sizes = grouped_data(80, seed=3)
    model = RankMKL(group_sizes=sizes, kernels=["linear", "chi2"], C=10.0).fit(X[:50], y[:50])
    expected = pairwise_accuracy(model.decision_function(X[50:]), preference_pairs(y[50:]))
    assert model.score(X[50:], y[50:]) == expected > 0.8
    assert model.weights_[0] > model.weights_[1]
    query = np.repeat([0, 1, 2], 10)
    within = pairwise_accuracy(model.decision_function(X[50:]), preference_pairs(y[50:], query))
    assert model.score(X[50:], y[50:], query_id=query) == within
    with pytest.raises(ValueError, match="every label is equal"):
        model.score(X[50:], np.ones(30))


def test_clone_pipeline_and_grid_search_select_by_pairwise_accuracy():
    X, y, sizes = grouped_data(90, seed=4)
    X = X * 7.0 - 2.0  # a scaler's job: chi2 needs non-negative inputs
    model = RankMKL(group_sizes=sizes, C=0.5)
    assert clone(model).get_params() == model.get_params()
    pipe = make_pipeline(MinMaxScaler(clip=True), model)
    # a 50x sharper chi2 kernel than the default memorises the training points
    search = GridSearchCV(pipe, {"rankmkl__gamma_scale": [50.0, 0.5]}, cv=KFold(3))
    search.fit(X[:60], y[:60])
    assert search.best_params_ == {"rankmkl__gamma_scale": 0.5}
    sharp, smooth = search.cv_results_["mean_test_score"]
    assert smooth > sharp + 0.1 and smooth > 0.9
    held_out = search.score(X[60:], y[60:])
    fitted = search.best_estimator_
    assert held_out == pairwise_accuracy(fitted.decision_function(X[60:]), preference_pairs(y[60:]))


def test_query_ids_reach_fit_and_score_through_metadata_routing():
    """Pairs never cross queries: with routing, GridSearchCV hands query_id to both."""
    X, y, sizes = grouped_data(96, seed=5)
    query = np.repeat(np.arange(8), 12)
    seen: list[tuple[str, int]] = []

    class Recording(RankMKL):
        def fit(self, X, y, query_id=None):
            seen.append(("fit", len(np.unique(query_id))))
            return super().fit(X, y, query_id=query_id)

        def score(self, X, y, query_id=None):
            seen.append(("score", len(np.unique(query_id))))
            return super().score(X, y, query_id=query_id)

    with sklearn.config_context(enable_metadata_routing=True):
        ranker = Recording(group_sizes=sizes).set_fit_request(query_id=True)
        ranker = ranker.set_score_request(query_id=True)
        search = GridSearchCV(ranker, {"C": [0.1, 1.0]}, cv=GroupKFold(4))
        search.fit(X, y, query_id=query, groups=query)
    assert ("fit", 6) in seen and ("score", 2) in seen  # 4 folds: 6 queries fit, 2 scored
    fold = Recording(group_sizes=sizes, C=search.best_params_["C"])
    train = query < 6
    fold.fit(X[train], y[train], query_id=query[train])
    expected = pairwise_accuracy(
        fold.decision_function(X[~train]), preference_pairs(y[~train], query[~train])
    )
    assert fold.score(X[~train], y[~train], query_id=query[~train]) == expected
