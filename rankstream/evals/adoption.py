"""Adopting rankstream beside an engine's own ranking, measured (`rankstream eval adoption`).

The adoption path of docs/guide/adopt.md, on simulated users, with the product's pieces:

1. **Shadow.** The embedded pipeline of `rankstream demo` (`rankstream.demo_pipeline`:
   simulator, click join, online and batch workers on one in-process transport and store)
   with `shadow` on and a simulated engine ranker (`simulators.engine_rankers`) sending
   its scores with every query. Every impression's shown list is compared with the
   engine's own order (`selection.engine_ranking.engine_order` of the scores it sent):
   with no randomized share (the default) they must be equal on every impression. Every
   `checkpoint` impressions each stored model (the learners' newest versions, Uni-Con) is
   scored on held-out queries (another seed's query stream, never served): its true
   NDCG@50 from the collection's grades (the learning curve).
2. **Race.** The models the shadow run learned, frozen, raced against the engine as the
   click join and serve race them: serve's `selection.click_race.Interleaver` (a share of
   the champion's rankings team-drafted with one challenger in turn), the join's
   `selection.click_race.InterleavingRace` (the always-valid test, refusals), the engine
   the incumbent. After a switch the engine is a challenger of the new champion (the
   guardrail). Frozen challengers and an engine that never changes are never re-opened
   (the join re-opens a refused race only when a model learned twice as much). Each
   impression draws a query from a pool (the population: true NDCG@50 is its mean) and
   shows the top 50 to simulated users (`simulators.click_models`).
3. **Counterfactual.** In every race run, the IPS estimate (`ranking.counterfactual`, the
   live estimator's code) of each decided challenger's click-DCG@10 minus the engine's,
   from the run's logged impressions and clicks up to the decision, its 95% interval, and
   the truth it estimates, computed exactly from the users' click model: the mean over
   the same impressions of sum_d P(click | examined, grade_d) (gain(challenger's rank of
   d) - gain(engine's rank of d)) over the shown d. Propensities: the users' true
   examination probabilities for position-based users; for cascade users (whose
   examination is not position-based) the exact mean examination per rank over the run's
   shown lists, the best a position-only estimate can do.

Per run the decision of a challenger is its first verdict against the engine (the
switch, or a refusal); the estimate agrees when its sign is the decision's (+ switch,
- refusal).
"""

from __future__ import annotations

import dataclasses
import math
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from rankstream.ranking.counterfactual import Moments, gains, policy_terms, rerank
from rankstream.ranking.metrics import NDCG_K
from rankstream.selection.click_race import Interleaver, InterleavingRace, session_outcomes
from rankstream.selection.engine_ranking import ENGINE, engine_order
from rankstream.selection.judged_race import ChampionPolicy
from rankstream.selection.scoring import ScorerCache
from rankstream.simulators.click_feedback import RELEVANCE_GRADES
from rankstream.simulators.click_models import ClickModel, PositionBasedClickModel, click_model
from rankstream.simulators.engine_rankers import EngineRanker, engine_ranker
from rankstream.simulators.judged_feedback import FeedbackSimulator
from rankstream.stream.settings import Settings

SHOWN = NDCG_K  # results shown per impression
ESTIMATE_K = 10  # the counterfactual click-DCG@k (the live estimate's)
HELD_OUT_SEED = 7_919  # the held-out queries' stream (added to the run's seed)
RACE_SEED = 4_100


@dataclass(frozen=True)
class Pool:
    """Queries of one seed's stream: raw phi (Q, K, d), grades (Q, K)."""

    phi: np.ndarray
    relevance: np.ndarray


def draw_pool(simulator: FeedbackSimulator, queries: int) -> Pool:
    drawn = [simulator.next_query() for _ in range(queries)]
    return Pool(
        np.stack([q.phi for q in drawn]).astype(np.float64),
        np.stack([q.relevance for q in drawn]).astype(np.int64),
    )


