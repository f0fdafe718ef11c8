"""Interleaving vs an A/B test of click-through rate, on simulated users (`eval interleaving`).

The question: how many impressions does each way of comparing two rankers on click
traffic need before it picks the better one, and how often does it pick wrongly.

* **Users.** A pool of `pool_queries` queries of the collection (the §5.5 simulator's
  query stream: candidates, standardized phi, ground-truth grades); each impression
  draws a query from the pool uniformly and shows `shown` (50) results to a simulated
  user of the click model (`simulators.click_models`). The pool is the population, so a
  ranker's true NDCG@50 is its mean over the pool, exactly.
* **Rankers.** Uni-Con's weight vector (all ones on standardized phi) and perturbations
  of it along seeded random directions, w = 1 + eps u; for each target difference the
  perturbation whose true NDCG@50 differs from Uni-Con's by the nearest amount is
  taken (the actual differences are reported). The better of the two is the challenger;
  the correct decision is "switch".
* **Interleaving.** Each impression team-drafts the champion's and the challenger's
  rankings (`ranking.interleaving`); its outcome (+1/0/-1, ties included) is one paired
  difference of the champion test (`ranking.sequential.PairedTest` with the deployment's
  alpha and delta, read on the outcome's scale as `selection.click_race` says).
* **A/B.** Impressions alternate between the two arms, each showing its own top 50 to an
  independent user and query; the k-th impressions of the two arms form a pair, and the
  difference of their click-through rates (clicks / results shown, in [-1, 1]) is the
  paired difference of the same test. Impressions counted: both arms' (2 per pair). A
  CTR needs only how many results were clicked, so each arm's click count is drawn from
  its exact distribution for the query's list (`click_count_distribution` of the same
  users), which lets an A/B run go to a million impressions in a fraction of a second.
* **A/A.** Both sides the same ranker (Uni-Con): any switch within the horizon is a
  false decision.

Every run is raced as the live race is: a refusal is a logged verdict, not the end, so a
run goes on until it switches or reaches the horizon. Per method and difference, over
`runs` runs: impressions to the first switch (median and 90th percentile, each a run's
own count (inverted CDF); a run with no switch within the horizon counts as infinitely
long, so a percentile above the horizon is None), the share of runs refused before they
switched (errors), the share undecided at the horizon, and the outcomes' mean and sd with
the fixed-sample yardstick (`summarise`). `ab_over_interleaving` is A/B's median over
interleaving's; where A/B's median run never switched correctly it is A/B's horizon over
interleaving's median, marked as a lower bound. Each run's outcomes
are generated in doubling chunks up to the horizon and the verdicts computed for the
whole prefix at once (`first_switch`: the same verdicts as a race fed one at a time).

From the former module `interleaving_cost` of `rankstream/evals/`, merged here:

What interleaving costs the users, and whether it finds a better model: a serving loop.

Issue 38 item 5 asks for a default interleaving share under which a click-only engine
gets a learned champion when one is better and keeps Uni-Con otherwise, the users losing
at most 0.005 NDCG@50 over 20,000 impressions with almost-random users. This loop
measures a share with the product's own pieces, in process and fast: serve's
`selection.click_race.Interleaver` (team draft, round-robin over the challengers not
refused), the click join's `selection.click_race.InterleavingRace` (the champion's test,
refusals, re-opening) and the simulated users of `simulators.click_models` on the query pool
of `rankstream eval interleaving` (`rankstream.evals.interleaving_eval.build_pool`: the
synthetic collection, 500 queries; true NDCG@50 from its grades).

The challengers do not learn: each is a fixed perturbation of Uni-Con's weights whose
true NDCG@50 differs from Uni-Con's by a chosen amount (`SCENARIOS`; "flipped" is
Uni-Con's ranking upside down, the issue's collapse). That is the worst case for the
re-opening rule: a refused challenger is re-opened once the stream has doubled since its
refusal (every session teaches every learner, so its learned count doubles) and is
exactly as bad again. Each impression: a query from the pool, the champion's top 50 or,
with probability `share`, its team draft with a challenger; the users click; the outcome
goes to the race; a switch makes the winner the champion (every race starts over).

Per run: the users' mean NDCG@50 minus Uni-Con's on the same queries (paired: Uni-Con's
list is computed for every impression) over the run and over its last 5,000
impressions, the first switch (impression and winner) and the impressions drafted per
challenger. Runs are paired across shares: the same seed gives the same queries.

    python -m rankstream.evals.interleaving_eval --shares 0.1 0.2 0.5 --seeds 0 1 2
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from statistics import NormalDist
from typing import Any

import numpy as np

from rankstream.plots import plot_interleaving
from rankstream.ranking.baselines import UNI_CON
from rankstream.ranking.interleaving import credit, outcome, team_draft, team_draft_many
from rankstream.ranking.metrics import NDCG_K
from rankstream.ranking.sequential import ChampionTest, PairedTest, first_refusal, first_switch
from rankstream.selection.click_race import REOPEN_FACTOR, Interleaver, InterleavingRace
from rankstream.selection.judged_race import ChampionPolicy
from rankstream.simulators.catalog import check_name, load_collection
from rankstream.simulators.click_feedback import RELEVANCE_GRADES
from rankstream.simulators.click_models import ClickModel, click_model
from rankstream.simulators.judged_feedback import experiment_setup
from rankstream.simulators.progress_bar import progress_bar
from rankstream.stream.settings import Settings

TARGETS = (0.005, 0.01, 0.02)
SHOWN = NDCG_K  # results per impression, the dashboards' NDCG@50 cut-off
DEPTH = 2 * SHOWN  # how deep a ranking is kept: a team draft of SHOWN never reads further
METHODS = ("interleaving", "ab")
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
    sim, scaler, _ = experiment_setup(served.collection, seed, served.index)
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
        # Per arm and query, P(at most k clicks) on its top SHOWN: an A/B impression's
        # CTR needs only how many were clicked, drawn from the exact distribution of
        # `users.clicks_many` on that list (`click_count_distribution`).
        self.click_counts = tuple(
            np.cumsum(
                users.click_count_distribution(
                    np.take_along_axis(pool.relevance, ranking[:, :SHOWN], 1)
                ),
                axis=1,
            )
            for ranking in self.rankings
        )

    def interleaving(self, n: int, rng: np.random.Generator) -> np.ndarray:
        """n impressions' outcomes for the challenger (+1 win, 0 tie, -1 loss)."""
        queries = rng.integers(0, len(self.pool.relevance), n)
        rankings = np.stack([r[queries] for r in self.rankings])
        merged = team_draft_many(rankings, self.pool.relevance.shape[1], SHOWN, rng)
        grades = np.take_along_axis(self.pool.relevance[queries], merged.items, 1)
        clicks = self.users.clicks_many(grades, rng)
        return outcome(credit(merged.teams, clicks, 2)).astype(np.float64)

    def ab(self, n: int, rng: np.random.Generator) -> np.ndarray:
        """n pairs' differences of click-through rate, challenger arm minus champion arm:
        each arm's impression a query of its own and a user who clicks k of the SHOWN."""
        ctr = []
        for cumulative in self.click_counts:
            queries = rng.integers(0, len(self.pool.relevance), n)
            clicks = (rng.random(n)[:, None] >= cumulative[queries, :-1]).sum(axis=1)
            ctr.append(clicks / SHOWN)
        return ctr[1] - ctr[0]


