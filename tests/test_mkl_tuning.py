"""RankMKL tuning: per-group chi2 bandwidths, the lam / C^3 invariance, inner-solve accuracy."""

from __future__ import annotations

import json

import numpy as np
import pytest

import rankstream.evals.mkl as mkl_eval
from rankstream.evals.mkl import Choice, Method, MKLEvalConfig, cross_validate
from rankstream.ranking.mkl import RankMKL
from rankstream.ranking.mkl.base_kernels import chi2_distances, default_gamma
from rankstream.ranking.mkl.solver import combine, mkl_gradient, solve_rank_svm


def ranked_pairs(score: np.ndarray, n_pairs: int, rng: np.random.Generator) -> np.ndarray:
    i, j = rng.integers(0, score.shape[0], size=(2, 4 * n_pairs))
    keep = score[i] != score[j]
    i, j = i[keep][:n_pairs], j[keep][:n_pairs]
    return np.where((score[i] > score[j])[:, None], np.stack([i, j], 1), np.stack([j, i], 1))


def noisy_groups(n: int, rng: np.random.Generator) -> tuple[list[np.ndarray], np.ndarray]:
    """Two non-negative groups, one informative, and a noisy truth so C binds."""
    informative, noise = rng.random((n, 4)), rng.random((n, 6))
    truth = informative[:, 0] + 0.3 * rng.normal(size=n)
    return [informative, noise], truth


def test_only_lam_over_c_cubed_shapes_the_ranking():
    rng = np.random.default_rng(11)
    Xs, truth = noisy_groups(50, rng)
    pairs = ranked_pairs(truth, 300, rng)
    tight = {"tol": 1e-7, "inner_tol": 1e-9, "max_iter": 300, "max_epochs": 20_000}
    C, lam, s = 0.05, 1.0, 3.0
    X = np.hstack(Xs)
    base = RankMKL.from_groups(Xs, pairs, C=C, lam=lam, **tight)
    scaled = RankMKL.from_groups(Xs, pairs, C=s * C, lam=s**3 * lam, **tight)
    np.testing.assert_allclose(scaled.weights_ * s, base.weights_, rtol=2e-3)
    np.testing.assert_allclose(scaled.decision_function(X), base.decision_function(X),
                               rtol=2e-3, atol=1e-6)  # fmt: skip
    # C alone is a real knob here (C binds), so the agreement above is not trivial.
    other = RankMKL.from_groups(Xs, pairs, C=s * C, lam=lam, **tight)
    assert not np.allclose(other.decision_function(X), base.decision_function(X), rtol=1e-2)


def test_per_group_gamma_scale_multiplies_each_groups_default_bandwidth():
    rng = np.random.default_rng(12)
    Xs, truth = noisy_groups(40, rng)
    pairs = ranked_pairs(truth, 200, rng)
    model = RankMKL.from_groups(Xs, pairs, gamma_scale=[0.5, 2.0])
    expected = [0.5 * default_gamma(chi2_distances(Xs[0], Xs[0])),
                2.0 * default_gamma(chi2_distances(Xs[1], Xs[1]))]  # fmt: skip
    np.testing.assert_allclose(model.gammas_, expected, rtol=1e-12)
    explicit = RankMKL.from_groups(Xs, pairs, gamma=expected)
    fresh = rng.random((40, 10))
    np.testing.assert_allclose(explicit.decision_function(fresh), model.decision_function(fresh))
    meta, arrays = model.to_state()
    restored = RankMKL.from_state(json.loads(json.dumps(meta)), arrays)
    np.testing.assert_array_equal(restored.decision_function(fresh), model.decision_function(fresh))


@pytest.mark.parametrize(
    ("gamma_scale", "message"),
    [([1.0], "gamma_scale has 1 entries"), ([1.0, -1.0], "gamma_scale must"),
     (float("nan"), "gamma_scale must"), ([], "gamma_scale must")],
)  # fmt: skip
def test_bad_gamma_scale_raises(gamma_scale, message):
    X = np.random.default_rng(13).random((6, 3))
    with pytest.raises(ValueError, match=message):
        RankMKL.from_groups([X, X], [[0, 1], [2, 3]], gamma_scale=gamma_scale)


def test_default_inner_tolerance_gives_an_accurate_mkl_gradient():
    """GMKL steps along -1/2 alpha^T K_k alpha; the default inner tol must get it right."""
    rng = np.random.default_rng(14)
    Xs, truth = noisy_groups(60, rng)
    Ks = [np.exp(-default_gamma(D) * D) for D in (chi2_distances(X, X) for X in Xs)]
    pairs = ranked_pairs(truth, 400, rng)
    d = np.array([0.7, 0.3])
    for C in (0.1, 10.0):
        exact = solve_rank_svm(combine(Ks, d), pairs, C, tol=1e-10, max_epochs=50_000)
        default = solve_rank_svm(combine(Ks, d), pairs, C)
        g_exact = mkl_gradient(Ks, exact.alpha, d, 0.0)
        g_default = mkl_gradient(Ks, default.alpha, d, 0.0)
        assert np.abs(g_default - g_exact).max() < 1e-3 * np.abs(g_exact).max()


def test_cross_validation_tries_group_bandwidths_and_tunes_lam_only_for_mkl(monkeypatch):
    rng = np.random.default_rng(15)
    n = 48
    labels = np.repeat(np.arange(6), 8)  # six categories, ranked by their label
    informative = rng.random((n, 4)) + labels[:, None] / 6.0
    table = {"a": informative, "b": rng.random((n, 5))}
    train, strength = np.arange(n), labels.astype(float)
    config = MKLEvalConfig(cv_folds=2, cv_max_pairs=200, c_grid=(0.1, 1.0),
                           gamma_scales=(0.5, 1.0), lam_grid=(0.1, 10.0))  # fmt: skip
    tried: list[Choice] = []
    real = mkl_eval.fit_and_score

    def recording(method, table, *rest):
        tried.append(rest[-1])
        return real(method, table, *rest)

    monkeypatch.setattr(mkl_eval, "fit_and_score", recording)
    single = cross_validate(Method("a", ("a",)), table, train, strength, labels, config, rng)
    assert single.gamma_scale in config.gamma_scales and single.C in config.c_grid
    assert {c.lam for c in tried} == {config.lam}  # one group: lam does nothing, not searched
    tried.clear()
    per_group = (0.5, 2.0)
    mkl = cross_validate(
        Method("rankmkl", ("a", "b")), table, train, strength, labels, config, rng, per_group
    )
    assert {c.gamma_scale for c in tried} == {*config.gamma_scales, per_group}
    assert mkl.gamma_scale in (*config.gamma_scales, per_group)
    assert {c.lam for c in tried} == {config.lam, *config.lam_grid}
    assert {c.C for c in tried if c.lam != config.lam} == {mkl.C}  # lam tuned at the chosen C
    assert mkl.C in config.c_grid and mkl.lam in config.lam_grid