def ndcg(relevance: np.ndarray, order: np.ndarray, k: int = NDCG_K) -> np.ndarray:
    """NDCG@k of rankings `order` (n, >= k positions) of grades `relevance` (n, K)."""
    discounts = 1.0 / np.log2(np.arange(2, k + 2))
    dcg = (np.exp2(np.take_along_axis(relevance, order[:, :k], 1)) - 1.0) @ discounts
    ideal = (np.exp2(-np.sort(-relevance, axis=1)[:, :k]) - 1.0) @ discounts
    return np.where(ideal > 0, dcg / np.where(ideal > 0, ideal, 1.0), 0.0)


def stored_scorers(store: Any, width: int) -> dict[str, Any]:
    """Every stored model with a scorer at its newest version (as the live estimates
    read them), the engine's record left out (it has no scorer)."""
    cache = ScorerCache(store, width=width)
    latest = store.latest_versions()
    names = sorted(n for n in latest if n != ENGINE)
    cache.learn_kinds(names)
    found = {}
    for name in names:
        if cache.scorable(name):
            scorer = cache.get(name, latest[name])
            if scorer is not None:
                found[name] = scorer
    return found


def rankings_of(scorers: Mapping[str, Any], pool: Pool) -> dict[str, np.ndarray]:
    """Each model's full ranking (positions, best first; ties in candidate order) per query."""
    q, k, d = pool.phi.shape
    flat = pool.phi.reshape(q * k, d)
    return {
        name: np.argsort(-np.asarray(s.score(flat), np.float64).reshape(q, k), 1, kind="stable")
        for name, s in scorers.items()
    }


# --- 1. shadow --------------------------------------------------------------------------
def shadow_run(
    engine: str,
    users: str,
    impressions: int,
    checkpoint: int,
    seed: int,
    held_out: int,
    settings: Settings,
    collection: Any,
    index: Any,
    progress: Callable[[str], None],
) -> tuple[dict[str, Any], Any, Pool]:
    """The shadow run (module docstring); its report, the pipeline's store and the
    held-out pool."""
    from rankstream.demo_pipeline import DemoOptions, DemoPipeline
    from rankstream.simulators.judged_feedback import experiment_setup

    options = DemoOptions(
        queries=impressions,
        feedback=f"clicks:{users}",
        engine_ranker=engine,
        seed=seed,
        collection=collection.name,
    )
    shadow = dataclasses.replace(settings, shadow=True)
    pipeline = DemoPipeline(options, shadow, collection=collection, index=index)
    sim, _, _ = experiment_setup(collection, seed + HELD_OUT_SEED, index)
    pool = draw_pool(sim, held_out)
    curve: dict[str, list[float | None]] = {}
    at: list[int] = []
    equal = 0
    served_by: dict[str, int] = {}
    started = time.perf_counter()
    pipeline.start()
    try:
        handler = pipeline.simulation.handler
        while not pipeline.done:
            name = pipeline.step()
            served_by[name] = served_by.get(name, 0) + 1
            result = handler.last
            scores = handler._engine_scores
            assert result is not None and result.shown is not None and scores is not None
            shown = np.asarray(result.shown)
            equal += bool(np.array_equal(shown, engine_order(scores)[: shown.shape[0]]))
            n = len(pipeline.served_by)
            if n % checkpoint == 0 or pipeline.done:
                values = {
                    name: float(ndcg(pool.relevance, r).mean())
                    for name, r in rankings_of(
                        stored_scorers(pipeline.store, settings.phi_dim), pool
                    ).items()
                }
                at.append(n)
                for name in set(curve) | set(values):
                    curve.setdefault(name, [None] * (len(at) - 1)).append(values.get(name))
                progress(
                    f"shadow {engine} {users}: {n}/{impressions} impressions, "
                    f"{time.perf_counter() - started:.0f} s"
                )
    finally:
        pipeline.close()
    engine_scores = engine_ranker(engine).scores
    rng = np.random.default_rng([seed, HELD_OUT_SEED])
    engine_held_out = np.mean(
        [
            ndcg(
                pool.relevance[i : i + 1],
                engine_order(engine_scores(pool.phi[i], pool.relevance[i], rng))[None, :],
            )[0]
            for i in range(len(pool.relevance))
        ]
    )
    report = {
        "engine_ranker": engine,
        "users": users,
        "impressions": len(pipeline.served_by),
        "randomized_share": settings.intervention_share,
        "shown_equals_engine_order": equal / len(pipeline.served_by),
        "served_by": served_by,
        "held_out_queries": held_out,
        "checkpoints": at,
        "true_ndcg_held_out": curve,
        "engine_true_ndcg_held_out": float(engine_held_out),
        "seconds": round(time.perf_counter() - started, 1),
    }
    return report, pipeline.store, pool


