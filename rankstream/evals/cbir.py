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
  engine's starting model, docs/architecture.md's warm start). Why: OPR has no step parameter,
  so nothing else tempers it; it is a plain perceptron on non-separable pairs whose
  last weights swing with the stream, and from zero its first mistakes alone set the
  direction, while from Uni-Con it corrects a sensible model. The update rules are
  untouched; the same choice is open to every online ranker (the aggressive ones,
  with their tuned step, mostly end where they would from zero);
* every chosen model is scored on the test queries: mAP and NDCG@50;
* each chosen model's training is timed (CPU seconds of its fit: one pass for the
  online rankers, the Newton solve for RankSVM, the validation scan for Best-Fea),
  the paper's Table 3 measure; `large_scale` trains on the 3 million triplets of §5.4.

The result is a plain dict (JSON-ready) that carries the paper's ImageCLEF column of
Table 2 and its Table 3 beside the measured numbers; see `evaluate_cbir`.
"""

from __future__ import annotations

import itertools
import os
import time
from collections.abc import Callable, Sequence
from functools import partial
from typing import Any

import numpy as np

from rankstream.evals.cbir_datasets import DATASETS
from rankstream.ranking import learners
from rankstream.ranking.baselines import BestFea, RankSVM, UniCon
from rankstream.ranking.metrics import average_precision, mean_over_queries, ndcg_at_k
from rankstream.ranking.online import OnlineRanker
from rankstream.ranking.scaling import Standardizer
from rankstream.simulators.cbir_testbed import CBIRTestBed, RankedQuery

BASELINES = ("uni_con", "best_fea", "ranksvm")


def methods() -> tuple[str, ...]:
    """The baselines, then every online learner registered now (`ranking.learners`)."""
    return (*BASELINES, *learners.names())


def learned() -> tuple[str, ...]:
    """The methods that learn from the training triplets: RankSVM and the online ones."""
    return methods()[2:]


# The online rankers' validation grids are their specs' (`ranking.learners.grids()`).

INITIALISATIONS = ("zero", "uni_con")
"""Starting weights validation chooses from for every online ranker (zero first on ties)."""

RANKSVM_GRID: Sequence[float] = (0.01, 0.1, 1.0)

# The online-LTR paper's Table 2, ImageCLEF column (test mAP), and its Table 3 (seconds
# to train on ImageCLEFFlickr's 3 million triplets; no baselines): the baselines' here,
# each online learner's in its spec (None: the paper has none, as for AROW).
_PAPER_BASELINES = {
    "uni_con": (0.6174, None),
    "best_fea": (0.5777, None),
    "ranksvm": (0.6585, 4737.0),
}


def paper_table2_imageclef() -> dict[str, float | None]:
    """The paper's test mAP per method (`methods()`), None where it has none."""
    online = {n: learners.learner(n).paper_map for n in learners.names()}
    return {**{m: v[0] for m, v in _PAPER_BASELINES.items()}, **online}


def paper_table3_seconds() -> dict[str, float | None]:
    """The paper's training seconds per method (`methods()`), None where it has none."""
    online = {n: learners.learner(n).paper_seconds for n in learners.names()}
    return {**{m: v[1] for m, v in _PAPER_BASELINES.items()}, **online}


LARGE_SCALE_ROWS = 3_000_000
"""§5.4: 3 million training triplets (ImageCLEFFlickr in the paper)."""

Progress = Callable[[str], None]
Scorer = Callable[[np.ndarray], np.ndarray]


def mean_ap(score: Scorer, queries: Sequence[RankedQuery]) -> float:
    """mAP of a scoring function over judged queries."""
    return mean_over_queries(average_precision, ((score(q.phi), q.relevance) for q in queries))


def mean_ndcg_at_50(score: Scorer, queries: Sequence[RankedQuery]) -> float:
    ndcg_at_50 = partial(ndcg_at_k, k=50)
    return mean_over_queries(ndcg_at_50, ((score(q.phi), q.relevance) for q in queries))


def _timed(build: Callable[[], Any]) -> tuple[Any, float]:
    """build() and the CPU seconds it took (CPU: the machine is shared, wall time noisy)."""
    start = time.process_time()
    model = build()
    return model, time.process_time() - start


