"""RankMKL: the n-dimensional Q products, the dual solver, GMKL gradients, state, inputs."""

from __future__ import annotations

import json

import numpy as np
import pytest
from scipy.optimize import minimize
from sklearn.exceptions import NotFittedError

from rankstream.ranking.metrics import pairwise_accuracy
from rankstream.ranking.mkl import RankMKL
from rankstream.ranking.mkl.base_kernels import chi2_distances
from rankstream.ranking.mkl.solver import (
    combine,
    fit_mkl,
    incidence_matrix,
    mkl_gradient,
    pair_signs,
    q_product,
    solve_rank_svm,
)


def ranked_pairs(score: np.ndarray, n_pairs: int, rng: np.random.Generator) -> np.ndarray:
    i, j = rng.integers(0, score.shape[0], size=(2, 4 * n_pairs))
    keep = score[i] != score[j]
    i, j = i[keep][:n_pairs], j[keep][:n_pairs]
    return np.where((score[i] > score[j])[:, None], np.stack([i, j], 1), np.stack([j, i], 1))


def random_psd(n: int, rng: np.random.Generator) -> np.ndarray:
    B = rng.normal(size=(n, n // 2))
    return B @ B.T / n


def test_q_product_equals_explicit_eq5():
    rng = np.random.default_rng(1)
    n, p = 12, 30
    K = random_psd(n, rng)
    pairs = ranked_pairs(rng.normal(size=n), p, rng)
    y = pair_signs(p)
    Q = np.empty((p, p))  # eq. (5), one entry at a time, signs of eq. (3)
    for a, (i, j) in enumerate(pairs):
        for b, (k, m) in enumerate(pairs):
            Q[a, b] = K[i, k] + K[j, m] - K[i, m] - K[j, k]
    A = incidence_matrix(pairs, n, y)
    AKA = (A @ K @ A.T) * np.outer(y, y)
    np.testing.assert_allclose(AKA, Q, atol=1e-12)
    beta = rng.random(p)
    np.testing.assert_allclose(q_product(K, A, y, beta), Q @ beta, atol=1e-12)


def test_dual_coordinate_descent_matches_a_generic_box_qp_solver():
    rng = np.random.default_rng(2)
    n, p, C = 15, 40, 0.5
    K = random_psd(n, rng)
    pairs = ranked_pairs(rng.normal(size=n), p, rng)
    y = pair_signs(p)
    A = incidence_matrix(pairs, n, y)
    Q = (A @ K @ A.T) * np.outer(y, y)
    ref = minimize(
        lambda b: 0.5 * b @ Q @ b - b.sum(),
        np.zeros(p),
        jac=lambda b: Q @ b - 1.0,
        bounds=[(0.0, C)] * p,
        method="L-BFGS-B",
        options={"ftol": 1e-14, "gtol": 1e-10, "maxiter": 5000},
    )
    sol = solve_rank_svm(K, pairs, C, tol=1e-8, max_epochs=100_000)
    assert sol.objective == pytest.approx(-ref.fun, rel=1e-6)
    assert sol.beta.min() >= 0.0 and sol.beta.max() <= C
    np.testing.assert_allclose(sol.alpha, A.T @ (y * sol.beta), atol=1e-10)


def test_mkl_gradient_matches_finite_differences_of_the_dual_objective():
    rng = np.random.default_rng(3)
    n, p, C, lam = 14, 35, 0.3, 0.7
    Ks = [random_psd(n, rng) for _ in range(3)]
    pairs = ranked_pairs(rng.normal(size=n), p, rng)
    d = np.array([0.6, 0.3, 0.9])

    def objective(weights: np.ndarray) -> tuple[float, np.ndarray]:
        sol = solve_rank_svm(combine(Ks, weights), pairs, C, tol=1e-11, max_epochs=200_000)
        return sol.objective + 0.5 * lam * weights @ weights, sol.alpha

    _, alpha = objective(d)
    grad = mkl_gradient(Ks, alpha, d, lam)
    h = 1e-5
    for k in range(3):
        e = np.zeros(3)
        e[k] = h
        numeric = (objective(d + e)[0] - objective(d - e)[0]) / (2 * h)
        assert grad[k] == pytest.approx(numeric, rel=1e-4, abs=1e-6)


def test_armijo_steps_decrease_the_mkl_objective():
    rng = np.random.default_rng(4)
    n = 30
    Ks = [random_psd(n, rng) for _ in range(3)]
    pairs = ranked_pairs(rng.normal(size=n), 120, rng)
    start = fit_mkl(Ks, pairs, C=1.0, lam=1.0, max_iter=0)
    end = fit_mkl(Ks, pairs, C=1.0, lam=1.0, max_iter=30)
    assert end.iterations > 0
    assert end.objective < start.objective
    assert (end.weights >= 0).all()


def synthetic_groups(n: int, rng: np.random.Generator):
    informative = rng.random((n, 6))
    noise = [rng.random((n, 8)), rng.random((n, 5))]
    truth = informative[:, 0] + 0.5 * informative[:, 1] ** 2
    return [informative, *noise], truth


def test_informative_kernel_dominates_and_ranks_held_out_points():
    rng = np.random.default_rng(5)
    Xs, truth = synthetic_groups(160, rng)
    train, test = np.arange(100), np.arange(100, 160)
    pairs = ranked_pairs(truth[train], 1500, rng)
    model = RankMKL.from_groups(
        [X[train] for X in Xs], pairs, kernels=["chi2", "chi2", "linear"], C=1.0
    )
    assert model.group_sizes_ == (6, 8, 5) and model.n_features_in_ == 19
    assert (model.weights_ >= 0).all()
    assert model.weights_[0] > model.weights_[1:].sum()  # L2-MKL keeps noise weights > 0
    scores = model.decision_function(np.hstack([X[test] for X in Xs]))
    test_pairs = ranked_pairs(truth[test], 1000, rng)
    assert pairwise_accuracy(scores, test_pairs) > 0.9
    assert model.alpha_.shape[0] == model.support_.shape[0] <= 100
    assert np.all(model.alpha_ != 0)


def test_state_round_trip_scores_identically():
    rng = np.random.default_rng(6)
    Xs, truth = synthetic_groups(60, rng)
    model = RankMKL.from_groups(
        Xs, ranked_pairs(truth, 300, rng), kernels=["chi2", "linear", "chi2"], C=0.5,
        gamma_scale=2.0,
    )  # fmt: skip
    meta, arrays = model.to_state()
    meta = json.loads(json.dumps(meta))
    assert all(isinstance(a, np.ndarray) and a.dtype != object for a in arrays.values())
    restored = RankMKL.from_state(meta, {k: v.copy() for k, v in arrays.items()})
    fresh = rng.random((60, sum(X.shape[1] for X in Xs)))
    np.testing.assert_array_equal(restored.decision_function(fresh), model.decision_function(fresh))
    assert restored.group_sizes_ == model.group_sizes_ and restored.get_params()["C"] == 0.5
    with pytest.raises(ValueError, match="rankmkl"):
        RankMKL.from_state({"kind": "opr"}, arrays)
    arrays["weights"] = -arrays["weights"]
    with pytest.raises(ValueError, match="non-negative"):
        RankMKL.from_state(meta, arrays)


def test_chi2_distances_match_the_definition():
    rng = np.random.default_rng(7)
    X, Y = rng.random((4, 6)), rng.random((3, 6))
    X[0, :2] = 0.0
    Y[1, :2] = 0.0
    expected = np.array(
        [
            [sum((a - b) ** 2 / (a + b) for a, b in zip(x, y, strict=True) if a + b > 0) for y in Y]
            for x in X
        ]
    )
    np.testing.assert_allclose(chi2_distances(X, Y), expected, rtol=1e-10)


@pytest.mark.parametrize(
    ("Xs", "pairs", "message"),
    [
        ([-np.ones((4, 2))], [[0, 1]], "negative"),
        ([np.full((4, 2), np.nan)], [[0, 1]], "NaN"),
        ([np.ones((4, 2))], [[0, 4]], "out of range"),
        ([np.ones((4, 2))], [[2, 2]], "itself"),
        ([np.ones((4, 2))], np.empty((0, 2), dtype=int), "at least one"),
        ([np.ones((4, 2))], [[0, 1, 2]], "shape"),
        ([np.ones((4, 2))], [[0.0, 1.0]], "integer"),
        ([np.ones((4, 2)), np.ones((5, 2))], [[0, 1]], "disagree"),
        ([], [[0, 1]], "non-empty"),
        ([np.ones((4, 2)), np.ones((4, 0))], [[0, 1]], r"Xs\[1\] must be a non-empty"),
    ],
)
def test_bad_input_raises_a_clear_value_error(Xs, pairs, message):
    with pytest.raises(ValueError, match=message):
        RankMKL.from_groups(Xs, np.asarray(pairs), kernels="chi2")


def test_bad_parameters_and_unfitted_use_raise():
    X = np.random.default_rng(8).random((5, 3))
    y = np.arange(5.0)
    with pytest.raises(ValueError, match="C must"):
        RankMKL(C=0.0).fit(X, y)
    with pytest.raises(ValueError, match="unknown kernel"):
        RankMKL(kernels="rbf").fit(X, y)
    with pytest.raises(ValueError, match="add up to 4 columns, but X has 3"):
        RankMKL(group_sizes=(2, 2)).fit(X, y)
    with pytest.raises(ValueError, match="kernels has 3 entries for 2 feature groups"):
        RankMKL(group_sizes=(1, 2), kernels=["chi2"] * 3).fit(X, y)
    with pytest.raises(ValueError, match="max_pairs"):
        RankMKL(max_pairs=0).fit(X, y)
    with pytest.raises(ValueError, match="random_state"):
        RankMKL(random_state=-1).fit(X, y)
    with pytest.raises(ValueError, match="every label is equal"):
        RankMKL().fit(X, np.ones(5))
    with pytest.raises(ValueError, match="within any query"):
        RankMKL().fit(X, y, query_id=np.arange(5))
    with pytest.raises(NotFittedError):
        RankMKL().decision_function(X)
    model = RankMKL(kernels="chi2").fit_pairs(X, [[0, 1], [1, 2]])
    with pytest.raises(ValueError, match="3 features"):
        model.decision_function(X[:, :2])
    with pytest.raises(ValueError, match="negative"):
        model.decision_function(-X)
