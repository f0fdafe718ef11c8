"""cMDS-DML and LDMLR: the paper's equations checked against their definitions."""

from __future__ import annotations

import json

import numpy as np
import pytest

from rankstream.ranking.dml import CMDSDML, LDMLR, OrdinalKNNRegressor
from rankstream.ranking.dml.cmds_dml import CMDSObjective
from rankstream.ranking.dml.edm import (
    classical_mds,
    double_centered,
    embed_labels,
    label_edm,
    resolve_beta,
    squared_distances,
    theorem1_mu0,
)
from rankstream.ranking.dml.ldmlr import LDMLRObjective, project_psd, weighted_scatter
from rankstream.ranking.dml.neighbors import pair_differences, target_neighbor_pairs


def ordinal_data(n_per_label: int = 12, d: int = 6, levels: int = 4, seed: int = 0):
    """Points whose first coordinate carries the label; the rest is noise."""
    rng = np.random.default_rng(seed)
    r = np.repeat(np.arange(levels), n_per_label).astype(float)
    X = rng.normal(size=(r.size, d))
    X[:, 0] = 0.3 * X[:, 0] + r
    return X, r


def test_eq8_entries():
    r = np.array([0.0, 0.0, 1.0, 3.0])
    D = label_edm(r, beta=0.5)
    assert D[0, 1] == 0.0
    assert D[0, 2] == pytest.approx((1 + 0.5) ** 2)
    assert D[2, 3] == pytest.approx((2 + 0.5) ** 2)
    np.testing.assert_array_equal(D, D.T)


def test_theorem1_condition():
    levels = np.array([0.0, 1.0, 2.0, 5.0])
    mu0 = theorem1_mu0(levels)
    assert mu0 == 0.0  # labels on a line: Delta_bar^(1/2) is itself an EDM
    for beta in (0.0, 1.0, 3.0):  # beta >= -4 mu0: eq. (8) is an EDM (B(D) is PSD)
        B = double_centered(label_edm(np.repeat(levels, 3), beta))
        assert np.linalg.eigvalsh(B).min() > -1e-9
    assert resolve_beta(levels, None) == 1.0
    with pytest.raises(ValueError, match="Theorem 1"):
        resolve_beta(levels, -0.5)
    # ... and the violation is real: with beta = -0.5 eq. (8) is not an EDM.
    B = double_centered(label_edm(levels, -0.5))
    assert np.linalg.eigvalsh(B).min() < -1e-6


@pytest.mark.parametrize("counts", [(3, 3, 3, 3), (2, 5, 1, 4)])
def test_algorithm1_matches_direct_cmds(counts):
    r = np.repeat([0.0, 1.0, 2.0, 4.0], counts)
    beta = 1.0
    D = label_edm(r, beta)
    s = 3  # m - 1 = 3 dimensions hold the 4 label points exactly
    Y_fast = embed_labels(r, beta, s)
    Y_direct = classical_mds(D, s)
    np.testing.assert_allclose(squared_distances(Y_fast), D, atol=1e-9)
    np.testing.assert_allclose(squared_distances(Y_direct), D, atol=1e-9)
    np.testing.assert_allclose(Y_fast.sum(axis=0), 0.0, atol=1e-9)  # Remark 2


def test_gradient_matches_finite_differences():
    X, r = ordinal_data(n_per_label=5, d=4)
    Y = embed_labels(r, 1.0, 2)
    V = pair_differences(X, target_neighbor_pairs(X, r, 3))
    objective = CMDSObjective(X, Y, V, mu=0.3)
    rng = np.random.default_rng(1)
    theta = rng.normal(size=2 * 4 + 1)
    _, grad = objective.value_and_grad(theta)
    eps = 1e-6
    numeric = np.array(
        [
            (objective.value(theta + eps * e) - objective.value(theta - eps * e)) / (2 * eps)
            for e in np.eye(theta.size)
        ]
    )
    np.testing.assert_allclose(grad, numeric, rtol=1e-5, atol=1e-6)
    # ... and the value is eq. (10) written out term by term.
    L, c = objective.unpack(theta)
    direct = 0.5 * np.sum((X @ L.T - c * Y) ** 2) + 0.3 * np.sum(
        (np.sum((V @ L.T) ** 2, axis=1) - np.sum(V**2, axis=1)) ** 2
    )
    assert objective.value(theta) == pytest.approx(direct)


def test_target_neighbors_share_labels_and_are_nearest():
    X, r = ordinal_data(n_per_label=6, d=3)
    pairs = target_neighbor_pairs(X, r, 2)
    assert pairs.shape == (r.size * 2, 2)
    assert np.all(r[pairs[:, 0]] == r[pairs[:, 1]])
    assert np.all(pairs[:, 0] != pairs[:, 1])
    i = 0
    same = np.flatnonzero((r == r[i]) & (np.arange(r.size) != i))
    expected = same[np.argsort(np.linalg.norm(X[same] - X[i], axis=1))[:2]]
    np.testing.assert_array_equal(pairs[pairs[:, 0] == i, 1], expected)


def test_cmds_dml_decreases_objective_and_learns_the_ordinal_direction():
    X, r = ordinal_data()
    model = CMDSDML(n_components=2, n_neighbors=3, mu=0.01).fit(X, r)
    assert model.components_.shape == (2, X.shape[1])
    assert np.all(np.isfinite(model.components_))
    A = model.get_mahalanobis_matrix()
    np.testing.assert_allclose(A, model.components_.T @ model.components_)
    # The label lives in feature 0; the learned metric must weight it most.
    assert np.argmax(np.diag(A)) == 0
    knn = OrdinalKNNRegressor(3, CMDSDML(n_components=2, n_neighbors=3, mu=0.01)).fit(X, r)
    Xt, rt = ordinal_data(seed=7)
    euclid = OrdinalKNNRegressor(3).fit(X, r)
    assert np.abs(knn.predict(Xt) - rt).mean() < np.abs(euclid.predict(Xt) - rt).mean()


