"""Uni-Con, Best-Fea and RankSVM: what they compute, state round trips, bad input."""

from __future__ import annotations

import json

import numpy as np
import pytest

from rankstream.ranking.baselines import BestFea, RankSVM, UniCon
from rankstream.ranking.metrics import pairwise_accuracy
from rankstream.ranking.scaling import Standardizer


def restore(model):
    meta, arrays = model.to_state()
    return type(model).from_state(json.loads(json.dumps(meta)), arrays)


def test_unicon_is_the_sum_of_standardized_phi():
    Phi = np.array([[1.0, 10.0, 3.0], [3.0, 30.0, 3.0], [2.0, 50.0, 3.0]])
    model = UniCon().fit(Phi)
    # column z-scores: [-1.2247, 1.2247, 0], [-1.2247, 0, 1.2247], [0, 0, 0] (std 1)
    expected = np.array([-1.0, 1.0, 0.0]) * np.sqrt(1.5) + np.array([-1.0, 0.0, 1.0]) * np.sqrt(1.5)
    np.testing.assert_allclose(model.score(Phi), expected, atol=1e-12)
    np.testing.assert_array_equal(model.weights, np.ones(3))
    np.testing.assert_array_equal(restore(model).score(Phi), model.score(Phi))
    shared = UniCon(scaler=model.scaler_)
    np.testing.assert_array_equal(shared.score(Phi), model.score(Phi))


def make_queries(n_queries: int, informative: int, sign: float, seed: int = 0):
    rng = np.random.default_rng(seed)
    queries = []
    for _ in range(n_queries):
        rel = rng.integers(0, 3, 30).astype(float)
        Phi = rng.standard_normal((30, 5))
        Phi[:, informative] = sign * (rel + 0.3 * rng.standard_normal(30))
        Phi[:, (informative + 1) % 5] = 0.3 * rel + rng.standard_normal(30)  # weaker
        queries.append((Phi, rel))
    return queries


@pytest.mark.parametrize(("informative", "sign"), [(2, 1.0), (4, -1.0)])
def test_bestfea_picks_the_best_signed_dimension(informative, sign):
    model = BestFea().fit(make_queries(8, informative, sign))
    assert model.feature_ == informative
    expected = np.zeros(5)
    expected[informative] = sign
    np.testing.assert_array_equal(model.weights, expected)
    Phi, _ = make_queries(1, informative, sign, seed=9)[0]
    np.testing.assert_array_equal(model.score(Phi), sign * Phi[:, informative])
    np.testing.assert_array_equal(restore(model).weights, model.weights)


def test_bestfea_bad_input():
    with pytest.raises(ValueError, match="at least one"):
        BestFea().fit([])
    with pytest.raises(ValueError, match=r"queries\[1\] Phi has 4 columns"):
        BestFea().fit([(np.ones((3, 5)), [0, 1, 0]), (np.ones((3, 4)), [0, 1, 0])])
    with pytest.raises(ValueError, match=r"queries\[0\] relevance"):
        BestFea().fit([(np.ones((3, 5)), [0, -1, 0])])
    with pytest.raises(ValueError, match="not fitted"):
        BestFea().score(np.ones((2, 5)))


def pairs_from_truth(n: int, d: int, seed: int):
    rng = np.random.default_rng(seed)
    truth = rng.standard_normal(d)
    X = rng.standard_normal((n, d))
    y = np.where(X @ truth + 0.3 * rng.standard_normal(n) > 0, 1.0, -1.0)
    return X, y, truth


def test_ranksvm_converges_to_liblinears_l2_loss_optimum():
    """Same objective as liblinear's primal L2-loss SVM (no intercept): same optimum."""
    import warnings

    from sklearn.svm import LinearSVC

    X, y, truth = pairs_from_truth(3000, 8, seed=1)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a ConvergenceWarning would fail the test
        model = RankSVM(C=0.5).fit(X, y)
    assert 1 <= model.n_iter_ < model.max_iter
    # liblinear needs both classes: flip alternate rows, (x, y) -> (-x, -y), same objective
    flip = np.where(np.arange(len(y)) % 2 == 0, 1.0, -1.0)
    reference = LinearSVC(C=0.5, loss="squared_hinge", dual=False, fit_intercept=False, tol=1e-8)
    reference.fit(X * flip[:, None], y * flip)
    w_ref = reference.coef_[0]
    assert model.objective(X, y) <= model.objective(X, y, w_ref) + 1e-9
    np.testing.assert_allclose(model.weights, w_ref, rtol=1e-4, atol=1e-5)
    # and it ranks held-out items as well as the reference does
    Phi = np.random.default_rng(7).standard_normal((60, 8))
    order = np.argsort(-(Phi @ truth))
    above, below = np.triu_indices(60, k=1)
    pairs = np.stack([order[above], order[below]], axis=1)
    ours = pairwise_accuracy(model.score(Phi), pairs)
    assert ours > 0.9
    assert abs(ours - pairwise_accuracy(Phi @ w_ref, pairs)) < 0.01


