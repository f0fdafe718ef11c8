"""Base kernels of RankMKL: linear and exponential chi-square, per feature group.

Every base kernel is divided by its *spread* on the training points (the mean squared
distance to the centroid in feature space, tr(H K H)/n with H the centering matrix).
Ranking only ever sees differences phi(x_i) - phi(x_j), so a translation-invariant scale
is the one that makes the kernel weights d comparable across groups and keeps C meaningful
whatever a group's raw magnitude is.
"""

from __future__ import annotations

import numba
import numpy as np

from rankstream.ranking.validation import as_float_matrix

KERNEL_KINDS = ("linear", "chi2")


def check_group(X: np.ndarray, kind: str, name: str = "features") -> np.ndarray:
    """Validate one feature group: 2-d, finite, and non-negative when the kernel is chi2."""
    if kind not in KERNEL_KINDS:
        raise ValueError(f"unknown kernel {kind!r}; expected one of {KERNEL_KINDS}")
    X = as_float_matrix(X, name)
    if X.shape[0] == 0 or X.shape[1] == 0:
        raise ValueError(f"{name} must be non-empty, got shape {X.shape}")
    if kind == "chi2" and X.min() < 0:
        raise ValueError(
            f"Negative values in data passed to {name} (min {X.min():.3g}): the chi2 "
            "kernel needs non-negative (histogram-like) features"
        )
    return X


@numba.njit(parallel=True, fastmath=True, cache=True)
def _chi2_distances(X, Y):
    out = np.empty((X.shape[0], Y.shape[0]))
    for a in numba.prange(X.shape[0]):
        for b in range(Y.shape[0]):
            total = 0.0
            for f in range(X.shape[1]):
                s = X[a, f] + Y[b, f]
                if s > 0.0:
                    diff = X[a, f] - Y[b, f]
                    total += diff * diff / s
            out[a, b] = total
    return out


def chi2_distances(X: np.ndarray, Y: np.ndarray) -> np.ndarray:
    """chi2(x, y) = sum_f (x_f - y_f)^2 / (x_f + y_f), with 0/0 = 0; shape (len(X), len(Y)).

    Compiled (numba, parallel over rows): scoring is dominated by this one computation.
    """
    return _chi2_distances(np.ascontiguousarray(X), np.ascontiguousarray(Y))


def default_gamma(D: np.ndarray) -> float:
    """The usual chi2 bandwidth: 1 / mean chi2 distance between distinct training points."""
    n = D.shape[0]
    mean = (D.sum() - np.trace(D)) / max(n * (n - 1), 1) if D.shape[0] == D.shape[1] else D.mean()
    return 1.0 / mean if mean > 0 else 1.0


def raw_kernel(kind: str, X: np.ndarray, Y: np.ndarray, gamma: float | None) -> np.ndarray:
    """Unscaled base kernel k(X, Y): X Y^T or exp(-gamma chi2(X, Y))."""
    if kind == "linear":
        return X @ Y.T
    return np.exp(-gamma * chi2_distances(X, Y))


def kernel_spread(K: np.ndarray) -> float:
    """tr(H K H)/n: the mean squared feature-space distance to the centroid (> 0)."""
    spread = float(np.mean(np.diag(K)) - K.mean())
    return spread if spread > 1e-12 else 1.0


def train_kernel(
    kind: str, X: np.ndarray, gamma: float | None, gamma_scale: float = 1.0
) -> tuple[np.ndarray, float | None, float]:
    """Scaled train kernel plus the (gamma, scale) needed to reproduce it on new points.

    An explicit `gamma` is used as given; None means `gamma_scale` / mean chi2 distance.
    """
    if kind == "chi2":
        D = chi2_distances(X, X)
        gamma = gamma_scale * default_gamma(D) if gamma is None else float(gamma)
        K = np.exp(-gamma * D)
    else:
        gamma = None
        K = X @ X.T
    scale = kernel_spread(K)
    return K / scale, gamma, scale