def test_ldmlr_iterates_stay_psd_and_h_matches_definition():
    X, r = ordinal_data(n_per_label=6, d=5)
    pairs = target_neighbor_pairs(X, r, 3)
    V = pair_differences(X, pairs)
    objective = LDMLRObjective(weighted_scatter(X, r, 1.0), V, mu=2.0)
    A = np.random.default_rng(0).normal(size=(5, 5))
    A = A @ A.T
    omega = np.where(r[:, None] != r[None, :], (np.abs(r[:, None] - r[None, :]) + 1.0), 0.0)
    diff = X[:, None, :] - X[None, :, :]
    dA = np.einsum("ijk,kl,ijl->ij", diff, A, diff)
    excess = np.einsum("pk,kl,pl->p", V, A, V) - np.sum(V**2, axis=1)
    assert objective.value(A) == pytest.approx(-np.sum(omega * dA) + 2.0 * excess @ excess)
    step = 1.0 / objective.curvature()
    A = np.eye(5)
    for _ in range(20):
        A = project_psd(A - step * objective.gradient(A))
        assert np.linalg.eigvalsh(A).min() >= -1e-10
    model = LDMLR(n_neighbors=3, mu=2.0, max_iter=20).fit(X, r)
    assert np.linalg.eigvalsh(model.metric_).min() >= -1e-10
    assert np.all(np.isfinite(model.components_))


def test_ldmlr_staged_fit_equals_separate_fits():
    """Each stage of one run is the model `fit` gives with that T_max (the eval's shortcut)."""
    X, r = ordinal_data(n_per_label=6, d=5)
    stages = [0, 3, 10, 25]
    staged = [
        (model.n_iter_, model.components_.copy(), model.objective_)
        for model in LDMLR(n_neighbors=3, mu=2.0, learning_rate=1.5).staged_fit(X, r, stages)
    ]
    assert [n for n, _, _ in staged] == stages
    for stage, (_, components, objective) in zip(stages, staged, strict=True):
        alone = LDMLR(n_neighbors=3, mu=2.0, learning_rate=1.5, max_iter=stage).fit(X, r)
        assert np.array_equal(alone.components_, components)
        assert alone.objective_ == objective
    with pytest.raises(ValueError, match="stages"):
        next(LDMLR().staged_fit(X, r, []))


def test_project_psd_is_the_nearest_psd_matrix():
    M = np.diag([3.0, -2.0, 0.5])
    np.testing.assert_allclose(project_psd(M), np.diag([3.0, 0.0, 0.5]))


@pytest.mark.parametrize("estimator", [CMDSDML, LDMLR])
def test_bad_inputs_raise(estimator):
    X, r = ordinal_data(n_per_label=4, d=3)
    with pytest.raises(ValueError, match="single value"):
        estimator(n_neighbors=2).fit(X, np.zeros(len(r)))
    with pytest.raises(ValueError, match="n_neighbors"):
        estimator(n_neighbors=5).fit(X[::4], r[::4])
    bad = X.copy()
    bad[2, 1] = np.nan
    with pytest.raises(ValueError, match="NaN"):
        estimator(n_neighbors=2).fit(bad, r)
    bad_r = r.copy()
    bad_r[0] = np.inf
    with pytest.raises(ValueError, match=r"NaN|infinity|Inf"):
        estimator(n_neighbors=2).fit(X, bad_r)
    with pytest.raises(ValueError):
        estimator(n_neighbors=2).fit(X, r[:-1])


def test_state_round_trip_is_json_and_exact():
    X, r = ordinal_data()
    model = CMDSDML(n_components=2, n_neighbors=3, pca_components=4, mu=0.05).fit(X, r)
    meta, arrays = model.to_state()
    meta = json.loads(json.dumps(meta))
    restored = CMDSDML.from_state(meta, {k: v.copy() for k, v in arrays.items()})
    np.testing.assert_array_equal(restored.transform(X), model.transform(X))
    assert restored.get_params() == model.get_params()
    with pytest.raises(ValueError, match="kind"):
        CMDSDML.from_state({**meta, "kind": "rankmkl"}, arrays)
    with pytest.raises(ValueError, match="NaN"):
        CMDSDML.from_state(meta, {**arrays, "components": arrays["components"] * np.nan})


def test_ldmlr_objective_is_unbounded_below_when_target_pairs_do_not_span():
    """Why LDMLR's T_max is validated: with n <= d, h has no minimiser.

    Along the projector B onto the complement of the target-pair differences the penalty
    is constant and -<S, B> < 0, so h(I + t B) falls linearly in t.
    """
    rng = np.random.default_rng(0)
    r = np.repeat([0.0, 1.0, 2.0], 4)
    Z = rng.normal(size=(12, 20))
    Z -= Z.mean(axis=0)
    V = pair_differences(Z, target_neighbor_pairs(Z, r, 2))
    objective = LDMLRObjective(weighted_scatter(Z, r, 1.0), V, mu=1.0)
    _, singular, vt = np.linalg.svd(V, full_matrices=True)
    rank = int(np.sum(singular > 1e-10))
    B = vt[rank:].T @ vt[rank:]
    assert rank < Z.shape[1] and np.sum(objective.scatter * B) > 0
    values = [objective.value(np.eye(20) + t * B) for t in (0.0, 1e3, 1e6)]
    assert values[0] > values[1] > values[2]
    assert values[2] - values[1] == pytest.approx(
        (1e6 - 1e3) / 1e3 * (values[1] - values[0]), rel=1e-6
    )
