"""Choosing cMDS-DML's settings: staged tol runs, the shared validation loop, CMDSDMLCV."""

from __future__ import annotations

import numpy as np
import pytest
from sklearn.base import clone
from sklearn.model_selection import GridSearchCV
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import StandardScaler

from rankstream.ranking.dml import CMDSDML, CMDSDMLCV, LDMLR, OrdinalKNNRegressor
from rankstream.ranking.dml.cmds_dml_cv import BETAS, MUS, TOLS, default_n_components
from rankstream.ranking.dml.edm import resolve_beta
from rankstream.ranking.dml.model_selection import (
    PerLabelShuffleSplit,
    best_setting,
    embedding_dimension,
    grid_points,
    knn_mae,
    validation_maes,
)
from rankstream.ranking.metrics import mae


def ordinal_data(n_per_label: int = 12, d: int = 8, levels: int = 4, seed: int = 0):
    """Points whose first coordinate carries the label under a wide nuisance direction."""
    rng = np.random.default_rng(seed)
    r = np.repeat(np.arange(levels), n_per_label).astype(float)
    X = rng.normal(size=(r.size, d))
    X[:, 0] = 0.3 * X[:, 0] + r
    X[:, 1] *= 6.0
    return X, r


def test_staged_fit_yields_each_tol_exactly_as_a_separate_fit():
    X, r = ordinal_data()
    tols = [1e-2, 1e-8, 1e-4, 1e-3]
    model = CMDSDML(n_components=2, n_neighbors=3, mu=0.01, max_iter=150)
    staged = [
        (m.components_.copy(), m.c_, m.n_iter_, m.objective_, m.converged_)
        for m in model.staged_fit(X, r, tols)
    ]
    assert len(staged) == 4
    assert [s[2] for s in staged] == sorted([s[2] for s in staged], reverse=True)  # smallest first
    for tol, (components, c, n_iter, objective, converged) in zip(
        sorted(tols), staged, strict=True
    ):
        alone = clone(model).set_params(tol=tol).fit(X, r)
        assert np.array_equal(alone.components_, components) and alone.c_ == c
        assert (alone.n_iter_, alone.objective_, alone.converged_) == (n_iter, objective, converged)
    assert staged[0][2] == 150 and not staged[0][4]  # 1e-8 runs out of iterations
    assert staged[-1][4] and staged[-1][2] < staged[1][2]  # 1e-2 converges early
    with pytest.raises(ValueError, match="tols"):
        next(model.staged_fit(X, r, [-1.0]))


def splits_of(r: np.ndarray, n: int, seed: int = 0) -> list[tuple[np.ndarray, np.ndarray]]:
    return list(PerLabelShuffleSplit(n, random_state=seed).split(None, r))


@pytest.mark.parametrize(
    ("factory", "grid", "staged"),
    [
        (
            lambda **p: CMDSDML(n_components=2, n_neighbors=3, max_iter=200, **p),
            {"mu": (1e-3, 1e-1), "tol": (1e-2, 1e-6, 1e-4), "beta": (0.0, 2.0)},
            "tol",
        ),
        (
            lambda **p: LDMLR(n_neighbors=3, learning_rate=1.5, **p),
            {"mu": (1.0,), "max_iter": (40, 5, 15)},
            "max_iter",
        ),
    ],
)
def test_staged_validation_equals_one_fit_per_setting_in_grid_order(factory, grid, staged):
    X, r = ordinal_data()
    splits = splits_of(r, 2)
    fast = validation_maes(factory, grid, 3, X, r, splits, staged=staged)
    slow = validation_maes(factory, grid, 3, X, r, splits)
    assert fast == slow
    assert [setting for setting, _ in fast] == grid_points(grid)  # tie-break order
    for setting, value in fast[:3]:
        expected = np.mean([knn_mae(factory(**setting).fit(X[a], r[a]), 3, X, r, (a, b))
                            for a, b in splits])  # fmt: skip
        assert value == pytest.approx(expected, abs=1e-15)


def test_knn_mae_is_the_ordinal_knn_regressors_mae():
    X, r = ordinal_data(seed=3)
    fit, held_out = splits_of(r, 1)[0]
    model = CMDSDML(n_components=2, n_neighbors=3).fit(X[fit], r[fit])
    knn = OrdinalKNNRegressor(3, transformer=model).fit(X[fit], r[fit])
    assert knn_mae(model, 3, X, r, (fit, held_out)) == mae(r[held_out], knn.predict(X[held_out]))
    euclid = OrdinalKNNRegressor(3).fit(X[fit], r[fit])
    assert knn_mae(None, 3, X, r, (fit, held_out)) == mae(r[held_out], euclid.predict(X[held_out]))


def test_best_setting_takes_the_first_lowest_and_respects_fixed_keys():
    table = [({"a": 1, "b": 1}, 0.5), ({"a": 1, "b": 2}, 0.3), ({"a": 2, "b": 1}, 0.3)]
    assert best_setting(table) == {"a": 1, "b": 2}
    assert best_setting(table, b=1) == {"a": 2, "b": 1}
    with pytest.raises(ValueError, match="no grid point"):
        best_setting(table, b=3)


