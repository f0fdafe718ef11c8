"""`rankstream eval champion`: the champion tests on score streams, beside the old rule.

Three policies watch the same paired per-query NDCG@50 streams (incumbent u_i, challenger
c_i, one pair per judged query), each checked after every query:

* betting: the race's test, `ranking.sequential.PairedTest` (wealth by betting, exactly
  valid for d in [-1, 1]) on d_i = c_i - u_i (alpha, delta);
* msprt: the mixture SPRT it replaced (`ranking.sequential.MixtureSPRT`, plug-in variance
  with its prior, 100-pair burn-in), valid only asymptotically;
* rolling_mean: the rule before both (switch once the challenger's mean over its last
  200 queries beats the incumbent's by more than 0.005, after 20 queries). Here both
  windows hold the same queries, the most favourable case for it: in the evaluator
  Uni-Con's window started with the stream and a learned model's only at its first
  checkpoint.

(a) A/A: two rankers of equal quality, `runs` streams of `horizon` queries: the share
that ever switches (false switches), with its binomial standard error. (b) a challenger
truly better by each of `effects`: the median number of queries to the switch (None
when fewer than half the runs switch within the horizon) and the share switched within
500.

Score streams, two sources:

* simulated: u_i ~ N(0.6, 0.15) clipped to [0, 1], c_i = u_i + effect + N(0, sd), for
  each per-query spread sd of `spreads`;
* real: the demo's streams (`rankstream.demo_pipeline`, synthetic collection): every pair of
  models scored on the same queries; the pair of median spread among the pairs that
  differ (sd > 0.01) is resampled (queries drawn with replacement), its challenger
  shifted so that its true mean difference is exactly 0 (A/A) or each effect. The A/A
  is also run (`runs` each, every policy) on every differing pair in both directions,
  since skew is where a plug-in variance fails: per pair, the mean over pairs, how many
  pairs are above alpha and how many significantly so (one-sided binomial test,
  Bonferroni over the pairs), and the worst pair with its binomial standard error; the
  worst of many noisy estimates is biased up, so that pair is run again on
  `confirm_runs` fresh streams (its confirmed rate and the p-value of "rate <= alpha");
* rare loss (A/A only, `rare_loss`, `confirm_runs` runs): the null where a plug-in
  variance fails by construction, a total loss on one query in 200.

Beside each stream, the bound no level-alpha test can beat: the power of the
fixed-sample one-sided z-test at n = 500 for a +0.01 challenger at the stream's spread
sd, Phi(0.01 sqrt(500) / sd - z_{1-alpha}), the most powerful test of a Gaussian mean
with n fixed in advance (a sequential test that may stop earlier cannot do better at
500), and the largest spread at which it reaches 80%. And the bound no test valid for every
distribution on [-1, 1] can beat whatever the spread (`range_bound`): the fewest pairs
at which it may switch a challenger better by each effect on every single query.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable
from dataclasses import replace
from typing import Any

import numpy as np
from scipy.stats import binom, norm

from rankstream.demo_pipeline import DemoOptions, run_demo
from rankstream.evals.champion_eval_options import ChampionEvalOptions
from rankstream.ranking.sequential import switch_times

OLD_WINDOW, OLD_MARGIN, OLD_MIN_QUERIES = 200, 0.005, 20  # the replaced policy's defaults
WITHIN = 500  # the target: a +0.01 challenger switches within 500 paired queries
TARGET_EFFECT, TARGET_POWER = 0.01, 0.8


OLD = "rolling_mean"  # the report's key of the rule before both tests
RARE_LOSS = 0.005  # `rare_loss`: the share of queries the challenger loses entirely


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


def range_bound(effect: float, alpha: float) -> int:
    """The fewest pairs at which any test valid for every distribution of d on [-1, 1]
    can switch a challenger whose every difference is exactly `effect` (zero spread).

    Under the null "d = -1 with probability e / (1 + e), else e" (mean 0) that very
    sample has probability (1 + e)^-n, so rejecting on it keeps level alpha only once
    (1 + e)^-n <= alpha: n >= log(1/alpha) / log(1 + e). Any spread only adds to it.

    >>> range_bound(0.01, 0.01), range_bound(0.01, 0.05), range_bound(0.02, 0.01)
    (463, 302, 233)
    """
    return math.ceil(math.log(1.0 / alpha) / math.log1p(effect))


def old_switch_times(incumbent: np.ndarray, challenger: np.ndarray) -> np.ndarray:
    """The query at which the rolling-mean rule first switches, per stream (rows; inf:
    never).

    >>> old_switch_times(np.full((1, 50), 0.5), np.full((1, 50), 0.51))
    array([20.])
    """
    n = np.arange(1, incumbent.shape[-1] + 1)
    counts = np.minimum(n, OLD_WINDOW)

    def rolling(x: np.ndarray) -> np.ndarray:
        total = np.cumsum(x, axis=-1)
        total[..., OLD_WINDOW:] -= total[..., :-OLD_WINDOW].copy()
        return total / counts

    hits = (n >= OLD_MIN_QUERIES) & (rolling(challenger) > rolling(incumbent) + OLD_MARGIN)
    return np.where(hits.any(axis=-1), hits.argmax(axis=-1) + 1.0, np.inf)


Streams = Callable[[float, np.random.Generator, int], tuple[np.ndarray, np.ndarray]]


def switch_times_by_policy(
    options: ChampionEvalOptions, u: np.ndarray, c: np.ndarray
) -> dict[str, np.ndarray]:
    """Every policy's queries to the first switch on the same streams (rows)."""
    d = np.clip(c - u, -1.0, 1.0)
    times = {name: switch_times(test, d) for name, test in options.tests().items()}
    return {**times, OLD: old_switch_times(u, c)}


