"""Algorithm 2's line search: the exact quartic restriction and the adaptive Armijo trial."""

from __future__ import annotations

import numpy as np
import pytest

from ranking.dml.armijo import steepest_descent
from ranking.dml.cmds_dml import CMDSObjective
from ranking.dml.edm import embed_labels
from ranking.dml.neighbors import pair_differences, target_neighbor_pairs


def objective_and_start(mu: float = 0.05, seed: int = 0):
    rng = np.random.default_rng(seed)
    r = np.repeat(np.arange(4.0), 8)
    X = rng.normal(size=(r.size, 6))
    X[:, 0] += r
    X -= X.mean(axis=0)
    Y = embed_labels(r, 1.0, 2)
    objective = CMDSObjective(X, Y, pair_differences(X, target_neighbor_pairs(X, r, 3)), mu)
    return objective, CMDSObjective.pack(np.eye(2, 6), 1.0)


def test_line_restriction_is_f_on_the_line():
    objective, theta = objective_and_start()
    direction = np.random.default_rng(3).normal(size=theta.size)
    change = objective.along(theta, direction)
    f0 = objective.value(theta)
    for alpha in (0.0, 1e-3, 0.1, 0.7, 2.5):
        assert change(alpha) == pytest.approx(
            objective.value(theta + alpha * direction) - f0, rel=1e-9, abs=1e-9
        )
    # Its slope at 0 is grad^T d, the quantity the Armijo test compares against.
    _, grad = objective.value_and_grad(theta)
    h = 1e-6
    assert (change(h) - change(-h)) / (2 * h) == pytest.approx(grad @ direction, rel=1e-5)


@pytest.mark.parametrize("adaptive", [False, True])
def test_descent_meets_armijo_and_stops_on_the_gradient_test(adaptive):
    objective, theta = objective_and_start()
    gamma = 1.0 / objective.lipschitz_estimate()
    values = []

    class Recording:
        def value_and_grad(self, x):
            f, g = objective.value_and_grad(x)
            values.append(f)
            return f, g

        def along(self, x, d):
            return objective.along(x, d)

    result = steepest_descent(
        Recording(),
        theta,
        gamma=gamma,
        rho=0.5,
        sigma=0.05,
        max_backtracks=20,
        max_iter=20000,
        tol=1e-6,
        adaptive_gamma=adaptive,
    )
    assert result.converged
    assert np.all(np.diff(values) < 0)  # every accepted Armijo step decreases f
    _, grad = objective.value_and_grad(result.x)
    _, grad0 = objective.value_and_grad(theta)
    assert np.linalg.norm(grad) <= 1e-6 * np.linalg.norm(grad0)


def test_barzilai_borwein_trial_needs_far_fewer_iterations():
    objective, theta = objective_and_start()
    gamma = 1.0 / objective.lipschitz_estimate()
    common = dict(gamma=gamma, rho=0.5, sigma=0.05, max_backtracks=20, max_iter=50000, tol=1e-6)
    fixed = steepest_descent(objective, theta, adaptive_gamma=False, **common)
    adaptive = steepest_descent(objective, theta, adaptive_gamma=True, **common)
    assert fixed.converged and adaptive.converged
    assert adaptive.n_iter * 3 < fixed.n_iter
    assert adaptive.fun == pytest.approx(fixed.fun, rel=1e-3)
