"""Steepest descent with the Armijo rule (Algorithm 2, steps S4-S6).

Written once for any smooth objective over a flat parameter vector: the objective
supplies f with its gradient, and f restricted to a line. The restriction is what makes
the line search cheap: for eq. (10) f(x + alpha d) is a quartic polynomial in alpha,
so after one O(p s d) set-up per iteration every back-tracking trial costs O(1).
cMDS-DML's fit runs the numba translation of this loop (`ranking.dml.cmds_descent`);
this version is the reference it is tested against.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

import numpy as np


class LineSearchObjective(Protocol):
    def value_and_grad(self, x: np.ndarray) -> tuple[float, np.ndarray]:
        """f(x) and grad f(x)."""
        ...

    def along(self, x: np.ndarray, direction: np.ndarray) -> Callable[[float], float]:
        """alpha -> f(x + alpha * direction) - f(x), exact, cheap to call many times."""
        ...


@dataclass(frozen=True)
class DescentResult:
    x: np.ndarray
    fun: float
    n_iter: int
    grad_norm: float
    converged: bool  # True when the gradient test of S4 stopped the loop


def barzilai_borwein_step(step: np.ndarray, grad_change: np.ndarray) -> float | None:
    """s^T s / s^T y (BB1) from the last step s and gradient change y; None if s^T y <= 0."""
    curvature = float(step @ grad_change)
    if not np.isfinite(curvature) or curvature <= 0:
        return None
    return float(step @ step) / curvature


def steepest_descent(
    objective: LineSearchObjective,
    x0: np.ndarray,
    *,
    gamma: float,
    rho: float,
    sigma: float,
    max_backtracks: int,
    max_iter: int,
    tol: float,
    adaptive_gamma: bool = True,
) -> DescentResult:
    """Minimise f from x0 along d = -grad f with alpha = gamma_k * rho^m (S4-S6).

    m runs over 0..max_backtracks (the paper's r) and the first m meeting
    f(x + alpha d) - f(x) <= sigma * alpha * grad^T d is taken, exactly as in S5.

    Readings of the paper, each chosen because it works and keeps the method:

    * S4's test ||grad f|| <= eps is applied relative to the first gradient
      (eps = tol * max(1, ||grad f(x0)||)), so that `tol` means the same on any data.
    * The trial step gamma_k may adapt (`adaptive_gamma`): gamma at k = 0, afterwards the
      Barzilai-Borwein step s^T s / s^T y of the last move (gamma when s^T y <= 0). The
      direction stays -grad f and every step still passes the Armijo test, so f
      decreases monotonically; a fixed gamma needs thousands of iterations on
      ill-conditioned data where the BB trial needs tens.
    * When no m <= r gives sufficient decrease the iterate is already stationary to
      working precision and the loop stops there rather than taking a step that
      increases f.
    """
    x = np.array(x0, dtype=np.float64, copy=True)
    f, g = objective.value_and_grad(x)
    grad_norm = float(np.sqrt(g @ g))
    threshold = tol * max(1.0, grad_norm)
    trial = gamma
    iteration = 0
    while iteration < max_iter:
        if grad_norm <= threshold:
            return DescentResult(x, f, iteration, grad_norm, True)
        slope = -(grad_norm**2)  # grad^T d with d = -grad
        decrease = objective.along(x, -g)
        alpha = trial
        for _ in range(max_backtracks + 1):
            change = decrease(alpha)
            if np.isfinite(change) and change <= sigma * alpha * slope:
                break
            alpha *= rho
        else:
            return DescentResult(x, f, iteration, grad_norm, False)
        x_new = x - alpha * g
        f_new, g_new = objective.value_and_grad(x_new)
        if adaptive_gamma:
            trial = barzilai_borwein_step(x_new - x, g_new - g) or gamma
        x, f, g = x_new, f_new, g_new
        grad_norm = float(np.sqrt(g @ g))
        iteration += 1
    return DescentResult(x, f, iteration, grad_norm, grad_norm <= threshold)
