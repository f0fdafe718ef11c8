"""Kernel RankSVM dual and GMKL kernel-weight learning, in the n-dimensional form.

The RankSVM of the paper's eq. (1) becomes the bias-free SVM of eq. (2) through eq. (3):
each preference pair a = (i, j) is a point phi_i - phi_j with label y_a. Its dual (eq. 4)

    max_beta  1^T beta - 1/2 beta^T Q beta,   0 <= beta_a <= C,
    Q = Y A K A^T Y,   A the p x n signed incidence matrix (eq. 6),

is solved by dual coordinate descent (Hsieh et al. 2008, the LIBLINEAR method) without
ever forming Q: we keep alpha = A^T (y * beta) (n-dim) and u = K alpha, so that
(Q beta)_a = y_a (u_i - u_j) and Q_aa = K_ii + K_jj - 2 K_ij. One coordinate step costs
O(1) to evaluate and O(n) to apply. This is the exact L1-hinge dual of the paper; it stops
when the largest projected-gradient violation is below `tol`.

Kernel weights (eq. 8, GMKL of Varma & Babu 2009): minimise over d >= 0

    T(d) = max_beta [1^T beta - 1/2 alpha^T K_d alpha] + lam/2 ||d||^2,  K_d = sum_k d_k K_k,

whose gradient (Danskin) is dT/dd_k = -1/2 alpha^T K_k alpha + lam d_k. The paper writes (8)
as one "maximise"; the working reading (GMKL's) is min over d of the max over beta, which is
convex in d because the inner max is a maximum of affine functions of d.
"""

from __future__ import annotations

from dataclasses import dataclass

import numba
import numpy as np
import scipy.sparse as sp


@numba.njit(cache=True)
def _dual_cd(K, left, right, y, C, beta, alpha, u, tol, max_epochs, seed):
    p = left.shape[0]
    n = K.shape[0]
    np.random.seed(seed)
    order = np.arange(p)
    epochs = 0
    for epoch in range(max_epochs):
        epochs = epoch + 1
        np.random.shuffle(order)
        violation = 0.0
        for t in range(p):
            a = order[t]
            i = left[a]
            j = right[a]
            grad = y[a] * (u[i] - u[j]) - 1.0
            b = beta[a]
            if b <= 0.0:
                pg = min(grad, 0.0)
            elif b >= C:
                pg = max(grad, 0.0)
            else:
                pg = grad
            if pg == 0.0:
                continue
            violation = max(violation, abs(pg))
            qaa = K[i, i] + K[j, j] - 2.0 * K[i, j]
            # qaa = 0: the pair's two points coincide in feature space; grad = -1 < 0
            new_b = min(max(b - grad / qaa, 0.0), C) if qaa > 1e-12 else C
            delta = (new_b - b) * y[a]
            if delta == 0.0:
                continue
            beta[a] = new_b
            alpha[i] += delta
            alpha[j] -= delta
            for r in range(n):
                u[r] += delta * (K[r, i] - K[r, j])
        if violation < tol:
            break
    return epochs


def pair_signs(p: int) -> np.ndarray:
    """Labels y_a of eq. (3) with every other pair flipped, so both classes occur.

    Without a bias term the flip (phi_i - phi_j, +1) -> (phi_j - phi_i, -1) leaves Q and the
    solution unchanged; it only keeps the problem a genuine two-class SVM.
    """
    y = np.ones(p)
    y[1::2] = -1.0
    return y


