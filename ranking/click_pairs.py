"""Preference pairs from clicks, each with its inverse-propensity weight.

A click says little on its own: a result at rank 8 is seen far less often than one at
rank 1. Joachims (KDD 2002) reads a displayed list and its clicks as preferences a
user expressed: a clicked result over every *skipped* result above it ("click > skip
above": the user read past them to click it) and over the *next unclicked* result just
below it ("click > no-click next": read right after it). Those are the pairs here;
ties are never emitted, and a list with no click gives none.

Position bias. A pair (clicked at rank i, other at rank j) is observed only if the
click at rank i is, which under examination happens with P(examined at rank i). Each
pair therefore weighs 1 / P(examined at the **clicked result's** rank i), the inverse
propensity of the click that makes it, as Propensity SVM-Rank weighs each clicked
result (Joachims, Swaminathan & Schnabel, "Unbiased Learning-to-Rank with Biased
Feedback", WSDM 2017). That debiases a pair only when the *other* side does not depend
on the clicks either: Propensity SVM-Rank pairs each click with **every other shown
result** (`losers="shown"`), and then, under the position-based model with
attractiveness a and propensity p, E[weighted count of "i over j" - "j over i"] =
a_i - a_j for any ranking. The skip pairs are not so: "i over a skipped j" needs j
unclicked, and a skipped j above i has no "j over i" pair unless adjacent, so the
weighted skip pairs of one fixed ranking say "lower beats higher" even between equally
attractive results (4 results, eta 1, all a = 0.5: rank 4 over rank 1 by a net 0.25 a
list), and 1/p amplifies the deepest of them. IPS weights belong with `"shown"`
(tests/test_clicks.py computes both expectations exactly), so `"shown"` is the default
(`DEFAULT_LOSERS`: here, in the click join and so in `rankstream serve`); `"skips"`
stays available, e.g. for naive (unweighted) pairs under a top-down reader.
Propensities below `min_propensity` (0.1 unless told) are clipped to it (a weight never
exceeds 1 / min_propensity), trading a little bias for bounded variance, as Joachims et
al. do.

>>> import numpy as np
>>> clicks = np.array([False, True, False, False, True, False])
>>> pairs = click_pairs(clicks, losers="skips")
>>> pairs.winner.tolist(), pairs.loser.tolist()
([1, 1, 4, 4, 4, 4], [0, 2, 0, 2, 3, 5])
>>> click_pairs(clicks).loser.tolist()  # "shown": every other shown result
[0, 2, 3, 4, 5, 0, 1, 2, 3, 5]
>>> ips = click_pairs(np.array([False, True, False]), propensities=np.array([1.0, 0.5, 0.25]))
>>> ips.weight.tolist()  # 1 / P(examined at rank 2), the clicked result's rank
[2.0, 2.0]
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

DEFAULT_MIN_PROPENSITY = 0.1
"""Propensities are clipped to at least this: no pair weighs more than 10. The click join's
default and `eval clicks`' (one value): the estimate past rank 10 is extrapolated and 1/p
of a small, noisy p is where IPS variance comes from; at 0.01 OPAR-I's IPS arm on pbm:1
users lost up to 0.045 NDCG@50 on one seed in ten, at 0.1 it gained on all of them
(docs/results/clicks.md)."""


@dataclass(frozen=True)
class ClickPairs:
    """Pairs as displayed positions (0-based): `winner` preferred over `loser`."""

    winner: np.ndarray  # (p,) int64
    loser: np.ndarray  # (p,) int64
    weight: np.ndarray  # (p,) float64: 1 without propensities, else 1/P(examined at winner)

    def __len__(self) -> int:
        return int(self.winner.shape[0])


LOSERS = ("skips", "shown")
DEFAULT_LOSERS = "shown"
"""The default pair set: the one whose IPS-weighted expectation is unbiased (above)."""


def click_pairs(
    clicks: np.ndarray,
    propensities: np.ndarray | None = None,
    min_propensity: float = DEFAULT_MIN_PROPENSITY,
    losers: str = DEFAULT_LOSERS,
) -> ClickPairs:
    """The pairs of one displayed list's clicks (bool, in displayed order), see above.

    `propensities[k]` is P(examined at displayed position k) (0-based, so rank k + 1);
    None gives every pair weight 1 (the naive pairs). `losers="shown"` (the default) pairs
    each click with *every* other shown result (clicked or not): Propensity SVM-Rank's
    pairs, for which E[click_i / p_i] = a_i makes the weighted pair counts unbiased under
    the position-based model, skips or not; `losers="skips"` gives Joachims's skip pairs
    (they assume a top-down reader, and are biased with IPS weights).
    """
    if losers not in LOSERS:
        raise ValueError(f"losers must be one of {LOSERS}, got {losers!r}")
    clicked = np.asarray(clicks)
    if clicked.ndim != 1 or clicked.dtype != bool:
        raise ValueError(f"clicks must be a 1-d bool array, got {clicked.dtype} {clicked.shape}")
    if losers == "shown":
        shown = np.arange(clicked.shape[0])
        winner = np.repeat(np.flatnonzero(clicked), clicked.shape[0] - 1)
        loser = np.concatenate([shown[shown != i] for i in np.flatnonzero(clicked)] or [[]])
        return _weighted(winner, loser.astype(np.int64), propensities, min_propensity)
    # Per click i, in displayed order: the skipped results above it (ascending), then i + 1
    # if it exists and was not clicked. As whole-array operations: a list is one event.
    n = clicked.shape[0]
    clicks_at = np.flatnonzero(clicked)
    skipped = np.flatnonzero(~clicked)
    above = np.searchsorted(skipped, clicks_at)  # skipped results above each click
    has_next = clicks_at + 1 < n
    has_next[has_next] = ~clicked[clicks_at[has_next] + 1]
    per_click = above + has_next
    winner = np.repeat(clicks_at, per_click).astype(np.int64)
    starts = np.cumsum(per_click) - per_click  # each click's first pair
    within = np.arange(winner.shape[0]) - np.repeat(starts, per_click)
    loser = np.take(skipped, within, mode="clip")  # clipped: the i + 1 pairs, replaced below
    is_next = within == np.repeat(above, per_click)  # the pair past the skips: i + 1
    loser = np.where(is_next, winner + 1, loser).astype(np.int64)
    return _weighted(winner, loser, propensities, min_propensity)


def _weighted(
    winner: np.ndarray,
    loser: np.ndarray,
    propensities: np.ndarray | None,
    min_propensity: float,
) -> ClickPairs:
    if propensities is None:
        return ClickPairs(winner, loser, np.ones(winner.shape[0]))
    return ClickPairs(winner, loser, ips_weights(winner, propensities, min_propensity))


def ips_weights(
    positions: np.ndarray, propensities: np.ndarray, min_propensity: float = DEFAULT_MIN_PROPENSITY
) -> np.ndarray:
    """1 / max(propensities[position], min_propensity) per position (0-based)."""
    p = np.asarray(propensities, dtype=np.float64)
    if p.ndim != 1 or not np.isfinite(p).all() or (p <= 0).any() or (p > 1).any():
        raise ValueError("propensities must be a 1-d array of probabilities in (0, 1]")
    if not 0 < min_propensity <= 1:
        raise ValueError(f"min_propensity must lie in (0, 1], got {min_propensity}")
    positions = np.asarray(positions, dtype=np.int64)
    if positions.size and positions.max() >= p.shape[0]:
        raise ValueError(f"no propensity for position {positions.max()} (have {p.shape[0]})")
    return 1.0 / np.maximum(p[positions], min_propensity)
