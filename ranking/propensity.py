"""Position-bias propensities estimated online from randomized interventions.

Two interventions, two estimators sharing the prior and the tail past the measured ranks:
`PropensityEstimator` (RandTop-n, the simulator's: the top `depth` shuffled) and
`SwapPropensityEstimator` (ranks 1 and k swapped on a share of the traffic: what `rankstream
serve` does, `choose_swap`, and what the click join reads from each impression's
`intervention`, "swap:1-k"). The rest of this docstring is RandTop-n's.

IPS-weighted click pairs (`ranking.click_pairs`) need P(examined at rank k), and it is
not known: it depends on the users, the page layout, the device. It is estimated here
from a small, randomized share of the traffic, the intervention of Joachims,
Swaminathan & Schnabel ("Unbiased Learning-to-Rank with Biased Feedback", WSDM 2017,
§6: randomizing the top n, their "RandTop-n"): on an intervened impression the top
`depth` results of the served ranking are shown in a uniformly random order. Over many
such impressions every rank 1..depth holds the same documents on average, so the
click-through rate at rank k is P(examined at k) times one common mean attractiveness,
and the ratio of the click counts at rank k and at rank 1 estimates p_k / p_1. The
propensities are relative to rank 1 (p_1 = 1): IPS weights only need them up to a
common factor. (Swapping only ranks 1 and k, their gentler intervention, gives one
rank's observation per impression instead of `depth`; randomizing the top `depth`
reaches the same precision with `depth` times fewer intervened impressions.)

Thin data. With c_k clicks at rank k on the intervened impressions so far,

    p_k / p_1 = (c_k + m pi_k) / (c_1 + m),   pi_k = (1/k)^prior_eta

a prior worth `m` = `prior_clicks` clicks at rank 1, shaped like the position-based
model with `prior_eta` (1 by default, the usual 1/rank). Before any intervention the
estimate is the prior; once c_1 >> m the data decide.

Past `depth`. Ranks below the randomized ones are never observed apart from their
ranking; there the estimate extends as a power law k^-eta_hat, eta_hat the
least-squares fit of log p_k on log k over ranks 2..depth (through p_1 = 1), clipped
at >= 0, so propensities never increase with rank beyond `depth`.

>>> import numpy as np
>>> estimator = PropensityEstimator(depth=3, prior_clicks=0.0)
>>> estimator.observe(np.array([True, True, False]))
>>> estimator.observe(np.array([True, False, True]))
>>> estimator.propensities(3).tolist()
[1.0, 0.5, 0.5]
"""

from __future__ import annotations

from typing import Any

import numpy as np

DEFAULT_DEPTH = 10
DEFAULT_PRIOR_ETA = 1.0
DEFAULT_PRIOR_CLICKS = 10.0


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


