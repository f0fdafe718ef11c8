"""Label-level Euclidean distance matrices and classical MDS (cMDS-DML paper, §2.3 and §3).

The ideal embedding points y_i of cMDS-DML come from the label-difference EDM of eq. (8).
Theorem 1 says when that matrix really is an EDM, and Algorithm 1 embeds it through the
m x m matrix of the m distinct labels instead of the n x n one, which is what makes the
refit cost independent of n. The O(n^3) route (`label_edm` + `classical_mds`) is kept as
the definition the fast route is tested against.
"""

from __future__ import annotations

import numpy as np

# Eigenvalues below this (relative to the largest) count as zero in cMDS and Theorem 1.
_EIG_RTOL = 1e-10


def centering_matrix(n: int) -> np.ndarray:
    """J = I - (1/n) 1 1^T of eq. (4)."""
    return np.eye(n) - np.full((n, n), 1.0 / n)


def double_centered(D: np.ndarray) -> np.ndarray:
    """B(D) = -1/2 J D J of eq. (4), computed without forming J."""
    D = np.asarray(D, dtype=np.float64)
    B = D - D.mean(axis=0, keepdims=True) - D.mean(axis=1, keepdims=True) + D.mean()
    return -0.5 * B


def label_edm(r: np.ndarray, beta: float) -> np.ndarray:
    """Eq. (8): D_ij = (|r_i - r_j| + beta)^2 when r_i != r_j, else 0 (n x n)."""
    r = np.asarray(r, dtype=np.float64).ravel()
    diff = np.abs(r[:, None] - r[None, :])
    return np.where(diff > 0, (diff + beta) ** 2, 0.0)


def label_level_edm(levels: np.ndarray, beta: float) -> np.ndarray:
    """Eq. (11): Delta_ij = (|a_i - a_j| + beta)^2 for i != j over the m distinct labels."""
    return label_edm(np.unique(np.asarray(levels, dtype=np.float64)), beta)


def theorem1_mu0(levels: np.ndarray) -> float:
    """mu_0 of Theorem 1: the smallest eigenvalue of -1/2 J Delta_bar^(1/2) J.

    Delta_bar^(1/2) holds the plain label differences |a_i - a_j| (eq. 9). For labels on
    a line it is the squared-distance matrix of sqrt-distances, which is always an EDM, so
    mu_0 is 0 up to rounding (the paper notes "mu_0 = 0 in this situation"); rounding
    noise is clipped to 0 so that beta = 0 stays admissible.
    """
    a = np.unique(np.asarray(levels, dtype=np.float64))
    delta_bar = np.abs(a[:, None] - a[None, :])
    eigenvalues = np.linalg.eigvalsh(double_centered(delta_bar))
    scale = max(1.0, float(np.abs(eigenvalues).max()))
    mu0 = float(eigenvalues.min())
    return 0.0 if abs(mu0) <= 1e-9 * scale else mu0


def resolve_beta(levels: np.ndarray, beta: float | None) -> float:
    """The beta used in eq. (8): checked against Theorem 1, or chosen automatically.

    `None` picks max(1, -4 mu_0): the paper's beta = 1 whenever Theorem 1 allows it (it
    always does for real-valued labels, where mu_0 = 0), else the smallest admissible
    value. An explicit beta < -4 mu_0 raises, because eq. (8) is then not guaranteed to be
    an EDM and the cMDS points would not reproduce it.
    """
    bound = -4.0 * theorem1_mu0(levels)
    if beta is None:
        return max(1.0, bound)
    beta = float(beta)
    if not np.isfinite(beta):
        raise ValueError(f"beta must be finite, got {beta!r}")
    if beta < bound - 1e-12:
        raise ValueError(
            f"beta={beta} violates Theorem 1 (needs beta >= -4*mu_0 = {bound:.6g}); "
            "eq. (8) would not be a Euclidean distance matrix"
        )
    return beta


def classical_mds(D: np.ndarray, n_components: int) -> np.ndarray:
    """cMDS of eqs. (4)-(6): points (n, n_components) whose squared distances fit D.

    Uses the n_components largest positive eigenvalues of B(D); columns beyond the number
    of positive eigenvalues are zero, so an EDM of embedding dimension <= n_components is
    reproduced exactly and a higher-dimensional one is its best rank-s approximation.
    """
    B = double_centered(D)
    eigenvalues, eigenvectors = np.linalg.eigh(B)
    order = np.argsort(eigenvalues)[::-1][:n_components]
    lam = eigenvalues[order]
    tol = _EIG_RTOL * max(1.0, float(np.abs(eigenvalues).max()))
    lam = np.where(lam > tol, lam, 0.0)
    Y = np.zeros((D.shape[0], n_components))
    Y[:, : lam.size] = eigenvectors[:, order] * np.sqrt(lam)
    return Y


def embed_labels(r: np.ndarray, beta: float, n_components: int) -> np.ndarray:
    """Algorithm 1: the points y_1..y_n (n, s) for the EDM of eq. (8) in O(m^3).

    Step 2 embeds the m x m matrix Delta; step 3 gives every sample its label's point
    (zero-padded to s); step 4 re-centres with the *mean* over samples (the paper writes
    a sum, but only the mean makes sum_i y_i = 0 as Remark 2 requires). When Delta needs
    more than s dimensions the top-s cMDS of Delta is used, which matches the direct
    n x n route exactly when every label has the same number of samples.
    """
    r = np.asarray(r, dtype=np.float64).ravel()
    levels, inverse = np.unique(r, return_inverse=True)
    Z = classical_mds(label_level_edm(levels, beta), n_components)
    Y = Z[inverse]
    return Y - Y.mean(axis=0, keepdims=True)


def squared_distances(Y: np.ndarray) -> np.ndarray:
    """The EDM (squared Euclidean distances) of the rows of Y."""
    sq = np.einsum("ij,ij->i", Y, Y)
    return np.maximum(sq[:, None] + sq[None, :] - 2.0 * Y @ Y.T, 0.0)
