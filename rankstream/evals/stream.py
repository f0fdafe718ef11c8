"""The §5.5 stream on the catalog's collections: each online learner serving its own loop.

For every collection (`simulators.catalog.COLLECTIONS`) and seed, 2,000 queries go
through `simulators.judged_feedback.online_experiment_scores`: Uni-Con and every learner rank
the same queries' 300 candidates, each learner learns from the judged top 50 of its own
ranking and serves the next query with what it learned (the paper's §5.5, one loop per
algorithm as in its Fig. 3). Measured per query: NDCG@50 and AP over the candidates;
reported: Uni-Con's means and each learner's paired gain over Uni-Con (same queries).

Two uses:

* **Calibration** (`grid=False`): every learner at its default hyper-parameters; the
  the calibration table of docs/results/stream.md (seeds 0-2), with the paper's figures beside it
  (`PAPER_STREAM`, `evals.cbir.paper_table2_imageclef`).
* **Choosing the defaults** (`grid=True`): every point of the learners' validation
  grids (`ranking.learners.grids()`, the ones `eval cbir` validates on) on validation
  seeds the calibration never uses (100, 101), and, per hyper-parameter, the value with
  the highest NDCG@50 gain over Uni-Con averaged over the collections, the seeds and
  the learners that read it (`choose_defaults`). Averaging over both collections is the
  point: a step size tuned on the synthetic collection alone serves real photos worse
  than Uni-Con. The result is written once, in `ranking.learners` (each
  `HyperParameter`'s default).
"""

from __future__ import annotations

import itertools
import os
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import numpy as np

from rankstream.evals.cbir import paper_table2_imageclef, spread
from rankstream.ranking import learners
from rankstream.simulators.catalog import check_name, load_collection
from rankstream.simulators.judged_feedback import BASELINE, Variant, online_experiment_scores

VALIDATION_SEEDS = (100, 101)
PAPER_STREAM = {
    "uni_con_ndcg_at_50": 0.80,
    "source": "§5.5: Uni-Con's mean NDCG@50 over 2,000 queries is about 0.80; Fig. 3 "
    "plots the learners a few percent above it",
}

Progress = Callable[[str], None]


def default_variants(algos: Iterable[str] | None = None) -> dict[str, Variant]:
    """Each learner once, at the default hyper-parameters."""
    return {algo: (algo, {}) for algo in algos or learners.names()}


def grid_variants(grids: Mapping[str, Mapping[str, Sequence[float]]] | None = None) -> dict:
    """Every grid point of every learner (default: `ranking.learners.grids()`), named
    "{algo} C=0.0001" (a learner with no hyper-parameter: its name alone)."""
    variants: dict[str, Variant] = {}
    for algo, grid in (learners.grids() if grids is None else grids).items():
        for values in itertools.product(*grid.values()):
            params = dict(zip(grid, values, strict=True))
            label = " ".join(f"{name}={value:g}" for name, value in params.items())
            variants[f"{algo} {label}".strip()] = (algo, params)
    return variants


