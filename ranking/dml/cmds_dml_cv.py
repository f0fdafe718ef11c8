"""CMDSDMLCV: cMDS-DML with mu, beta, the stopping rule and s chosen on validation splits.

`CMDSDML`'s results depend on settings the data decide (see its docstring): beta shapes
the label target, tol is the regulariser that stops the descent before eq. (10)'s
degenerate minimiser, and s must hold the label EDM. `rankstream eval dml` validates
them per data set; this estimator does the same on inner splits of whatever it is
fitted on, in scikit-learn's RidgeCV / LogisticRegressionCV idiom, so that calling it
with defaults gives the validated learner:

>>> import numpy as np
>>> from sklearn.datasets import load_digits
>>> from rankstream.ranking.dml import OrdinalKNNRegressor
>>> X, _ = load_digits(return_X_y=True)
>>> ink = X.sum(axis=1)
>>> r = np.searchsorted(np.quantile(ink, [0.2, 0.4, 0.6, 0.8]), ink, side="right")
>>> model = CMDSDMLCV(pca_components=40, cv=3).fit(X[:60], r[:60])
>>> sorted(model.best_params_)
['beta', 'mu', 'n_components', 'tol']
>>> knn = OrdinalKNNRegressor(transformer=model).fit(X[:60], r[:60])
>>> knn.predict(X[100:103]).shape
(3,)
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
from sklearn.utils.validation import validate_data
from threadpoolctl import threadpool_limits

from rankstream.ranking.dml.base import (
    OrdinalMetricLearner,
    check_enough_samples,
    check_ordinal_labels,
)
from rankstream.ranking.dml.cmds_dml import CMDSDML
from rankstream.ranking.dml.model_selection import (
    PerLabelShuffleSplit,
    best_setting,
    embedding_dimension,
    validation_maes,
)
from rankstream.ranking.estimator_params import keep_init_params

# The grids `rankstream eval dml` validates over. cMDS-DML is nearly flat in mu; beta 0
# wins where the target is one direction (digits' ink), 5-10 on identity-like levels
# (PubFig's Young ranks); tol 1e-4 to 3e-5 on digits, 1e-6 to 1e-7 on PubFig.
MUS = (1e-5, 1e-4, 1e-3, 1e-2)
TOLS = (3e-4, 1e-4, 3e-5, 1e-5, 3e-6, 1e-6, 3e-7, 1e-7, 3e-8)
BETAS = (0.0, 1.0, 2.0, 3.0, 5.0, 10.0)


def default_n_components(n_levels: int) -> tuple[int, ...]:
    """s candidates for m labels: the paper's 3 and the dimension that holds eq. (8)."""
    return tuple(sorted({3, embedding_dimension(n_levels)}))


