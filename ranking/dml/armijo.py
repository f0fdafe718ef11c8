"""Steepest descent with the Armijo rule (Algorithm 2, steps S4-S6).

Written once for any smooth objective over a flat parameter vector so that the
cMDS-DML model only supplies f and its gradient.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

ValueAndGradient = Callable[[np.ndarray], tuple[float, np.ndarray]]
ValueOnly = Callable[[np.ndarray], float]


@dataclass(frozen=True)
class DescentResult:
    x: np.ndarray
    fun: float
    n_iter: int
    grad_norm: float
    converged: bool  # True when the gradient test of S4 stopped the loop


def steepest_descent(
    value_and_grad: ValueAndGradient,
    value: ValueOnly,
    x0: np.ndarray,
    *,
    gamma: float,
    rho: float,
    sigma: float,
    max_backtracks: int,
    max_iter: int,
    tol: float,
) -> DescentResult:
    """Minimise f from x0 with d = -grad f and alpha = gamma * rho^m (S5).

    m runs over 0..max_backtracks (the paper's r) and the first m meeting
    f(x + alpha d) - f(x) <= sigma * alpha * grad^T d is taken. S4's test ||grad|| <= eps
    is applied relative to the first gradient (eps = tol * max(1, ||grad f(x0)||)) so
    that `tol` means the same on any data scale. When no m <= r gives sufficient
    decrease the iterate is already stationary to working precision and the loop stops
    there rather than taking a step that increases f.
    """
    x = np.array(x0, dtype=np.float64, copy=True)
    f, g = value_and_grad(x)
    grad_norm = float(np.sqrt(g @ g))
    threshold = tol * max(1.0, grad_norm)
    iteration = 0
    while iteration < max_iter:
        if grad_norm <= threshold:
            return DescentResult(x, f, iteration, grad_norm, True)
        slope = -(grad_norm**2)  # grad^T d with d = -grad
        alpha = gamma
        for _ in range(max_backtracks + 1):
            candidate = x - alpha * g
            f_new = value(candidate)
            if np.isfinite(f_new) and f_new - f <= sigma * alpha * slope:
                break
            alpha *= rho
        else:
            return DescentResult(x, f, iteration, grad_norm, False)
        x = candidate
        f, g = value_and_grad(x)
        grad_norm = float(np.sqrt(g @ g))
        iteration += 1
    return DescentResult(x, f, iteration, grad_norm, grad_norm <= threshold)