def run_stream(
    collection: str,
    seed: int,
    variants: Mapping[str, Variant],
    cache_dir: str | os.PathLike,
    queries: int = 2000,
    progress: bool = False,
    options: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """One collection and seed: Uni-Con's NDCG@50 and mAP, each variant's and its gains.

    `options` go to the collection's loader (`simulators.catalog`), e.g. a smaller size.
    """
    started = time.process_time()
    served = load_collection(
        check_name(collection), cache_dir, progress=progress, **(options or {})
    )
    scores = online_experiment_scores(
        served.collection,
        variants,
        n_queries=queries,
        seed=seed,
        index=served.index,
        progress=f"{collection}, seed {seed}" if progress else False,
    )
    ndcg, ap = scores["ndcg"], scores["ap"]
    return {
        "collection": collection,
        "images": served.collection.n_images,
        "seed": seed,
        "queries": queries,
        "uni_con": {"ndcg_at_50": float(ndcg[BASELINE].mean()), "map": float(ap[BASELINE].mean())},
        "variants": {
            name: {
                "algo": algo,
                "params": dict(params),
                "ndcg_at_50": float(ndcg[name].mean()),
                "map": float(ap[name].mean()),
                "ndcg_gain": float((ndcg[name] - ndcg[BASELINE]).mean()),
                "map_gain": float((ap[name] - ap[BASELINE]).mean()),
            }
            for name, (algo, params) in variants.items()
        },
        "cpu_seconds": round(time.process_time() - started, 1),
    }


def summarise(runs: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Per collection: Uni-Con and each variant's gains, mean/std/min/max over its seeds;
    relative gains in percent of Uni-Con's value on the same seed."""
    summary: dict[str, Any] = {}
    for collection in dict.fromkeys(run["collection"] for run in runs):
        mine = [run for run in runs if run["collection"] == collection]
        names = mine[0]["variants"]
        summary[collection] = {
            "seeds": [run["seed"] for run in mine],
            "uni_con": {
                metric: spread([run["uni_con"][metric] for run in mine])
                for metric in ("ndcg_at_50", "map")
            },
            "variants": {name: _variant_summary(mine, name) for name in names},
        }
    return summary


def _variant_summary(runs: Sequence[dict[str, Any]], name: str) -> dict[str, Any]:
    def relative(run: dict[str, Any], gain: str, metric: str) -> float:
        return run["variants"][name][gain] / run["uni_con"][metric] * 100

    return {
        "ndcg_gain": spread([run["variants"][name]["ndcg_gain"] for run in runs]),
        "map_gain": spread([run["variants"][name]["map_gain"] for run in runs]),
        "ndcg_gain_percent": spread([relative(run, "ndcg_gain", "ndcg_at_50") for run in runs]),
        "map_gain_percent": spread([relative(run, "map_gain", "map") for run in runs]),
    }


def choose_defaults(runs: Sequence[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Per hyper-parameter, the grid value with the highest NDCG@50 gain over Uni-Con,
    averaged over every run (collection x seed) and every learner that reads it.

    >>> run = {"variants": {
    ...     "ogdr eta=0.1": {"params": {"eta": 0.1}, "ndcg_gain": -0.03},
    ...     "ogdr eta=0.0001": {"params": {"eta": 0.0001}, "ndcg_gain": 0.01},
    ...     "opr": {"params": {}, "ndcg_gain": 0.02}}}
    >>> choose_defaults([run])["eta"]["value"]
    0.0001
    """
    gains: dict[str, dict[float, list[float]]] = {}
    for run in runs:
        for result in run["variants"].values():
            for name, value in result["params"].items():
                gains.setdefault(name, {}).setdefault(value, []).append(result["ndcg_gain"])
    chosen = {}
    for name, by_value in gains.items():
        means = {value: float(np.mean(values)) for value, values in by_value.items()}
        chosen[name] = {"value": max(means, key=means.__getitem__), "mean_gain": means}
    return chosen


def evaluate_stream(
    collections: Sequence[str],
    seeds: Sequence[int],
    cache_dir: str | os.PathLike,
    grid: bool = False,
    queries: int = 2000,
    progress: bool = False,
    options: Mapping[str, Mapping[str, Any]] | None = None,
) -> dict[str, Any]:
    """Every collection x seed (see the module docstring); JSON-ready. `options` maps a
    collection to its loader's options (default: the whole collection)."""
    if not collections or not seeds:
        raise ValueError("need at least one collection and one seed")
    if queries < 1:
        raise ValueError(f"queries must be >= 1, got {queries}")
    options = options or {}
    for name in collections:
        check_name(name)
    variants = grid_variants() if grid else default_variants()
    runs = [
        run_stream(
            collection, seed, variants, cache_dir, queries, progress, options.get(collection)
        )
        for collection in collections
        for seed in seeds
    ]
    result: dict[str, Any] = {
        "grid": grid,
        "hyperparameters": learners.hyperparameters(),
        "runs": runs,
        "summary": summarise(runs),
        "paper": {"stream": PAPER_STREAM, "table2_imageclef_map": paper_table2_imageclef()},
    }
    if grid:
        result["chosen"] = choose_defaults(runs)
    return result