# --- 2 and 3. race and counterfactual ----------------------------------------------------
class _Named:
    def __init__(self, name: str) -> None:
        self.name = name


def examination(users: ClickModel, grades: np.ndarray) -> np.ndarray:
    """P(examined) at each displayed rank, per impression (n, L), exactly."""
    if isinstance(users, PositionBasedClickModel):
        return np.broadcast_to(users.propensities(grades.shape[1]), grades.shape)
    click = np.asarray(users.click_probability)[grades]
    stop = np.asarray(users.stop_probability)[grades]
    leave = np.cumprod(1.0 - click * stop, axis=1)
    return np.concatenate([np.ones((grades.shape[0], 1)), leave[:, :-1]], axis=1)


def race_run(
    pool: Pool,
    rankings: Mapping[str, np.ndarray],
    engine: EngineRanker,
    users: ClickModel,
    share: float,
    horizon: int,
    policy: ChampionPolicy,
    seed: int,
) -> dict[str, Any]:
    """One race of the frozen models against the engine (module docstring)."""
    rng = np.random.default_rng([seed, RACE_SEED])
    engine_rng = np.random.default_rng([seed, RACE_SEED, 1])
    interleaver = Interleaver(Settings(interleaving_share=share), np.random.default_rng([seed, 2]))
    race = InterleavingRace(policy, incumbent=ENGINE)
    models = {n: _Named(n) for n in (*rankings, ENGINE)}
    queries = rng.integers(0, len(pool.relevance), horizon)
    shown_ndcg = np.empty(horizon)
    engine_ndcg = np.empty(horizon)
    log_shown, log_clicks, log_engine = [], [], []
    decisions: dict[str, tuple[int, int]] = {}  # challenger -> (sign, impressions logged then)
    switch: dict[str, Any] | None = None
    for t, query in enumerate(queries):
        relevance = pool.relevance[query]
        scores = engine.scores(pool.phi[query], relevance, engine_rng)
        own = {ENGINE: engine_order(scores)}
        champion = race.incumbent
        champion_list = own[ENGINE] if champion == ENGINE else rankings[champion][query]
        refused = frozenset(race.refusals)
        challengers = interleaver.challengers(models, champion, refused)
        engine_ndcg[t] = ndcg(relevance[None], own[ENGINE][None])[0]
        if challengers:
            names = (champion, *(c.name for c in challengers))
            lists = [own[ENGINE] if n == ENGINE else rankings[n][query] for n in names]
            merged = interleaver.draft(names, lists, SHOWN, rng=rng)
            shown = merged.order
        else:
            shown = champion_list[:SHOWN]
        clicks = users.clicks(relevance[shown], rng)
        shown_ndcg[t] = ndcg(relevance[None], np.asarray(shown)[None])[0]
        log_shown.append((query, np.asarray(shown)))
        log_clicks.append(clicks)
        log_engine.append(scores[shown])
        if not challengers:
            continue
        name = names[1]
        won = race.observe(
            name, [int(session_outcomes(names, merged.teams, clicks)[name])], version=1
        )
        if champion == ENGINE and name not in decisions:
            if won is not None:
                decisions[name] = (1, t + 1)
            elif name in race.refusals:
                decisions[name] = (-1, t + 1)
        if won is not None and switch is None:
            switch = {"impression": t + 1, "champion": won}
        if won == ENGINE:
            switch = {**(switch or {}), "guardrail_at": t + 1}
    after = slice(switch["impression"], horizon) if switch else slice(horizon, horizon)
    counterfactual = {
        name: _estimate(
            pool,
            rankings[name],
            users,
            log_shown[:upto],
            log_clicks[:upto],
            log_engine[:upto],
            sign,
        )
        for name, (sign, upto) in decisions.items()
    }
    return {
        "seed": seed,
        "switch": switch,
        "final_champion": race.incumbent,
        "shown_ndcg_after_switch": float(shown_ndcg[after].mean()) if switch else None,
        "engine_ndcg_after_switch": float(engine_ndcg[after].mean()) if switch else None,
        "impressions_after_switch": after.stop - after.start,
        "decisions": counterfactual,
    }


