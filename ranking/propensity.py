"""Position-bias propensities estimated online from randomized interventions.

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
        ranks = np.arange(1, self.depth + 1)
        prior = (1.0 / ranks) ** self.prior_eta
        denominator = self.clicks[0] + self.prior_clicks
        if denominator == 0:  # no prior and no click at rank 1 yet: the prior's shape
            return prior
        return np.minimum((self.clicks + self.prior_clicks * prior) / denominator, 1.0)

    def propensities(self, n: int) -> np.ndarray:
        """P(examined at rank k) / P(examined at rank 1) for k = 1..n (see the docstring).

        Estimates are capped at 1 (rank 1's), and the power-law tail past `depth` starts
        from the estimate at `depth`."""
        measured = self.relative_ctr()
        if n <= self.depth:
            return measured[:n].copy()
        ranks = np.arange(1, n + 1, dtype=np.float64)
        log_rank = np.log(ranks[1 : self.depth])
        floor = np.finfo(np.float64).tiny  # a zero estimate: log of the smallest float
        log_p = np.log(np.maximum(measured[1:], floor))
        eta_hat = max(0.0, float(-(log_rank @ log_p) / (log_rank @ log_rank)))
        tail = measured[-1] * (self.depth / ranks[self.depth :]) ** eta_hat
        return np.concatenate([measured, np.maximum(tail, floor)])

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
