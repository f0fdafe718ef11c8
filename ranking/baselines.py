"""The paper's reference rankers: Uni-Con, Best-Fea and batch RankSVM.

Gao et al. (IJCAI 2015, §5.2) compare the online rankers with "Uni-Con" (all
query-dependent descriptors combined uniformly), "Best-Fea" (the single best
descriptor chosen on validation queries) and RankSVM (Herbrich et al., 2000) run
in batch over the same pair differences. All three are linear scorers
score(phi) = w . phi, optionally through a Standardizer, so they share one scoring
path (`ranking.scaling.linear_scores`) and one storage layout with the online rankers.
"""

from __future__ import annotations

import warnings
from collections.abc import Iterable
from typing import Any, ClassVar

import numpy as np
from threadpoolctl import threadpool_limits

from rankstream.ranking.metrics import average_precision
from rankstream.ranking.scaling import Standardizer, linear_scores, store_scaler, stored_scaler
from rankstream.ranking.validation import (
    as_float_matrix,
    as_float_vector,
    as_pair_labels,
    as_relevance,
    check_positive,
)

UNI_CON = "uni_con"  # Uni-Con's name wherever models are named: the store, reports, experiments


class LinearScorer:
    """Fitted weights (d,) plus the optional scaler they apply to phi."""

    kind: ClassVar[str] = "linear"

    def __init__(self) -> None:
        self.weights_: np.ndarray | None = None
        self.scaler_: Standardizer | None = None

    @property
    def weights(self) -> np.ndarray:
        if self.weights_ is None:
            raise ValueError(f"{type(self).__name__} is not fitted")
        return self.weights_.copy()

    def score(self, Phi: object) -> np.ndarray:
        """Scores (m,) of candidates phi (m, d); higher ranks first."""
        return linear_scores(Phi, self.weights, self.scaler_)

    def _params(self) -> dict[str, Any]:
        return {}

    def to_state(self) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
        """JSON-able meta and named float64 arrays (no pickle)."""
        meta: dict[str, Any] = {"kind": self.kind, "params": self._params()}
        arrays = {"weights": self.weights}
        store_scaler(self.scaler_, meta, arrays)
        return meta, arrays

    @classmethod
    def from_state(cls, meta: dict[str, Any], arrays: dict[str, np.ndarray]) -> LinearScorer:
        if meta.get("kind") != cls.kind:
            raise ValueError(f"state kind {meta.get('kind')!r} is not {cls.kind!r}")
        model = cls(**meta["params"])
        model.weights_ = as_float_vector(arrays["weights"], "weights").copy()
        model.scaler_ = stored_scaler(meta, arrays)
        if model.scaler_ is not None and model.scaler_.dim != model.weights_.shape[0]:
            raise ValueError("scaler and weights disagree on the width")
        return model


class UniCon(LinearScorer):
    """Uni-Con: score = sum of standardized phi (equal weights, all ones).

    `fit(Phi)` fits the Standardizer on training phi; pass `scaler` to reuse one
    already fitted (e.g. the one the online rankers share).
    """

    kind = "unicon"

    def __init__(self, scaler: Standardizer | None = None) -> None:
        super().__init__()
        if scaler is not None:
            self._use(scaler)

    def _use(self, scaler: Standardizer) -> None:
        if scaler.dim is None:
            raise ValueError("scaler must be fitted (on training phi) before use")
        self.scaler_ = scaler
        self.weights_ = np.ones(scaler.dim)

    def fit(self, Phi: object) -> UniCon:
        self._use(Standardizer().fit(Phi))
        return self


class BestFea(LinearScorer):
    """Best-Fea: the single phi dimension with the best mAP on validation queries.

    Both directions of each dimension are tried (a feature may be a distance rather
    than a similarity), so the weights are one signed unit vector. Ties go to the
    lower dimension, then to the positive direction. `fit(queries)` takes an
    iterable of (Phi (m, d), relevance (m,)); relevance > 0 counts as relevant.
    """

    kind = "bestfea"

    def __init__(self) -> None:
        super().__init__()
        self.validation_map_: np.ndarray | None = None  # (2, d): rows +phi, -phi

    @property
    def feature_(self) -> int:
        return int(np.flatnonzero(self.weights)[0])

    def fit(self, queries: Iterable[tuple[object, object]]) -> BestFea:
        totals: np.ndarray | None = None
        n_queries = 0
        for q, (Phi, rel) in enumerate(queries):
            Phi = as_float_matrix(
                Phi, f"queries[{q}] Phi", None if totals is None else totals.shape[1]
            )
            rel = as_relevance(rel, Phi.shape[0], f"queries[{q}] relevance")
            if totals is None:
                totals = np.zeros((2, Phi.shape[1]))
            for sign_row, sign in enumerate((1.0, -1.0)):
                for j in range(Phi.shape[1]):
                    totals[sign_row, j] += average_precision(sign * Phi[:, j], rel)
            n_queries += 1
        if totals is None:
            raise ValueError("BestFea.fit needs at least one validation query")
        self.validation_map_ = totals / n_queries
        flat = int(np.argmax(self.validation_map_.T.ravel()))  # dimension-major: j, then sign
        j, sign_row = divmod(flat, 2)
        self.weights_ = np.zeros(totals.shape[1])
        self.weights_[j] = 1.0 if sign_row == 0 else -1.0
        return self


