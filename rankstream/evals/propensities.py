"""How many impressions the online propensity estimators need (`eval propensities`).

Position-based users ("pbm:ETA", `simulators.click_models`: rank k examined with (1/k)^eta)
see impressions of a collection's Uni-Con top `ranks` (a pool of `pool_queries` queries
of the seed, one drawn per impression). Each impression goes through what `rankstream
serve` does and the click join reads: `randomize` (serve's own call, with the join's
depth) randomizes a share of them by the intervention, "shuffle" (the default, serve's:
the top 10 in a random order, RandTop-n) or "swap" (ranks 1 and k traded), and every
impression, randomized or not, goes with its logged intervention to a
`PropensityEstimator`, the class the join holds, built from the join's defaults.

Every `check_every` impressions (all of them, randomized or not) the estimate at ranks
1..`ranks` is compared with the simulator's truth (1/k)^eta by relative error. Reported
per seed: the count at which every rank first came within `tolerance`, the count from
which every later check stayed within it (None if the last check did not), the estimate,
truth and error per rank at the end, and the largest error at each check (plotted).
Rank 1's estimate is 1 by normalization (propensities are relative to rank 1), so its
error is 0: the measure is of ranks 2..`ranks`.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from rankstream.evals.cbir import spread
from rankstream.plots import plot_propensity_errors
from rankstream.ranking.metrics import ranked_order
from rankstream.ranking.propensity import (
    DEFAULT_DEPTH,
    INTERVENTIONS,
    SHUFFLE,
    PropensityEstimator,
    randomize,
)
from rankstream.simulators.catalog import check_name, load_collection
from rankstream.simulators.click_feedback import DEFAULT_INTERVENTION_SHARE, RELEVANCE_GRADES
from rankstream.simulators.click_models import PositionBasedClickModel, click_model
from rankstream.simulators.judged_feedback import BASELINE, experiment_setup


def position_based(model: str) -> PositionBasedClickModel:
    """The users of `model`, which must be position-based (only they have propensities
    that depend on the rank alone)."""
    users = click_model(model, RELEVANCE_GRADES)
    if not isinstance(users, PositionBasedClickModel):
        raise ValueError(f"propensities are measured on position-based users, pbm:ETA, not {model}")
    return users


def shown_pool(
    collection: str,
    seed: int,
    cache_dir: str | os.PathLike,
    ranks: int,
    pool_queries: int,
    options: Mapping[str, Any] | None = None,
) -> np.ndarray:
    """(pool_queries, ranks) grades of Uni-Con's top `ranks` on the seed's queries."""
    served = load_collection(check_name(collection), cache_dir, False, **(options or {}))
    sim, _, arms = experiment_setup(served.collection, seed, served.index)
    pool = []
    for _ in range(pool_queries):
        query = sim.next_query()
        pool.append(query.relevance[ranked_order(arms[BASELINE].serve(query))[:ranks]])
    return np.array(pool, dtype=np.int64)


def observe_served(
    estimator: PropensityEstimator,
    users: PositionBasedClickModel,
    shown: np.ndarray,
    intervention: str,
    share: float,
    rng: np.random.Generator,
) -> None:
    """Serve's intervention on each row of `shown` (grades in ranked order), the users'
    clicks on what was shown, all counted by the join's estimator with their logged
    interventions."""
    shown = shown.copy()
    logged: list[str | None] = []
    for row in range(shown.shape[0]):
        served = randomize(shown[row], intervention, share, rng, estimator.depth)
        shown[row] = served.order
        logged.append(served.intervention)
    estimator.observe_many(logged, users.clicks_many(shown, rng))


def run_propensities(
    grades: np.ndarray,
    users: PositionBasedClickModel,
    intervention: str,
    impressions: int,
    share: float,
    seed: int,
    check_every: int = 10_000,
    tolerance: float = 0.10,
    progress: str | None = None,
) -> dict[str, Any]:
    """One seed's run (module docstring) on the pool `grades` (queries x ranks)."""
    ranks = grades.shape[1]
    truth = users.propensities(ranks)
    rng = np.random.default_rng([seed, round(users.eta * 1000)])
    estimator = PropensityEstimator(depth=DEFAULT_DEPTH)
    served, first_within, stayed_from, checks = 0, None, None, []
    while served < impressions:
        n = min(check_every, impressions - served)
        pool = grades[rng.integers(0, len(grades), n)]
        observe_served(estimator, users, pool, intervention, share, rng)
        served += n
        error = np.abs(estimator.propensities(ranks) / truth - 1.0)
        within = bool((error <= tolerance).all())
        first_within = first_within or (served if within else None)
        stayed_from = (stayed_from or served) if within else None
        checks.append([served, float(error.max())])
        if progress:
            print(
                f"{progress}: {served:,} impressions, worst error {error.max():.1%}",
                file=sys.stderr,
                flush=True,
            )
    estimate = estimator.propensities(ranks)
    return {
        "seed": seed,
        "intervened": estimator.intervened,
        "first_within_tolerance": first_within,
        "within_tolerance_from": stayed_from,
        "max_relative_error": checks[-1][1],
        "per_rank": [
            {
                "rank": k + 1,
                "estimate": round(float(estimate[k]), 4),
                "truth": round(float(truth[k]), 4),
                "relative_error": float(abs(estimate[k] / truth[k] - 1.0)),
            }
            for k in range(ranks)
        ],
        "checks": checks,
    }