def _estimate(
    pool: Pool,
    ranking: np.ndarray,
    users: ClickModel,
    shown: Sequence[tuple[int, np.ndarray]],
    clicks: Sequence[np.ndarray],
    engine_scores: Sequence[np.ndarray],
    sign: int,
) -> dict[str, Any]:
    """IPS of the challenger minus the engine over the logged impressions, its interval,
    the exact truth, and whether they agree with the race's decision (`sign`)."""
    grades = np.stack([pool.relevance[q][s] for q, s in shown])
    exam = examination(users, grades)
    propensities = exam if isinstance(users, PositionBasedClickModel) else exam.mean(axis=0)
    p = np.asarray(propensities[0] if propensities.ndim == 2 else propensities)
    rank_of = [np.argsort(ranking[q], kind="stable") for q, _ in shown]  # position -> rank
    challenger = [
        rerank(-r[s].astype(np.float64)) for r, (_, s) in zip(rank_of, shown, strict=True)
    ]
    engine = [rerank(e) for e in engine_scores]
    terms_c = policy_terms(list(clicks), challenger, p, ESTIMATE_K)
    terms_e = policy_terms(list(clicks), engine, p, ESTIMATE_K)
    found = Moments.of_difference(terms_c, terms_e).estimate()
    attract = np.asarray(users.click_probability)[grades]
    truth = float(
        np.mean(
            (
                attract
                * (gains(np.stack(challenger), ESTIMATE_K) - gains(np.stack(engine), ESTIMATE_K))
            ).sum(axis=1)
        )
    )
    low, high = found.ips_interval if found.ips_interval is not None else (math.nan, math.nan)
    return {
        "decision": "switch" if sign > 0 else "refuse",
        "impressions": len(shown),
        "ips": found.ips,
        "ips_interval": [low, high],
        "truth": truth,
        "covers": bool(low <= truth <= high),
        "sign_agrees": bool(np.sign(found.ips) == sign),
        "clipped_clicks": terms_c.clipped + terms_e.clipped,
    }


# --- summaries --------------------------------------------------------------------------
def clopper_pearson_upper(k: int, n: int, level: float = 0.95) -> float:
    """One-sided upper bound on a rate from k of n (scipy.stats.beta).

    >>> round(clopper_pearson_upper(0, 200), 4)
    0.0149
    """
    from scipy.stats import beta

    return 1.0 if k >= n else float(beta.ppf(level, k + 1, n - k))


def mean_interval(values: Sequence[float], level: float = 0.95) -> dict[str, Any] | None:
    """Mean and its two-sided t interval (scipy.stats.t) over runs."""
    from scipy.stats import t

    x = np.asarray(values, dtype=np.float64)
    if x.size < 2:
        return None if x.size == 0 else {"mean": float(x[0]), "interval": None, "runs": 1}
    half = t.ppf(0.5 + level / 2, x.size - 1) * x.std(ddof=1) / math.sqrt(x.size)
    return {
        "mean": float(x.mean()),
        "interval": [float(x.mean() - half), float(x.mean() + half)],
        "runs": int(x.size),
    }


