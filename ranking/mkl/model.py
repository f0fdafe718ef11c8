"""RankMKL as a scikit-learn estimator: kernel RankSVM over a learned mix of base kernels.

scikit-learn passes one matrix X and one target y, so the feature groups are consecutive
column blocks of X (`group_sizes`) and the preference pairs come from y: every (i, j)
with y_i > y_j, within a query when `query_id` is given (`ranking.pairs`). `score` is the
pairwise accuracy on the pairs y implies, so `GridSearchCV(RankMKL(), ...)` selects by the
measure the paper reports. Pairs that do not come from labels (a click log, a reservoir of
triplets) go through `fit_pairs`; `from_groups` takes the paper's list of feature-group
matrices. All three reach the same solver through `_fit_on_pairs`.
"""

from __future__ import annotations

import numbers
from collections.abc import Sequence
from typing import Any

import numpy as np
from sklearn.base import BaseEstimator
from sklearn.utils import check_random_state
from sklearn.utils.validation import check_is_fitted, validate_data

from rankstream.ranking.estimator_params import keep_init_params
from rankstream.ranking.metrics import pairwise_accuracy
from rankstream.ranking.mkl.base_kernels import KERNEL_KINDS, check_group, raw_kernel, train_kernel
from rankstream.ranking.mkl.solver import fit_mkl
from rankstream.ranking.pairs import check_pairs, preference_pairs, sample_pairs

_SEED_LIMIT = 2**31 - 1  # numba seeds the dual solver's shuffles from an int32


def concat_groups(Xs: Sequence[object]) -> tuple[np.ndarray, tuple[int, ...]]:
    """The paper's feature-group matrices as one X (n, sum d_k) and their `group_sizes`."""
    if isinstance(Xs, np.ndarray) or len(Xs) == 0:
        raise ValueError("Xs must be a non-empty list of (n, d_k) feature-group matrices")
    groups = [np.asarray(X) for X in Xs]
    for g, X in enumerate(groups):
        if X.ndim != 2 or X.shape[1] == 0:
            raise ValueError(f"Xs[{g}] must be a non-empty 2-d (n, d) matrix, got {X.shape}")
    rows = [X.shape[0] for X in groups]
    if len(set(rows)) > 1:
        raise ValueError(f"feature groups disagree on n: {rows}")
    return np.hstack(groups), tuple(X.shape[1] for X in groups)


def _seed(random_state: object) -> int:
    """An int random_state is the solver's seed itself; None or a RandomState draws one."""
    if isinstance(random_state, numbers.Integral) and not isinstance(random_state, bool):
        if not 0 <= int(random_state) <= _SEED_LIMIT:
            raise ValueError(f"random_state must lie in [0, {_SEED_LIMIT}], got {random_state}")
        return int(random_state)
    return int(check_random_state(random_state).randint(_SEED_LIMIT))