def _slowest(counts: Sequence[int | None]) -> int | None:
    """The most impressions any seed needed; None if one never got there."""
    return None if any(c is None for c in counts) else max(counts)  # type: ignore[type-var]


def evaluate_propensities(
    collection: str,
    models: Sequence[str],
    seeds: Sequence[int],
    cache_dir: str | os.PathLike,
    intervention: str = SHUFFLE,
    impressions: int = 1_000_000,
    share: float = DEFAULT_INTERVENTION_SHARE,
    check_every: int = 10_000,
    tolerance: float = 0.10,
    ranks: int = DEFAULT_DEPTH,
    pool_queries: int = 500,
    progress: bool = False,
    options: Mapping[str, Any] | None = None,
    plot_path: str | Path | None = None,
) -> dict[str, Any]:
    """Every click model and seed (module docstring); JSON-ready, with the plot's path."""
    if intervention not in INTERVENTIONS:
        raise ValueError(f"intervention must be one of {', '.join(INTERVENTIONS)}")
    if not seeds or not models:
        raise ValueError("need at least one seed and one click model")
    if not 0.0 < share <= 1.0:
        raise ValueError(f"share must lie in (0, 1], got {share}")
    if impressions < 1 or check_every < 1 or not 2 <= ranks <= DEFAULT_DEPTH:
        raise ValueError(f"need impressions, check_every >= 1, ranks in 2..{DEFAULT_DEPTH}")
    users = {model: position_based(model) for model in models}  # refuse before loading
    pools = {s: shown_pool(collection, s, cache_dir, ranks, pool_queries, options) for s in seeds}
    result: dict[str, Any] = {
        "collection": collection,
        "intervention": intervention,
        "share": share,
        "impressions": impressions,
        "check_every": check_every,
        "tolerance": tolerance,
        "ranks": ranks,
        "click_models": {},
    }
    for model, user in users.items():
        runs = [
            run_propensities(
                pools[seed],
                user,
                intervention,
                impressions,
                share,
                seed,
                check_every,
                tolerance,
                progress=f"{model}, seed {seed}" if progress else None,
            )
            for seed in seeds
        ]
        result["click_models"][model] = {
            "runs": runs,
            "first_within_tolerance": _slowest([r["first_within_tolerance"] for r in runs]),
            "within_tolerance_from": _slowest([r["within_tolerance_from"] for r in runs]),
            "max_relative_error": spread([r["max_relative_error"] for r in runs]),
        }
    if plot_path is not None:
        result["plot"] = str(plot_propensity_errors(result, plot_path))
    return result
