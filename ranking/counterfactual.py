"""Counterfactual click-DCG@k of a ranking policy from logged impressions and clicks.

What it estimates. For one impression the policy under evaluation reranks the results
that were shown; its click-based DCG@k is the sum, over the results the user would click
if every one were examined, of 1 / log2(1 + rank) at the policy's rank (1-based) when that
rank is <= k. Its expectation over the logged queries is estimated from clicks on the
*logged* rankings by inverse propensity scoring (Joachims, Swaminathan & Schnabel,
"Unbiased Learning-to-Rank with Biased Feedback", WSDM 2017, the propensity-weighted
estimator of an additive metric): per impression

    x = sum over clicked results d of  gain_k(policy's rank of d) / p(logged rank of d)

and IPS is the mean of x over the impressions (those without clicks count, with x = 0).
Under the position-based model a result at logged rank j is clicked with probability
p_j a_d (examined with p_j, then clicked with its attractiveness a_d), so
E[x] = sum_d a_d gain_k(rank of d): unbiased for any reranking of what was shown.

Self-normalised form (SNIPS). SNIPS (Swaminathan & Joachims, NeurIPS 2015; Open Bandit
Pipeline's `SelfNormalizedInverseProbabilityWeighting`) divides importance weights by their
empirical mean, whose expectation is 1. Here the weights are the clicks' 1/p, whose
expectation is unknown (the attractiveness of what was shown), so no weight with a known
mean exists; this module's reading: each click's weight divided by the log's mean click
weight, so the weights average 1 over the clicks,

    SNIPS = (sum x / sum w) * (clicks / impressions),   w = sum over clicks of 1/p,

the IPS-weighted mean gain of a clicked result times the observed clicks per impression.
It is bounded by the click rate (gains <= 1) and does not change when every propensity is
scaled by one factor (propensities from `ranking.propensity` are relative to rank 1);
it converges to V * E[clicks] / E[w], not to V: biased for the level, and for two
policies on the same impressions the factor is common, so SNIPS orders policies as IPS
does. Report it as a scale-free companion, decide on IPS.

Confidence intervals: the central limit theorem on per-impression terms (impressions are
independent draws of queries and users): IPS +- z s / sqrt(n) with s the terms' standard
deviation; SNIPS by the delta method (its per-impression influence terms). A *difference*
between two policies is paired per impression (the same clicks, both reranked): the
interval of the mean of x_a - x_b, never two separate intervals. Both come from the
terms' `Moments` (count, means, co-moments), which add exactly: a live estimate keeps one
per policy and per pair and adds each closed session's terms, no terms kept.

Clipping. Propensities are clipped below at `min_propensity` (the click join's
`DEFAULT_MIN_PROPENSITY`, 0.1): a click weighs at most 1 / min_propensity. The cost: a
click at a rank with p < min_propensity counts p / min_propensity of its worth, so the
estimate is low by sum_d a_d gain_k(d) (1 - p_d / min_propensity) over such results
(counted as `clipped_clicks`); the gain is bounded variance.

What it assumes, and where it is biased:

* Examination depends on the logged rank only (the position-based model), and a click
  needs examination. Cascade users (examination depends on the clicks above) and trust
  bias (clicks at the top beyond what examination explains) break E[x] = V: the estimate
  is biased, typically toward the logged ranking's own order.
* The policy only reorders what was shown. Results never shown have no clicks and are not
  in the terms: a policy that would bring up unshown results is not credited for them.
* The propensities are right: known, or estimated by `ranking.propensity` from randomized
  impressions (rank 1's taken as 1: the estimate is then of click-DCG scaled by 1 / p_1,
  a common factor). Wrong propensities bias it; ranks past the randomized depth are
  extrapolated.
* Clipping (above): low at ranks with p < min_propensity.

>>> import numpy as np
>>> shown_clicks = [np.array([False, True, False]), np.array([True, False, False])]
>>> scores = [np.array([0.1, 0.9, 0.5]), np.array([0.0, 1.0, 0.2])]
>>> p = np.array([1.0, 0.5, 0.25])
>>> terms = policy_terms(shown_clicks, [rerank(s) for s in scores], p, k=10)
>>> terms.x.tolist()  # 1/0.5 at new rank 1; 1/1 at new rank 3 (1/log2 4 = 0.5)
[2.0, 0.5]
>>> round(estimate(terms).ips, 4), round(estimate(terms).snips, 4)
(1.25, 0.8333)
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from statistics import NormalDist

import numpy as np

from rankstream.ranking.click_pairs import DEFAULT_MIN_PROPENSITY, ips_weights

__all__ = [
    "DEFAULT_K",
    "DEFAULT_LEVEL",
    "Estimate",
    "Moments",
    "Terms",
    "difference",
    "estimate",
    "gains",
    "impression_terms",
    "policy_terms",
    "rerank",
]

DEFAULT_K = 10
"""DCG@10: the ranks `ranking.propensity` measures (its depth); deeper ranks' propensities
are extrapolated, and their clicks are rare and heavily weighted."""
DEFAULT_LEVEL = 0.95


def gains(ranks: np.ndarray, k: int) -> np.ndarray:
    """1 / log2(1 + rank) for 1-based rank = `ranks` + 1 (0-based in), 0 past rank k."""
    if k < 1:
        raise ValueError(f"k must be >= 1, got {k}")
    ranks = np.asarray(ranks, dtype=np.int64)
    return np.where(ranks < k, 1.0 / np.log2(ranks + 2.0), 0.0)


def rerank(scores: np.ndarray) -> np.ndarray:
    """The 0-based rank a policy gives each shown result (displayed order in): its scores
    from high to low, ties in the displayed order (stable), as serve orders a model's."""
    scores = np.asarray(scores, dtype=np.float64)
    if scores.ndim != 1 or not np.isfinite(scores).all():
        raise ValueError("scores must be a 1-d array of finite numbers")
    order = np.argsort(-scores, kind="stable")
    ranks = np.empty(order.shape[0], dtype=np.int64)
    ranks[order] = np.arange(order.shape[0])
    return ranks


