"""Online rankers against the paper's baselines on a CBIR test bed (Table 2 of §5.2).

Protocol, as in the online-LTR paper's §5.1-5.2:

* one Standardizer is fitted on training phi only and shared by every learned model;
* Uni-Con sums the standardized features; Best-Fea picks the single feature (and
  direction) with the best validation mAP; batch RankSVM picks C on validation;
* OPR, OPAR-I, OPAR-II, OGDR and AROW each make ONE pass over the training rows in a
  fixed shuffled order (the same order for all), their parameter (C, eta or r) chosen
  from a small grid by validation mAP; OPR has none;
* validation also chooses each online ranker's initialisation ("init" in params):
  zero weights, or a warm start from Uni-Con (all ones on standardized phi, the search
  engine's starting model, DESIGN.md's warm start). Why: OPR has no step parameter,
  so nothing else tempers it; it is a plain perceptron on non-separable pairs whose
  last weights swing with the stream, and from zero its first mistakes alone set the
  direction, while from Uni-Con it corrects a sensible model. The update rules are
  untouched; the same choice is open to every online ranker (the aggressive ones,
  with their tuned step, mostly end where they would from zero);
* every chosen model is scored on the test queries: mAP and NDCG@50.

The result is a plain dict (JSON-ready); see `evaluate_cbir`.
"""

from __future__ import annotations

import itertools
import os
from collections.abc import Callable, Sequence
from functools import partial
from typing import Any

import numpy as np

from rankstream.ranking.baselines import BestFea, RankSVM, UniCon
from rankstream.ranking.metrics import average_precision, mean_over_queries, ndcg_at_k
from rankstream.ranking.online import OnlineRanker
from rankstream.ranking.scaling import Standardizer
from rankstream.simulators.cbir_testbed import CBIRTestBed, RankedQuery, load_synthetic_testbed
from rankstream.simulators.digits import load_digits_testbed

TestBedLoader = Callable[..., CBIRTestBed]

DATASETS: dict[str, TestBedLoader] = {
    "digits": load_digits_testbed,
    "synthetic": load_synthetic_testbed,
}
"""Dataset name -> loader(seed=, train_rows=, max_val_queries=, max_test_queries=, cache_dir=)."""

METHODS = ("uni_con", "best_fea", "ranksvm", "opr", "opar1", "opar2", "ogdr", "arow")

ONLINE_GRIDS: dict[str, dict[str, Sequence[float]]] = {
    "opr": {},
    "opar1": {"C": (0.0001, 0.001, 0.01, 0.1, 1.0)},
    "opar2": {"C": (0.0001, 0.001, 0.01, 0.1, 1.0)},
    "ogdr": {"eta": (0.0001, 0.001, 0.01, 0.1, 1.0)},
    "arow": {"r": (0.1, 1.0, 10.0, 100.0)},
}
"""Validation grids for the online rankers (the paper chooses them by cross validation)."""

INITIALISATIONS = ("zero", "uni_con")
"""Starting weights validation chooses from for every online ranker (zero first on ties)."""

RANKSVM_GRID: Sequence[float] = (0.01, 0.1, 1.0)

Progress = Callable[[str], None]
Scorer = Callable[[np.ndarray], np.ndarray]


def mean_ap(score: Scorer, queries: Sequence[RankedQuery]) -> float:
    """mAP of a scoring function over judged queries."""
    return mean_over_queries(average_precision, ((score(q.phi), q.relevance) for q in queries))


def mean_ndcg_at_50(score: Scorer, queries: Sequence[RankedQuery]) -> float:
    ndcg_at_50 = partial(ndcg_at_k, k=50)
    return mean_over_queries(ndcg_at_50, ((score(q.phi), q.relevance) for q in queries))


def _select(
    candidates: Sequence[tuple[dict[str, Any], Callable[[], Any]]],
    val_queries: Sequence[RankedQuery],
) -> tuple[Any, dict[str, Any], float]:
    """Fit each (params, build) candidate; keep the best by validation mAP (first on ties)."""
    best: tuple[Any, dict[str, Any], float] | None = None
    for params, build in candidates:
        model = build()
        score = mean_ap(model.score, val_queries)
        if best is None or score > best[2]:
            best = (model, params, score)
    assert best is not None  # every grid has at least one point
    return best