class CMDSDMLCV(OrdinalMetricLearner):
    """cMDS-DML whose mu, beta, tol and s are chosen by kNN MAE on validation splits.

    Every combination of `mus`, `tols`, `betas` and `n_components` is scored by the mean
    MAE of K-nearest-neighbour regression (K = `n_neighbors`, the learner's own K) on the
    validation part of each split of `cv` (`ranking.dml.model_selection`); the best one is
    refitted on all the data. All tols of a setting come from one descent
    (`CMDSDML.staged_fit`). `n_components` None means `default_n_components` of the
    number of labels, an int fixes s, a sequence is searched. `cv` None is 10
    `PerLabelShuffleSplit`s holding out 30% of each label (seeded by `random_state`), an
    int that many, or any scikit-learn splitter or iterable of (fit, validation) index
    arrays. `max_iter` passes to CMDSDML unchanged, and so does an int or None
    `pca_components`; "auto" is PCA to the training data's rank: no direction with
    variance is dropped, but the points are rotated onto their principal axes, so that
    L0 = (e_1..e_s)^T starts the descent on the top s principal directions, as after the
    paper's PCA step, and not on whichever s input columns come first. (Digits' ink, 10
    images per label, 5 splits, kNN MAE: no PCA 0.94, "auto" 0.42, the eval's PCA 40
    0.44, Euclidean kNN 1.13.)

    Fitted attributes: best_params_ (mu, tol, beta, n_components), best_mae_ (its mean
    validation MAE), cv_results_ ({"params": [...], "mean_validation_mae": array} in grid
    order), estimator_ (the refitted CMDSDML) and, from it, components_,
    preprocessing_, beta_, c_, n_iter_, converged_.
    """

    def __init__(
        self,
        n_neighbors: int = 5,
        n_components: int | Sequence[int] | None = None,
        mus: Sequence[float] = MUS,
        tols: Sequence[float] = TOLS,
        betas: Sequence[float] = BETAS,
        max_iter: int = 500,
        pca_components: int | str | None = "auto",
        cv: object = None,
        random_state: int = 0,
    ) -> None:
        keep_init_params(locals())

    def _grid(self, n_levels: int) -> dict[str, tuple[Any, ...]]:
        """The search grid; key order fixes the tie-break (`best_setting`)."""
        if self.n_components is None:
            s_values = default_n_components(n_levels)
        else:
            s_values = tuple(int(s) for s in np.atleast_1d(self.n_components))
        grid = {
            "mu": tuple(float(v) for v in np.atleast_1d(self.mus)),
            "tol": tuple(float(v) for v in np.atleast_1d(self.tols)),
            "beta": tuple(float(v) for v in np.atleast_1d(self.betas)),
            "n_components": s_values,
        }
        for name, values in grid.items():
            if not values or not all(np.isfinite(v) and v >= 0 for v in values):
                raise ValueError(f"{name} candidates must be finite and >= 0, got {values!r}")
        if min(s_values) < 1:
            raise ValueError(f"n_components must be >= 1, got {s_values!r}")
        return grid

    def _splits(self, X: np.ndarray, r: np.ndarray) -> list[tuple[np.ndarray, np.ndarray]]:
        cv = self.cv
        if cv is None or isinstance(cv, int | np.integer):
            n_splits = 10 if cv is None else int(cv)
            cv = PerLabelShuffleSplit(n_splits, random_state=self.random_state)
        splits = list(cv.split(X, r) if hasattr(cv, "split") else cv)
        k = int(self.n_neighbors)
        for fit, held_out in splits:
            if len(held_out) == 0:
                raise ValueError("a validation split is empty")
            check_enough_samples(len(fit), k)
        return [(np.asarray(fit), np.asarray(held_out)) for fit, held_out in splits]

    def fit(self, X: object, y: object) -> CMDSDMLCV:
        """Validate the grid on splits of (X, y), then refit the best setting on all of it."""
        X, r = validate_data(self, X, y, y_numeric=True, dtype=np.float64)
        check_enough_samples(X.shape[0], int(self.n_neighbors))
        r = check_ordinal_labels(r)
        grid = self._grid(np.unique(r).size)
        k = int(self.n_neighbors)

        pca = self.pca_components
        if isinstance(pca, str):
            if pca != "auto":
                raise ValueError(f"pca_components must be an int, None or 'auto', got {pca!r}")
            pca = X.shape[1]  # Preprocessing caps it at the rank

        def factory(**params: Any) -> CMDSDML:
            return CMDSDML(n_neighbors=k, max_iter=int(self.max_iter), pca_components=pca, **params)

        # Hundreds of fits on small matrices: BLAS threads only contend (on a busy 2-core
        # machine the per-fit PCA's SVD ran ~6x slower in total with them).
        with threadpool_limits(limits=1, user_api="blas"):
            table = validation_maes(factory, grid, k, X, r, self._splits(X, r), staged="tol")
        self.best_params_ = best_setting(table)
        self.best_mae_ = float(min(value for _, value in table))
        self.cv_results_ = {
            "params": [params for params, _ in table],
            "mean_validation_mae": np.array([value for _, value in table]),
        }
        self.estimator_ = factory(**self.best_params_).fit(X, r)
        for name in ("components_", "preprocessing_", "beta_", "c_", "n_iter_", "converged_"):
            setattr(self, name, getattr(self.estimator_, name))
        return self