def impression_terms(
    clicked: np.ndarray,
    ranks: np.ndarray,
    propensities: np.ndarray,
    k: int = DEFAULT_K,
    min_propensity: float = DEFAULT_MIN_PROPENSITY,
) -> tuple[float, float, int, int]:
    """(x, w, clicks, clipped clicks) of one impression: `clicked` (bool, displayed order),
    `ranks` the policy's 0-based rank of each shown result, `propensities[j]` P(examined
    at displayed position j); x and w as in the module docstring."""
    terms = policy_terms([clicked], [ranks], propensities, k, min_propensity)
    return float(terms.x[0]), float(terms.w[0]), int(terms.c[0]), terms.clipped


@dataclass(frozen=True)
class Terms:
    """Per-impression terms of one policy over a log: x (its IPS term), w (the clicks'
    summed inverse propensities), c (clicks); `clipped` counts clipped clicks."""

    x: np.ndarray
    w: np.ndarray
    c: np.ndarray
    clipped: int

    def __len__(self) -> int:
        return int(self.x.shape[0])


def policy_terms(
    clicked: Sequence[np.ndarray],
    ranks: Sequence[np.ndarray],
    propensities: np.ndarray | list[np.ndarray],
    k: int = DEFAULT_K,
    min_propensity: float = DEFAULT_MIN_PROPENSITY,
) -> Terms:
    """The terms of a policy over a log: per impression its clicks (bool, displayed order)
    and the policy's ranks of its shown results (`rerank` of its scores; the logged
    ranking itself is `np.arange(n)`). One pass over the whole log's arrays.
    `propensities`: one array for every impression, or a list of one per impression (a
    live log whose estimate moved between impressions), each at least as long as it."""
    if len(clicked) != len(ranks):
        raise ValueError(f"{len(clicked)} impressions' clicks but {len(ranks)} rankings")
    n = len(clicked)
    for c, r in zip(clicked, ranks, strict=True):
        if np.ndim(c) != 1 or np.asarray(c).dtype != bool:
            raise ValueError(f"clicks must be 1-d bool arrays, got {np.asarray(c).dtype}")
        if np.shape(r) != np.shape(c):
            raise ValueError(f"need a rank per shown result ({len(c)}), got {np.shape(r)}")
    lengths = np.array([len(c) for c in clicked], dtype=np.int64)
    flat_clicked = np.concatenate([*clicked, np.zeros(0, bool)])
    flat_ranks = np.concatenate([*ranks, np.zeros(0, np.int64)]).astype(np.int64)
    impression = np.repeat(np.arange(n), lengths)
    position = np.arange(flat_ranks.shape[0]) - np.repeat(np.cumsum(lengths) - lengths, lengths)
    in_range = (flat_ranks >= 0) & (flat_ranks < lengths[impression])
    distinct = np.unique(impression * (lengths.max(initial=0) + 1) + flat_ranks).shape[0]
    if not in_range.all() or distinct != flat_ranks.shape[0]:
        raise ValueError("ranks must be a permutation of 0..n-1 (a reranking of what was shown)")
    at, who = position[flat_clicked], impression[flat_clicked]
    if isinstance(propensities, list):  # one per impression: index their shown prefixes
        if len(propensities) != n:
            raise ValueError(f"{n} impressions but {len(propensities)} propensity arrays")
        if any(len(p) < m for p, m in zip(propensities, lengths.tolist(), strict=True)):
            raise ValueError("an impression's propensities are shorter than what it showed")
        propensities = np.concatenate(
            [np.zeros(0), *(np.asarray(p)[:m] for p, m in zip(propensities, lengths.tolist(),
                                                             strict=True))]
        )  # fmt: skip
        at = np.flatnonzero(flat_clicked)
    weight = ips_weights(at, propensities, min_propensity)
    clipped = int((np.asarray(propensities, dtype=np.float64)[at] < min_propensity).sum())
    gain = gains(flat_ranks[flat_clicked], k) * weight
    return Terms(
        np.bincount(who, weights=gain, minlength=n).astype(np.float64),
        np.bincount(who, weights=weight, minlength=n).astype(np.float64),
        np.bincount(who, minlength=n).astype(np.int64),
        clipped,
    )


