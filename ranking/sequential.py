"""A paired, always-valid test of "the challenger ranks better than the incumbent".

The evidence is the per-query differences d_i = NDCG@50(challenger) - NDCG@50(incumbent)
on the judged queries both were scored on. The test is the mixture sequential probability
ratio test (mSPRT) of Robbins (1970, "Statistical methods related to the law of the
iterated logarithm") in the form Johari, Pekelis & Walsh use for A/B tests watched
continuously ("Always Valid Inference: Continuous Monitoring of A/B Tests", Operations
Research 70(3), 2022, section 4): a Gaussian likelihood ratio for the mean of d, mixed
over N(0, tau^2) alternatives, with the plug-in variance of the d seen so far,

    Lambda_n = sqrt(s2 / (s2 + n tau2)) * exp(n^2 tau2 mean^2 / (2 s2 (s2 + n tau2))).

Lambda_n is a nonnegative martingale under "mean d = 0", so by Ville's inequality it
ever reaches 1/alpha with probability at most alpha, however often it is looked at
(Gaussian d, known variance). With a plug-in variance the bound is asymptotic
(Waudby-Smith, Arbour, Sinha, Kennedy & Ramdas, "Time-uniform central limit theory and
asymptotic confidence sequences", Annals of Statistics 2024: any consistent variance
estimate keeps it), and skewed differences are its weak spot: when the challenger's
rare large losses are missing from the first pairs, the variance looks small exactly
when the mean looks good, so the studentised mean's upper tail is heavier than the
Gaussian's. On the demo's real streams (every pair of models, differences re-centred to
mean 0, resampled) the plain plug-in switched falsely in 1.3% of 5,000 runs for the
worst pair (skew -1.9), with no verdict before 100 pairs. Hence the variance estimate

    s2 = (m2 + VARIANCE_PRIOR) / n,

the sum of squared deviations m2 plus a prior of VARIANCE_PRIOR = 0.3 pseudo-observations
at the largest variance a difference in [-1, 1] can have (1): the range guards the
first pairs and fades as 1/n, so the estimate stays consistent and the test
asymptotically the same. Chosen by simulation (the worst real pairs, OPAR-I and
OPAR-II vs AROW, skew -2, 5,000 runs each; then through `rankstream eval champion`'s
own code, 3,000 runs): prior 0 / 0.1 / 0.15 / 0.2 / 0.3 / 0.5 gave false switches of
1.30% / 0.96% / 0.84% / 0.78% / 0.54% / 0.38% on the worst pair (1.43% / - / 1.10% / - /
0.83% / 0.60% through the eval's code; its full runs of 1,000 runs a pair measured
2.1% / 1.9% / 1.3% +- 0.36% for 0 / 0.15 / 0.3, each the largest of 54 noisy
estimates), and switched a +0.01 challenger at simulated spread 0.05 within 500 pairs
in 85% / 83% / 81% / 78% / 73% / 65% of 400 runs. 0.3 is the smallest prior whose
3,000-run figure is clearly below alpha; it costs that 500-pair target at spread 0.05
(74% of 1,000 runs; it holds to spread 0.04), a price the 1% promise is worth. A 200-pair
burn-in with prior 0.15 did as well at less cost (0.87%, 81%), but a verdict that late
would leave `make test`'s engine loop, which waits for the switch after 150 queries,
waiting. Two
other fixes measured worse: the mSPRT on means of blocks of B pairs is the same
statistic looked at every B pairs with a variance of fewer degrees of freedom (worst
pair 0.8-1.1% at B = 5-10 with a 200-300 pair burn-in, and far worse with short
burn-ins); an e-process by betting (Waudby-Smith & Ramdas, JRSS-B 2023) is valid for
any bounded d, skew included, but its bets are capped by d's range [-1, 1], not its
spread: at spread 0.05 it switched a +0.01 challenger within 500 pairs in 26% of runs.
At the real streams' spreads (median 0.11) no valid test reaches 80% there: the
fixed-sample one-sided z-test at n = 500, the most powerful test of a Gaussian mean,
has power Phi(0.01 sqrt(500) / sd - z_{1-alpha}) = 38% at sd 0.11; 80% needs sd <= 0.07
(`rankstream eval champion` reports this bound per stream). No verdict before
`min_pairs` = 100 pairs either.
Inverting Lambda_n gives the always-valid confidence sequence printed beside it:

    mean +- sqrt(s2 (s2 + n tau2) / (n^2 tau2) * (log(1 + n tau2 / s2) + 2 log(1/alpha))).

How the two settings enter (a decision, `docs/CONTRACTS.md` "Champion"):

* H0 is "the challenger is no better" (mean d <= 0); the challenger wins ("switch") once
  the confidence sequence's lower bound is above 0, i.e. Lambda_n >= 1/alpha with a
  positive mean. Testing against 0 rather than against delta keeps the power where the
  issue asks for it: a challenger truly 0.01 better is 0.01 from H0, not 0.005.
* delta, the smallest difference worth a switch, sets the mixture's scale, tau = 2 delta:
  the alternatives the test weighs are differences of a few delta. (Chosen by
  simulation: at a true difference of 2 delta and per-query spread 0.05, tau = 2 delta
  switched within 500 pairs in 89% of 200 runs, tau = delta in 85%, tau = 4 delta in
  70%; each kept A/A false switches at 0.5%.) And
* a challenger whose upper bound falls below delta is refused: with error at most alpha
  it is not delta better. The refusal is a verdict, not a reset: the race goes on, so
  the alpha bound holds over any horizon (a reset would give every new race a fresh
  alpha to spend); a learning challenger that improves moves its mean up, and every
  race starts over when the champion changes.

Differences are NDCG@50 differences, so they lie in [-1, 1]; s2 is floored at
`VARIANCE_FLOOR` so that a test built with no prior (`variance_prior=0`) on identical
rankers (every d = 0) gives Lambda = 0, not 0/0.

>>> test = PairedTest(alpha=0.01, delta=0.005)
>>> state = test.update(RaceState(), [0.02, 0.01, 0.03] * 40)
>>> state.n, round(state.mean, 3)
(120, 0.02)
>>> test.decision(state)
'switch'
>>> test.decision(test.update(RaceState(), [0.0] * 600))  # identical rankers
'refuse'
>>> test.decision(test.update(RaceState(), [0.3, -0.3] * 60))  # not enough to tell
'undecided'
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import numpy as np

SWITCH, REFUSE, UNDECIDED = "switch", "refuse", "undecided"
VARIANCE_FLOOR = 1e-8  # (1e-4 NDCG)^2: far below any real spread of per-query differences
VARIANCE_PRIOR = 0.3  # pseudo-observations at the range's largest variance (module docstring)


@dataclass(frozen=True)
class RaceState:
    """The running sufficient statistics of one challenger's differences (Welford)."""

    n: int = 0
    mean: float = 0.0
    m2: float = 0.0  # sum of squared deviations from the mean

    def add(self, d: float) -> RaceState:
        if not -1.0 <= d <= 1.0:  # also refuses NaN
            raise ValueError(f"an NDCG difference lies in [-1, 1], got {d!r}")
        n = self.n + 1
        mean = self.mean + (d - self.mean) / n
        return RaceState(n, mean, self.m2 + (d - self.mean) * (d - mean))


