"""RankMKL: kernel RankSVM whose kernel is a learned non-negative mix of base kernels."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from rankstream.ranking.mkl.kernels import KERNEL_KINDS, check_group, raw_kernel, train_kernel
from rankstream.ranking.mkl.solver import fit_mkl


def check_pairs(pairs: object, n: int) -> np.ndarray:
    """Preference pairs as an int64 (p, 2) array of distinct in-range indices, p >= 1."""
    arr = np.asarray(pairs)
    if arr.ndim != 2 or arr.shape[1] != 2:
        raise ValueError(f"pairs must have shape (p, 2), got {arr.shape}")
    if arr.shape[0] < 1:
        raise ValueError("pairs is empty; RankMKL needs at least one preference pair")
    if not np.issubdtype(arr.dtype, np.integer):
        raise ValueError(f"pairs must hold integer indices, got dtype {arr.dtype}")
    arr = arr.astype(np.int64)
    out = np.flatnonzero((arr < 0).any(axis=1) | (arr >= n).any(axis=1))
    if out.size:
        raise ValueError(f"pairs row {out[0]} = {arr[out[0]].tolist()} is out of range [0, {n})")
    same = np.flatnonzero(arr[:, 0] == arr[:, 1])
    if same.size:
        raise ValueError(f"pairs row {same[0]} compares item {arr[same[0], 0]} with itself")
    return arr


class RankMKL:
    """Multiple kernel RankSVM (Sharaf, Hussein & Ismail 2015), GMKL-style weights.

    `kernels` is "linear" or "chi2" for every group, or one kind per group; chi2 is the
    exponential chi-square kernel exp(-gamma chi2(x, x')) and needs non-negative features.
    `gamma` (chi2 bandwidth) is None (= 1 / mean chi2 distance on the training points),
    a float, or one value per group; `gamma_scale` (a float, or one per group) multiplies
    the default (the knob that cross-validation turns, since the data sets the default's
    units). `lam` is the L2 regulariser lam/2 ||d||^2 on the kernel weights. With two or
    more groups only lam / C^3 matters for the ranking (see `ranking.mkl.solver.fit_mkl`).
    Base kernels are scaled to unit spread (see `ranking.mkl.kernels`). With a single group
    the weight stays 1: rescaling one kernel is what C does, so one group is exactly a
    kernel RankSVM.

    >>> rng = np.random.default_rng(0)
    >>> X = rng.random((40, 3)); noise = rng.random((40, 5))
    >>> order = np.argsort(-X[:, 0]); pairs = np.stack([order[:-1], order[1:]], axis=1)
    >>> model = RankMKL(kernels=["linear", "chi2"], C=10.0).fit([X, noise], pairs)
    >>> bool(model.weights_[0] > model.weights_[1])
    True
    """

    def __init__(
        self,
        kernels: str | Sequence[str] = "chi2",
        C: float = 1.0,
        gamma: float | Sequence[float | None] | None = None,
        gamma_scale: float | Sequence[float] = 1.0,
        lam: float = 1.0,
        max_iter: int = 30,
        tol: float = 1e-3,
        inner_tol: float = 1e-3,
        max_epochs: int = 2000,
        seed: int = 0,
    ) -> None:
        self.kernels = kernels
        self.C = C
        self.gamma = gamma
        self.gamma_scale = gamma_scale
        self.lam = lam
        self.max_iter = max_iter
        self.tol = tol
        self.inner_tol = inner_tol
        self.max_epochs = max_epochs
        self.seed = seed

    def _per_group(self, value: Any, n_groups: int, name: str) -> list[Any]:
        if isinstance(value, str) or value is None or np.isscalar(value):
            return [value] * n_groups
        values = list(value)
        if len(values) != n_groups:
            raise ValueError(f"{name} has {len(values)} entries for {n_groups} feature groups")
        return values

    def _check_params(self) -> None:
        if not (np.isfinite(self.C) and self.C > 0):
            raise ValueError(f"C must be a positive finite number, got {self.C!r}")
        if not (np.isfinite(self.lam) and self.lam >= 0):
            raise ValueError(f"lam must be a finite number >= 0, got {self.lam!r}")
        scales = np.atleast_1d(np.asarray(self.gamma_scale, dtype=np.float64))
        if scales.ndim != 1 or scales.size == 0 or not (np.isfinite(scales) & (scales > 0)).all():
            raise ValueError(
                f"gamma_scale must be positive and finite (one or one per group), "
                f"got {self.gamma_scale!r}"
            )

    def fit(self, Xs: Sequence[np.ndarray], pairs: object) -> RankMKL:
        """Learn kernel weights and pair multipliers from (i above j) preference pairs."""
        self._check_params()
        if isinstance(Xs, np.ndarray) or len(Xs) == 0:
            raise ValueError("Xs must be a non-empty list of (n, d_k) feature-group matrices")
        kinds = self._per_group(self.kernels, len(Xs), "kernels")
        gammas = self._per_group(self.gamma, len(Xs), "gamma")
        gamma_scales = self._per_group(self.gamma_scale, len(Xs), "gamma_scale")
        for kind in kinds:
            if kind not in KERNEL_KINDS:
                raise ValueError(f"unknown kernel {kind!r}; expected one of {KERNEL_KINDS}")
        groups = [
            check_group(X, k, f"Xs[{g}]") for g, (X, k) in enumerate(zip(Xs, kinds, strict=True))
        ]
        n = groups[0].shape[0]
        if any(X.shape[0] != n for X in groups):
            raise ValueError(f"feature groups disagree on n: {[X.shape[0] for X in groups]}")
        pairs = check_pairs(pairs, n)
        trained = [
            train_kernel(k, X, g, float(scale))
            for X, k, g, scale in zip(groups, kinds, gammas, gamma_scales, strict=True)
        ]
        Ks = [K for K, _, _ in trained]
        solution = fit_mkl(
            Ks,
            pairs,
            self.C,
            self.lam,
            self.max_iter,
            self.tol,
            self.inner_tol,
            self.max_epochs,
            seed=self.seed,
        )
        alpha = solution.dual.alpha
        support = np.flatnonzero(alpha != 0.0)
        self.kinds_ = kinds
        self.gammas_ = [g for _, g, _ in trained]
        self.scales_ = np.array([s for _, _, s in trained])
        self.weights_ = solution.weights
        self.alpha_ = alpha[support]
        self.support_ = support
        self.support_groups_ = [X[support] for X in groups]
        self.objective_ = solution.objective
        self.n_iter_ = solution.iterations
        return self

    def _fitted(self) -> None:
        if not hasattr(self, "weights_"):
            raise ValueError("RankMKL is not fitted; call fit(Xs, pairs) first")

    def decision_function(self, Xs: Sequence[np.ndarray]) -> np.ndarray:
        """Scores f(x) = sum_k d_k/s_k sum_i alpha_i k_k(x_i, x); higher ranks first."""
        self._fitted()
        if isinstance(Xs, np.ndarray) or len(Xs) != len(self.kinds_):
            raise ValueError(f"Xs must be a list of {len(self.kinds_)} feature-group matrices")
        scores = None
        for g, (X, kind, gamma, scale, dk, sv) in enumerate(
            zip(
                Xs,
                self.kinds_,
                self.gammas_,
                self.scales_,
                self.weights_,
                self.support_groups_,
                strict=True,
            )
        ):
            X = check_group(X, kind, f"Xs[{g}]")
            if X.shape[1] != sv.shape[1]:
                raise ValueError(f"Xs[{g}] has {X.shape[1]} columns, expected {sv.shape[1]}")
            if scores is None:
                scores = np.zeros(X.shape[0])
            elif X.shape[0] != scores.shape[0]:
                raise ValueError("feature groups disagree on the number of rows")
            if dk == 0.0 or sv.shape[0] == 0:
                continue
            if kind == "linear":  # primal weights: one matrix-vector product per group
                scores += (dk / scale) * (X @ (sv.T @ self.alpha_))
            else:
                scores += (dk / scale) * (raw_kernel(kind, X, sv, gamma) @ self.alpha_)
        return scores

    def to_state(self) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
        """JSON-able meta and named arrays (no pickle): enough to score exactly as fitted."""
        self._fitted()
        meta = {
            "kind": "rankmkl",
            "kernels": list(self.kinds_),
            "gammas": [None if g is None else float(g) for g in self.gammas_],
            "params": {
                "C": float(self.C),
                "lam": float(self.lam),
                "gamma_scale": (
                    float(self.gamma_scale)
                    if np.isscalar(self.gamma_scale)
                    else [float(v) for v in self.gamma_scale]
                ),
            },
        }
        arrays = {
            "weights": self.weights_.copy(),
            "scales": self.scales_.copy(),
            "alpha": self.alpha_.copy(),
            "support": self.support_.copy(),
        }
        for g, sv in enumerate(self.support_groups_):
            arrays[f"support_group_{g}"] = sv.copy()
        return meta, arrays

    @classmethod
    def from_state(cls, meta: dict[str, Any], arrays: dict[str, np.ndarray]) -> RankMKL:
        if meta.get("kind") != "rankmkl":
            raise ValueError(f"state kind {meta.get('kind')!r} is not 'rankmkl'")
        kinds = list(meta["kernels"])
        model = cls(kernels=kinds, **meta.get("params", {}))
        weights = np.array(arrays["weights"], dtype=np.float64)
        alpha = np.array(arrays["alpha"], dtype=np.float64)
        groups = [
            np.array(arrays[f"support_group_{g}"], dtype=np.float64) for g in range(len(kinds))
        ]
        if weights.shape != (len(kinds),) or (weights < 0).any():
            raise ValueError("rankmkl state: weights must be one non-negative value per kernel")
        for name, arr in [("weights", weights), ("alpha", alpha), *enumerate(groups)]:
            if not np.isfinite(arr).all():
                raise ValueError(f"rankmkl state: {name} holds NaN or Inf")
        if any(sv.shape[0] != alpha.shape[0] for sv in groups):
            raise ValueError("rankmkl state: support groups and alpha disagree in length")
        model.kinds_ = kinds
        model.gammas_ = list(meta["gammas"])
        model.scales_ = np.array(arrays["scales"], dtype=np.float64)
        model.weights_ = weights
        model.alpha_ = alpha
        model.support_ = np.array(arrays["support"], dtype=np.int64)
        model.support_groups_ = groups
        return model