class PropensityEstimator:
    """Click counts per rank on intervened impressions, and the propensities they give."""

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
        self.depth = depth
        self.prior_eta = float(prior_eta)
        self.prior_clicks = float(prior_clicks)
        self.clicks = np.zeros(depth, dtype=np.int64)
        self.impressions = 0

    def intervene(self, ranking: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        """`ranking` (displayed order) with its top `depth` shuffled uniformly at random."""
        shown = np.array(ranking, copy=True)
        top = min(self.depth, shown.shape[0])
        shown[:top] = shown[:top][rng.permutation(top)]
        return shown

    def observe(self, clicks: np.ndarray) -> None:
        """Count an intervened impression's clicks (bool, displayed order; >= depth shown)."""
        clicks = np.asarray(clicks)
        if clicks.ndim != 1 or clicks.dtype != bool:
            raise ValueError(f"clicks must be a 1-d bool array, got {clicks.dtype} {clicks.shape}")
        if clicks.shape[0] < self.depth:
            raise ValueError(f"an intervened impression shows >= {self.depth} results")
        self.clicks += clicks[: self.depth]
        self.impressions += 1

    def observe_many(self, clicks: np.ndarray) -> None:
        """Count many intervened impressions at once: clicks (n, >= depth) bool."""
        clicks = np.asarray(clicks)
        if clicks.ndim != 2 or clicks.dtype != bool or clicks.shape[1] < self.depth:
            raise ValueError(f"clicks must be (n, >= {self.depth}) bool, got {clicks.shape}")
        self.clicks += clicks[:, : self.depth].sum(axis=0)
        self.impressions += clicks.shape[0]

    def relative_ctr(self) -> np.ndarray:
        """p_k / p_1 for ranks 1..depth: the click ratios, shrunk toward the prior."""
        prior = prior_propensities(self.depth, self.prior_eta)
        denominator = self.clicks[0] + self.prior_clicks
        if denominator == 0:  # no prior and no click at rank 1 yet: the prior's shape
            return prior
        return np.minimum((self.clicks + self.prior_clicks * prior) / denominator, 1.0)

    def propensities(self, n: int) -> np.ndarray:
        """P(examined at rank k) / P(examined at rank 1) for k = 1..n (see the docstring).

        Estimates are capped at 1 (rank 1's), and the power-law tail past `depth` starts
        from the estimate at `depth`."""
        return extend_past_depth(self.relative_ctr(), n)

    def to_state(self) -> dict[str, Any]:
        """JSON-able counts and settings (for a store), read back by `from_state`."""
        return {
            "depth": self.depth,
            "prior_eta": self.prior_eta,
            "prior_clicks": self.prior_clicks,
            "clicks": self.clicks.tolist(),
            "impressions": self.impressions,
        }

    @classmethod
    def from_state(cls, state: dict[str, Any]) -> PropensityEstimator:
        estimator = cls(state["depth"], state["prior_eta"], state["prior_clicks"])
        clicks = np.asarray(state["clicks"], dtype=np.int64)
        impressions = int(state["impressions"])
        if clicks.shape != (estimator.depth,) or (clicks < 0).any() or impressions < 0:
            raise ValueError("state clicks must be depth counts >= 0, impressions >= 0")
        if (clicks > impressions).any():
            raise ValueError("a rank cannot have more clicks than intervened impressions")
        estimator.clicks, estimator.impressions = clicks, impressions
        return estimator


# --- the swap intervention ---------------------------------------------------------------
SWAP_PREFIX = "swap:1-"


def choose_swap(
    rng: np.random.Generator, share: float, shown: int, depth: int = DEFAULT_DEPTH
) -> int | None:
    """The rank k (2..min(depth, shown)) whose result trades places with rank 1's on this
    impression, with probability `share`; None (show the ranking as it is) otherwise.

    This is what a server calls per ranking it answers (`rankstream serve` with
    `RANKSTREAM_INTERVENTION_SHARE`), then shows `swap(ranking, k)` and logs
    `swap_intervention(k)` as the impression's `intervention`; the click join reads it
    back with `parse_swap`. k is uniform, so every rank gets 1/(depth - 1) of the share.
    """
    if not 0.0 <= share <= 1.0:
        raise ValueError(f"share must lie in [0, 1], got {share}")
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


def parse_swap(intervention: str | None) -> int | None:
    """k of a "swap:1-k" intervention (k >= 2); None for no intervention or another kind."""
    if intervention is None or not intervention.startswith(SWAP_PREFIX):
        return None
    tail = intervention[len(SWAP_PREFIX) :]
    if not tail.isdigit() or int(tail) < 2:
        return None
    return int(tail)


class SwapPropensityEstimator:
    """Propensities from swap interventions (Joachims, Swaminathan & Schnabel, WSDM 2017,
    §6: swap the results at rank 1 and rank k on a small random share of the traffic).

    Which impressions are swapped is random, so the result a swap moves to rank k is, on
    average, the result the *unswapped* impressions show at rank 1. The click-through rate
    at rank k on impressions swapped with k is p_k a and the one at rank 1 on unswapped
    impressions is p_1 a, with one common mean attractiveness a, so their ratio is
    p_k / p_1 (propensities relative to rank 1, all IPS weights need). With c_k clicks at
    rank k on n_k impressions swapped with k, and c_1 clicks at rank 1 on n_1 unswapped
    ones (ctr_1 = c_1 / n_1):

        p_k / p_1 = (c_k + m pi_k) / (n_k ctr_1 + m),   pi_k = (1/k)^prior_eta

    n_k ctr_1 is how many clicks rank k would have had at rank 1's propensity; a prior worth
    `m` = `prior_clicks` of them, shaped like the position-based model (1/rank by default),
    holds until the data outweigh it (without data: exactly the prior). Capped at 1, and
    extended past `depth` as `extend_past_depth` does.

    >>> estimator = SwapPropensityEstimator(depth=3, prior_clicks=0.0)
    >>> for _ in range(4):
    ...     estimator.observe(None, np.array([True, False, False]))
    >>> estimator.observe(2, np.array([False, True, False]))
    >>> estimator.observe(3, np.array([False, False, False]))
    >>> estimator.observe(3, np.array([False, False, True]))
    >>> estimator.propensities(3).tolist()
    [1.0, 1.0, 0.5]
    """

    def __init__(
        self,
        depth: int = DEFAULT_DEPTH,
        prior_eta: float = DEFAULT_PRIOR_ETA,
        prior_clicks: float = DEFAULT_PRIOR_CLICKS,
    ) -> None:
        PropensityEstimator(depth, prior_eta, prior_clicks)  # the same checks
        self.depth, self.prior_eta, self.prior_clicks = depth, float(prior_eta), float(prior_clicks)
        self.impressions = np.zeros(depth, dtype=np.int64)  # [0]: unswapped, [k-1]: swapped k
        self.clicks = np.zeros(depth, dtype=np.int64)  # [0]: at rank 1 unswapped, [k-1]: at k

    def observe(self, k: int | None, clicks: np.ndarray) -> None:
        """Count an impression's clicks (bool, displayed order): unswapped (k None) at rank
        1, swapped with k at rank k; a swap beyond `depth` counts nowhere."""
        clicks = np.asarray(clicks)
        if clicks.ndim != 1 or clicks.dtype != bool or clicks.shape[0] < 1:
            raise ValueError(f"clicks must be a 1-d bool array, got {clicks.dtype} {clicks.shape}")
        if k is not None and int(k) < 2:
            return
        self.observe_many(np.array([0 if k is None else int(k)]), clicks[None, :])

    def observe_many(self, swapped: np.ndarray, clicks: np.ndarray) -> None:
        """Count n impressions at once: `swapped` (n,) the k each was swapped with (0:
        unswapped), `clicks` (n, L) bool in displayed order; as `observe` counts each."""
        swapped, clicks = np.asarray(swapped), np.asarray(clicks)
        if clicks.ndim != 2 or clicks.dtype != bool or clicks.shape[1] < 1:
            raise ValueError(f"clicks must be (n, >= 1) bool, got {clicks.dtype} {clicks.shape}")
        if swapped.shape != clicks.shape[:1] or not np.issubdtype(swapped.dtype, np.integer):
            raise ValueError(f"swapped must be {clicks.shape[0]} integers, got {swapped.shape}")
        rank = np.where(swapped == 0, 1, swapped)
        counted = ((swapped == 0) | (swapped >= 2)) & (rank <= min(self.depth, clicks.shape[1]))
        rows, at = np.flatnonzero(counted), rank[counted] - 1
        self.impressions += np.bincount(at, minlength=self.depth)
        self.clicks += np.bincount(at, weights=clicks[rows, at], minlength=self.depth).astype(
            np.int64
        )

    def relative_ctr(self) -> np.ndarray:
        """p_k / p_1 for ranks 1..depth (see the class docstring)."""
        prior = prior_propensities(self.depth, self.prior_eta)
        ctr_1 = self.clicks[0] / self.impressions[0] if self.impressions[0] else 0.0
        expected = self.impressions * ctr_1 + self.prior_clicks
        found = np.divide(
            self.clicks + self.prior_clicks * prior,
            expected,
            out=prior.copy(),
            where=expected > 0,
        )
        found[0] = 1.0
        return np.minimum(found, 1.0)

    def propensities(self, n: int) -> np.ndarray:
        """P(examined at rank k) / P(examined at rank 1) for k = 1..n."""
        return extend_past_depth(self.relative_ctr(), n)

    @property
    def observed(self) -> int:
        """Impressions counted (unswapped and swapped)."""
        return int(self.impressions.sum())

    def to_state(self) -> dict[str, Any]:
        """JSON-able counts and settings, read back by `from_state`."""
        return {
            "depth": self.depth,
            "prior_eta": self.prior_eta,
            "prior_clicks": self.prior_clicks,
            "impressions": self.impressions.tolist(),
            "clicks": self.clicks.tolist(),
        }

    @classmethod
    def from_state(cls, state: dict[str, Any]) -> SwapPropensityEstimator:
        estimator = cls(state["depth"], state["prior_eta"], state["prior_clicks"])
        impressions = np.asarray(state["impressions"], dtype=np.int64)
        clicks = np.asarray(state["clicks"], dtype=np.int64)
        shape = (estimator.depth,)
        if impressions.shape != shape or clicks.shape != shape:
            raise ValueError(f"state counts must have {estimator.depth} entries")
        if (clicks < 0).any() or (clicks > impressions).any():
            raise ValueError("state clicks must be >= 0 and at most the impressions")
        estimator.impressions, estimator.clicks = impressions, clicks
        return estimator