@dataclass(frozen=True)
class Evidence:
    """What the test says about one race: pairs, mean with its interval, statistic, verdict."""

    pairs: int
    mean_difference: float
    ci_low: float
    ci_high: float
    log_statistic: float  # log Lambda_n; the switch needs log(1/alpha) and a positive mean
    threshold: float  # log(1/alpha)
    decision: str

    def as_dict(self) -> dict[str, float | int | str]:
        return {
            "paired_queries": self.pairs,
            "mean_difference": self.mean_difference,
            "ci_low": self.ci_low,
            "ci_high": self.ci_high,
            "log_statistic": self.log_statistic,
            "threshold": self.threshold,
            "decision": self.decision,
        }


@dataclass(frozen=True)
class PairedTest:
    """The one-sided mSPRT on paired differences (module docstring): alpha, delta, burn-in.

    `min_pairs`: no verdict before this many pairs. `variance_prior`: the range's
    pseudo-observations added to the variance estimate, which guard the first pairs
    against skew (module docstring; the simulation tests check alpha holds with both).
    """

    alpha: float = 0.01
    delta: float = 0.005
    min_pairs: int = 100
    variance_prior: float = VARIANCE_PRIOR

    def __post_init__(self) -> None:
        if not 0.0 < self.alpha < 1.0:
            raise ValueError(f"alpha must be in (0, 1), got {self.alpha!r}")
        if not 0.0 < self.delta <= 1.0:
            raise ValueError(f"delta must be in (0, 1], got {self.delta!r}")
        if self.min_pairs < 2:
            raise ValueError(f"min_pairs must be >= 2, got {self.min_pairs!r}")
        if not 0.0 <= self.variance_prior < math.inf:  # also refuses NaN
            raise ValueError(f"variance_prior must be >= 0, got {self.variance_prior!r}")

    @property
    def tau2(self) -> float:
        """The mixing variance: (2 delta)^2 (module docstring)."""
        return (2.0 * self.delta) ** 2

    @property
    def threshold(self) -> float:
        return math.log(1.0 / self.alpha)

    def update(self, state: RaceState, differences: Iterable[float]) -> RaceState:
        for d in differences:
            state = state.add(float(d))
        return state

    def variance(self, state: RaceState) -> float:
        """(m2 + variance_prior) / n, floored at `VARIANCE_FLOOR` (module docstring)."""
        return max((state.m2 + self.variance_prior) / state.n, VARIANCE_FLOOR)

    def log_statistic(self, state: RaceState) -> float:
        """log Lambda_n of the mixture over N(0, tau2) alternatives (0 with no pairs)."""
        if state.n == 0:
            return 0.0
        s2, tau2, n = self.variance(state), self.tau2, state.n
        return 0.5 * math.log(s2 / (s2 + n * tau2)) + (n * n * tau2 * state.mean**2) / (
            2.0 * s2 * (s2 + n * tau2)
        )

    def half_width(self, state: RaceState) -> float:
        """Half the always-valid (1 - alpha) confidence sequence's width at n pairs."""
        if state.n == 0:
            return math.inf
        s2, tau2, n = self.variance(state), self.tau2, state.n
        radius2 = s2 * (s2 + n * tau2) / (n * n * tau2)
        return math.sqrt(radius2 * (math.log1p(n * tau2 / s2) + 2.0 * self.threshold))

    def decision(self, state: RaceState) -> str:
        return self.evidence(state).decision

    def evidence(self, state: RaceState) -> Evidence:
        half = self.half_width(state)
        low, high = state.mean - half, state.mean + half
        if state.n < self.min_pairs:
            verdict = UNDECIDED
        elif high < self.delta:  # not delta better, with error <= alpha
            verdict = REFUSE
        elif low > 0.0:  # better, with error <= alpha (= log_statistic >= threshold, mean > 0)
            verdict = SWITCH
        else:
            verdict = UNDECIDED
        return Evidence(
            state.n,
            state.mean,
            max(low, -1.0),
            min(high, 1.0),
            self.log_statistic(state),
            self.threshold,
            verdict,
        )