def _select(
    candidates: Sequence[tuple[dict[str, Any], Callable[[], Any]]],
    val_queries: Sequence[RankedQuery],
) -> tuple[Any, dict[str, Any], float]:
    """Fit each (params, build) candidate; keep the best by validation mAP (first on ties).

    Returns the chosen model, its parameters and the CPU seconds its fit took.
    """
    best: tuple[Any, dict[str, Any], float, float] | None = None
    for params, build in candidates:
        model, seconds = _timed(build)
        score = mean_ap(model.score, val_queries)
        if best is None or score > best[2]:
            best = (model, params, score, seconds)
    assert best is not None  # every grid has at least one point
    return best[0], best[1], best[3]


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
    grid = learners.learner(algo).grid
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
    seconds: dict[str, float | None] = {}

    say("uni_con")
    models["uni_con"] = UniCon(scaler)
    params["uni_con"] = {}
    seconds["uni_con"] = None  # nothing to learn
    say("best_fea: scanning 36 features x 2 directions on validation")
    best_fea, seconds["best_fea"] = _timed(lambda: BestFea().fit(testbed.val_queries))
    models["best_fea"] = best_fea
    sign = "+" if best_fea.weights[best_fea.feature_] > 0 else "-"
    params["best_fea"] = {"feature": testbed.feature_names[best_fea.feature_], "sign": sign}

    say(f"ranksvm: C in {list(RANKSVM_GRID)}")
    ranksvm_grid = [
        ({"C": C}, partial(lambda c: RankSVM(C=c, scaler=scaler).fit(X, y), C))
        for C in RANKSVM_GRID
    ]
    models["ranksvm"], params["ranksvm"], seconds["ranksvm"] = _select(
        ranksvm_grid, testbed.val_queries
    )
    for algo, grid in learners.grids().items():
        say(f"{algo}: one pass over {len(y):,} rows per grid point {dict(grid)} x init")
        models[algo], params[algo], seconds[algo] = _select(
            _online_candidates(algo, scaler, X, y), testbed.val_queries
        )

    say("scoring the test queries")
    scored = methods()
    return {
        "dataset": testbed.name,
        "seed": seed,
        "queries": testbed.query_counts,
        "train_rows": int(y.shape[0]),
        "map": {m: mean_ap(models[m].score, testbed.test_queries) for m in scored},
        "ndcg_at_50": {m: mean_ndcg_at_50(models[m].score, testbed.test_queries) for m in scored},
        "params": params,
        "val_map": {m: mean_ap(models[m].score, testbed.val_queries) for m in scored},
        "train_cpu_seconds": seconds,
        "paper": {
            "table2_imageclef_map": paper_table2_imageclef(),
            "table3_seconds": paper_table3_seconds(),
        },
    }


def evaluate_cbir(
    dataset: str = "digits",
    seed: int = 0,
    train_rows: int | None = None,
    max_queries: int | None = None,
    progress: Progress | None = None,
    cache_dir: str | os.PathLike | None = None,
    large_scale: bool = False,
) -> dict[str, Any]:
    """Build the named test bed and evaluate every method on it.

    Returns {"dataset", "seed", "queries": {"train", "val", "test"}, "train_rows",
    "map": {method: float}, "ndcg_at_50": {method: float}, "params": {method: {...}},
    "val_map": {method: float}, "train_cpu_seconds": {method: float | None},
    "paper": {"table2_imageclef_map", "table3_seconds"}} with methods `methods()`.
    `max_queries` caps the validation and test queries each (for quick runs);
    `train_rows` the training rows; `large_scale` means §5.4's 3 million of them.
    """
    if dataset not in DATASETS:
        raise ValueError(f"unknown dataset {dataset!r}; choose from {sorted(DATASETS)}")
    if large_scale:
        if train_rows not in (None, LARGE_SCALE_ROWS):
            raise ValueError(f"large_scale trains on {LARGE_SCALE_ROWS:,} rows, not {train_rows:,}")
        train_rows = LARGE_SCALE_ROWS
    say = progress or (lambda message: None)
    say(f"building the {dataset} test bed")
    options: dict[str, Any] = {"seed": seed, "cache_dir": cache_dir, "progress": progress}
    if train_rows is not None:
        options["train_rows"] = train_rows
    if max_queries is not None:
        options["max_val_queries"] = options["max_test_queries"] = max_queries
    testbed = DATASETS[dataset](**options)
    return {**evaluate_testbed(testbed, seed=seed, progress=progress), "dataset": dataset}


def spread(values: Sequence[float]) -> dict[str, float | None]:
    """Mean, sample standard deviation (None for one value), min and max."""
    array = np.asarray(values, dtype=np.float64)
    std = float(array.std(ddof=1)) if array.size > 1 else None
    return {
        "mean": float(array.mean()),
        "std": std,
        "min": float(array.min()),
        "max": float(array.max()),
    }


def summarise_seeds(runs: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Test mAP per method over seeds, and each learned method's relative mAP gain over
    Uni-Con and over Best-Fea, paired by seed (same folds and queries), in percent."""
    if not runs:
        raise ValueError("need at least one run to summarise")
    scored, learning = methods(), learned()
    maps = {m: [run["map"][m] for run in runs] for m in scored}
    gains: dict[str, dict[str, Any]] = {}
    for baseline in ("uni_con", "best_fea"):
        gains[baseline] = {
            m: spread([(run["map"][m] / run["map"][baseline] - 1.0) * 100 for run in runs])
            for m in learning
        }
    above_both = {
        m: all(run["map"][m] > max(run["map"]["uni_con"], run["map"]["best_fea"]) for run in runs)
        for m in learning
    }
    return {
        "dataset": runs[0]["dataset"],
        "seeds": [run["seed"] for run in runs],
        "map": {m: spread(values) for m, values in maps.items()},
        "ndcg_at_50": {m: spread([run["ndcg_at_50"][m] for run in runs]) for m in scored},
        "gain_over_uni_con_percent": gains["uni_con"],
        "gain_over_best_fea_percent": gains["best_fea"],
        "above_uni_con_and_best_fea_every_seed": above_both,
    }