def summarise_races(runs: Sequence[Mapping[str, Any]], alpha: float) -> dict[str, Any]:
    switched = [r for r in runs if r["switch"] is not None]
    at = [r["switch"]["impression"] for r in switched]
    paired = [
        r["shown_ndcg_after_switch"] - r["engine_ndcg_after_switch"]
        for r in switched
        if r["impressions_after_switch"] > 0
    ]
    decided = [d for r in runs for d in r["decisions"].values()]
    winners: dict[str, int] = {}
    for r in switched:
        winners[r["switch"]["champion"]] = winners.get(r["switch"]["champion"], 0) + 1
    return {
        "runs": len(runs),
        "switched_runs": len(switched),
        "left_engine_fraction": len(switched) / len(runs),
        "left_engine_upper_95": clopper_pearson_upper(len(switched), len(runs)),
        "alpha": alpha,
        "median_impressions_to_switch": float(np.median(at)) if at else None,
        "winners": winners,
        "guardrail_returns": sum("guardrail_at" in r["switch"] for r in switched),
        "ndcg_after_switch_minus_engine": mean_interval(paired),
        "ndcg_after_switch": mean_interval([r["shown_ndcg_after_switch"] for r in switched]),
        "engine_ndcg_same_impressions": mean_interval(
            [r["engine_ndcg_after_switch"] for r in switched]
        ),
        "counterfactual": {
            "decided": len(decided),
            "sign_agreement": float(np.mean([d["sign_agrees"] for d in decided]))
            if decided
            else None,
            "coverage": float(np.mean([d["covers"] for d in decided])) if decided else None,
            "clipped_clicks": int(sum(d["clipped_clicks"] for d in decided)),
        },
    }


def evaluate_adoption(
    engine: str,
    shadow_users: str,
    race_users: Sequence[str],
    shadow_impressions: int,
    checkpoint: int,
    runs: int,
    horizon: int,
    share: float,
    seed: int,
    held_out: int,
    pool_queries: int,
    settings: Settings,
    collection: Any,
    index: Any,
    progress: Callable[[str], None] = lambda _line: None,
    plot_path: str | Path | None = None,
    detail: bool = False,
) -> dict[str, Any]:
    """Shadow, then `runs` races per kind of user, with their counterfactual estimates."""
    from rankstream.simulators.judged_feedback import experiment_setup

    ranker = engine_ranker(engine)
    users = {u: click_model(u, RELEVANCE_GRADES) for u in race_users}
    shadow, store, _ = shadow_run(
        engine,
        shadow_users,
        shadow_impressions,
        checkpoint,
        seed,
        held_out,
        settings,
        collection,
        index,
        progress,
    )
    scorers = stored_scorers(store, settings.phi_dim)
    sim, _, _ = experiment_setup(collection, seed + RACE_SEED, index)
    pool = draw_pool(sim, pool_queries)
    rankings = rankings_of(scorers, pool)
    policy = ChampionPolicy.from_settings(settings)
    true_pool = {n: float(ndcg(pool.relevance, r).mean()) for n, r in rankings.items()}
    result: dict[str, Any] = {
        "engine_ranker": ranker.spec,
        "collection": collection.name,
        "seed": seed,
        "test": policy.test.describe(),
        "shadow": shadow,
        "race": {
            "share": share,
            "horizon": horizon,
            "pool_queries": pool_queries,
            "challengers_true_ndcg": true_pool,
            "users": {},
        },
    }
    for name, model in users.items():
        done = []
        started = time.perf_counter()
        for run in range(runs):
            done.append(
                race_run(
                    pool, rankings, ranker, model, share, horizon, policy, seed * 100_003 + run
                )
            )
            if (run + 1) % max(1, runs // 10) == 0 or run + 1 == runs:
                progress(
                    f"race {ranker.spec} {name}: {run + 1}/{runs} runs, "
                    f"{time.perf_counter() - started:.0f} s"
                )
        cell = summarise_races(done, policy.test.alpha)
        if detail:
            cell["per_run"] = done
        result["race"]["users"][name] = cell
    if plot_path is not None:
        from rankstream.plots import plot_shadow_learning

        result["plot"] = str(plot_shadow_learning(shadow, plot_path))
    return result