def _fit_online(
    algo: str,
    scaler: Standardizer,
    X: np.ndarray,
    y: np.ndarray,
    init: str,
    hyper: dict[str, float],
) -> OnlineRanker:
    warm_start = UniCon(scaler).weights if init == "uni_con" else None
    return OnlineRanker(algo=algo, scaler=scaler, warm_start=warm_start, **hyper).learn_many(X, y)


def _online_candidates(
    algo: str, scaler: Standardizer, X: np.ndarray, y: np.ndarray
) -> list[tuple[dict[str, Any], Callable[[], OnlineRanker]]]:
    """Every (initialisation, grid point) of `algo`, each a one-pass fit over (X, y)."""
    grid = ONLINE_GRIDS[algo]
    points = [dict(zip(grid, values, strict=True)) for values in itertools.product(*grid.values())]
    return [
        ({"init": init, **hyper}, partial(_fit_online, algo, scaler, X, y, init, hyper))
        for init in INITIALISATIONS
        for hyper in points
    ]


def evaluate_testbed(
    testbed: CBIRTestBed, seed: int = 0, progress: Progress | None = None
) -> dict[str, Any]:
    """Fit and select every method on `testbed`; score the chosen models on test queries."""
    say = progress or (lambda message: None)
    scaler = Standardizer().fit(testbed.train_phi)
    order = np.random.default_rng(seed).permutation(testbed.train_y.shape[0])
    X, y = testbed.train_X[order], testbed.train_y[order]

    models: dict[str, Any] = {}
    params: dict[str, dict[str, Any]] = {}

    say("uni_con")
    models["uni_con"] = UniCon(scaler)
    params["uni_con"] = {}
    say("best_fea: scanning 36 features x 2 directions on validation")
    best_fea = BestFea().fit(testbed.val_queries)
    models["best_fea"] = best_fea
    sign = "+" if best_fea.weights[best_fea.feature_] > 0 else "-"
    params["best_fea"] = {"feature": testbed.feature_names[best_fea.feature_], "sign": sign}

    say(f"ranksvm: C in {list(RANKSVM_GRID)}")
    ranksvm_grid = [
        ({"C": C}, partial(lambda c: RankSVM(C=c, scaler=scaler).fit(X, y), C))
        for C in RANKSVM_GRID
    ]
    models["ranksvm"], params["ranksvm"], _ = _select(ranksvm_grid, testbed.val_queries)
    for algo, grid in ONLINE_GRIDS.items():
        say(f"{algo}: one pass over {len(y):,} rows per grid point {dict(grid)} x init")
        models[algo], params[algo], _ = _select(
            _online_candidates(algo, scaler, X, y), testbed.val_queries
        )

    say("scoring the test queries")
    return {
        "dataset": testbed.name,
        "seed": seed,
        "queries": testbed.query_counts,
        "train_rows": int(y.shape[0]),
        "map": {m: mean_ap(models[m].score, testbed.test_queries) for m in METHODS},
        "ndcg_at_50": {m: mean_ndcg_at_50(models[m].score, testbed.test_queries) for m in METHODS},
        "params": params,
        "val_map": {m: mean_ap(models[m].score, testbed.val_queries) for m in METHODS},
    }


def evaluate_cbir(
    dataset: str = "digits",
    seed: int = 0,
    train_rows: int | None = None,
    max_queries: int | None = None,
    progress: Progress | None = None,
    cache_dir: str | os.PathLike | None = None,
) -> dict[str, Any]:
    """Build the named test bed and evaluate every method on it.

    Returns {"dataset", "seed", "queries": {"train", "val", "test"}, "train_rows",
    "map": {method: float}, "ndcg_at_50": {method: float}, "params": {method: {...}},
    "val_map": {method: float}} with methods `METHODS`. `max_queries` caps the
    validation and test queries each (for quick runs); `train_rows` the training rows.
    """
    if dataset not in DATASETS:
        raise ValueError(f"unknown dataset {dataset!r}; choose from {sorted(DATASETS)}")
    say = progress or (lambda message: None)
    say(f"building the {dataset} test bed")
    options: dict[str, Any] = {"seed": seed, "cache_dir": cache_dir}
    if train_rows is not None:
        options["train_rows"] = train_rows
    if max_queries is not None:
        options["max_val_queries"] = options["max_test_queries"] = max_queries
    testbed = DATASETS[dataset](**options)
    return evaluate_testbed(testbed, seed=seed, progress=progress)