def test_per_label_shuffle_split_holds_out_a_share_of_every_label():
    r = np.repeat([0.0, 1.0, 2.0, 3.0], [10, 4, 2, 1])
    splitter = PerLabelShuffleSplit(5, validation_fraction=0.3, random_state=1)
    splits = list(splitter.split(np.zeros((r.size, 1)), r))
    assert len(splits) == splitter.get_n_splits() == 5
    for fit, held_out in splits:
        assert np.intersect1d(fit, held_out).size == 0 and fit.size + held_out.size == r.size
        assert np.bincount(r[held_out].astype(int), minlength=4).tolist() == [3, 1, 1, 0]
    assert not np.array_equal(splits[0][1], splits[1][1])
    again = list(PerLabelShuffleSplit(5, validation_fraction=0.3, random_state=1).split(None, r))
    assert all(np.array_equal(a[1], b[1]) for a, b in zip(splits, again, strict=True))
    with pytest.raises(ValueError, match="every label occurs once"):
        next(splitter.split(None, np.arange(4.0)))
    with pytest.raises(ValueError, match="validation_fraction"):
        PerLabelShuffleSplit(validation_fraction=1.0)


def test_cmds_dml_cv_refits_the_setting_with_the_lowest_validation_mae():
    X, r = ordinal_data(n_per_label=15, seed=4)
    search = CMDSDMLCV(
        n_neighbors=3, mus=(1e-3,), tols=(1e-1, 1e-5), betas=(0.0, 3.0), n_components=(1, 2),
        cv=3, max_iter=200,
    ).fit(X, r)  # fmt: skip
    table = validation_maes(
        lambda **p: CMDSDML(n_neighbors=3, max_iter=200, pca_components=X.shape[1], **p),
        {"mu": (1e-3,), "tol": (1e-1, 1e-5), "beta": (0.0, 3.0), "n_components": (1, 2)},
        3, X, r, splits_of(r, 3),
    )  # fmt: skip
    assert search.cv_results_["params"] == [setting for setting, _ in table]
    np.testing.assert_array_equal(
        search.cv_results_["mean_validation_mae"], [value for _, value in table]
    )
    assert search.best_params_ == best_setting(table)
    assert search.best_mae_ == min(value for _, value in table)
    refit = CMDSDML(n_neighbors=3, max_iter=200, pca_components=X.shape[1], **search.best_params_)
    refit.fit(X, r)
    np.testing.assert_array_equal(search.components_, refit.components_)
    np.testing.assert_array_equal(search.transform(X), refit.transform(X))


def test_cmds_dml_cv_defaults_are_the_evals_grids_and_hold_the_label_edm():
    assert CMDSDMLCV().get_params()["pca_components"] == "auto"
    defaults = CMDSDMLCV()
    assert (defaults.mus, defaults.tols, defaults.betas) == (MUS, TOLS, BETAS)
    assert [default_n_components(m) for m in (2, 5, 8)] == [(3,), (3, 4), (3, 7)]
    assert [embedding_dimension(m) for m in (2, 3, 5, 8)] == [3, 3, 4, 7]
    for m in (5, 8):  # every beta is Theorem 1-admissible for labels on a line
        assert all(resolve_beta(np.arange(float(m)), beta) == beta for beta in BETAS)


@pytest.mark.parametrize(
    ("params", "message"),
    [
        ({"tols": ()}, "tol candidates"),
        ({"betas": (-1.0,)}, "beta candidates"),
        ({"n_components": 0}, "n_components must"),
        ({"pca_components": "all"}, "pca_components must"),
        ({"cv": [(np.arange(40), np.array([], dtype=int))]}, "validation split is empty"),
        ({"cv": [(np.arange(2), np.arange(2, 48))]}, "n_neighbors"),
    ],
)
def test_cmds_dml_cv_bad_settings_raise(params, message):
    X, r = ordinal_data()
    with pytest.raises(ValueError, match=message):
        CMDSDMLCV(n_neighbors=3, **params).fit(X, r)


def test_cmds_dml_cv_in_a_pipeline_and_a_grid_search():
    X, r = ordinal_data(n_per_label=15, seed=5)
    small = CMDSDMLCV(n_neighbors=3, mus=(1e-3,), tols=(1e-2, 1e-4), betas=(0.0,), cv=2)
    pipe = make_pipeline(StandardScaler(), OrdinalKNNRegressor(3, transformer=small))
    search = GridSearchCV(
        pipe, {"ordinalknnregressor__n_neighbors": [3, 5]}, scoring="neg_mean_absolute_error", cv=2
    )
    search.fit(X, r)
    Xt, rt = ordinal_data(n_per_label=15, seed=6)
    assert mae(rt, search.predict(Xt)) < mae(rt, OrdinalKNNRegressor(3).fit(X, r).predict(Xt))
