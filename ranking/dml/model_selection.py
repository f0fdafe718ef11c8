"""Choosing an ordinal metric learner's settings: kNN MAE on per-label validation splits.

The papers' protocol (cMDS-DML §5, Li et al. 2015): a metric is good when K-nearest-
neighbour regression in its space estimates held-out ordinal labels well, so a setting
is scored by the mean kNN MAE over random splits that draw training points label by
label. `validation_maes` scores a grid that way; `CMDSDMLCV` and `rankstream eval dml`
(for LDMLR too) both choose with it, so the loop exists once. A learner whose stopping
rule is one of the grid's keys (LDMLR's max_iter, cMDS-DML's tol) is run once per split
to the last stage (`staged_fit`) instead of once per value.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any

import numpy as np
from sklearn.neighbors import NearestNeighbors

from rankstream.ranking.dml.knn import knn_estimates
from rankstream.ranking.metrics import mae

Split = tuple[np.ndarray, np.ndarray]  # (fit rows, validation rows)
Table = list[tuple[dict[str, Any], float]]  # (setting, mean validation MAE), grid order


def embedding_dimension(n_levels: int) -> int:
    """cMDS-DML's s for m labels: max(3, m - 1).

    For beta > 0 the label EDM of eq. (8) has embedding dimension m - 1, and Algorithm 1
    (step 3 pads the m label points to R^s) assumes s is at least that, so that the y_i
    reproduce D and keep property (i). The paper's s = 3 satisfies this on UMIST (m = 3)
    and stays the floor; PubFig's 8 Young levels need 7, digits' 5 ink quintiles 4.
    """
    return max(3, int(n_levels) - 1)


def knn_mae(transformer: Any | None, k: int, X: np.ndarray, r: np.ndarray, split: Split) -> float:
    """MAE of kNN regression (mean of K labels) in a fitted `transformer`'s space (None: X).

    The estimates are `OrdinalKNNRegressor(n_neighbors=k)`'s on the embedded points.
    """
    fit, held_out = split
    embed = (lambda points: points) if transformer is None else transformer.transform
    index = NearestNeighbors(n_neighbors=int(k)).fit(embed(X[fit]))
    return mae(r[held_out], knn_estimates(index, r[fit], embed(X[held_out])))


def grid_points(grid: dict[str, Iterable[Any]]) -> list[dict[str, Any]]:
    """Every combination, in itertools.product order of the keys as given."""
    keys = list(grid)
    return [dict(zip(keys, values, strict=True)) for values in itertools.product(*grid.values())]


def validation_maes(
    factory: Callable[..., Any],
    grid: dict[str, Sequence[Any]],
    k: int,
    X: np.ndarray,
    r: np.ndarray,
    splits: Sequence[Split],
    staged: str | None = None,
) -> Table:
    """Mean validation kNN MAE of `factory(**setting)` for every setting of `grid`.

    Rows come in `grid_points` order whatever `staged` is, so `best_setting`'s tie-break
    (the first lowest MAE) does not depend on how the table was computed. With `staged`,
    that key's values are read off one `staged_fit(X, r, values)` run per split and per
    setting of the other keys; `staged_fit` yields the model at each value in ascending
    order, each equal to a separate fit with it (stages that end on the same map,
    `components_`, are scored once).
    """
    if not splits:
        raise ValueError("no validation splits")
    stages = sorted(grid[staged]) if staged else [None]
    rest = {key: values for key, values in grid.items() if key != staged}
    totals: dict[tuple[Any, ...], float] = {}
    for params in grid_points(rest):
        per_stage = np.zeros(len(stages))
        for fit, held_out in splits:
            if staged is None:
                model = factory(**params).fit(X[fit], r[fit])
                per_stage[0] += knn_mae(model, k, X, r, (fit, held_out))
                continue
            models = factory(**params).staged_fit(X[fit], r[fit], stages)
            previous: tuple[np.ndarray, float] | None = None
            for i, model in enumerate(models):
                # consecutive stages often stop at the same iterate: same map, same MAE
                if previous is None or not np.array_equal(previous[0], model.components_):
                    previous = (model.components_.copy(), knn_mae(model, k, X, r, (fit, held_out)))
                per_stage[i] += previous[1]
        for stage, total in zip(stages, per_stage, strict=True):
            setting = params if staged is None else {**params, staged: stage}
            totals[_key(grid, setting)] = total / len(splits)
    return [(setting, totals[_key(grid, setting)]) for setting in grid_points(grid)]


def _key(grid: dict[str, Any], setting: dict[str, Any]) -> tuple[Any, ...]:
    return tuple(setting[key] for key in grid)


def best_setting(table: Table, **fixed: Any) -> dict[str, Any]:
    """The first setting with the lowest validation MAE among those matching `fixed`."""
    rows = [(value, setting) for setting, value in table if fixed.items() <= setting.items()]
    if not rows:
        raise ValueError(f"no grid point matches {fixed}")
    return min(rows, key=lambda row: row[0])[1]


class PerLabelShuffleSplit:
    """Random (fit, validation) splits drawn label by label (a scikit-learn CV splitter).

    Each label with c >= 2 samples sends round(validation_fraction * c) of them (at least
    1, at most c - 1) to validation; a label seen once always stays in the fit part. This
    is `rankstream eval dml`'s per-label protocol applied to a training set of any
    balance. Usable as `cv=` of scikit-learn's searches (pass y to `split`).
    """

    def __init__(
        self, n_splits: int = 10, validation_fraction: float = 0.3, random_state: int = 0
    ) -> None:
        if int(n_splits) < 1:
            raise ValueError(f"n_splits must be >= 1, got {n_splits!r}")
        if not 0.0 < float(validation_fraction) < 1.0:
            raise ValueError(f"validation_fraction must lie in (0, 1), got {validation_fraction!r}")
        self.n_splits = int(n_splits)
        self.validation_fraction = float(validation_fraction)
        self.random_state = random_state

    def get_n_splits(self, X: object = None, y: object = None, groups: object = None) -> int:
        return self.n_splits

    def split(self, X: object, y: object, groups: object = None) -> Iterator[Split]:
        r = np.asarray(y, dtype=np.float64).ravel()
        levels = [np.flatnonzero(r == level) for level in np.unique(r)]
        if all(members.size < 2 for members in levels):
            raise ValueError("every label occurs once; nothing can be held out for validation")
        rng = np.random.default_rng(self.random_state)
        for _ in range(self.n_splits):
            held_out = []
            for members in levels:
                if members.size < 2:
                    continue
                count = round(self.validation_fraction * members.size)
                count = min(max(count, 1), members.size - 1)
                held_out.append(rng.choice(members, count, replace=False))
            validation = np.sort(np.concatenate(held_out))
            yield np.setdiff1d(np.arange(r.size), validation), validation