@dataclass(frozen=True)
class Run:
    """One run: pairs to the first switch and first refusal (None: none within the
    horizon), and the outcomes it generated (their count, sum and sum of squares)."""

    switch: int | None
    refusal: int | None
    n: int
    total: float
    squares: float


def race(
    stream: Callable[[int, np.random.Generator], np.ndarray],
    test: ChampionTest,
    horizon: int,
    rng: np.random.Generator,
) -> Run:
    """One race of at most `horizon` pairs, run as the live race is: a refusal is a
    verdict that is logged (and counted here as the error it is when the challenger is
    better), not the end; the race goes on until it switches or the horizon is reached.
    """
    outcomes = np.empty(0)
    switch = None
    while switch is None and outcomes.size < horizon:
        more = min(max(FIRST_CHUNK, outcomes.size), horizon - outcomes.size)
        outcomes = np.concatenate([outcomes, stream(more, rng)])
        switch = first_switch(test, outcomes)
    seen = outcomes[:switch] if switch else outcomes
    refusal = first_refusal(test, seen)
    return Run(switch, refusal, seen.size, float(seen.sum()), float(seen @ seen))


def _percentile(values: Sequence[float], q: float) -> float | None:
    value = float(np.percentile(np.asarray(values, dtype=np.float64), q, method="inverted_cdf"))
    return value if np.isfinite(value) else None


