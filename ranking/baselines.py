"""The paper's reference rankers: Uni-Con, Best-Fea and batch RankSVM.

Gao et al. (IJCAI 2015, §5.2) compare the online rankers with "Uni-Con" (all
query-dependent descriptors combined uniformly), "Best-Fea" (the single best
descriptor chosen on validation queries) and RankSVM (Herbrich et al., 2000) run
in batch over the same pair differences. All three are linear scorers
score(phi) = w . phi, optionally through a Standardizer, so they share one scoring
path (`ranking.scaling.linear_scores`) and one storage layout with the online rankers.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, ClassVar

import numpy as np

from ranking.metrics import average_precision
from ranking.scaling import Standardizer, linear_scores
from ranking.validation import (
    as_float_matrix,
    as_float_vector,
    as_pair_labels,
    as_relevance,
    check_positive,
)


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
        meta: dict[str, Any] = {"kind": self.kind, "params": self._params(), "scaler": None}
        arrays = {"weights": self.weights}
        if self.scaler_ is not None:
            meta["scaler"], scaler_arrays = self.scaler_.to_state()
            arrays.update({f"scaler.{k}": v for k, v in scaler_arrays.items()})
        return meta, arrays

    @classmethod
    def from_state(cls, meta: dict[str, Any], arrays: dict[str, np.ndarray]) -> LinearScorer:
        if meta.get("kind") != cls.kind:
            raise ValueError(f"state kind {meta.get('kind')!r} is not {cls.kind!r}")
        model = cls(**meta["params"])
        model.weights_ = as_float_vector(arrays["weights"], "weights").copy()
        if meta.get("scaler") is not None:
            prefix = "scaler."
            model.scaler_ = Standardizer.from_state(
                meta["scaler"],
                {k[len(prefix) :]: v for k, v in arrays.items() if k.startswith(prefix)},
            )
            if model.scaler_.dim != model.weights_.shape[0]:
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

    Solves min_w 1/2 |w|^2 + C sum_i max(0, 1 - y_i w.x_i) with scikit-learn's
    LinearSVC (hinge loss, no intercept: a ranking function has none). Rows are
    sign-flipped to alternate labels (x, y) -> (-x, -y), which leaves every term of
    the objective unchanged but guarantees the classifier sees both classes.
    """

    kind = "ranksvm"

    def __init__(self, C: float = 1.0, max_iter: int = 20000, scaler: Standardizer | None = None):
        super().__init__()
        self.C = check_positive(C, "C")
        self.max_iter = int(max_iter)
        if scaler is not None and scaler.dim is None:
            raise ValueError("scaler must be fitted (on training phi) before use")
        self.scaler_ = scaler

    def _params(self) -> dict[str, Any]:
        return {"C": self.C, "max_iter": self.max_iter}

    def fit(self, X: object, y: object) -> RankSVM:
        """X (n, d) pair differences phi1 - phi2, y (n,) in {+1, -1}; n >= 2."""
        from sklearn.svm import LinearSVC

        dim = None if self.scaler_ is None else self.scaler_.dim
        X = as_float_matrix(X, "X", dim)
        y = as_pair_labels(y, X.shape[0])
        if X.shape[0] < 2:
            raise ValueError("RankSVM needs at least 2 pairs")
        if self.scaler_ is not None:
            X = self.scaler_.transform_differences(X)
        flip = y * np.where(np.arange(X.shape[0]) % 2 == 0, 1.0, -1.0)
        svc = LinearSVC(
            C=self.C,
            loss="hinge",
            dual=True,
            fit_intercept=False,
            max_iter=self.max_iter,
            random_state=0,
        )
        svc.fit(X * flip[:, None], y * flip)
        weights = np.asarray(svc.coef_[0], dtype=np.float64)
        if not np.isfinite(weights).all():
            raise ValueError("RankSVM produced non-finite weights")
        self.weights_ = weights.copy()
        return self