def race(options: ChampionEvalOptions, draw: Streams, seed: int) -> dict[str, Any]:
    """A/A and each effect, every policy on the same streams."""
    result: dict[str, Any] = {}
    for effect in (0.0, *options.effects):
        rng = np.random.default_rng([seed, round(effect * 1e6)])
        u, c = draw(effect, rng, options.runs)
        key = "aa" if effect == 0.0 else f"{effect:g}"
        times = switch_times_by_policy(options, u, c)
        result[key] = {name: _outcome(at, effect) for name, at in times.items()}
    return result


def _outcome(at: np.ndarray, effect: float) -> dict[str, Any]:
    switched = np.isfinite(at)
    runs = int(at.size)
    if effect == 0.0:
        rate = float(switched.mean())
        return {
            "false_switch_rate": rate,
            "standard_error": (rate * (1.0 - rate) / runs) ** 0.5,
            "runs": runs,
        }
    median = float(np.median(at))
    return {
        "median_queries_to_switch": None if np.isinf(median) else int(median),
        f"switched_within_{WITHIN}": float((at <= WITHIN).mean()),
        "switched_within_horizon": float(switched.mean()),
        "runs": runs,
    }


def simulated(options: ChampionEvalOptions, spread: float) -> Streams:
    def draw(effect: float, rng: np.random.Generator, runs: int) -> tuple[np.ndarray, np.ndarray]:
        shape = (runs, options.horizon)
        u = np.clip(rng.normal(0.6, 0.15, shape), 0.0, 1.0)
        c = np.clip(u + effect + rng.normal(0.0, spread, shape), 0.0, 1.0)
        return u, c

    return draw


def rare_loss(options: ChampionEvalOptions) -> Streams:
    """A/A where a plug-in variance fails: the challenger loses everything (NDCG 1 -> 0)
    on one query in 200 and gains a little on the rest, mean difference exactly 0; the
    first pairs rarely show a loss, so the variance looks tiny just when the mean looks
    good (`ranking.sequential.MixtureSPRT`)."""
    q = RARE_LOSS

    def draw(effect: float, rng: np.random.Generator, runs: int) -> tuple[np.ndarray, np.ndarray]:
        loss = rng.random((runs, options.horizon)) < q
        u = np.where(loss, 1.0, 0.5)
        return u, np.where(loss, 0.0, 0.5 + q / (1.0 - q) + effect)

    return draw


def rare_loss_aa(options: ChampionEvalOptions) -> dict[str, Any]:
    """The A/A on `rare_loss` streams, `confirm_runs` of them: there a wealth crosses
    1/alpha with no overshoot, so Ville's bound is nearly tight (a rate just below alpha,
    which 1,000 runs cannot tell from alpha); with the p-value of "rate <= alpha"."""
    result = race(replace(options, effects=(), runs=options.confirm_runs), rare_loss(options),
                  options.seed)["aa"]  # fmt: skip
    for outcome in result.values():
        switched = round(outcome["false_switch_rate"] * outcome["runs"])
        outcome["p_value_rate_at_most_alpha"] = _p_value(switched, outcome["runs"], options.alpha)
    return result


def _p_value(switched: int, runs: int, alpha: float) -> float:
    """One-sided binomial p-value of "the false-switch rate is at most alpha"."""
    return float(binom.sf(switched - 1, runs, alpha))