def summarise(runs: Sequence[Run], per_pair: int, horizon: int, alpha: float) -> dict[str, Any]:
    """Impressions to a switch (median, 90th percentile), errors and undecided shares,
    and what the outcomes were: their mean and sd over every run's pairs, and
    `fixed_sample_pairs`, the pairs at which a fixed-sample one-sided z-test at `alpha`
    with that mean and sd (known) decides correctly in half of all runs,
    (z_{1-alpha} sd / mean)^2: the yardstick of the sequential test's median (an
    always-valid test pays for being looked at after every pair; about 2x at alpha 0.01).
    The outcomes are each run's up to its switch, so where runs switch the mean is
    biased up by the stopping (and the yardstick low): a run that switched early had
    outcomes that looked good early.
    """
    count = len(runs)
    impressions = [np.inf if r.switch is None else r.switch * per_pair for r in runs]
    refused_first = sum(
        r.refusal is not None and (r.switch is None or r.refusal < r.switch) for r in runs
    )
    n = sum(r.n for r in runs)
    mean = sum(r.total for r in runs) / n
    sd = math.sqrt(max(sum(r.squares for r in runs) / n - mean * mean, 0.0))
    z = NormalDist().inv_cdf(1.0 - alpha)
    return {
        "runs": count,
        "horizon_impressions": horizon * per_pair,
        "median_impressions": _percentile(impressions, 50),
        "p90_impressions": _percentile(impressions, 90),
        "switched": sum(r.switch is not None for r in runs) / count,
        "error_rate": refused_first / count,
        "undecided": sum(r.switch is None and r.refusal is None for r in runs) / count,
        "outcome_mean": mean,
        "outcome_sd": sd,
        "fixed_sample_pairs": (z * sd / mean) ** 2 if mean > 0 else None,
    }


PER_PAIR = {"interleaving": 1, "ab": 2}  # impressions per paired difference
HORIZONS = {"interleaving": 50_000, "ab": 1_000_000}  # impressions per run at most