class RankMKL(BaseEstimator):
    """Multiple kernel RankSVM (Sharaf, Hussein & Ismail 2015), GMKL-style weights.

    X holds the feature groups side by side: `group_sizes` (d_1, ..., d_t) are the widths
    of its consecutive column blocks, one base kernel each; None is one group of all
    columns (a plain kernel RankSVM). `fit(X, y, query_id=None)` learns from every pair
    y_i > y_j (within a query when query ids are given), subsampled to `max_pairs`
    (None: all of them; the dual has one variable per pair, the kernels are n x n).
    `score(X, y, query_id=None)` is the pairwise accuracy on the pairs y implies.

    `kernels` is "linear" or "chi2" for every group, or one kind per group; chi2 is the
    exponential chi-square kernel exp(-gamma chi2(x, x')) and needs non-negative features
    (scale with e.g. `MinMaxScaler(clip=True)` in a pipeline). `gamma` (chi2 bandwidth) is
    None (= 1 / mean chi2 distance on the training points), a float, or one value per
    group; `gamma_scale` (a float, or one per group) multiplies the default (the knob that
    cross-validation turns, since the data sets the default's units). `lam` is the L2
    regulariser lam/2 ||d||^2 on the kernel weights. With two or more groups only
    lam / C^3 matters for the ranking (see `ranking.mkl.solver.fit_mkl`). Base kernels are
    scaled to unit spread (see `ranking.mkl.base_kernels`). With a single group the weight
    stays 1: rescaling one kernel is what C does, so one group is exactly a kernel
    RankSVM. `random_state`: an int seeds the dual solver's coordinate order (and the pair
    subsample) directly; None or a RandomState draws a seed.

    With query ids inside `GridSearchCV`: `search.fit(X, y, query_id=q)` passes them to
    `fit`; for `score` to see them too, enable metadata routing and request them with
    `RankMKL().set_fit_request(query_id=True).set_score_request(query_id=True)`.

    Fitted attributes: group_sizes_, kinds_, gammas_, scales_, weights_ (d, one per
    kernel), alpha_ and support_ (the non-zero per-point coefficients and their training
    rows), support_groups_, n_pairs_, objective_, n_iter_.

    >>> rng = np.random.default_rng(0)
    >>> signal = rng.random((40, 3)); noise = rng.random((40, 5))
    >>> X, y = np.hstack([signal, noise]), signal[:, 0]
    >>> model = RankMKL(group_sizes=(3, 5), kernels=["linear", "chi2"], C=10.0).fit(X, y)
    >>> bool(model.weights_[0] > model.weights_[1]), model.score(X, y) > 0.95
    (True, True)
    """

    def __init__(
        self,
        group_sizes: Sequence[int] | None = None,
        kernels: str | Sequence[str] = "chi2",
        C: float = 1.0,
        gamma: float | Sequence[float | None] | None = None,
        gamma_scale: float | Sequence[float] = 1.0,
        lam: float = 1.0,
        max_pairs: int | None = None,
        max_iter: int = 30,
        tol: float = 1e-3,
        inner_tol: float = 1e-3,
        max_epochs: int = 2000,
        random_state: int | np.random.RandomState | None = 0,
    ) -> None:
        keep_init_params(locals())

    # --- parameters -----------------------------------------------------------------
    def _sizes(self, n_features: int) -> tuple[int, ...]:
        if self.group_sizes is None:
            return (n_features,)
        sizes = tuple(int(s) for s in np.atleast_1d(np.asarray(self.group_sizes)))
        if not sizes or min(sizes) < 1:
            raise ValueError(f"group_sizes must be positive widths, got {self.group_sizes!r}")
        if sum(sizes) != n_features:
            raise ValueError(
                f"group_sizes {sizes} add up to {sum(sizes)} columns, but X has {n_features}"
            )
        return sizes

    @staticmethod
    def _per_group(value: Any, n_groups: int, name: str) -> list[Any]:
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
        if self.max_pairs is not None and int(self.max_pairs) < 1:
            raise ValueError(f"max_pairs must be >= 1 or None, got {self.max_pairs!r}")

    def _kinds(self, n_groups: int) -> list[str]:
        kinds = self._per_group(self.kernels, n_groups, "kernels")
        for kind in kinds:
            if kind not in KERNEL_KINDS:
                raise ValueError(f"unknown kernel {kind!r}; expected one of {KERNEL_KINDS}")
        return kinds

    # --- fitting --------------------------------------------------------------------
    def fit(self, X: object, y: object, query_id: object | None = None) -> RankMKL:
        """Learn from every pair y_i > y_j (within a query if `query_id` is given)."""
        self._check_params()
        X, y = validate_data(self, X, y, y_numeric=True, dtype=np.float64)
        if X.shape[0] < 2:
            raise ValueError(f"got {X.shape[0]} sample; RankMKL needs at least 2 to rank")
        pairs = preference_pairs(y, query_id)
        if pairs.shape[0] == 0:
            where = "within any query" if query_id is not None else "in y"
            raise ValueError(f"no preference pairs: every label is equal {where}")
        seed = _seed(self.random_state)
        pairs = sample_pairs(pairs, self.max_pairs, np.random.default_rng(seed))
        return self._fit_on_pairs(X, pairs, seed)

    def fit_pairs(self, X: object, pairs: object) -> RankMKL:
        """Learn from explicit preference pairs: rows (i, j) of indices into X, i above j."""
        self._check_params()
        X = validate_data(self, X, dtype=np.float64)
        return self._fit_on_pairs(X, check_pairs(pairs, X.shape[0]), _seed(self.random_state))

    @classmethod
    def from_groups(cls, Xs: Sequence[object], pairs: object, **params: Any) -> RankMKL:
        """The paper's input: a list of (n, d_k) feature-group matrices and (i, j) pairs."""
        X, sizes = concat_groups(Xs)
        return cls(group_sizes=sizes, **params).fit_pairs(X, pairs)

    def _fit_on_pairs(self, X: np.ndarray, pairs: np.ndarray, seed: int) -> RankMKL:
        sizes = self._sizes(X.shape[1])
        kinds = self._kinds(len(sizes))
        gammas = self._per_group(self.gamma, len(sizes), "gamma")
        gamma_scales = self._per_group(self.gamma_scale, len(sizes), "gamma_scale")
        groups = [
            check_group(block, kind, f"feature group {g}")
            for g, (block, kind) in enumerate(zip(self._split(X, sizes), kinds, strict=True))
        ]
        trained = [
            train_kernel(k, block, g, float(scale))
            for block, k, g, scale in zip(groups, kinds, gammas, gamma_scales, strict=True)
        ]
        solution = fit_mkl(
            [K for K, _, _ in trained],
            pairs,
            self.C,
            self.lam,
            self.max_iter,
            self.tol,
            self.inner_tol,
            self.max_epochs,
            seed=seed,
        )
        alpha = solution.dual.alpha
        support = np.flatnonzero(alpha != 0.0)
        self.group_sizes_ = sizes
        self.kinds_ = kinds
        self.gammas_ = [g for _, g, _ in trained]
        self.scales_ = np.array([s for _, _, s in trained])
        self.weights_ = solution.weights
        self.alpha_ = alpha[support]
        self.support_ = support
        self.support_groups_ = [block[support] for block in groups]
        self.n_pairs_ = int(pairs.shape[0])
        self.objective_ = solution.objective
        self.n_iter_ = solution.iterations
        return self

    @staticmethod
    def _split(X: np.ndarray, sizes: Sequence[int]) -> list[np.ndarray]:
        edges = np.cumsum(sizes)[:-1]
        return np.hsplit(X, edges)

    # --- prediction -----------------------------------------------------------------
    def decision_function(self, X: object) -> np.ndarray:
        """Scores f(x) = sum_k d_k/s_k sum_i alpha_i k_k(x_i, x); higher ranks first."""
        check_is_fitted(self, "weights_")
        X = validate_data(self, X, reset=False, dtype=np.float64)
        scores = np.zeros(X.shape[0])
        blocks = self._split(X, self.group_sizes_)
        for g, (block, kind, gamma, scale, dk, sv) in enumerate(
            zip(
                blocks,
                self.kinds_,
                self.gammas_,
                self.scales_,
                self.weights_,
                self.support_groups_,
                strict=True,
            )
        ):
            block = check_group(block, kind, f"feature group {g}")
            if dk == 0.0 or sv.shape[0] == 0:
                continue
            if kind == "linear":  # primal weights: one matrix-vector product per group
                scores += (dk / scale) * (block @ (sv.T @ self.alpha_))
            else:
                scores += (dk / scale) * (raw_kernel(kind, block, sv, gamma) @ self.alpha_)
        return scores

    def score(self, X: object, y: object, query_id: object | None = None) -> float:
        """Pairwise accuracy of the scores on every pair y_i > y_j (within a query)."""
        pairs = preference_pairs(y, query_id)
        if pairs.shape[0] == 0:
            raise ValueError("no preference pairs to score: every label is equal")
        return pairwise_accuracy(self.decision_function(X), pairs)

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.target_tags.required = True
        kinds = [self.kernels] if isinstance(self.kernels, str) else list(self.kernels)
        tags.input_tags.positive_only = "chi2" in kinds
        return tags

    # --- model store: JSON meta + plain arrays, never pickle -------------------------
    def to_state(self) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
        """JSON-able meta and named arrays (no pickle): enough to score exactly as fitted."""
        check_is_fitted(self, "weights_")
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
        """Rebuild a fitted model from `to_state` output; group widths come from the arrays."""
        if meta.get("kind") != "rankmkl":
            raise ValueError(f"state kind {meta.get('kind')!r} is not 'rankmkl'")
        kinds = list(meta["kernels"])
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
        if any(sv.ndim != 2 or sv.shape[0] != alpha.shape[0] for sv in groups):
            raise ValueError("rankmkl state: support groups and alpha disagree in length")
        sizes = tuple(int(sv.shape[1]) for sv in groups)
        model = cls(group_sizes=sizes, kernels=kinds, **meta.get("params", {}))
        model.n_features_in_ = sum(sizes)
        model.group_sizes_ = sizes
        model.kinds_ = kinds
        model.gammas_ = list(meta["gammas"])
        model.scales_ = np.array(arrays["scales"], dtype=np.float64)
        model.weights_ = weights
        model.alpha_ = alpha
        model.support_ = np.array(arrays["support"], dtype=np.int64)
        model.support_groups_ = groups
        return model