def oriented_pairs(pairs: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(left, right) indices of each SVM point phi_left - phi_right after the sign flips."""
    flip = y < 0
    left = np.where(flip, pairs[:, 1], pairs[:, 0]).astype(np.int64)
    right = np.where(flip, pairs[:, 0], pairs[:, 1]).astype(np.int64)
    return left, right


def incidence_matrix(pairs: np.ndarray, n: int, y: np.ndarray | None = None):
    """The sparse p x n matrix A of eq. (6), rows (phi_left - phi_right) after the flips."""
    p = pairs.shape[0]
    y = pair_signs(p) if y is None else y
    left, right = oriented_pairs(pairs, y)
    rows = np.repeat(np.arange(p), 2)
    cols = np.stack([left, right], axis=1).ravel()
    vals = np.tile([1.0, -1.0], p)
    return sp.csr_matrix((vals, (rows, cols)), shape=(p, n))


def q_product(K: np.ndarray, A, y: np.ndarray, beta: np.ndarray) -> np.ndarray:
    """Q beta = Y A (K (A^T (y * beta))) without materialising the p x p matrix Q."""
    return y * (A @ (K @ (A.T @ (y * beta))))


@dataclass
class DualSolution:
    """Inner RankSVM solution: pair multipliers, per-point coefficients and the dual value."""

    beta: np.ndarray  # (p,) in [0, C]
    alpha: np.ndarray  # (n,) = A^T (y * beta); f(x) = sum_i alpha_i k(x_i, x)
    objective: float  # 1^T beta - 1/2 alpha^T K alpha
    epochs: int


def solve_rank_svm(
    K: np.ndarray,
    pairs: np.ndarray,
    C: float,
    beta0: np.ndarray | None = None,
    tol: float = 1e-3,
    max_epochs: int = 2000,
    seed: int = 0,
) -> DualSolution:
    """Solve the RankSVM dual (eq. 4) for one (combined) kernel by dual coordinate descent."""
    p = pairs.shape[0]
    y = pair_signs(p)
    left, right = oriented_pairs(pairs, y)
    K = np.ascontiguousarray(K, dtype=np.float64)
    beta = np.zeros(p) if beta0 is None else np.clip(np.array(beta0, dtype=np.float64), 0.0, C)
    alpha = np.zeros(K.shape[0])
    np.add.at(alpha, left, y * beta)
    np.add.at(alpha, right, -y * beta)
    u = K @ alpha
    epochs = _dual_cd(K, left, right, y, float(C), beta, alpha, u, tol, max_epochs, seed)
    objective = float(beta.sum() - 0.5 * alpha @ u)
    return DualSolution(beta=beta, alpha=alpha, objective=objective, epochs=int(epochs))


def combine(Ks: list[np.ndarray], d: np.ndarray) -> np.ndarray:
    """K_d = sum_k d_k K_k."""
    K = np.zeros_like(Ks[0])
    for dk, Kk in zip(d, Ks, strict=True):
        if dk != 0.0:
            K += dk * Kk
    return K


def mkl_gradient(Ks: list[np.ndarray], alpha: np.ndarray, d: np.ndarray, lam: float) -> np.ndarray:
    """dT/dd_k = -1/2 alpha^T K_k alpha + lam d_k (alpha held at the inner optimum)."""
    return np.array([-0.5 * alpha @ (Kk @ alpha) for Kk in Ks]) + lam * d


@dataclass
class MKLSolution:
    weights: np.ndarray  # d >= 0, one per base kernel
    dual: DualSolution
    objective: float  # T(d)
    iterations: int


def fit_mkl(
    Ks: list[np.ndarray],
    pairs: np.ndarray,
    C: float,
    lam: float,
    max_iter: int = 30,
    tol: float = 1e-3,
    inner_tol: float = 1e-3,
    max_epochs: int = 2000,
    d0: np.ndarray | None = None,
    seed: int = 0,
) -> MKLSolution:
    """GMKL: projected gradient on d >= 0 with Armijo backtracking around the inner dual.

    Each trial d re-solves the dual warm-started from the last accepted beta. A step is
    accepted when T(P(d - s g)) <= T(d) + sigma g.(P(d - s g) - d) (Armijo along the
    projection arc); the step doubles after an acceptance and halves after a rejection.
    Stops when the relative change of d falls below `tol` or after `max_iter` steps.
    A single kernel is not reweighted (see below).

    Only lam / C^3 shapes the ranking: with d = s e and beta = beta'/s the inner dual at
    (s e, C) is 1/s times the one at (e, s C), so problem (C, lam) in d is problem
    (s C, s^3 lam) in e and the scores only change by the factor s. Cross-validating lam
    next to C therefore refines the grid of the one knob that matters.
    """
    t = len(Ks)
    d = np.full(t, 1.0 / t) if d0 is None else np.asarray(d0, dtype=np.float64).copy()

    def evaluate(weights: np.ndarray, beta0: np.ndarray | None) -> tuple[DualSolution, float]:
        sol = solve_rank_svm(combine(Ks, weights), pairs, C, beta0, inner_tol, max_epochs, seed)
        return sol, sol.objective + 0.5 * lam * float(weights @ weights)

    if t == 1:
        # One kernel: its weight only rescales K, which is what C already does, so a single
        # group is the plain kernel RankSVM with d = 1 (and C keeps its usual meaning).
        d = np.ones(1)
    sol, T = evaluate(d, None)
    if t == 1:
        return MKLSolution(d, sol, T, 0)
    step = 1.0 / max(np.abs(mkl_gradient(Ks, sol.alpha, d, lam)).max(), 1e-12)
    sigma = 1e-4
    iterations = 0
    for iterations in range(1, max_iter + 1):  # noqa: B007 - reported after the loop
        g = mkl_gradient(Ks, sol.alpha, d, lam)
        accepted = False
        for _ in range(20):
            d_new = np.maximum(d - step * g, 0.0)
            if not np.any(d_new > 0):
                step *= 0.5
                continue
            sol_new, T_new = evaluate(d_new, sol.beta)
            if T_new <= T + sigma * float(g @ (d_new - d)):
                accepted = True
                break
            step *= 0.5
        if not accepted:
            break
        change = np.abs(d_new - d).max() / max(np.abs(d).max(), 1e-12)
        d, sol, T = d_new, sol_new, T_new
        step *= 2.0
        if change < tol:
            break
    return MKLSolution(d, sol, T, iterations)