def evaluate_interleaving(
    collection: str,
    models: Sequence[str],
    cache_dir: str | os.PathLike,
    test: ChampionTest,
    runs: int = 100,
    aa_runs: int | None = None,
    targets: Sequence[float] = TARGETS,
    horizons: Mapping[str, int] | None = None,
    seed: int = 0,
    pool_queries: int = 500,
    options: Mapping[str, Any] | None = None,
    progress: bool = False,
    plot_path: str | Path | None = None,
) -> dict[str, Any]:
    """Every click model, target difference and method, plus A/A (module docstring).

    `horizons`: impressions per run at most, per method (default `HORIZONS`).
    `aa_runs`: runs of the A/A case (default `runs`): a false-decision rate near alpha
    needs many more runs than a median does to be told apart from alpha
    (`false_decision_bound`).
    """
    users = {m: click_model(m, RELEVANCE_GRADES) for m in models}  # refuse unknown names first
    aa_runs = runs if aa_runs is None else aa_runs
    if min(runs, aa_runs) < 1:
        raise ValueError(f"runs must be >= 1, got {min(runs, aa_runs)}")
    limits = {**HORIZONS, **(horizons or {})}
    for method, limit in limits.items():
        if limit // PER_PAIR[method] < test.min_pairs:
            raise ValueError(
                f"a {method} horizon of {limit} impressions is under the test's "
                f"{test.min_pairs} pairs ({PER_PAIR[method]} impressions a pair)"
            )
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
        "aa_runs": aa_runs,
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
    case_runs = {key: aa_runs if key == "aa" else runs for key in cases}
    total = len(models) * sum(case_runs.values()) * len(METHODS)
    with progress_bar(progress, f"eval interleaving on {collection}", total) as advance:
        for model_index, name in enumerate(models):
            per_case: dict[str, Any] = {}
            for case_index, (key, (champion, challenger)) in enumerate(cases.items()):
                comparison = Comparison(pool, champion, challenger, users[name])
                per_case[key] = {}
                for method_index, method in enumerate(METHODS):
                    horizon = limits[method] // PER_PAIR[method]
                    done = []
                    for run in range(case_runs[key]):
                        rng = np.random.default_rng(
                            [seed, model_index, case_index, method_index, run]
                        )
                        done.append(race(getattr(comparison, method), test, horizon, rng))
                        advance()
                    cell = summarise(done, PER_PAIR[method], horizon, test.alpha)
                    if key == "aa":
                        false = sum(r.switch is not None for r in done)
                        cell = {
                            "runs": len(done),
                            "horizon_impressions": cell["horizon_impressions"],
                            "false_decisions": cell["switched"],
                            "false_decision_bound": false_decision_bound(
                                false, len(done), test.alpha
                            ),
                        }
                    per_case[key][method] = cell
            per_case["ab_over_interleaving"] = {key: _ratio(per_case[key]) for key in pairs}
            result["click_models"][name] = per_case
    if plot_path is not None:
        result["plot"] = str(plot_interleaving(result, plot_path))
    return result


def false_decision_bound(false: int, runs: int, alpha: float) -> dict[str, float]:
    """What `false` switches in `runs` A/A runs say of the true false-decision rate p.

    `upper`: the one-sided 95% Clopper-Pearson upper bound on p; `p_value`: P(at least
    `false` of `runs` | p = alpha), small when the runs are evidence that p > alpha.
    A point estimate above alpha on a few runs is no such evidence (3 of 100 at alpha
    0.01: p-value 0.08), which is why the A/A case takes its own number of runs.

    >>> b = false_decision_bound(3, 100, 0.01)
    >>> round(b["upper"], 4), round(b["p_value"], 3)
    (0.0757, 0.079)
    >>> round(false_decision_bound(0, 1000, 0.01)["upper"], 4)
    0.003
    """
    from scipy.stats import beta, binom

    upper = 1.0 if false >= runs else float(beta.ppf(0.95, false + 1, runs - false))
    return {"upper": upper, "p_value": float(binom.sf(false - 1, runs, alpha))}


def _ratio(cell: Mapping[str, Any]) -> dict[str, Any] | None:
    """A/B's median impressions to a correct switch over interleaving's.

    `lower_bound` true: the A/B median run made no correct switch within its horizon, so
    the ratio given is the horizon over interleaving's median, and the true ratio is at
    least that. None when interleaving's median run made no correct switch either (the
    cells' `switched` and `error_rate` say why).
    """
    ab, inter = cell["ab"], cell["interleaving"]["median_impressions"]
    if inter is None:
        return None
    if ab["median_impressions"] is None:
        return {"ratio": ab["horizon_impressions"] / inter, "lower_bound": True}
    return {"ratio": ab["median_impressions"] / inter, "lower_bound": False}


