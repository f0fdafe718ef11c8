"""What interleaving costs the users, and whether it finds a better model: a serving loop.

Issue 38 item 5 asks for a default interleaving share under which a click-only engine
gets a learned champion when one is better and keeps Uni-Con otherwise, the users losing
at most 0.005 NDCG@50 over 20,000 impressions with almost-random users. This loop
measures a share with the product's own pieces, in process and fast: serve's
`workers.interleaver.Interleaver` (team draft, round-robin over the challengers not
refused), the click join's `workers.interleaving.InterleavingRace` (the champion's test,
refusals, re-opening) and the simulated users of `simulators.clicks` on the query pool
of `rankstream eval interleaving` (`rankstream.evals.interleaving.build_pool`: the
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

    python -m rankstream.evals.interleaving_cost --shares 0.1 0.2 0.5 --seeds 0 1 2
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Sequence
from typing import Any

import numpy as np

from rankstream.evals.interleaving import build_pool
from rankstream.ranking.baselines import UNI_CON
from rankstream.ranking.interleaving import credit, outcome, team_draft
from rankstream.ranking.metrics import NDCG_K
from rankstream.ranking.sequential import PairedTest
from rankstream.simulators.click_feedback import RELEVANCE_GRADES
from rankstream.simulators.clicks import click_model
from rankstream.stream.settings import Settings
from rankstream.workers.champion import ChampionPolicy
from rankstream.workers.interleaver import Interleaver
from rankstream.workers.interleaving import REOPEN_FACTOR, InterleavingRace

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
