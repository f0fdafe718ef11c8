"""Feature scaling that travels with a model.

The 36 similarity features of phi live on very different scales, so rankers learn
on standardized phi. The scaler is fitted explicitly on training phi only (never
implicitly on whatever is scored) and is stored with the weights, so a model read
back from the store scores exactly as it did when it was written.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from rankstream.ranking.validation import as_float_matrix


class Standardizer:
    """z = (phi - mean) / std per dimension; zero-variance dimensions get std 1.

    Pair differences x = phi1 - phi2 scale as x / std: the mean cancels.

    >>> s = Standardizer().fit(np.array([[0.0, 5.0], [2.0, 5.0]]))
    >>> s.transform(np.array([[2.0, 5.0]])).tolist()
    [[1.0, 0.0]]
    >>> s.transform_differences(np.array([[2.0, 3.0]])).tolist()
    [[2.0, 3.0]]
    """

    def __init__(self) -> None:
        self.mean_: np.ndarray | None = None
        self.std_: np.ndarray | None = None

    def __repr__(self) -> str:
        """Stable across copies (a model's repr shows its scaler; river compares clones')."""
        return "Standardizer()" if self.dim is None else f"Standardizer(dim={self.dim})"

    @property
    def dim(self) -> int | None:
        return None if self.mean_ is None else int(self.mean_.shape[0])

    def fit(self, Phi: object) -> Standardizer:
        """Learn mean and std from training phi (n, d), n >= 1."""
        Phi = as_float_matrix(Phi, "Phi")
        if Phi.shape[0] == 0:
            raise ValueError("Phi has no rows; cannot fit a Standardizer")
        mean = Phi.mean(axis=0)
        std = Phi.std(axis=0)
        std[~(std > 0)] = 1.0
        self.mean_, self.std_ = mean, std
        return self

    def _fitted(self) -> tuple[np.ndarray, np.ndarray]:
        if self.mean_ is None or self.std_ is None:
            raise ValueError("Standardizer is not fitted; call fit(training_phi) first")
        return self.mean_, self.std_

    def transform(self, Phi: object) -> np.ndarray:
        """Standardized phi (m, d)."""
        mean, std = self._fitted()
        return (as_float_matrix(Phi, "Phi", mean.shape[0]) - mean) / std

    def transform_differences(self, X: object, check_finite: bool = True) -> np.ndarray:
        """Scaled pair differences (n, d): x / std (the mean cancels in phi1 - phi2)."""
        _, std = self._fitted()
        return as_float_matrix(X, "X", std.shape[0], check_finite) / std

    def to_state(self) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
        """JSON-able meta and named arrays; no pickle."""
        mean, std = self._fitted()
        return {"kind": "standardizer", "dim": int(mean.shape[0])}, {
            "mean": mean.copy(),
            "std": std.copy(),
        }

    @classmethod
    def from_state(cls, meta: dict[str, Any], arrays: dict[str, np.ndarray]) -> Standardizer:
        if meta.get("kind") != "standardizer":
            raise ValueError(f"state kind {meta.get('kind')!r} is not 'standardizer'")
        dim = int(meta["dim"])
        scaler = cls()
        mean = np.array(arrays["mean"], dtype=np.float64)
        std = np.array(arrays["std"], dtype=np.float64)
        if mean.shape != (dim,) or std.shape != (dim,):
            raise ValueError(f"standardizer arrays must have shape ({dim},)")
        if not (np.isfinite(mean).all() and np.isfinite(std).all() and (std > 0).all()):
            raise ValueError("standardizer state holds non-finite mean or non-positive std")
        scaler.mean_, scaler.std_ = mean, std
        return scaler


SCALER_PREFIX = "scaler."  # a model's stored scaler arrays: "scaler.mean", "scaler.std"


def store_scaler(
    scaler: Standardizer | None, meta: dict[str, Any], arrays: dict[str, np.ndarray]
) -> None:
    """Write a model's optional scaler into its state: meta["scaler"] (None without one)
    and its arrays under `SCALER_PREFIX` (the online rankers', baselines' and PDGD's)."""
    meta["scaler"] = None
    if scaler is not None:
        meta["scaler"], scaler_arrays = scaler.to_state()
        arrays.update({f"{SCALER_PREFIX}{k}": v for k, v in scaler_arrays.items()})


def stored_scaler(meta: dict[str, Any], arrays: dict[str, np.ndarray]) -> Standardizer | None:
    """The scaler `store_scaler` wrote (None when the model had none)."""
    if meta.get("scaler") is None:
        return None
    n = len(SCALER_PREFIX)
    own = {k[n:]: v for k, v in arrays.items() if k.startswith(SCALER_PREFIX)}
    return Standardizer.from_state(meta["scaler"], own)


def linear_scores(
    Phi: object, weights: np.ndarray, scaler: Standardizer | None = None
) -> np.ndarray:
    """w . phi for each row of Phi (m, d), through `scaler` when the model has one.

    The one scoring path of every linear model (online rankers and baselines), so
    they cannot disagree on how phi is scaled before the dot product.
    """
    if scaler is not None:
        return scaler.transform(Phi) @ weights
    return as_float_matrix(Phi, "Phi", weights.shape[0]) @ weights