class RankSVM(LinearScorer):
    """Batch linear RankSVM on pair differences (Herbrich et al., 2000; Joachims, 2002).

    The L2-loss (squared hinge) RankSVM, a standard variant (Chapelle & Keerthi,
    "Efficient algorithms for ranking with SVMs", 2010):

        min_w  f(w) = 1/2 |w|^2 + C sum_i max(0, 1 - y_i w.x_i)^2

    with no intercept (a ranking function has none), solved in the primal by Newton's
    method (Chapelle, "Training a support vector machine in the primal", 2007): with
    z_i = y_i x_i and the active set A = {i : w.z_i < 1}, the gradient is
    w - 2C Z_A'(1 - Z_A w) and the (generalised) Hessian I + 2C Z_A'Z_A is only d x d,
    so each step costs two passes over the rows. f is piecewise quadratic and
    strongly convex, so the iteration converges in a handful of steps; a backtracking
    line search keeps every step a descent. Converged means |grad| <= tol * max(1, |w|).
    The hinge-loss RankSVM's dual solver needs tens of thousands of passes at C ~ 1 on
    200k rows; this one needs about ten, to a tighter optimum.
    """

    kind = "ranksvm"

    def __init__(
        self,
        C: float = 1.0,
        max_iter: int = 50,
        tol: float = 1e-6,
        scaler: Standardizer | None = None,
    ):
        super().__init__()
        self.C = check_positive(C, "C")
        self.max_iter = int(max_iter)
        if self.max_iter < 1:
            raise ValueError(f"max_iter must be >= 1, got {max_iter}")
        self.tol = check_positive(tol, "tol")
        if scaler is not None and scaler.dim is None:
            raise ValueError("scaler must be fitted (on training phi) before use")
        self.scaler_ = scaler
        self.n_iter_: int | None = None

    def _params(self) -> dict[str, Any]:
        return {"C": self.C, "max_iter": self.max_iter, "tol": self.tol}

    def objective(self, X: object, y: object, w: object | None = None) -> float:
        """f(w) on pair differences X, labels y (the fitted weights by default)."""
        Z = self._signed_rows(X, y)
        w = self.weights if w is None else as_float_vector(w, "w", Z.shape[1])
        return _objective(Z, w, self.C)

    def _signed_rows(self, X: object, y: object) -> np.ndarray:
        dim = None if self.scaler_ is None else self.scaler_.dim
        X = as_float_matrix(X, "X", dim)
        y = as_pair_labels(y, X.shape[0])
        if self.scaler_ is not None:
            X = self.scaler_.transform_differences(X)
        return X * y[:, None]

    def fit(self, X: object, y: object) -> RankSVM:
        """X (n, d) pair differences phi1 - phi2, y (n,) in {+1, -1}; n >= 2.

        Raises sklearn's ConvergenceWarning if `max_iter` Newton steps do not reach `tol`.
        BLAS runs single-threaded here: the products are (n x d)'(n x d) with d ~ 36,
        too thin to split across threads, and on a shared machine OpenBLAS's waiting
        threads made a fit 4-6x slower in wall time.
        """
        Z = self._signed_rows(X, y)
        if Z.shape[0] < 2:
            raise ValueError("RankSVM needs at least 2 pairs")
        with threadpool_limits(limits=1, user_api="blas"):
            w = self._newton(Z)
        if not np.isfinite(w).all():
            raise ValueError("RankSVM produced non-finite weights")
        self.weights_ = w
        return self

    def _newton(self, Z: np.ndarray) -> np.ndarray:
        w = np.zeros(Z.shape[1])
        converged = False
        self.n_iter_ = 0  # Newton steps taken
        for _ in range(self.max_iter + 1):
            margins = Z @ w
            active = margins < 1.0
            Z_active = Z[active]
            gradient = w - 2.0 * self.C * (Z_active.T @ (1.0 - margins[active]))
            if np.linalg.norm(gradient) <= self.tol * max(1.0, float(np.linalg.norm(w))):
                converged = True
                break
            if self.n_iter_ == self.max_iter:
                break
            hessian = 2.0 * self.C * (Z_active.T @ Z_active)
            hessian[np.diag_indices_from(hessian)] += 1.0
            step = np.linalg.solve(hessian, -gradient)
            w = _backtrack(Z, w, margins, step, float(gradient @ step), self.C)
            self.n_iter_ += 1
        if not converged:
            # scikit-learn: ~6 s at import here; only a RankSVM that does not converge needs it
            from sklearn.exceptions import ConvergenceWarning

            warnings.warn(
                f"RankSVM did not converge in {self.max_iter} Newton steps (C={self.C})",
                ConvergenceWarning,
                stacklevel=3,
            )
        return w


def _objective(Z: np.ndarray, w: np.ndarray, C: float) -> float:
    slack = np.maximum(0.0, 1.0 - Z @ w)
    return float(0.5 * (w @ w) + C * (slack @ slack))


def _backtrack(
    Z: np.ndarray, w: np.ndarray, margins: np.ndarray, step: np.ndarray, slope: float, C: float
) -> np.ndarray:
    """w + t step with the largest t in 1, 1/2, 1/4, ... meeting Armijo's condition.

    The decrease f(w + t step) - f(w) is summed term by term, each slack's change as
    (a - b)(a + b), not as a difference of two totals: near the optimum the decrease
    is far below the rounding of f itself (~1e-16 |f|), and comparing totals would
    reject every step there and stall.
    """
    along = Z @ step
    before = np.maximum(0.0, 1.0 - margins)
    ws, ss = float(w @ step), float(step @ step)
    t = 1.0
    while t > 1e-10:
        after = np.maximum(0.0, 1.0 - margins - t * along)
        change = t * ws + 0.5 * t * t * ss + C * float((after - before) @ (after + before))
        if change <= 1e-4 * t * slope:
            return w + t * step
        t *= 0.5
    return w