def test_ranksvm_warns_when_the_step_budget_is_too_small():
    from sklearn.exceptions import ConvergenceWarning

    X, y, _ = pairs_from_truth(500, 5, seed=8)
    with pytest.warns(ConvergenceWarning, match="1 Newton steps"):
        model = RankSVM(C=10.0, max_iter=1).fit(X, y)
    assert model.n_iter_ == 1


def test_ranksvm_learns_the_order_even_when_all_labels_agree():
    X, y, truth = pairs_from_truth(400, 6, seed=2)
    X = X * y[:, None]  # every pair now says p1 ranks above p2
    model = RankSVM(C=0.05).fit(X, np.ones(400))
    cosine = model.weights @ truth / np.linalg.norm(model.weights) / np.linalg.norm(truth)
    assert cosine > 0.95
    Phi = np.random.default_rng(3).standard_normal((40, 6))
    order = np.argsort(-(Phi @ truth))
    above, below = np.triu_indices(40, k=1)
    pairs = np.stack([order[above], order[below]], axis=1)
    assert pairwise_accuracy(model.score(Phi), pairs) > 0.95


def test_ranksvm_with_scaler_round_trip():
    X, y, _ = pairs_from_truth(100, 4, seed=4)
    scaler = Standardizer().fit(np.random.default_rng(5).uniform(0, 5, (50, 4)))
    model = RankSVM(C=0.1, scaler=scaler).fit(X, y)
    back = restore(model)
    Phi = np.random.default_rng(6).standard_normal((7, 4))
    np.testing.assert_array_equal(back.score(Phi), model.score(Phi))
    assert back.C == 0.1
    assert back.objective(X, y) == model.objective(X, y)


@pytest.mark.parametrize(
    ("X", "y", "message"),
    [
        (np.ones((1, 3)), [1], "at least 2"),
        (np.array([[1.0, np.nan], [0.0, 1.0]]), [1, -1], "row 0"),
        (np.ones((2, 2)), [1, 3], r"y\[1\]"),
        (np.array([[1.0, np.inf], [0.0, 1.0]]), [1, -1], "row 0"),
    ],
)
def test_ranksvm_bad_input(X, y, message):
    with pytest.raises(ValueError, match=message):
        RankSVM().fit(X, y)


def ranking_pair_differences(seed: int) -> tuple[np.ndarray, np.ndarray]:
    """phi_i - phi_j for every graded preference i above j within each of 30 queries."""
    from rankstream.ranking.pairs import preference_pairs

    rng = np.random.default_rng(seed)
    query = np.repeat(np.arange(30), 12)
    phi = rng.standard_normal((query.size, 6))
    grade = np.digitize(phi @ rng.standard_normal(6) + 0.8 * rng.standard_normal(query.size),
                        [-1.0, 0.0, 1.0])  # fmt: skip
    pairs = preference_pairs(grade, query)
    return phi[pairs[:, 0]] - phi[pairs[:, 1]], np.ones(len(pairs))


@pytest.mark.parametrize("C", [0.001, 0.1, 10.0])
def test_ranksvm_is_liblinears_squared_hinge_solution_on_ranking_pairs(C):
    """Same objective as LinearSVC(loss="squared_hinge", fit_intercept=False) on the pair
    differences (1/2 |w|^2 + C sum max(0, 1 - y w.x)^2): the same minimiser."""
    from sklearn.svm import LinearSVC

    X, y = ranking_pair_differences(seed=int(C * 1000))
    model = RankSVM(C=C, tol=1e-10).fit(X, y)
    # liblinear needs both classes: negate alternate pairs, (x, y) -> (-x, -y), same objective
    flip = np.where(np.arange(len(y)) % 2 == 0, 1.0, -1.0)
    reference = LinearSVC(C=C, loss="squared_hinge", dual=False, fit_intercept=False,
                          tol=1e-12, max_iter=100_000).fit(X * flip[:, None], y * flip)  # fmt: skip
    w_ref = reference.coef_[0]
    assert model.objective(X, y) == pytest.approx(model.objective(X, y, w_ref), rel=1e-10)
    np.testing.assert_allclose(model.weights, w_ref, rtol=1e-6, atol=1e-9)
    assert (model.score(X) > 0).mean() > 0.8  # the pairs' order is learned, not a constant