def _bounds(test: PairedTest, differences: Any) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(n, lower, upper) of the confidence sequence after each difference (numpy)."""
    d = np.asarray(differences, dtype=np.float64).reshape(-1)
    if not (np.abs(d) <= 1.0).all():
        raise ValueError("NDCG differences lie in [-1, 1]")
    n = np.arange(1, d.size + 1, dtype=np.float64)
    if d.size == 0:
        return n, n, n
    mean = np.cumsum(d) / n
    m2 = np.cumsum((d - mean[-1]) ** 2) - n * (mean - mean[-1]) ** 2  # shifted: no cancellation
    s2 = np.maximum((np.maximum(m2, 0.0) + test.variance_prior) / n, VARIANCE_FLOOR)
    tau2 = test.tau2
    half = np.sqrt(
        s2 * (s2 + n * tau2) / (n * n * tau2) * (np.log1p(n * tau2 / s2) + 2.0 * test.threshold)
    )
    return n, mean - half, mean + half


def first_switch(test: PairedTest, differences: Any) -> int | None:
    """The number of pairs at which `test` first says switch (None: it never does).

    The same verdicts as feeding `RaceState.add` one difference at a time and asking
    `test.decision` after each, computed for the whole stream at once (numpy), for
    simulations of many runs.

    >>> first_switch(PairedTest(), [0.05, 0.03, 0.04, 0.06] * 30)
    100
    """
    n, low, high = _bounds(test, differences)
    hits = np.flatnonzero((n >= test.min_pairs) & ~(high < test.delta) & (low > 0.0))
    return int(hits[0]) + 1 if hits.size else None


def first_refusal(test: PairedTest, differences: Any) -> int | None:
    """The number of pairs at which `test` first says refuse (None: it never does).

    >>> first_refusal(PairedTest(), [0.01, -0.01] * 400)  # the variance prior's price
    430
    >>> first_refusal(PairedTest(variance_prior=0.0), [0.01, -0.01] * 60)
    100
    """
    n, _, high = _bounds(test, differences)
    hits = np.flatnonzero((n >= test.min_pairs) & (high < test.delta))
    return int(hits[0]) + 1 if hits.size else None