@dataclass(frozen=True)
class Estimate:
    """IPS and SNIPS of click-DCG@k (or of a paired difference) with `level` intervals;
    an interval is None with fewer than 2 impressions, SNIPS None without a click."""

    ips: float
    ips_interval: tuple[float, float] | None
    snips: float | None
    snips_interval: tuple[float, float] | None
    impressions: int
    clicks: int
    clipped_clicks: int
    level: float

    def as_dict(self) -> dict[str, object]:
        """JSON-able, intervals as [low, high]."""
        return {
            "ips": self.ips,
            "ips_interval": None if self.ips_interval is None else list(self.ips_interval),
            "snips": self.snips,
            "snips_interval": None if self.snips_interval is None else list(self.snips_interval),
            "level": self.level,
            "impressions": self.impressions,
            "clicks": self.clicks,
            "clipped_clicks": self.clipped_clicks,
        }


def _z(level: float) -> float:
    if not 0.0 < level < 1.0:
        raise ValueError(f"level must lie in (0, 1), got {level}")
    return NormalDist().inv_cdf(0.5 + level / 2.0)


@dataclass(frozen=True)
class Moments:
    """What the estimates need of a log's per-impression terms (x, w, c): their count,
    means and co-moment matrix (sum of outer products of deviations), merged exactly by
    `+` (Chan et al.'s pairwise update), so a live estimate can add each closed session's
    terms without keeping them; `clipped` counts clipped clicks."""

    n: int
    mean: np.ndarray  # (3,): x, w, c
    comoment: np.ndarray  # (3, 3)
    clipped: int = 0

    @classmethod
    def of(cls, terms: Terms) -> Moments:
        """The moments of a policy's terms."""
        return cls._of(terms.x, terms.w, terms.c, terms.clipped)

    @classmethod
    def of_difference(cls, a: Terms, b: Terms) -> Moments:
        """The moments of policy a minus policy b, paired per impression (x_a - x_b, with
        the clicks and weights the two share)."""
        if len(a) != len(b) or not (np.array_equal(a.w, b.w) and np.array_equal(a.c, b.c)):
            raise ValueError("a difference needs both policies' terms on the same impressions")
        return cls._of(a.x - b.x, a.w, a.c, a.clipped)

    @classmethod
    def _of(cls, x: np.ndarray, w: np.ndarray, c: np.ndarray, clipped: int) -> Moments:
        values = np.column_stack([x, w, c]).astype(np.float64)
        if not values.shape[0]:
            return cls(0, np.zeros(3), np.zeros((3, 3)), clipped)
        mean = values.mean(axis=0)
        deviations = values - mean
        return cls(values.shape[0], mean, deviations.T @ deviations, clipped)

    def __add__(self, other: Moments) -> Moments:
        n = self.n + other.n
        if not n:
            return Moments(0, np.zeros(3), np.zeros((3, 3)), self.clipped + other.clipped)
        delta = other.mean - self.mean
        mean = self.mean + delta * (other.n / n)
        comoment = self.comoment + other.comoment + np.outer(delta, delta) * (self.n * other.n / n)
        return Moments(n, mean, comoment, self.clipped + other.clipped)

    def estimate(self, level: float = DEFAULT_LEVEL) -> Estimate:
        """IPS = mean x with the CLT interval; SNIPS = mean x * mean c / mean w with the
        delta method's: the variance of its per-impression influence
        (c̄/w̄) x - (x̄ c̄/w̄²) w + (x̄/w̄) c, from the terms' sample covariance."""
        z = _z(level)
        if self.n == 0:
            raise ValueError("no impressions to estimate from")
        x_bar, w_bar, c_bar = (float(v) for v in self.mean)
        covariance = self.comoment / (self.n - 1) if self.n > 1 else None

        def interval(value: float, gradient: list[float]) -> tuple[float, float] | None:
            if covariance is None:
                return None
            g = np.array(gradient)
            half = z * math.sqrt(max(float(g @ covariance @ g), 0.0) / self.n)
            return (value - half, value + half)

        snips = snips_interval = None
        if w_bar > 0:
            snips = x_bar * c_bar / w_bar
            gradient = [c_bar / w_bar, -x_bar * c_bar / w_bar**2, x_bar / w_bar]
            snips_interval = interval(snips, gradient)
        clicks = round(c_bar * self.n)
        ips_interval = interval(x_bar, [1.0, 0.0, 0.0])
        return Estimate(
            x_bar, ips_interval, snips, snips_interval, self.n, clicks, self.clipped, level
        )


def estimate(terms: Terms, level: float = DEFAULT_LEVEL) -> Estimate:
    """A policy's IPS and SNIPS click-DCG@k with CLT / delta-method intervals."""
    return Moments.of(terms).estimate(level)


def difference(a: Terms, b: Terms, level: float = DEFAULT_LEVEL) -> Estimate:
    """Policy a minus policy b on the same impressions, paired per impression: IPS is the
    mean of x_a - x_b; SNIPS scales it by the log's common clicks / w (the two policies
    share the clicks and their weights)."""
    return Moments.of_difference(a, b).estimate(level)
