"""cMDS-DML's S4-S6 loop compiled with numba: the fit's hot path.

The numpy objective (`ranking.dml.cmds_dml.CMDSObjective`) and the generic Armijo loop
(`ranking.dml.armijo.steepest_descent`) state the mathematics and are the reference this
kernel is tested against (same L, c to 1e-10). On the paper's sizes (s = 3, d = 40,
a few hundred target pairs) they spend their time in ~50 numpy calls per iteration on
tiny arrays; here one iteration is two passes over the target-pair differences V:

* `_evaluate`: f(L, c) of eq. (10) and its gradient, the neighbour excesses
  e_p = ||L v_p||^2 - ||v_p||^2 and the gradient term 4 mu e_p (L v_p) v_p^T in one pass;
* `_line_coefficients`: f(theta + alpha d) - f(theta) = a1 alpha + ... + a4 alpha^4
  (exact, see `CMDSObjective.along`), so back-tracking trials cost O(1).

`reassoc`/`contract` let LLVM vectorise the length-d dot products; they only reorder
sums (as BLAS does in the reference), never assume finite values, so the NaN/Inf test
of the Armijo rule still works.
"""

from __future__ import annotations

import numpy as np
from numba import njit

_FASTMATH = {"reassoc", "contract"}


@njit(cache=True, fastmath=_FASTMATH)
def _evaluate(theta, s, d, gram, cross, y_sq, V, v_sq, mu, LG, LV, excess, grad):
    """f(theta); fills LG = L Z^T Z, LV = V L^T, the excesses and grad = [vec(dL), dc]."""
    sd = s * d
    c = theta[sd]
    lg_l = 0.0
    l_cross = 0.0
    for a in range(s):
        for j in range(d):
            acc = 0.0
            for i in range(d):
                acc += theta[a * d + i] * gram[i, j]
            LG[a, j] = acc
            lg_l += acc * theta[a * d + j]
            l_cross += theta[a * d + j] * cross[a, j]
    fit = 0.5 * lg_l - c * l_cross + 0.5 * c * c * y_sq
    for i in range(sd):
        grad[i] = 0.0
    penalty = 0.0
    scale = 4.0 * mu
    for k in range(V.shape[0]):
        sq = 0.0
        for a in range(s):
            acc = 0.0
            for j in range(d):
                acc += theta[a * d + j] * V[k, j]
            LV[k, a] = acc
            sq += acc * acc
        e = sq - v_sq[k]
        excess[k] = e
        penalty += e * e
        weight = scale * e
        for a in range(s):
            w = weight * LV[k, a]
            for j in range(d):
                grad[a * d + j] += w * V[k, j]
    for a in range(s):
        for j in range(d):
            grad[a * d + j] += LG[a, j] - c * cross[a, j]
    grad[sd] = c * y_sq - l_cross
    return fit + mu * penalty


@njit(cache=True, fastmath=_FASTMATH)
def _line_coefficients(theta, direction, s, d, gram, cross, y_sq, V, mu, LG, LV, excess):
    """(a1, a2, a3, a4) of f(theta + alpha direction) - f(theta), from `_evaluate`'s parts."""
    sd = s * d
    c = theta[sd]
    dc = direction[sd]
    d_gram_d = 0.0
    lg_d = 0.0
    d_cross = 0.0
    l_cross = 0.0
    for a in range(s):
        for j in range(d):
            acc = 0.0
            for i in range(d):
                acc += direction[a * d + i] * gram[i, j]
            d_gram_d += acc * direction[a * d + j]
            lg_d += LG[a, j] * direction[a * d + j]
            d_cross += direction[a * d + j] * cross[a, j]
            l_cross += theta[a * d + j] * cross[a, j]
    q1 = lg_d - c * d_cross - dc * l_cross + c * dc * y_sq
    q2 = 0.5 * d_gram_d - dc * d_cross + 0.5 * dc * dc * y_sq
    e2e2 = 0.0
    e1e2 = 0.0
    e1e1 = 0.0
    e0e2 = 0.0
    e0e1 = 0.0
    for k in range(V.shape[0]):
        e1 = 0.0
        e2 = 0.0
        for a in range(s):
            acc = 0.0
            for j in range(d):
                acc += direction[a * d + j] * V[k, j]
            e1 += LV[k, a] * acc
            e2 += acc * acc
        e1 *= 2.0
        e0 = excess[k]
        e2e2 += e2 * e2
        e1e2 += e1 * e2
        e1e1 += e1 * e1
        e0e2 += e0 * e2
        e0e1 += e0 * e1
    a4 = mu * e2e2
    a3 = 2.0 * mu * e1e2
    a2 = q2 + mu * (e1e1 + 2.0 * e0e2)
    a1 = q1 + 2.0 * mu * e0e1
    return a1, a2, a3, a4