FLIPPED = "flipped"
SCENARIOS: dict[str, tuple[float | str, ...]] = {
    # six challengers (the embedded serve's OPR, OPAR-I, OPAR-II, OGDR, AROW and PDGD)
    "worse": (-0.005, -0.01, -0.02, -0.05, -0.1, FLIPPED),
    "one-better": (0.02, 0.0, -0.005, -0.01, -0.02, -0.05),
    "better": (0.02, 0.01, 0.01, 0.005, 0.0, -0.01),
}


class _Named:
    def __init__(self, name: str) -> None:
        self.name = name
        self.scorer = None


def _weights(pool: Any, gaps: Sequence[float | str], seed: int) -> list[np.ndarray]:
    """Per gap, the perturbation of Uni-Con's weights whose true NDCG@50 differs from
    Uni-Con's nearest the gap (FLIPPED: Uni-Con's weights negated)."""
    base = np.ones(pool.z.shape[2])
    rng = np.random.default_rng([seed, 38])
    reference = pool.true_ndcg(base)
    scanned = []
    for _ in range(16):
        u = rng.standard_normal(base.size)
        u *= np.linalg.norm(base) / np.linalg.norm(u)
        for eps in np.geomspace(0.005, 8.0, 40):
            w = base + eps * u
            scanned.append((pool.true_ndcg(w) - reference, w))
    chosen = []
    for gap in gaps:
        if gap == FLIPPED:
            chosen.append(-base)
        else:
            chosen.append(min(scanned, key=lambda s: abs(s[0] - float(gap)))[1])
    return chosen


def run(
    pool: Any,
    weights: Sequence[np.ndarray],
    users: str,
    share: float,
    impressions: int,
    seed: int,
    method: str = "team-draft",
    last: int = 5000,
) -> dict[str, Any]:
    """One serving loop (module docstring)."""
    names = [UNI_CON, *(f"c{i}" for i in range(len(weights)))]
    rankings = {UNI_CON: pool.rankings(np.ones(pool.z.shape[2]))}
    rankings.update({n: pool.rankings(w) for n, w in zip(names[1:], weights, strict=True)})
    gains = np.exp2(pool.relevance) - 1.0
    discounts = 1.0 / np.log2(np.arange(2, NDCG_K + 2))
    ideal = np.sort(gains, axis=1)[:, ::-1][:, :NDCG_K] @ discounts

    def ndcg(query: int, items: np.ndarray) -> float:
        top = items[:NDCG_K]
        value = gains[query, top] @ discounts[: len(top)]
        return float(value / ideal[query]) if ideal[query] > 0 else 0.0

    true = {n: pool.ndcg_of(r) for n, r in rankings.items()}
    model = click_model(users, RELEVANCE_GRADES)
    rng = np.random.default_rng([seed, 3800])
    interleaver = Interleaver(
        Settings(interleaving_share=share, interleaving_method=method),
        np.random.default_rng([seed, 3801]),
    )
    race = InterleavingRace(ChampionPolicy())
    models = {n: _Named(n) for n in names}
    refused_at: dict[str, int] = {}
    shown_ndcg = np.empty(impressions)
    unicon_ndcg = np.empty(impressions)
    drafted = dict.fromkeys(names, 0)
    switches: list[dict[str, Any]] = []
    queries = rng.integers(0, len(pool.relevance), impressions)
    for t, query in enumerate(queries):
        for name, at in list(refused_at.items()):  # learned count doubles with the stream
            if name in race.refusals and t >= REOPEN_FACTOR * at:
                race.reopen(name, version=t, learned=t)
                del refused_at[name]
        champion = race.incumbent
        champion_list = rankings[champion][query]
        unicon_ndcg[t] = ndcg(query, rankings[UNI_CON][query])
        refused = frozenset(race.refusals)
        challengers = interleaver.challengers(models, champion, refused)
        if not challengers:
            shown_ndcg[t] = ndcg(query, champion_list)
            continue
        team_names = (champion, *(c.name for c in challengers))
        merged = team_draft([rankings[n][query] for n in team_names], NDCG_K, rng)
        clicks = model.clicks(pool.relevance[query, merged.items], rng)
        shown_ndcg[t] = ndcg(query, merged.items)
        credits = credit(merged.teams, clicks, len(team_names))
        for j, name in enumerate(team_names[1:], start=1):
            drafted[name] += 1
            won = race.observe(name, [int(outcome(credits, challenger=j))], version=t)
            if name in race.refusals and name not in refused_at:
                refused_at[name] = max(t, 1)
            if won is not None:
                switches.append({"impression": t + 1, "champion": won})
                refused_at.clear()
                break
    tail = slice(max(impressions - last, 0), impressions)
    return {
        "users": users,
        "share": share,
        "method": method,
        "seed": seed,
        "true_ndcg": {n: round(v, 4) for n, v in true.items()},
        "loss_run": float(np.mean(unicon_ndcg - shown_ndcg)),
        "loss_last": float(np.mean(unicon_ndcg[tail] - shown_ndcg[tail])),
        "switches": switches,
        "final_champion": race.incumbent,
        "drafted": {n: k for n, k in drafted.items() if k},
    }


