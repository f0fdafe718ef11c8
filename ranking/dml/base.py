"""What cMDS-DML and LDMLR share: input checks, preprocessing and the transformer API.

Both learn a linear map on preprocessed points z = P^T (x - mean) / scale, where P is
the optional PCA basis (the papers' protocol: centre, do not scale per feature, reduce
dimension) and `scale` the RMS norm of the centred points. Centring is Assumption 2 of
the cMDS-DML paper. The single global scale changes no nearest-neighbour ranking; it
only makes the step sizes and trade-off weights (mu, gamma, learning_rate) mean the
same on data in any units, which the paper's own settings (gamma = 1e-9 on raw pixels,
10 on FG-NET features) show they otherwise do not. The learned map G (s x d) on z is
composed back into the input space: components_ = G P^T / scale.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from sklearn.base import BaseEstimator, TransformerMixin
from sklearn.utils.validation import check_is_fitted, validate_data


def check_ordinal_labels(r: np.ndarray) -> np.ndarray:
    """Finite float labels with at least two distinct values (else nothing is ordinal)."""
    r = np.asarray(r, dtype=np.float64).ravel()
    if not np.all(np.isfinite(r)):
        raise ValueError("ordinal labels r contain NaN or Inf")
    if np.unique(r).size < 2:
        raise ValueError("ordinal labels r take a single value; need at least two distinct labels")
    return r


def check_enough_samples(n_samples: int, n_neighbors: int) -> None:
    """A sample needs n_neighbors others before it can have K target neighbours."""
    if int(n_neighbors) < 1:
        raise ValueError(f"n_neighbors must be >= 1, got {n_neighbors!r}")
    if n_samples < n_neighbors + 1:
        raise ValueError(
            f"got {n_samples} sample(s); need at least n_neighbors + 1 = {n_neighbors + 1}"
        )


@dataclass(frozen=True)
class Preprocessing:
    """z = (x - mean) @ basis / scale; basis is (d_in, d) orthonormal (PCA) or identity."""

    mean: np.ndarray
    basis: np.ndarray
    scale: float

    @classmethod
    def fit(cls, X: np.ndarray, pca_components: int | None) -> Preprocessing:
        mean = X.mean(axis=0)
        centred = X - mean
        if pca_components is None:
            basis = np.eye(X.shape[1])
        else:
            if int(pca_components) < 1:
                raise ValueError(f"pca_components must be >= 1 or None, got {pca_components!r}")
            _, singular, vt = np.linalg.svd(centred, full_matrices=False)
            rank = int(np.sum(singular > singular.max(initial=0.0) * 1e-10)) or 1
            basis = vt[: min(int(pca_components), rank)].T
        projected = centred @ basis
        rms = float(np.sqrt(np.mean(np.einsum("ij,ij->i", projected, projected))))
        return cls(mean=mean, basis=basis, scale=rms if rms > 0 else 1.0)

    def apply(self, X: np.ndarray) -> np.ndarray:
        return (X - self.mean) @ self.basis / self.scale

    def to_input_space(self, G: np.ndarray) -> np.ndarray:
        """The input-space matrix of a map G learned on z."""
        return G @ self.basis.T / self.scale


class OrdinalMetricLearner(TransformerMixin, BaseEstimator):
    """Transformer base: subclasses implement `_learn(Z, r) -> G` on preprocessed points."""

    def _fit_preprocessed(self, X: object, r: object) -> tuple[np.ndarray, np.ndarray]:
        X, r = validate_data(self, X, r, y_numeric=True, dtype=np.float64)
        check_enough_samples(X.shape[0], self.n_neighbors)
        r = check_ordinal_labels(r)
        self.preprocessing_ = Preprocessing.fit(X, self.pca_components)
        return self.preprocessing_.apply(X), r

    def _set_components(self, G: np.ndarray) -> None:
        components = self.preprocessing_.to_input_space(G)
        if not np.all(np.isfinite(components)):
            raise ValueError(f"{type(self).__name__} produced a non-finite map; check the data")
        self.components_ = components

    def transform(self, X: object) -> np.ndarray:
        """Points in the learned space: X @ components_.T (distances = the learned metric)."""
        check_is_fitted(self, "components_")
        X = validate_data(self, X, reset=False, dtype=np.float64)
        return X @ self.components_.T

    def get_mahalanobis_matrix(self) -> np.ndarray:
        """A = components_^T components_ (d_in x d_in, PSD by construction)."""
        check_is_fitted(self, "components_")
        return self.components_.T @ self.components_

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.target_tags.required = True
        tags.transformer_tags.preserves_dtype = ["float64"]
        return tags
