"""Live counterfactual click-DCG@k of every stored model, the logged ranking and the engine.

Where the click join closes a session (an impression and its clicks, joined), it adds
that session to `LiveEstimates`: every policy reranks what was shown and
`ranking.counterfactual` turns the clicks into its IPS and SNIPS terms (the one
implementation of the estimator; its docstring derives both), summed exactly in
`Moments`, so no session is kept. The click join is the home because it is the one
place the logged impressions meet their clicks, once each: its closed sessions are
counted exactly once (the moments are saved in its checkpoint with the offsets), with
its own propensity estimate (`ranking.propensity`, the IPS weights of its pairs) and
its clipping (`JoinOptions.min_propensity`). The evaluator reads judged queries, which
carry no clicks.

The policies:

* `logged`: the order the users saw (what the logging policy earned);
* every stored model that has a scorer (`selection.scoring`), at its newest stored
  version as of the join's last checkpoint before the session is added
  (`LiveEstimates.refresh` at each checkpoint): a version that has not learned from the
  session, whose pairs leave the join only at a checkpoint after it closed. A model's
  estimate therefore follows the model as it learns (the versions it covers are kept
  beside it, `versions`), as the evaluator's rolling NDCG@50 does; a fixed kept version
  over a recording is `rankstream eval counterfactual --model NAME@VERSION`;
* `engine` (`selection.engine_ranking.ENGINE`): the engine's own order, on the
  impressions that carry its scores (`Impression.engine_scores`), reranked by them.

Each model's paired difference (per impression, the same clicks) from `logged`, and
from `engine` on the impressions that carry its scores, is kept too: the interval that
says whether a model would beat the engine.

What the estimate assumes, and where it is biased (`ranking.counterfactual`):
examination depends on the displayed rank only (position-based users; cascade users and
trust bias bias it, typically toward the logged order); a policy only reorders what was
shown (results the engine did not show earn nothing); the propensities are the join's
estimate from the randomized impressions, relative to rank 1 (wrong propensities bias
it; ranks past its depth are extrapolated, and without randomized impressions it is the
1/rank prior); clicks at ranks whose propensity is below `min_propensity` count
p / min_propensity of their worth (`clipped_clicks`): low there. A Plackett-Luce model
is estimated on its deterministic ranking by its scores, not on its samples.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from rankstream.ranking.click_pairs import DEFAULT_MIN_PROPENSITY
from rankstream.ranking.counterfactual import (
    DEFAULT_K,
    DEFAULT_LEVEL,
    Moments,
    Terms,
    policy_terms,
    rerank,
)
from rankstream.selection.engine_ranking import ENGINE
from rankstream.selection.scoring import Scorer, ScorerCache
from rankstream.stream.click_schema import Impression
from rankstream.stream.store import ModelStore
from rankstream.telemetry import prometheus_metrics as metrics

LOGGED = "logged"
"""The policy that is the order the users saw."""
COUNTERFACTUAL_RECORD = COUNTERFACTUAL_KIND = "counterfactual"
"""The store record the click join publishes the estimates in (read by `/v1/models`)."""
ESTIMATORS = ("ips", "snips")
INTERVAL = "CLT on per-impression terms (SNIPS: delta method); differences paired per impression"


@dataclass
class Tally:
    """One policy's (or one paired difference's) moments and the versions it covers."""

    moments: Moments = field(default_factory=lambda: Moments(0, np.zeros(3), np.zeros((3, 3))))
    versions: list[int] | None = None  # [first, last] scored; None for logged and engine

    def add(self, moments: Moments, version: int | None) -> None:
        self.moments = self.moments + moments
        if version is not None:
            first = version if self.versions is None else min(self.versions[0], version)
            last = version if self.versions is None else max(self.versions[1], version)
            self.versions = [first, last]

    def to_state(self) -> dict[str, Any]:
        m = self.moments
        return {
            "n": m.n,
            "mean": m.mean.tolist(),
            "comoment": m.comoment.tolist(),
            "clipped": m.clipped,
            "versions": self.versions,
        }

    @classmethod
    def from_state(cls, state: Mapping[str, Any]) -> Tally:
        moments = Moments(
            int(state["n"]),
            np.asarray(state["mean"], dtype=np.float64),
            np.asarray(state["comoment"], dtype=np.float64),
            int(state["clipped"]),
        )
        versions = state.get("versions")
        return cls(moments, None if versions is None else [int(v) for v in versions])

    def summary(self, level: float) -> dict[str, Any] | None:
        """Its estimate (`Estimate.as_dict`, with the versions), None before any impression."""
        if not self.moments.n:
            return None
        return {**self.moments.estimate(level).as_dict(), "versions": self.versions}


class LiveEstimates:
    """The running estimates of every policy (module docstring)."""

    def __init__(
        self,
        k: int = DEFAULT_K,
        level: float = DEFAULT_LEVEL,
        min_propensity: float = DEFAULT_MIN_PROPENSITY,
    ) -> None:
        self.k, self.level, self.min_propensity = k, level, min_propensity
        self.policies: dict[str, Tally] = {}
        self.differences: dict[str, Tally] = {}  # "<model> - <baseline>"
        self.scorers: dict[str, tuple[int, Scorer]] = {}  # name -> (version, scorer)
        self.left_out: dict[str, str] = {}  # a model whose scores could not rank: why (last)
        self._cache: ScorerCache | None = None

    # --- which models -------------------------------------------------------------------
    def refresh(self, store: ModelStore, width: int) -> None:
        """Every stored model with a scorer, at its newest stored version (one
        `latest_versions()` call; a version is loaded once). The engine's record has no
        scorer: the engine is estimated from the impressions' own scores."""
        if self._cache is None or self._cache.store is not store:
            self._cache = ScorerCache(store, width=width)
        cache = self._cache
        latest = store.latest_versions()
        names = sorted(n for n in latest if n not in (LOGGED, ENGINE))
        cache.learn_kinds(names)
        scorers: dict[str, tuple[int, Scorer]] = {}
        for name in names:
            if not cache.scorable(name):
                continue
            try:
                scorer = cache.get(name, latest[name])
            except ValueError:  # an unusable state or another width: not estimated
                continue
            if scorer is not None:
                scorers[name] = (latest[name], scorer)
        self.scorers = scorers

    # --- sessions -----------------------------------------------------------------------
    def add(self, sessions: Sequence[tuple[Impression, np.ndarray, np.ndarray]]) -> None:
        """Closed sessions (impression, clicked per shown result in displayed order, and
        P(examined) at ranks 1..n as its pairs were weighted) into every policy's moments.
        Each session keeps its own propensities, so how sessions are batched (the join adds
        them in batches, for speed) changes nothing but the sums' rounding."""
        if not sessions:
            return
        clicked = [np.asarray(c, dtype=bool) for _, c, _ in sessions]
        p = [np.asarray(q, dtype=np.float64) for _, _, q in sessions]
        logged = self._terms(clicked, [np.arange(len(c), dtype=np.int64) for c in clicked], p)
        self._tally(self.policies, LOGGED, logged, None)
        engine_rows = [i for i, (imp, _, _) in enumerate(sessions) if imp.engine_scores is not None]
        engine = None
        if engine_rows:
            engine = self._terms(
                [clicked[i] for i in engine_rows],
                [rerank(sessions[i][0].engine_scores) for i in engine_rows],
                [p[i] for i in engine_rows],
            )
            self._tally(self.policies, ENGINE, engine, None)
            paired = Moments.of_difference(engine, _rows(logged, engine_rows, engine.clipped))
            self._tally(self.differences, f"{ENGINE} - {LOGGED}", paired, None)
        if not self.scorers:
            return
        phi = np.concatenate([imp.phi for imp, _, _ in sessions])
        ends = np.cumsum([len(c) for c in clicked])[:-1]
        for name, (version, scorer) in self.scorers.items():
            try:
                scores = np.split(np.asarray(scorer.score(phi), dtype=np.float64), ends)
                ranks = [rerank(s) for s in scores]
            except ValueError as exc:  # e.g. non-finite scores: not estimated on these
                self.left_out[name] = f"v{version}: {str(exc)[:200]}"
                continue
            terms = self._terms(clicked, ranks, p)
            self._tally(self.policies, name, terms, version)
            paired = Moments.of_difference(terms, logged)
            self._tally(self.differences, f"{name} - {LOGGED}", paired, version)
            if engine is not None:
                paired = Moments.of_difference(_rows(terms, engine_rows, engine.clipped), engine)
                self._tally(self.differences, f"{name} - {ENGINE}", paired, version)

    def _terms(
        self, clicked: list[np.ndarray], ranks: list[np.ndarray], p: list[np.ndarray]
    ) -> Terms:
        return policy_terms(clicked, ranks, p, self.k, self.min_propensity)

    @staticmethod
    def _tally(tallies: dict[str, Tally], name: str, moments: Moments | Terms,
               version: int | None) -> None:  # fmt: skip
        if isinstance(moments, Terms):
            moments = Moments.of(moments)
        tallies.setdefault(name, Tally()).add(moments, version)

    # --- state and output ---------------------------------------------------------------
    def to_state(self) -> dict[str, Any]:
        """JSON-able, for the join's checkpoint (the sessions it counted, with the offsets)."""
        return {
            "policies": {n: t.to_state() for n, t in self.policies.items()},
            "differences": {n: t.to_state() for n, t in self.differences.items()},
            "left_out": self.left_out,
        }

    def restore(self, state: Mapping[str, Any]) -> None:
        self.left_out = dict(state.get("left_out", {}))
        self.policies = {n: Tally.from_state(s) for n, s in state.get("policies", {}).items()}
        self.differences = {n: Tally.from_state(s) for n, s in state.get("differences", {}).items()}

    def summary(self) -> dict[str, Any]:
        """What the store record `counterfactual` holds and `/v1/models` shows."""
        return {
            "k": self.k,
            "level": self.level,
            "min_propensity": self.min_propensity,
            "interval": INTERVAL,
            "policies": {n: t.summary(self.level) for n, t in sorted(self.policies.items())},
            "differences": {n: t.summary(self.level) for n, t in sorted(self.differences.items())},
            "left_out": dict(sorted(self.left_out.items())),
        }

    def export(self) -> None:
        """The estimates as gauges: `rankstream_counterfactual_click_dcg{model,estimator}`,
        its interval, the impressions, and each paired difference with its interval."""
        for name, tally in self.policies.items():
            found = tally.summary(self.level)
            if found is None:
                continue
            metrics.COUNTERFACTUAL_IMPRESSIONS.labels(model=name).set(found["impressions"])
            _set(found, metrics.COUNTERFACTUAL_CLICK_DCG, metrics.COUNTERFACTUAL_CLICK_DCG_CI,
                 model=name)  # fmt: skip
        for pair, tally in self.differences.items():
            found = tally.summary(self.level)
            if found is None:
                continue
            model, _, baseline = pair.partition(" - ")
            _set(found, metrics.COUNTERFACTUAL_DIFFERENCE, metrics.COUNTERFACTUAL_DIFFERENCE_CI,
                 model=model, baseline=baseline)  # fmt: skip


def _set(found: Mapping[str, Any], value: Any, bounds: Any, **labels: str) -> None:
    for estimator in ESTIMATORS:
        estimate, interval = found[estimator], found[f"{estimator}_interval"]
        if estimate is None:
            continue
        value.labels(**labels, estimator=estimator).set(estimate)
        if interval is not None:
            for bound, at in zip(("low", "high"), interval, strict=True):
                bounds.labels(**labels, estimator=estimator, bound=bound).set(at)


def _rows(terms: Terms, rows: list[int], clipped: int) -> Terms:
    """The terms of some impressions; `clipped` their clipped clicks (clipping depends on
    the clicks' displayed ranks alone, so it is any policy's count on those impressions)."""
    return Terms(terms.x[rows], terms.w[rows], terms.c[rows], clipped)
