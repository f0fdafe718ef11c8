"""Interleaving vs an A/B test of click-through rate, on simulated users (`eval interleaving`).

The question: how many impressions does each way of comparing two rankers on click
traffic need before it picks the better one, and how often does it pick wrongly.

* **Users.** A pool of `pool_queries` queries of the collection (the §5.5 simulator's
  query stream: candidates, standardized phi, ground-truth grades); each impression
  draws a query from the pool uniformly and shows `shown` (50) results to a simulated
  user of the click model (`simulators.clicks`). The pool is the population, so a
  ranker's true NDCG@50 is its mean over the pool, exactly.
* **Rankers.** Uni-Con's weight vector (all ones on standardized phi) and perturbations
  of it along seeded random directions, w = 1 + eps u; for each target difference the
  perturbation whose true NDCG@50 differs from Uni-Con's by the nearest amount is
  taken (the actual differences are reported). The better of the two is the challenger;
  the correct decision is "switch".
* **Interleaving.** Each impression team-drafts the champion's and the challenger's
  rankings (`ranking.interleaving`); its outcome (+1/0/-1, ties included) is one paired
  difference of the champion test (`ranking.sequential.PairedTest` with the deployment's
  alpha and delta, read on the outcome's scale as `workers.interleaving` says).
* **A/B.** Impressions alternate between the two arms, each showing its own top 50 to an
  independent user and query; the k-th impressions of the two arms form a pair, and the
  difference of their click-through rates (clicks / results shown, in [-1, 1]) is the
  paired difference of the same test. Impressions counted: both arms' (2 per pair).
* **A/A.** Both sides the same ranker (Uni-Con): any switch within the horizon is a
  false decision.

Per method and difference, over `runs` runs: impressions to the first switch (median and
90th percentile, each a run's own count (inverted CDF); a run with no switch within the
horizon counts as infinitely long, so a percentile above the horizon is None), the
share of runs refused before they switched (errors), and the share undecided at the
horizon. Each run's outcomes
are generated in doubling chunks up to the horizon and the verdicts computed for the
whole prefix at once (`first_switch`: the same verdicts as a race fed one at a time).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from rankstream.ranking.interleaving import credit, outcome, team_draft_many
from rankstream.ranking.metrics import NDCG_K
from rankstream.ranking.sequential import ChampionTest, first_refusal, first_switch
from rankstream.simulators.catalog import check_name, load_collection
from rankstream.simulators.click_feedback import RELEVANCE_GRADES
from rankstream.simulators.clicks import ClickModel, click_model
from rankstream.simulators.feedback import experiment_setup
from rankstream.simulators.progress import progress_bar

TARGETS = (0.005, 0.01, 0.02)
SHOWN = 50  # results per impression, the dashboards' NDCG@50 cut-off
DEPTH = 2 * SHOWN  # how deep a ranking is kept: a team draft of SHOWN never reads further
METHODS = ("interleaving", "ab")
CALIBRATION_QUERIES = 50
CONSISTENT_AT = (
    1,
    2,
    3,
    5,
    10,
    20,
    NDCG_K,
)  # depths at which a pair's better ranker must be better
FIRST_CHUNK = 1024


@dataclass(frozen=True)
class QueryPool:
    """The simulated population: per query, standardized phi (K, d) and grades (K,)."""

    z: np.ndarray  # (Q, K, d) float32
    relevance: np.ndarray  # (Q, K) int64

    def true_ndcg(self, weights: np.ndarray, k: int = NDCG_K) -> float:
        """The ranker's NDCG@k over the whole pool: its true value for these users
        (`ranking.metrics.ndcg_at_k` per query: gains 2^rel - 1, ties in input order)."""
        return self.ndcg_of(self.rankings(weights), k)

    def ndcg_of(self, rankings: np.ndarray, k: int = NDCG_K) -> float:
        """NDCG@k over the pool of rankings (Q, >= k) (`true_ndcg`)."""
        order = rankings[:, :k]
        discounts = 1.0 / np.log2(np.arange(2, k + 2))
        gains = np.exp2(np.take_along_axis(self.relevance, order, 1)) - 1.0
        ideal = (np.exp2(-np.sort(-self.relevance, axis=1)[:, :k]) - 1.0) @ discounts
        dcg = gains @ discounts
        return float(np.mean(np.where(ideal > 0, dcg / np.where(ideal > 0, ideal, 1.0), 0.0)))

    def rankings(self, weights: np.ndarray) -> np.ndarray:
        """(Q, DEPTH) candidate positions, best first (`ranked_order`: ties in input order)."""
        scores = (self.z @ weights.astype(np.float32)).astype(np.float64)
        return np.argsort(-scores, axis=1, kind="stable")[:, :DEPTH]


def build_pool(
    collection: str,
    cache_dir: str | os.PathLike,
    seed: int,
    pool_queries: int,
    options: Mapping[str, Any] | None = None,
    progress: bool = False,
) -> QueryPool:
    served = load_collection(check_name(collection), cache_dir, progress, **(options or {}))
    sim, scaler, _ = experiment_setup(served.collection, seed, served.index, CALIBRATION_QUERIES)
    z, rel = [], []
    for _ in range(pool_queries):
        query = sim.next_query()
        z.append(scaler.transform(query.phi).astype(np.float32))
        rel.append(query.relevance.astype(np.int64))
    return QueryPool(np.stack(z), np.stack(rel))


def ranker_pairs(
    pool: QueryPool, targets: Sequence[float], seed: int, directions: int = 8
) -> dict[str, dict[str, Any]]:
    """Per target, Uni-Con and the perturbation nearest the target difference (module
    docstring): their weights, true NDCG@50s and which is the challenger (the better).

    Only perturbations better or worse at every depth count (NDCG@5, @10 and @50 differ
    from Uni-Con's in the same direction): a ranker better at 50 but worse at the top is
    worse for a user who stops after a few results, and no click test should be scored
    "wrong" for seeing that.
    """
    base = np.ones(pool.z.shape[2])
    base_ndcg = {k: pool.true_ndcg(base, k) for k in CONSISTENT_AT}
    rng = np.random.default_rng([seed, 27])
    scanned = []  # (|difference at 50|, weights, NDCG@50)
    for _ in range(directions):
        u = rng.standard_normal(base.size)
        u *= np.linalg.norm(base) / np.linalg.norm(u)
        for eps in np.geomspace(0.005, 4.0, 30):
            w = base + eps * u
            order = pool.rankings(w)
            differences = [pool.ndcg_of(order, k) - base_ndcg[k] for k in CONSISTENT_AT]
            if all(d > 0 for d in differences) or all(d < 0 for d in differences):
                value = base_ndcg[NDCG_K] + differences[-1]
                scanned.append((abs(differences[-1]), w, value))
    if not scanned:
        raise ValueError("no perturbation of Uni-Con is better or worse at every depth")
    pairs = {}
    for target in targets:
        difference, w, value = min(scanned, key=lambda s: abs(s[0] - target))
        better, worse = (w, value), (base, base_ndcg[NDCG_K])
        if value < base_ndcg[NDCG_K]:
            better, worse = worse, better
        pairs[f"{target:g}"] = {
            "target": target,
            "difference": difference,
            "champion": worse,
            "challenger": better,
        }
    return pairs


class Comparison:
    """One pair of rankers shown to one kind of user: outcome streams per method."""

    def __init__(
        self, pool: QueryPool, champion: np.ndarray, challenger: np.ndarray, users: ClickModel
    ) -> None:
        self.pool, self.users = pool, users
        self.rankings = (pool.rankings(champion), pool.rankings(challenger))

    def interleaving(self, n: int, rng: np.random.Generator) -> np.ndarray:
        """n impressions' outcomes for the challenger (+1 win, 0 tie, -1 loss)."""
        queries = rng.integers(0, len(self.pool.relevance), n)
        rankings = np.stack([r[queries] for r in self.rankings])
        merged = team_draft_many(rankings, self.pool.relevance.shape[1], SHOWN, rng)
        grades = np.take_along_axis(self.pool.relevance[queries], merged.items, 1)
        clicks = self.users.clicks_many(grades, rng)
        return outcome(credit(merged.teams, clicks, 2)).astype(np.float64)

    def ab(self, n: int, rng: np.random.Generator) -> np.ndarray:
        """n pairs' differences of click-through rate, challenger arm minus champion arm."""
        ctr = []
        for ranking in self.rankings:
            queries = rng.integers(0, len(self.pool.relevance), n)
            grades = np.take_along_axis(self.pool.relevance[queries], ranking[queries, :SHOWN], 1)
            ctr.append(self.users.clicks_many(grades, rng).mean(axis=1))
        return ctr[1] - ctr[0]


def race(
    stream: Callable[[int, np.random.Generator], np.ndarray],
    test: ChampionTest,
    horizon: int,
    rng: np.random.Generator,
    until_switch: bool = False,
) -> tuple[int | None, int | None]:
    """(pairs to the first switch, pairs to the first refusal) within `horizon` pairs.

    The run ends at its first verdict: a refusal of a better challenger is already the
    error being counted. With `until_switch` (A/A, where refusing is right and only a
    switch is false) it goes on to the horizon, as the live race does.
    """
    outcomes = np.empty(0)
    switch = refusal = None
    while switch is None and outcomes.size < horizon:
        more = min(max(FIRST_CHUNK, outcomes.size), horizon - outcomes.size)
        outcomes = np.concatenate([outcomes, stream(more, rng)])
        switch = first_switch(test, outcomes)
        refusal = first_refusal(test, outcomes[:switch] if switch else outcomes)
        if refusal is not None and not until_switch:
            return None, refusal
    return switch, refusal


def _percentile(values: Sequence[float], q: float) -> float | None:
    value = float(np.percentile(np.asarray(values, dtype=np.float64), q, method="inverted_cdf"))
    return value if np.isfinite(value) else None


def summarise(
    switches: Sequence[int | None], refusals: Sequence[int | None], per_pair: int, horizon: int
) -> dict[str, Any]:
    """Impressions to a switch (median, 90th percentile), errors and undecided shares."""
    runs = len(switches)
    impressions = [np.inf if s is None else s * per_pair for s in switches]
    refused_first = sum(
        r is not None and (s is None or r < s) for s, r in zip(switches, refusals, strict=True)
    )
    return {
        "runs": runs,
        "horizon_impressions": horizon * per_pair,
        "median_impressions": _percentile(impressions, 50),
        "p90_impressions": _percentile(impressions, 90),
        "switched": sum(s is not None for s in switches) / runs,
        "error_rate": refused_first / runs,
        "undecided": sum(s is None and r is None for s, r in zip(switches, refusals, strict=True))
        / runs,
    }


PER_PAIR = {"interleaving": 1, "ab": 2}  # impressions per paired difference


def evaluate_interleaving(
    collection: str,
    models: Sequence[str],
    cache_dir: str | os.PathLike,
    test: ChampionTest,
    runs: int = 100,
    targets: Sequence[float] = TARGETS,
    horizons: Mapping[str, int] | None = None,
    seed: int = 0,
    pool_queries: int = 500,
    options: Mapping[str, Any] | None = None,
    progress: bool = False,
    plot_path: str | Path | None = None,
) -> dict[str, Any]:
    """Every click model, target difference and method, plus A/A (module docstring).

    `horizons`: impressions per run at most, per method (default 40,000 interleaved,
    100,000 A/B).
    """
    users = {m: click_model(m, RELEVANCE_GRADES) for m in models}  # refuse unknown names first
    if runs < 1:
        raise ValueError(f"runs must be >= 1, got {runs}")
    limits = {"interleaving": 40_000, "ab": 100_000, **(horizons or {})}
    pool = build_pool(collection, cache_dir, seed, pool_queries, options, progress)
    pairs = ranker_pairs(pool, targets, seed)
    base = np.ones(pool.z.shape[2])
    cases = {key: (p["champion"][0], p["challenger"][0]) for key, p in pairs.items()}
    cases["aa"] = (base, base)
    result: dict[str, Any] = {
        "collection": collection,
        "pool_queries": pool_queries,
        "shown": SHOWN,
        "test": test.describe(),
        "runs": runs,
        "seed": seed,
        "pairs": {
            key: {
                "target": p["target"],
                "ndcg_difference": p["difference"],
                "champion_ndcg": p["champion"][1],
                "challenger_ndcg": p["challenger"][1],
            }
            for key, p in pairs.items()
        },
        "click_models": {},
    }
    total = len(models) * len(cases) * len(METHODS) * runs
    with progress_bar(progress, f"eval interleaving on {collection}", total) as advance:
        for model_index, name in enumerate(models):
            per_case: dict[str, Any] = {}
            for case_index, (key, (champion, challenger)) in enumerate(cases.items()):
                comparison = Comparison(pool, champion, challenger, users[name])
                per_case[key] = {}
                for method_index, method in enumerate(METHODS):
                    horizon = limits[method] // PER_PAIR[method]
                    switches, refusals = [], []
                    for run in range(runs):
                        rng = np.random.default_rng(
                            [seed, model_index, case_index, method_index, run]
                        )
                        s, r = race(getattr(comparison, method), test, horizon, rng, key == "aa")
                        switches.append(s)
                        refusals.append(r)
                        advance()
                    cell = summarise(switches, refusals, PER_PAIR[method], horizon)
                    if key == "aa":
                        cell = {
                            "runs": runs,
                            "horizon_impressions": cell["horizon_impressions"],
                            "false_decisions": cell["switched"],
                        }
                    per_case[key][method] = cell
            per_case["ab_over_interleaving"] = {key: _ratio(per_case[key]) for key in pairs}
            result["click_models"][name] = per_case
    if plot_path is not None:
        from rankstream.plots import plot_interleaving

        result["plot"] = str(plot_interleaving(result, plot_path))
    return result


def _ratio(cell: Mapping[str, Any]) -> float | None:
    """A/B's median impressions to a correct switch over interleaving's; None when either
    median run made no correct switch (the cells' `switched` and `error_rate` say why)."""
    ab, inter = cell["ab"]["median_impressions"], cell["interleaving"]["median_impressions"]
    return ab / inter if ab is not None and inter is not None else None
