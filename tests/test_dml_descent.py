"""Algorithm 2's line search: the exact quartic restriction and the adaptive Armijo trial."""

from __future__ import annotations

import numpy as np
import pytest

from rankstream.ranking.dml.armijo import steepest_descent
from rankstream.ranking.dml.cmds_dml import CMDSObjective
from rankstream.ranking.dml.edm import embed_labels
from rankstream.ranking.dml.neighbors import pair_differences, target_neighbor_pairs


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


def _kernel(objective, theta, gamma, max_iter, tol, adaptive, max_backtracks=20):
    """The compiled loop with one tolerance: (theta, f, n_iter, grad_norm, converged)."""
    from rankstream.ranking.dml.cmds_descent import cmds_staged_descent

    stages = cmds_staged_descent(
        theta,
        objective.s,
        objective.d,
        objective.gram,
        np.ascontiguousarray(objective.cross),
        objective.y_sq,
        objective.V,
        objective.mu,
        gamma,
        0.5,
        0.05,
        max_backtracks,
        max_iter,
        np.array([tol]),
        adaptive,
    )
    return tuple(values[0] for values in stages)


def _reference(objective, theta, gamma, max_iter, tol, adaptive):
    return steepest_descent(
        objective,
        theta,
        gamma=gamma,
        rho=0.5,
        sigma=0.05,
        max_backtracks=20,
        max_iter=max_iter,
        tol=tol,
        adaptive_gamma=adaptive,
    )


@pytest.mark.parametrize("seed, mu", [(0, 0.05), (1, 1.0), (2, 1e-3)])
def test_compiled_descent_reproduces_the_numpy_reference(seed, mu):
    """Same iterates as `steepest_descent` over `CMDSObjective`, up to summation order.

    With a fixed trial step the whole run agrees to 1e-10. Barzilai-Borwein steps amplify
    the last-bit differences of summation order (BLAS vs the kernel's loops) over many
    iterations, so with them the iterates are compared over the first 20 iterations and
    the converged runs by their objective value and stopping test.
    """
    objective, theta = objective_and_start(mu=mu, seed=seed)
    gamma = 1.0 / objective.lipschitz_estimate()
    ref = _reference(objective, theta, gamma, 3000, 1e-5, False)
    x, f, n_iter, grad_norm, converged = _kernel(objective, theta, gamma, 3000, 1e-5, False)
    assert ref.converged and converged and n_iter == ref.n_iter > 20
    np.testing.assert_allclose(x, ref.x, rtol=0, atol=1e-10)
    assert f == pytest.approx(ref.fun, rel=1e-12)
    assert grad_norm == pytest.approx(ref.grad_norm, rel=1e-8)

    ref = _reference(objective, theta, gamma, 20, 0.0, True)
    x, f, n_iter, _, _ = _kernel(objective, theta, gamma, 20, 0.0, True)
    assert n_iter == ref.n_iter == 20
    np.testing.assert_allclose(x, ref.x, rtol=0, atol=1e-10)

    ref = _reference(objective, theta, gamma, 3000, 1e-6, True)
    x, f, n_iter, _, converged = _kernel(objective, theta, gamma, 3000, 1e-6, True)
    assert ref.converged and converged
    assert f == pytest.approx(ref.fun, rel=1e-6)


def test_compiled_descent_stops_without_a_step_when_armijo_never_holds():
    objective, theta = objective_and_start()
    # A huge trial step with no back-tracking allowed: no m passes, nothing moves.
    x, f, n_iter, _, converged = _kernel(objective, theta, 1e6, 10, 0.0, True, max_backtracks=0)
    assert n_iter == 0 and not converged
    np.testing.assert_array_equal(x, theta)
    assert f == pytest.approx(objective.value(theta), rel=1e-12)
