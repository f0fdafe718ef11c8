"""Position-bias propensities estimated online from randomized interventions.

IPS-weighted click pairs (`ranking.click_pairs`) need P(examined at rank k), and it is
not known: it depends on the users, the page layout, the device. It is estimated here
from a small, randomized share of the traffic, the interventions of Joachims,
Swaminathan & Schnabel ("Unbiased Learning-to-Rank with Biased Feedback", WSDM 2017, §6).
Two of them, chosen by `rankstream serve`'s `RANKSTREAM_INTERVENTION`, both made by
`randomize` (serve, the simulators and `eval propensities` call it) and both read by one
estimator, `PropensityEstimator` (what the click join holds):

* "shuffle" (RandTop-n, the default): on an intervened impression the top `depth`
  results are shown in a uniformly random order, logged as "shuffle:1-n". Every rank
  1..n then holds the same documents on average, so on those impressions the clicks at
  rank k over the clicks at rank 1 estimate p_k / p_1: every intervened impression
  observes every rank.
* "swap": the results at ranks 1 and k (k uniform in 2..depth) trade places, logged as
  "swap:1-k". Which impressions are swapped is random, so the result moved to rank k is,
  on average, the one the impressions shown as ranked have at rank 1: the clicks at rank
  k on the k-swapped impressions over n_k times the click-through rate at rank 1 of the
  unrandomized impressions (ctr_1) estimate p_k / p_1. One rank observed per intervened
  impression: it needs about depth - 1 times the shuffle's traffic for the same precision
  (docs/results/propensities.md).

Both are ratios of the clicks seen at rank k to the clicks rank 1's propensity would have
had on the same exposures, so the estimator pools whatever it is given (a deployment that
changed interventions keeps its counts). With c_k the clicks at rank k on shuffles that
covered rank k and s_k their clicks at rank 1, and w_k the clicks at rank k on the n_k
impressions swapped with k:

    p_k / p_1 = (c_k + w_k + m pi_k) / (s_k + n_k ctr_1 + m),   pi_k = (1/k)^prior_eta

a prior worth `m` = `prior_clicks` clicks at rank 1, shaped like the position-based
model with `prior_eta` (1 by default, the usual 1/rank). Before any intervention the
estimate is the prior; once the data's clicks >> m the data decide. Propensities are
relative to rank 1 (p_1 = 1): IPS weights only need them up to a common factor.

Past `depth`. Ranks below the randomized ones are never observed apart from their
ranking; there the estimate extends as a power law k^-eta_hat, eta_hat the
least-squares fit of log p_k on log k over ranks 2..depth (through p_1 = 1), clipped
at >= 0, so propensities never increase with rank beyond `depth`.

>>> import numpy as np
>>> estimator = PropensityEstimator(depth=3, prior_clicks=0.0)
>>> estimator.observe("shuffle:1-3", np.array([True, True, False]))
>>> estimator.observe("shuffle:1-3", np.array([True, False, True]))
>>> estimator.propensities(3).tolist()
[1.0, 0.5, 0.5]
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from rankstream.ranking import INTERVENTIONS, SHUFFLE, SWAP

__all__ = [
    "DEFAULT_DEPTH",
    "INTERVENTIONS",
    "SHUFFLE",
    "SWAP",
    "PropensityEstimator",
    "Shown",
    "choose_swap",
    "extend_past_depth",
    "parse_intervention",
    "parse_swap",
    "prior_propensities",
    "randomize",
    "shuffle_intervention",
    "swap",
    "swap_intervention",
]

DEFAULT_DEPTH = 10
DEFAULT_PRIOR_ETA = 1.0
DEFAULT_PRIOR_CLICKS = 10.0
SWAP_PREFIX = "swap:1-"
SHUFFLE_PREFIX = "shuffle:1-"


def prior_propensities(depth: int, prior_eta: float) -> np.ndarray:
    """The prior (1/k)^prior_eta for ranks k = 1..depth (the position-based model's shape)."""
    return (1.0 / np.arange(1, depth + 1)) ** prior_eta


def extend_past_depth(measured: np.ndarray, n: int) -> np.ndarray:
    """Propensities for ranks 1..n from `measured` ones at ranks 1..depth: as measured up
    to depth, then the power law k^-eta_hat fitted on them (module docstring)."""
    depth = measured.shape[0]
    if n <= depth:
        return measured[:n].copy()
    ranks = np.arange(1, n + 1, dtype=np.float64)
    log_rank = np.log(ranks[1:depth])
    floor = np.finfo(np.float64).tiny  # a zero estimate: log of the smallest float
    log_p = np.log(np.maximum(measured[1:], floor))
    eta_hat = max(0.0, float(-(log_rank @ log_p) / (log_rank @ log_rank)))
    tail = measured[-1] * (depth / ranks[depth:]) ** eta_hat
    return np.concatenate([measured, np.maximum(tail, floor)])


# --- the interventions --------------------------------------------------------------------
@dataclass(frozen=True)
class Shown:
    """One ranking as a randomized logging policy shows it: `order` (the ranking's items
    in displayed order), the impression's `intervention` (None: shown as ranked) and
    `probability`, P(this order | the ranking) under the policy (the wire's
    `shown_probability`)."""

    order: np.ndarray
    intervention: str | None
    probability: float


def choose_swap(
    rng: np.random.Generator, share: float, shown: int, depth: int = DEFAULT_DEPTH
) -> int | None:
    """The rank k (2..min(depth, shown)) whose result trades places with rank 1's on this
    impression, with probability `share`; None (show the ranking as it is) otherwise.
    k is uniform, so every rank gets 1/(depth - 1) of the share."""
    _check_share(share)
    top = min(depth, shown)
    if top < 2 or rng.random() >= share:
        return None
    return int(rng.integers(2, top + 1))


def swap(ranking: np.ndarray, k: int) -> np.ndarray:
    """`ranking` (displayed order) with its results at ranks 1 and k (1-based) traded."""
    shown = np.array(ranking, copy=True)
    if not 2 <= k <= shown.shape[0]:
        raise ValueError(f"rank {k} outside 2..{shown.shape[0]}")
    shown[[0, k - 1]] = shown[[k - 1, 0]]
    return shown


def swap_intervention(k: int) -> str:
    """The impression's `intervention` for a swap of ranks 1 and k: "swap:1-k"."""
    return f"{SWAP_PREFIX}{int(k)}"


def shuffle_intervention(n: int) -> str:
    """The impression's `intervention` for ranks 1..n shown shuffled: "shuffle:1-n"."""
    return f"{SHUFFLE_PREFIX}{int(n)}"


def randomize(
    ranking: np.ndarray,
    kind: str,
    share: float,
    rng: np.random.Generator,
    depth: int = DEFAULT_DEPTH,
) -> Shown:
    """`ranking` (ranked order) as the logging policy `kind` shows it: with probability
    `share` randomized (SHUFFLE: the top min(depth, n) in a uniformly random order; SWAP:
    ranks 1 and a uniform k in 2..min(depth, n) traded), else as ranked. What `rankstream
    serve` calls per ranking it logs (`RANKSTREAM_INTERVENTION`,
    `RANKSTREAM_INTERVENTION_SHARE`); the click join's `PropensityEstimator` reads the
    logged `intervention` back. The probability is of the order shown, so a shuffle that
    drew the ranked order also counts the unrandomized (1 - share)."""
    if kind not in INTERVENTIONS:
        raise ValueError(f"intervention must be one of {', '.join(INTERVENTIONS)}, got {kind!r}")
    _check_share(share)
    ranking = np.asarray(ranking)
    top = min(depth, ranking.shape[0])
    if kind == SWAP:
        k = choose_swap(rng, share, ranking.shape[0], depth)
        if k is None:
            return Shown(ranking, None, 1.0 - share if top >= 2 else 1.0)
        return Shown(swap(ranking, k), swap_intervention(k), share / (top - 1))
    if top < 2:
        return Shown(ranking, None, 1.0)
    uniform = share / math.factorial(top)  # each order of the top, shuffled
    if rng.random() >= share:
        return Shown(ranking, None, 1.0 - share + uniform)
    permutation = rng.permutation(top)
    shown = np.array(ranking, copy=True)
    shown[:top] = shown[:top][permutation]
    as_ranked = bool((permutation == np.arange(top)).all())
    return Shown(shown, shuffle_intervention(top), uniform + (1.0 - share) * as_ranked)


@functools.lru_cache(maxsize=256)
def parse_intervention(intervention: str | None) -> tuple[str, int] | None:
    """(SWAP, k) of "swap:1-k" (k >= 2), (SHUFFLE, n) of "shuffle:1-n" (n >= 2); None for
    no intervention or one this code does not know."""
    if intervention is None:
        return None
    for kind, prefix in ((SWAP, SWAP_PREFIX), (SHUFFLE, SHUFFLE_PREFIX)):
        if intervention.startswith(prefix):
            tail = intervention[len(prefix) :]
            if tail.isdigit() and int(tail) >= 2:
                return kind, int(tail)
    return None


def parse_swap(intervention: str | None) -> int | None:
    """k of a "swap:1-k" intervention (k >= 2); None for no intervention or another kind."""
    parsed = parse_intervention(intervention)
    return parsed[1] if parsed is not None and parsed[0] == SWAP else None


def _check_share(share: float) -> None:
    if not 0.0 <= share <= 1.0:
        raise ValueError(f"share must lie in [0, 1], got {share}")


# --- the estimator ------------------------------------------------------------------------
_UNCOUNTED = -1  # an intervention this code does not know: counted nowhere


class PropensityEstimator:
    """Click counts per rank by intervention, and the propensities they give (module
    docstring). Every impression goes in with its logged `intervention`: None (shown as
    ranked: its rank-1 click rate is the swap's baseline), "swap:1-k" or "shuffle:1-n";
    any other intervention counts nowhere (its ranks are not comparable).

    >>> estimator = PropensityEstimator(depth=3, prior_clicks=0.0)
    >>> for _ in range(4):
    ...     estimator.observe(None, np.array([True, False, False]))
    >>> estimator.observe("swap:1-2", np.array([False, True, False]))
    >>> estimator.observe("swap:1-3", np.array([False, False, False]))
    >>> estimator.observe("swap:1-3", np.array([False, False, True]))
    >>> estimator.propensities(3).tolist()
    [1.0, 1.0, 0.5]
    """

    def __init__(
        self,
        depth: int = DEFAULT_DEPTH,
        prior_eta: float = DEFAULT_PRIOR_ETA,
        prior_clicks: float = DEFAULT_PRIOR_CLICKS,
    ) -> None:
        if depth < 2:
            raise ValueError(f"depth must be >= 2 (rank 1 and another), got {depth}")
        if not (np.isfinite(prior_eta) and prior_eta >= 0):
            raise ValueError(f"prior_eta must be finite and >= 0, got {prior_eta}")
        if not (np.isfinite(prior_clicks) and prior_clicks >= 0):
            raise ValueError(f"prior_clicks must be finite and >= 0, got {prior_clicks}")
        self.depth, self.prior_eta, self.prior_clicks = depth, float(prior_eta), float(prior_clicks)
        zeros = functools.partial(np.zeros, depth, dtype=np.int64)
        self.impressions = zeros()  # [0]: shown as ranked, [k-1]: swapped with k
        self.clicks = zeros()  # [0]: at rank 1 shown as ranked, [k-1]: at k swapped with k
        self.shuffled = zeros()  # [k-1]: shuffles that covered rank k
        self.shuffled_clicks = zeros()  # [k-1]: their clicks at rank k
        self.shuffled_top = zeros()  # [k-1]: their clicks at rank 1

    def observe(self, intervention: str | None, clicks: np.ndarray) -> None:
        """Count one impression's clicks (bool, displayed order) under its intervention."""
        clicks = np.asarray(clicks)
        if clicks.ndim != 1 or clicks.dtype != bool or clicks.shape[0] < 1:
            raise ValueError(f"clicks must be a 1-d bool array, got {clicks.dtype} {clicks.shape}")
        if intervention is None:  # most impressions: shown as ranked (observe_many's rule)
            self.impressions[0] += 1
            self.clicks[0] += int(clicks[0])
            return
        self.observe_many([intervention], clicks[None, :])

    def observe_many(self, interventions: Sequence[str | None], clicks: np.ndarray) -> None:
        """Count n impressions at once: their interventions and clicks (n, L) bool in
        displayed order; as `observe` counts each."""
        clicks = np.asarray(clicks)
        if clicks.ndim != 2 or clicks.dtype != bool or clicks.shape[1] < 1:
            raise ValueError(f"clicks must be (n, >= 1) bool, got {clicks.dtype} {clicks.shape}")
        if len(interventions) != clicks.shape[0]:
            raise ValueError(f"need {clicks.shape[0]} interventions, got {len(interventions)}")
        swapped = np.full(clicks.shape[0], _UNCOUNTED, dtype=np.int64)  # 0: as ranked
        shuffled = np.zeros(clicks.shape[0], dtype=np.int64)  # n of a shuffle of 1..n
        for row, intervention in enumerate(interventions):
            parsed = parse_intervention(intervention)
            if intervention is None:
                swapped[row] = 0
            elif parsed is not None and parsed[0] == SWAP:
                swapped[row] = parsed[1]
            elif parsed is not None:
                shuffled[row] = parsed[1]
        width = min(self.depth, clicks.shape[1])
        rank = np.where(swapped == 0, 1, swapped)
        counted = (swapped >= 0) & (rank <= width)
        rows, at = np.flatnonzero(counted), rank[counted] - 1
        self.impressions += np.bincount(at, minlength=self.depth)
        hits = np.bincount(at, weights=clicks[rows, at], minlength=self.depth)
        self.clicks += hits.astype(np.int64)
        covered = np.minimum(shuffled, width)  # ranks 1..covered randomized and shown
        for k in range(1, int(covered.max(initial=0)) + 1):  # none without a shuffle
            rows = covered >= k
            self.shuffled[k - 1] += int(rows.sum())
            self.shuffled_clicks[k - 1] += int(clicks[rows, k - 1].sum())
            self.shuffled_top[k - 1] += int(clicks[rows, 0].sum())

    def relative_ctr(self) -> np.ndarray:
        """p_k / p_1 for ranks 1..depth (the module docstring's pooled ratio)."""
        prior = prior_propensities(self.depth, self.prior_eta)
        ctr_1 = self.clicks[0] / self.impressions[0] if self.impressions[0] else 0.0
        swapped, swap_clicks = self.impressions.copy(), self.clicks.copy()
        swapped[0] = swap_clicks[0] = 0  # rank 1's counts are the baseline, not a swap
        seen = self.shuffled_clicks + swap_clicks + self.prior_clicks * prior
        expected = self.shuffled_top + swapped * ctr_1 + self.prior_clicks
        found = np.divide(seen, expected, out=prior.copy(), where=expected > 0)
        found[0] = 1.0
        return np.minimum(found, 1.0)

    def propensities(self, n: int) -> np.ndarray:
        """P(examined at rank k) / P(examined at rank 1) for k = 1..n (see the docstring).

        Estimates are capped at 1 (rank 1's), and the power-law tail past `depth` starts
        from the estimate at `depth`."""
        return extend_past_depth(self.relative_ctr(), n)

    @property
    def observed(self) -> int:
        """Impressions counted (as ranked, swapped and shuffled)."""
        return int(self.impressions.sum() + self.shuffled[0])

    @property
    def intervened(self) -> int:
        """Randomized impressions counted (swapped and shuffled)."""
        return int(self.impressions[1:].sum() + self.shuffled[0])

    def to_state(self) -> dict[str, Any]:
        """JSON-able counts and settings (the join's checkpoint, the stored `propensities`),
        read back by `from_state`."""
        return {
            "depth": self.depth,
            "prior_eta": self.prior_eta,
            "prior_clicks": self.prior_clicks,
            "impressions": self.impressions.tolist(),
            "clicks": self.clicks.tolist(),
            "shuffled": self.shuffled.tolist(),
            "shuffled_clicks": self.shuffled_clicks.tolist(),
            "shuffled_top": self.shuffled_top.tolist(),
        }

    @classmethod
    def from_state(cls, state: dict[str, Any]) -> PropensityEstimator:
        """The estimator `to_state` saved; a state from before shuffles (swap counts only)
        reads with no shuffle counted."""
        estimator = cls(state["depth"], state["prior_eta"], state["prior_clicks"])
        shape = (estimator.depth,)
        counts = {}
        for name in ("impressions", "clicks", "shuffled", "shuffled_clicks", "shuffled_top"):
            counts[name] = np.asarray(state.get(name, np.zeros(shape)), dtype=np.int64)
            if counts[name].shape != shape or (counts[name] < 0).any():
                raise ValueError(f"state {name} must be {estimator.depth} counts >= 0")
        if (counts["clicks"] > counts["impressions"]).any() or (
            np.maximum(counts["shuffled_clicks"], counts["shuffled_top"]) > counts["shuffled"]
        ).any():
            raise ValueError("a rank cannot have more clicks than impressions")
        for name, value in counts.items():
            setattr(estimator, name, value)
        return estimator