@njit(cache=True, fastmath=_FASTMATH)
def cmds_staged_descent(
    theta0,
    s,
    d,
    gram,
    cross,
    y_sq,
    V,
    mu,
    gamma,
    rho,
    sigma,
    max_backtracks,
    max_iter,
    tols,
    adaptive_gamma,
):
    """Algorithm 2's S4-S6 on theta = [vec(L), c], stopped at every tol in `tols` on the way.

    The iterates of `armijo.steepest_descent`, with the same readings: S4's test relative
    to the first gradient, Barzilai-Borwein trial steps (gamma when s^T y <= 0), and a stop
    without a step when no m <= max_backtracks passes Armijo. `tols` is non-increasing.

    The stopping test only decides where a run ends, never where it goes: the run with a
    smaller tol passes through the exact iterate at which a larger tol stops. So row k of
    the results is what a run with tol = tols[k] returns, bit for bit, and validating the
    stopping rule over a grid costs one run to the smallest tol (`CMDSDML.staged_fit`).
    Returns arrays (thetas (K, n), f (K,), n_iter (K,), grad_norm (K,), converged (K,)).
    """
    n = theta0.size
    p = V.shape[0]
    n_stages = tols.size
    thetas = np.empty((n_stages, n))
    values = np.empty(n_stages)
    iterations = np.zeros(n_stages, dtype=np.int64)
    norms = np.empty(n_stages)
    converged = np.zeros(n_stages, dtype=np.bool_)
    v_sq = np.empty(p)
    for k in range(p):
        acc = 0.0
        for j in range(d):
            acc += V[k, j] * V[k, j]
        v_sq[k] = acc
    theta = theta0.copy()
    theta_new = np.empty(n)
    grad = np.empty(n)
    grad_new = np.empty(n)
    direction = np.empty(n)
    LG, LG_new = np.empty((s, d)), np.empty((s, d))
    LV, LV_new = np.empty((p, s)), np.empty((p, s))
    excess, excess_new = np.empty(p), np.empty(p)

    f = _evaluate(theta, s, d, gram, cross, y_sq, V, v_sq, mu, LG, LV, excess, grad)
    grad_sq = 0.0
    for i in range(n):
        grad_sq += grad[i] * grad[i]
    grad_norm = np.sqrt(grad_sq)
    thresholds = tols * max(1.0, grad_norm)
    trial = gamma
    iteration = 0
    stage = 0
    while iteration < max_iter:
        while stage < n_stages and grad_norm <= thresholds[stage]:
            thetas[stage] = theta
            values[stage], iterations[stage], norms[stage] = f, iteration, grad_norm
            converged[stage] = True
            stage += 1
        if stage == n_stages:
            return thetas, values, iterations, norms, converged
        slope = -(grad_norm * grad_norm)
        for i in range(n):
            direction[i] = -grad[i]
        a1, a2, a3, a4 = _line_coefficients(
            theta, direction, s, d, gram, cross, y_sq, V, mu, LG, LV, excess
        )
        alpha = trial
        accepted = False
        for _ in range(max_backtracks + 1):
            change = (((a4 * alpha + a3) * alpha + a2) * alpha + a1) * alpha
            if np.isfinite(change) and change <= sigma * alpha * slope:
                accepted = True
                break
            alpha *= rho
        if not accepted:
            break
        for i in range(n):
            theta_new[i] = theta[i] - alpha * grad[i]
        f_new = _evaluate(
            theta_new, s, d, gram, cross, y_sq, V, v_sq, mu, LG_new, LV_new, excess_new, grad_new
        )
        if adaptive_gamma:
            step_sq = 0.0
            curvature = 0.0
            for i in range(n):
                step = theta_new[i] - theta[i]
                step_sq += step * step
                curvature += step * (grad_new[i] - grad[i])
            bb = step_sq / curvature if np.isfinite(curvature) and curvature > 0 else 0.0
            trial = bb if bb != 0.0 else gamma
        theta, theta_new = theta_new, theta
        grad, grad_new = grad_new, grad
        LG, LG_new = LG_new, LG
        LV, LV_new = LV_new, LV
        excess, excess_new = excess_new, excess
        f = f_new
        grad_sq = 0.0
        for i in range(n):
            grad_sq += grad[i] * grad[i]
        grad_norm = np.sqrt(grad_sq)
        iteration += 1
    # Out of iterations, or no step passed Armijo (then nothing moved and no later
    # iterate exists): every remaining stage ends here, converged or not by its own test.
    stopped = iteration < max_iter
    for k in range(stage, n_stages):
        thetas[k] = theta
        values[k], iterations[k], norms[k] = f, iteration, grad_norm
        converged[k] = (not stopped) and grad_norm <= thresholds[k]
    return thetas, values, iterations, norms, converged
