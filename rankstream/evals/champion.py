"""`rankstream eval champion`: the champion policy on score streams, new test beside old.

Two policies watch the same paired per-query NDCG@50 streams (incumbent u_i, challenger
c_i, one pair per judged query), each checked after every query:

* new: the paired mSPRT of `ranking.sequential` on d_i = c_i - u_i (alpha, delta);
* old: the rolling-mean rule it replaces (switch once the challenger's mean over its
  last 200 queries beats the incumbent's by more than 0.005, after 20 queries). Here
  both windows hold the same queries, the most favourable case for it: in the
  evaluator Uni-Con's window started with the stream and a learned model's only at its
  first checkpoint.

(a) A/A: two rankers of equal quality, `runs` streams of `horizon` queries: the share
that ever switches (false switches). (b) a challenger truly better by each of
`effects`: the median number of queries to the switch (None when fewer than half the
runs switch within the horizon) and the share switched within 500.

Score streams, two sources:

* simulated: u_i ~ N(0.6, 0.15) clipped to [0, 1], c_i = u_i + effect + N(0, sd), for
  each per-query spread sd of `spreads`;
* real: the demo's streams (`rankstream.demo`, synthetic collection): every pair of
  models scored on the same queries; the pair of median spread among the pairs that
  differ (sd > 0.01) is resampled (queries drawn with replacement), its challenger
  shifted so that its true mean difference is exactly 0 (A/A) or each effect. The A/A
  is also run (`runs` each, both policies) on every differing pair in both directions,
  since the plug-in variance's weak spot is skew (`ranking.sequential`): per pair, the
  mean over pairs and the worst pair (with its binomial standard error: the worst of
  many estimates is biased up by their noise).

Beside each stream, the bound no valid test can beat: the power of the fixed-sample
one-sided z-test at n = 500 for a +0.01 challenger at the stream's spread sd,
Phi(0.01 sqrt(500) / sd - z_{1-alpha}), the most powerful test of a Gaussian mean with
n fixed in advance (a sequential test that may stop earlier cannot do better at 500),
and the largest spread at which it reaches 80%.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from scipy.stats import norm

from rankstream.demo import DemoOptions, run_demo
from rankstream.ranking.sequential import VARIANCE_PRIOR, PairedTest, first_switch

OLD_WINDOW, OLD_MARGIN, OLD_MIN_QUERIES = 200, 0.005, 20  # the replaced policy's defaults
WITHIN = 500  # the target: a +0.01 challenger switches within 500 paired queries
TARGET_EFFECT, TARGET_POWER = 0.01, 0.8


@dataclass(frozen=True)
class ChampionEvalOptions:
    runs: int = 1000
    horizon: int = 2000
    effects: tuple[float, ...] = (0.005, 0.01, 0.02)
    spreads: tuple[float, ...] = (0.03, 0.05, 0.1)
    alpha: float = 0.01
    delta: float = 0.005
    variance_prior: float = VARIANCE_PRIOR
    demo_queries: int = 1000
    demo_images: int = 20_000
    seed: int = 0
    real: bool = True

    def __post_init__(self) -> None:
        if self.runs < 1 or self.horizon < 1 or self.demo_queries < 100:
            raise ValueError("runs and horizon must be >= 1, demo_queries >= 100")
        self.test()  # checks alpha, delta and the prior

    def test(self) -> PairedTest:
        return PairedTest(alpha=self.alpha, delta=self.delta, variance_prior=self.variance_prior)


def fixed_sample_bound(spread: float, alpha: float) -> dict[str, float]:
    """The power at n = 500 of the fixed-sample z-test (module docstring), and the
    largest spread at which it is 80%.

    >>> {k: round(v, 3) for k, v in fixed_sample_bound(0.11, 0.01).items()}
    {'power_at_500': 0.385, 'largest_spread_for_80pct': 0.071}
    """
    z_alpha = float(norm.ppf(1.0 - alpha))
    shift = TARGET_EFFECT * WITHIN**0.5
    return {
        "power_at_500": float(norm.cdf(shift / spread - z_alpha)),
        "largest_spread_for_80pct": shift / (z_alpha + float(norm.ppf(TARGET_POWER))),
    }


def old_first_switch(incumbent: np.ndarray, challenger: np.ndarray) -> int | None:
    """The query at which the rolling-mean rule first switches (None: never).

    >>> old_first_switch(np.full(50, 0.5), np.full(50, 0.51))
    20
    """
    n = np.arange(1, incumbent.size + 1)
    counts = np.minimum(n, OLD_WINDOW)

    def rolling(x: np.ndarray) -> np.ndarray:
        total = np.cumsum(x)
        total[OLD_WINDOW:] -= total[:-OLD_WINDOW].copy()
        return total / counts

    switch = (n >= OLD_MIN_QUERIES) & (rolling(challenger) > rolling(incumbent) + OLD_MARGIN)
    hits = np.flatnonzero(switch)
    return int(hits[0]) + 1 if hits.size else None


Streams = Callable[[float, np.random.Generator], tuple[np.ndarray, np.ndarray]]


def race(options: ChampionEvalOptions, draw: Streams, seed: int) -> dict[str, Any]:
    """A/A and each effect, both policies on the same streams."""
    test = options.test()
    result: dict[str, Any] = {}
    for effect in (0.0, *options.effects):
        rng = np.random.default_rng([seed, round(effect * 1e6)])
        new, old = [], []
        for _ in range(options.runs):
            u, c = draw(effect, rng)
            new.append(first_switch(test, np.clip(c - u, -1.0, 1.0)))
            old.append(old_first_switch(u, c))
        key = "aa" if effect == 0.0 else f"{effect:g}"
        result[key] = {"new": _outcome(new, effect), "old": _outcome(old, effect)}
    return result


def _outcome(switches: Sequence[int | None], effect: float) -> dict[str, Any]:
    switched = np.array([s is not None for s in switches])
    if effect == 0.0:
        return {"false_switch_rate": float(switched.mean()), "runs": len(switches)}
    at = np.array([s if s is not None else np.inf for s in switches], dtype=np.float64)
    median = float(np.median(at))
    return {
        "median_queries_to_switch": None if np.isinf(median) else int(median),
        f"switched_within_{WITHIN}": float((at <= WITHIN).mean()),
        "switched_within_horizon": float(switched.mean()),
        "runs": len(switches),
    }


def simulated(options: ChampionEvalOptions, spread: float) -> Streams:
    def draw(effect: float, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
        u = np.clip(rng.normal(0.6, 0.15, options.horizon), 0.0, 1.0)
        c = np.clip(u + effect + rng.normal(0.0, spread, options.horizon), 0.0, 1.0)
        return u, c

    return draw


def resampled(incumbent: np.ndarray, challenger: np.ndarray, horizon: int) -> Streams:
    """The real pair's queries drawn with replacement, the challenger's mean difference
    set to exactly `effect` (scores may then leave [0, 1] slightly: the test sees d)."""
    centered = challenger - (challenger - incumbent).mean()

    def draw(effect: float, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
        rows = rng.integers(0, incumbent.size, horizon)
        return incumbent[rows], centered[rows] + effect

    return draw


def demo_pairs(options: ChampionEvalOptions, progress: bool) -> dict[str, dict[str, Any]]:
    """Every pair of models of one demo run, on the queries both were scored on."""
    result = run_demo(
        DemoOptions(queries=options.demo_queries, images=options.demo_images, seed=options.seed),
        progress=progress,
    )
    pairs = {}
    for a, b in itertools.combinations(sorted(result.ndcg), 2):
        both = ~np.isnan(result.ndcg[a]) & ~np.isnan(result.ndcg[b])
        if both.sum() >= 100:
            u, c = result.ndcg[a][both], result.ndcg[b][both]
            d = c - u
            pairs[f"{b} - {a}"] = {
                "incumbent": u,
                "challenger": c,
                "queries": int(both.sum()),
                "mean_difference": float(d.mean()),
                "spread": float(d.std()),
            }
    return pairs


def aa_every_pair(options: ChampionEvalOptions, pairs: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """The A/A on every differing real pair, both directions, both policies."""
    test, rng = options.test(), np.random.default_rng([options.seed, 1])
    rates: dict[str, dict[str, float]] = {}
    for pair, p in sorted(pairs.items()):
        if p["spread"] <= 0.01:
            continue
        reverse = " - ".join(pair.split(" - ")[::-1])
        for label, u0, c0 in ((pair, p["incumbent"], p["challenger"]),
                              (reverse, p["challenger"], p["incumbent"])):  # fmt: skip
            null = resampled(u0, c0, options.horizon)
            new = old = 0
            for _ in range(options.runs):
                u, c = null(0.0, rng)
                new += first_switch(test, np.clip(c - u, -1.0, 1.0)) is not None
                old += old_first_switch(u, c) is not None
            rates[label] = {"new": new / options.runs, "old": old / options.runs}
    result: dict[str, Any] = {"runs_each": options.runs}
    for policy in ("new", "old"):
        worst = max(rates, key=lambda label: rates[label][policy])
        rate = rates[worst][policy]
        result[policy] = {
            "mean_false_switch_rate": float(np.mean([r[policy] for r in rates.values()])),
            "worst_pair": worst,
            "worst_false_switch_rate": rate,
            "worst_standard_error": (rate * (1.0 - rate) / options.runs) ** 0.5,
        }
    result["by_pair"] = rates
    return result


def evaluate_champion(options: ChampionEvalOptions, progress: bool = False) -> dict[str, Any]:
    test = options.test()
    report: dict[str, Any] = {
        "alpha": options.alpha,
        "delta": options.delta,
        "test": f"one-sided mSPRT, tau = 2 delta, min_pairs {test.min_pairs}, "
        f"variance prior {test.variance_prior:g}",
        "old_policy": {"window": OLD_WINDOW, "margin": OLD_MARGIN, "min_queries": OLD_MIN_QUERIES},
        "runs": options.runs,
        "horizon": options.horizon,
        "simulated": {
            f"spread={sd:g}": race(options, simulated(options, sd), options.seed)
            for sd in options.spreads
        },
        "fixed_sample_bound": {
            f"spread={sd:g}": fixed_sample_bound(sd, options.alpha) for sd in options.spreads
        },
    }
    if options.real:
        pairs = demo_pairs(options, progress)
        differing = sorted((p["spread"], name) for name, p in pairs.items() if p["spread"] > 0.01)
        spread, name = differing[len(differing) // 2]
        chosen = pairs[name]
        report["fixed_sample_bound"][f"real ({name})"] = fixed_sample_bound(spread, options.alpha)
        report["real"] = {
            "source": f"rankstream demo: {options.demo_queries} queries, "
            f"{options.demo_images} synthetic images, seed {options.seed}",
            "spreads": {
                n: {k: p[k] for k in ("queries", "mean_difference", "spread")}
                for n, p in sorted(pairs.items())
            },
            "pair": name,
            "spread": spread,
            "aa_every_pair": aa_every_pair(options, pairs),
            "result": race(
                options,
                resampled(chosen["incumbent"], chosen["challenger"], options.horizon),
                options.seed,
            ),
        }
    report["targets"] = _targets(report)
    return report


def _targets(report: dict[str, Any]) -> dict[str, Any]:
    """The issue's two targets for the new test, per stream."""
    streams = dict(report["simulated"])
    if "real" in report:
        streams[f"real ({report['real']['pair']})"] = report["real"]["result"]
    targets: dict[str, Any] = {}
    if "real" in report:
        worst = report["real"]["aa_every_pair"]["new"]
        targets["real, every pair"] = {
            "aa_false_switches_within_alpha_worst_pair": worst["worst_false_switch_rate"]
            <= report["alpha"]
        }
    for name, result in streams.items():
        targets[name] = {
            "aa_false_switches_within_alpha": result["aa"]["new"]["false_switch_rate"]
            <= report["alpha"],
            f"switch_at_0.01_within_{WITHIN}_in_80pct": (
                result["0.01"]["new"][f"switched_within_{WITHIN}"] >= 0.8
                if "0.01" in result
                else None
            ),
        }
    return targets
