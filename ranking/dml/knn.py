"""kNN regression of ordinal labels in a learned space: the papers' MAE protocol.

The cMDS-DML paper (§5) and Li et al. (2015) estimate a test image's label by
"k-nearest neighbour regression" in the learned space and report the MAE of that
estimate. We read this as the plain kNN regressor: the *mean* label of the K nearest
training points, not rounded (a rounded or median vote is available for comparison).
"""

from __future__ import annotations

import numpy as np
from sklearn.base import BaseEstimator, RegressorMixin, clone
from sklearn.neighbors import NearestNeighbors
from sklearn.utils.validation import check_is_fitted, validate_data

from rankstream.ranking.dml.base import check_enough_samples


class OrdinalKNNRegressor(RegressorMixin, BaseEstimator):
    """Mean (or median) label of the K nearest training points after `transformer`.

    `transformer` (e.g. CMDSDML, LDMLR) is cloned and fitted on (X, r) in `fit`; None
    means Euclidean kNN on the raw features. `rounding=True` rounds each estimate to the
    nearest integer label.
    """

    def __init__(
        self,
        n_neighbors: int = 5,
        transformer: object | None = None,
        aggregate: str = "mean",
        rounding: bool = False,
    ) -> None:
        self.n_neighbors = n_neighbors
        self.transformer = transformer
        self.aggregate = aggregate
        self.rounding = rounding

    def fit(self, X: object, y: object) -> OrdinalKNNRegressor:
        if self.aggregate not in ("mean", "median"):
            raise ValueError(f"aggregate must be 'mean' or 'median', got {self.aggregate!r}")
        X, r = validate_data(self, X, y, y_numeric=True, dtype=np.float64)
        if int(self.n_neighbors) < 1 or X.shape[0] < int(self.n_neighbors):
            check_enough_samples(X.shape[0], int(self.n_neighbors) - 1)
        self.labels_ = np.asarray(r, dtype=np.float64)
        if self.transformer is None:
            self.transformer_ = None
            embedded = X
        else:
            self.transformer_ = clone(self.transformer).fit(X, self.labels_)
            embedded = self.transformer_.transform(X)
        self.index_ = NearestNeighbors(n_neighbors=int(self.n_neighbors)).fit(embedded)
        return self

    def predict(self, X: object) -> np.ndarray:
        check_is_fitted(self, "index_")
        X = validate_data(self, X, reset=False, dtype=np.float64)
        embedded = X if self.transformer_ is None else self.transformer_.transform(X)
        return knn_estimates(self.index_, self.labels_, embedded, self.aggregate, self.rounding)


def knn_estimates(
    index: NearestNeighbors,
    labels: np.ndarray,
    queries: np.ndarray,
    aggregate: str = "mean",
    rounding: bool = False,
) -> np.ndarray:
    """Mean (or median) of `labels` over each query's neighbours in a fitted `index`.

    The regressor's prediction, shared with `ranking.dml.model_selection.knn_mae`, which
    scores thousands of validation fits and skips the estimator's per-call input checks.
    """
    neighbors = index.kneighbors(queries, return_distance=False)
    votes = labels[neighbors]
    estimate = votes.mean(axis=1) if aggregate == "mean" else np.median(votes, axis=1)
    return np.rint(estimate) if rounding else estimate