def reopen_null(
    probabilities: Sequence[float], runs: int, impressions: int, alpha: float, seed: int = 38
) -> dict[str, dict[str, int]]:
    """False switches on null streams (outcomes -1, 0, +1 drawn with `probabilities`, mean
    <= 0) re-opened at every refusal: the switch wealth carried on (`PairedTest.reopen`,
    as the click race does) or a fresh race at wealth 1 (a new alpha each time)."""
    test = PairedTest(alpha=alpha)
    rng = np.random.default_rng(seed)
    found = {mode: {"false_switches": 0, "reopenings": 0} for mode in ("carry", "restart")}
    for _ in range(runs):
        outcomes = rng.choice([-1.0, 0.0, 1.0], size=impressions, p=list(probabilities))
        for mode, counts in found.items():
            state = test.start()
            for d in outcomes:
                state = test.add(state, float(d))
                verdict = test.decision(state)
                if verdict == "switch":
                    counts["false_switches"] += 1
                    break
                if verdict == "refuse":
                    counts["reopenings"] += 1
                    state = test.reopen(state) if mode == "carry" else test.start()
    return found


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shares", type=float, nargs="+", default=[0.1, 0.2, 0.5])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--users", nargs="+", default=["almost-random", "informational"])
    parser.add_argument("--scenarios", nargs="+", default=list(SCENARIOS))
    parser.add_argument("--impressions", type=int, default=20_000)
    parser.add_argument("--method", default="team-draft")
    parser.add_argument("--collection", default="synthetic")
    parser.add_argument(
        "--reopen-null", type=float, nargs=3, default=None, metavar=("P_LOSS", "P_TIE", "P_WIN"),
        help="instead: false switches of re-opened null races (300 runs of 3,000, alpha 0.05)",
    )  # fmt: skip
    args = parser.parse_args(argv)
    if args.reopen_null is not None:
        print(json.dumps({"outcomes": args.reopen_null,
                          **reopen_null(args.reopen_null, 300, 3000, 0.05)}))  # fmt: skip
        return 0
    cache = os.path.join(Settings().data_dir, "collections")
    pool = build_pool(args.collection, cache, 0, 500)
    for scenario in args.scenarios:
        weights = _weights(pool, SCENARIOS[scenario], 0)
        for users in args.users:
            for share in args.shares:
                for seed in args.seeds:
                    result = run(pool, weights, users, share, args.impressions, seed, args.method)
                    print(json.dumps({"scenario": scenario, **result}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