def resampled(incumbent: np.ndarray, challenger: np.ndarray, horizon: int) -> Streams:
    """The real pair's queries drawn with replacement, the challenger's mean difference
    set to exactly `effect` (scores may then leave [0, 1] slightly: the test sees d)."""
    centered = challenger - (challenger - incumbent).mean()

    def draw(effect: float, rng: np.random.Generator, runs: int) -> tuple[np.ndarray, np.ndarray]:
        rows = rng.integers(0, incumbent.size, (runs, horizon))
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
    """The A/A on every differing real pair, both directions, every policy."""
    rng = np.random.default_rng([options.seed, 1])
    rates: dict[str, dict[str, float]] = {}
    by_label: dict[str, tuple[np.ndarray, np.ndarray]] = {}
    for pair, p in sorted(pairs.items()):
        if p["spread"] <= 0.01:
            continue
        reverse = " - ".join(pair.split(" - ")[::-1])
        for label, u0, c0 in ((pair, p["incumbent"], p["challenger"]),
                              (reverse, p["challenger"], p["incumbent"])):  # fmt: skip
            by_label[label] = (u0, c0)
            u, c = resampled(u0, c0, options.horizon)(0.0, rng, options.runs)
            times = switch_times_by_policy(options, u, c)
            rates[label] = {name: float(np.isfinite(at).mean()) for name, at in times.items()}
    result: dict[str, Any] = {"runs_each": options.runs, "pairs": len(rates)}
    confirm = np.random.default_rng([options.seed, 2])
    for policy in (*options.tests(), OLD):
        worst = max(rates, key=lambda label: rates[label][policy])
        rate = rates[worst][policy]
        # the worst of many noisy rates is biased up: fresh runs of that pair estimate it
        u0, c0 = by_label[worst]
        u, c = resampled(u0, c0, options.horizon)(0.0, confirm, options.confirm_runs)
        confirmed = float(np.isfinite(switch_times_by_policy(options, u, c)[policy]).mean())
        result[policy] = {
            "mean_false_switch_rate": float(np.mean([r[policy] for r in rates.values()])),
            "worst_pair": worst,
            "worst_false_switch_rate": rate,
            "worst_standard_error": (rate * (1.0 - rate) / options.runs) ** 0.5,
            "pairs_above_alpha": sum(r[policy] > options.alpha for r in rates.values()),
            # one-sided binomial tests of "rate <= alpha", Bonferroni over the pairs
            "pairs_significantly_above_alpha": sum(
                _p_value(round(r[policy] * options.runs), options.runs, options.alpha)
                < 0.05 / len(rates)
                for r in rates.values()
            ),
            "worst_pair_confirmed": {
                "runs": options.confirm_runs,
                "false_switch_rate": confirmed,
                "standard_error": (confirmed * (1.0 - confirmed) / options.confirm_runs) ** 0.5,
                "p_value_rate_at_most_alpha": _p_value(
                    round(confirmed * options.confirm_runs), options.confirm_runs, options.alpha
                ),
            },
        }
    result["by_pair"] = rates
    return result


def evaluate_champion(options: ChampionEvalOptions, progress: bool = False) -> dict[str, Any]:
    report: dict[str, Any] = {
        "alpha": options.alpha,
        "delta": options.delta,
        "policies": {
            **{name: test.describe() for name, test in options.tests().items()},
            OLD: {"window": OLD_WINDOW, "margin": OLD_MARGIN, "min_queries": OLD_MIN_QUERIES},
        },
        "runs": options.runs,
        "horizon": options.horizon,
        "simulated": {
            f"spread={sd:g}": race(options, simulated(options, sd), options.seed)
            for sd in options.spreads
        },
        "aa_rare_loss": rare_loss_aa(options),
        "fixed_sample_bound": {
            f"spread={sd:g}": fixed_sample_bound(sd, options.alpha) for sd in options.spreads
        },
        "range_bound": {
            f"{effect:g}": range_bound(effect, options.alpha) for effect in options.effects
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
    """The issue's two targets per stream, for each sequential test."""
    streams = dict(report["simulated"])
    if "real" in report:
        streams[f"real ({report['real']['pair']})"] = report["real"]["result"]
    targets: dict[str, Any] = {}
    for policy in report["policies"]:
        if policy == OLD:
            continue
        mine: dict[str, Any] = {}
        rare = report["aa_rare_loss"][policy]
        mine["rare loss"] = {
            "aa_false_switches_within_alpha": rare["false_switch_rate"] <= report["alpha"],
            "aa_not_significantly_above_alpha": rare["p_value_rate_at_most_alpha"] >= 0.05,
        }
        if "real" in report:
            worst = report["real"]["aa_every_pair"][policy]
            mine["real, every pair"] = {
                "no_pair_significantly_above_alpha": worst["pairs_significantly_above_alpha"] == 0,
                "worst_pair_confirmed_within_alpha": worst["worst_pair_confirmed"][
                    "false_switch_rate"
                ]
                <= report["alpha"],
            }
        for name, result in streams.items():
            mine[name] = {
                "aa_false_switches_within_alpha": result["aa"][policy]["false_switch_rate"]
                <= report["alpha"],
                f"switch_at_0.01_within_{WITHIN}_in_80pct": (
                    result["0.01"][policy][f"switched_within_{WITHIN}"] >= 0.8
                    if "0.01" in result
                    else None
                ),
            }
        targets[policy] = mine
    return targets
