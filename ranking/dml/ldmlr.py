"""LDMLR (Li et al. 2015) as the cMDS-DML paper describes it (§2.2): the baseline.

    h(A) = -sum_{i,j} omega_ij d_A^2(x_i,x_j) + mu sum_{eta_ij=1} (d_A^2 - d_I^2)^2  (pair i, j)
    omega_ij = (|r_i - r_j| + 1)^p if r_i != r_j else 0
    A_{k+1} = Pi_{S+}(A_k - alpha grad h(A_k))

for T_max iterations from A_0 = I, Pi_{S+} being the eigenvalue clip onto the PSD cone.

Built to be a fair opponent, not a straw man:
* the first term is linear in A, so its gradient -sum omega_ij X_ij is computed once, in
  O(n d^2 + m^2 d) from per-label sums (omega depends only on the two labels);
* the step is alpha = learning_rate / L_h, with L_h the curvature of the quartic term
  (largest eigenvalue of the map A -> 2 mu sum_eta <X_ij, A> X_ij, by power iteration).
  The paper's unit step only works at one data scale; learning_rate and mu are meant to be
  picked on validation splits (`rankstream eval dml` does);
* an iterate whose h is not finite is never taken (the last finite one is kept).

T_max (`max_iter`) is a regulariser, not a convergence setting, and is validated like
mu. h is bounded below only if the target-pair differences span the (PCA) space: with
n <= d they do not (PubFig: 8 labels x 10 images in 79 dimensions leave the 7 between-
label directions free), so along any PSD B that is zero on every target difference the
penalty stays put while -<S, B> falls without end. Projected gradient then drifts
towards a null-space-LDA metric, and the kNN MAE keeps improving for thousands of
iterations (PubFig K=5: 1.19 at 50, 1.13 at 100, 1.04 at 400, 1.01 at 1000-15,000;
digits 0.88 at 50, 0.55 at 3000, 0.46 at 15,000). The paper's T_max = 30 / 50 stops far
short of that on normalised data. Only learning_rate x T_max matters along the way
(0.3 x 500 and 1.9 x 80 give the same MAE), so the eval validates T_max at the largest
stable learning_rate.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator

import numpy as np

from rankstream.ranking.dml.base import OrdinalMetricLearner
from rankstream.ranking.dml.neighbors import pair_differences, target_neighbor_pairs
from rankstream.ranking.estimator_params import keep_init_params


def ordinal_weight_matrix(levels: np.ndarray, power: float) -> np.ndarray:
    """omega of eq. (3) between the m distinct labels (m x m)."""
    diff = np.abs(levels[:, None] - levels[None, :])
    return np.where(diff > 0, (diff + 1.0) ** power, 0.0)


def weighted_scatter(Z: np.ndarray, r: np.ndarray, power: float) -> np.ndarray:
    """sum_{i,j} omega_ij (z_i - z_j)(z_i - z_j)^T over all ordered pairs, by label sums."""
    levels, inverse = np.unique(r, return_inverse=True)
    omega = ordinal_weight_matrix(levels, power)
    counts = np.bincount(inverse, minlength=levels.size).astype(np.float64)
    sums = np.zeros((levels.size, Z.shape[1]))
    np.add.at(sums, inverse, Z)
    per_sample_weight = (omega @ counts)[inverse]  # sum_b omega_ab n_b for z_i in label a
    second_moment = (Z * per_sample_weight[:, None]).T @ Z
    return 2.0 * second_moment - 2.0 * sums.T @ omega @ sums


def project_psd(A: np.ndarray) -> np.ndarray:
    """Nearest PSD matrix in Frobenius norm: clip the negative eigenvalues to 0."""
    eigenvalues, eigenvectors = np.linalg.eigh(0.5 * (A + A.T))
    clipped = (eigenvectors * np.maximum(eigenvalues, 0.0)) @ eigenvectors.T
    return 0.5 * (clipped + clipped.T)


class LDMLRObjective:
    """h(A) and its gradient for fixed data; A is a symmetric (d, d) matrix."""

    def __init__(self, scatter: np.ndarray, V: np.ndarray, mu: float) -> None:
        self.scatter = scatter
        self.V = V
        self.v_sq = np.einsum("ij,ij->i", V, V)
        self.mu = float(mu)

    def _excess(self, A: np.ndarray) -> np.ndarray:
        return np.einsum("ij,ij->i", self.V @ A, self.V) - self.v_sq

    def value(self, A: np.ndarray) -> float:
        excess = self._excess(A)
        return float(-np.sum(self.scatter * A) + self.mu * excess @ excess)

    def gradient(self, A: np.ndarray) -> np.ndarray:
        excess = self._excess(A)
        return -self.scatter + 2.0 * self.mu * (self.V * excess[:, None]).T @ self.V

    def curvature(self, n_iter: int = 30) -> float:
        """Largest eigenvalue of A -> 2 mu V^T diag(<v v^T, A>) V (power iteration)."""
        d = self.V.shape[1]
        if self.V.shape[0] == 0 or self.mu == 0:
            return 1.0
        A = np.eye(d) / np.sqrt(d)
        value = 1.0
        for _ in range(n_iter):
            image = (
                2.0
                * self.mu
                * (self.V * np.einsum("ij,ij->i", self.V @ A, self.V)[:, None]).T
                @ self.V
            )
            value = float(np.linalg.norm(image))
            if value == 0:
                return 1.0
            A = image / value
        return value


class LDMLR(OrdinalMetricLearner):
    """Linear distance metric learning for ranking (scikit-learn transformer).

    components_ is the square root of the learned PSD A (rows sqrt(lambda_k) u_k^T of the
    largest eigenvalues, n_components of them if set, otherwise all), mapped back to the
    input space. Fitted attributes: components_, metric_ (A on the preprocessed points),
    n_iter_, objective_.
    """

    def __init__(
        self,
        n_components: int | None = None,
        n_neighbors: int = 5,
        mu: float = 1e3,
        power: float = 1.0,
        learning_rate: float = 1.0,
        max_iter: int = 50,
        pca_components: int | None = None,
    ) -> None:
        keep_init_params(locals())

    def _check_params(self) -> None:
        if self.n_components is not None and int(self.n_components) < 1:
            raise ValueError(f"n_components must be >= 1 or None, got {self.n_components!r}")
        for name in ("mu", "power", "learning_rate"):
            value = getattr(self, name)
            if not (np.isfinite(value) and value > 0):
                raise ValueError(f"{name} must be finite and > 0, got {value!r}")

    def fit(self, X: object, y: object) -> LDMLR:
        """Learn the PSD metric A from points X (n, d) and ordinal labels y (n,)."""
        for _ in self.staged_fit(X, y, [int(self.max_iter)]):
            pass
        return self

    def staged_fit(self, X: object, y: object, stages: Iterable[int]) -> Iterator[LDMLR]:
        """Fit once and yield this model as fitted after each T_max in `stages`, in order.

        The iterates of T_max = t are a prefix of those of any longer run, so validating
        T_max over a grid costs one run to the largest value instead of one run per value.
        Each yielded state equals `fit` with max_iter = t (self is updated in place; copy
        what you keep). A run that hits a non-finite h stops there, and the remaining
        stages get that last finite iterate, as `fit` would.
        """
        self._check_params()
        stages = sorted({int(t) for t in stages})
        if not stages or stages[0] < 0:
            raise ValueError(f"stages must be iteration counts >= 0, got {stages!r}")
        Z, r = self._fit_preprocessed(X, y)
        pairs = target_neighbor_pairs(Z, r, int(self.n_neighbors))
        objective = LDMLRObjective(
            weighted_scatter(Z, r, self.power), pair_differences(Z, pairs), self.mu
        )
        step = self.learning_rate / objective.curvature()
        A = np.eye(Z.shape[1])
        value = objective.value(A)
        iterations, diverged = 0, False
        for stage in stages:
            while iterations < stage and not diverged:
                candidate = project_psd(A - step * objective.gradient(A))
                candidate_value = objective.value(candidate)
                diverged = not (np.isfinite(candidate_value) and np.all(np.isfinite(candidate)))
                if diverged:
                    break
                A, value = candidate, candidate_value
                iterations += 1
            self.metric_ = A
            self.n_iter_ = iterations
            self.objective_ = value
            self._set_components(self._square_root(A))
            yield self

    def _square_root(self, A: np.ndarray) -> np.ndarray:
        """Rows sqrt(lambda) u^T for the largest eigenvalues: G^T G = A (or its top-s part)."""
        eigenvalues, eigenvectors = np.linalg.eigh(A)
        order = np.argsort(eigenvalues)[::-1]
        if self.n_components is not None:
            order = order[: int(self.n_components)]
        root = np.sqrt(np.maximum(eigenvalues[order], 0.0))
        return root[:, None] * eigenvectors[:, order].T
