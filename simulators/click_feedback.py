"""The feedback loop with clicking users instead of judges: engines that learn from clicks.

The §5.5 loop (`simulators.feedback.run_arms`) with other arms. An impression shows the
top `display` (50) candidates of an engine's ranking; the simulated user
(`simulators.clicks`) clicks by the ground-truth grades of what is shown; the engine
learns from the impression and its clicks only. Every arm is scored on the ranking it
actually served (true NDCG@50 from the grades), so the cost of exploration (PDGD's
sampling, the propensity interventions) counts against it.

* `ClickPairArm`: an online ranker (OPAR-I, AROW, ...) serving its deterministic
  ranking and learning the click pairs of `ranking.click_pairs` as triplets: naive
  (every pair weight 1), or IPS-weighted with propensities estimated online
  (`ranking.propensity`) from a share `intervention_share` of its own impressions, on
  which the top `depth` are shown shuffled. No arm is given the true propensities.
  IPS weights go with the pairs of each click and every other shown result: on the
  skip pairs they are biased against the shown ranking (`ranking.click_pairs`).
* `PDGDArm`: `ranking.pdgd.PDGD`, serving Plackett-Luce samples and learning from
  them.

The click pair arms start from Uni-Con's *direction* at the margin's scale
(`margin_scale`): the weights w = s * 1 with s such that Uni-Con's scores spread over
its shown top `display` by 1 on average (the hinge's margin), where the judged arms
start at s = 1 (a spread of ~17 on Fashion-MNIST). Both serve Uni-Con's ranking; they
learn differently. A click pair learned by a hinge rule (OPAR-I, AROW) moves the model
only while its margin is below 1. At Uni-Con's own scale most shown pairs lie beyond
the margin one way or the other, so of two equally attractive results' pairs, learned
both ways (as IPS's unbiasedness needs: `ranking.click_pairs`), only the one against
the current ranking moves the model, and the click noise flattens what Uni-Con knew
(measured: the IPS arms lost 0.003-0.03 NDCG@50). Within the margin the rule is linear
in the pair (w += s C y x for OPAR-I), so those two updates cancel and what remains,
in expectation, is the attractiveness difference the weights carry.

Grades: the collections grade relevance 0, 1, 2 (`simulators.images.ImageCollection`),
so the click models' three-grade tables apply.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from rankstream.ranking import learners as ranking_learners
from rankstream.ranking.baselines import UniCon
from rankstream.ranking.click_pairs import DEFAULT_MIN_PROPENSITY, click_pairs
from rankstream.ranking.metrics import ranked_order
from rankstream.ranking.online import OnlineRanker, learn_many_together
from rankstream.ranking.pdgd import PDGD
from rankstream.ranking.propensity import SHUFFLE, PropensityEstimator, randomize
from rankstream.ranking.scaling import Standardizer
from rankstream.simulators.clicks import ClickModel
from rankstream.simulators.feedback import JUDGED, Arm, JudgedArm, RetrievedQuery

RELEVANCE_GRADES = 3  # the collections' grades 0, 1, 2
DEFAULT_DISPLAY = JUDGED  # results shown per impression: the judged depth and NDCG@50's
DEFAULT_INTERVENTION_SHARE = 0.05
CLICK_DEPTH = 3
"""The judged arms' control depth ("<learner> judged@3"): judgments of only the top 3
shown, about as deep as cascade users read (an informational user's last click is at
rank 2.5 on average, README "Learning from clicks"): what judged feedback gives where
the clicks are."""


def order_scores(order: np.ndarray, n: int) -> np.ndarray:
    """Scores (n,) whose `ranked_order` starts with `order` (the rest keep their order)."""
    scores = np.zeros(n)
    scores[order] = np.arange(n, n - order.shape[0], -1, dtype=np.float64)
    return scores


def margin_scale(calibration_phi: np.ndarray, scaler: Standardizer, display: int) -> float:
    """The s of the click pair arms' warm start s * 1 (module docstring): 1 / the mean,
    over calibration queries `calibration_phi` (q, K, d), of Uni-Con's score range over
    its top `display`, so Uni-Con's shown scores spread by the hinge's margin of 1."""
    phi = np.asarray(calibration_phi)
    if phi.ndim != 3 or phi.shape[0] < 1:
        raise ValueError(f"calibration_phi must be (queries, K, d), got {phi.shape}")
    unicon = UniCon(scaler=scaler)
    spreads = []
    for candidates in phi:
        top = np.sort(unicon.score(candidates))[::-1][:display]
        spreads.append(top[0] - top[-1])
    spread = float(np.mean(spreads))
    if not (np.isfinite(spread) and spread > 0):
        raise ValueError(f"Uni-Con's shown scores do not spread (mean range {spread})")
    return 1.0 / spread


class ClickPairArm:
    """An online ranker learning from the click pairs of its own impressions."""

    def __init__(
        self,
        ranker: OnlineRanker,
        click_model: ClickModel,
        rng: np.random.Generator,
        estimator: PropensityEstimator | None = None,
        intervention_share: float = DEFAULT_INTERVENTION_SHARE,
        display: int = DEFAULT_DISPLAY,
        min_propensity: float = DEFAULT_MIN_PROPENSITY,
        losers: str = "skips",
    ) -> None:
        if not 0.0 <= intervention_share <= 1.0:
            raise ValueError(f"intervention_share must lie in [0, 1], got {intervention_share}")
        self.ranker, self.click_model, self.rng = ranker, click_model, rng
        self.estimator, self.intervention_share = estimator, intervention_share
        self.display, self.min_propensity, self.losers = display, min_propensity, losers
        self._intervention: str | None = None  # of the impression served last

    def serve(self, query: RetrievedQuery) -> np.ndarray:
        scores = self.ranker.score(query.phi)
        self._intervention = None
        if self.estimator is None:
            return scores
        ranked = ranked_order(scores)[: self.display]
        shown = randomize(ranked, SHUFFLE, self.intervention_share, self.rng, self.estimator.depth)
        self._intervention = shown.intervention
        if shown.intervention is None:
            return scores
        return order_scores(shown.order, scores.shape[0])

    def learn(self, query: RetrievedQuery, served: np.ndarray) -> None:
        shown = ranked_order(served)[: self.display]
        clicks = self.click_model.clicks(query.relevance[shown].astype(np.int64), self.rng)
        if self.estimator is None:
            pairs = click_pairs(clicks, losers=self.losers)
            weights = None
        else:
            self.estimator.observe(self._intervention, clicks)
            propensities = self.estimator.propensities(shown.shape[0])
            pairs = click_pairs(clicks, propensities, self.min_propensity, self.losers)
            weights = pairs.weight
        if len(pairs):
            labels = np.ones(len(pairs))
            p1, p2 = shown[pairs.winner], shown[pairs.loser]
            error = learn_many_together([self.ranker], query.phi, p1, p2, labels, weights)[0]
            if error is not None:
                raise error


class PDGDArm:
    """PDGD serving Plackett-Luce samples of its scores and learning from their clicks."""

    def __init__(
        self,
        model: PDGD,
        click_model: ClickModel,
        rng: np.random.Generator,
        display: int = DEFAULT_DISPLAY,
    ) -> None:
        self.model, self.click_model, self.rng, self.display = model, click_model, rng, display

    def serve(self, query: RetrievedQuery) -> np.ndarray:
        shown = self.model.rank(query.phi, self.display, self.rng)
        return order_scores(shown, query.phi.shape[0])

    def learn(self, query: RetrievedQuery, served: np.ndarray) -> None:
        shown = ranked_order(served)[: self.display]
        clicks = self.click_model.clicks(query.relevance[shown].astype(np.int64), self.rng)
        self.model.learn(query.phi, shown, clicks)


def click_arms(
    learners: tuple[str, ...],
    click_model: ClickModel,
    scaler: Standardizer,
    judged: int,
    seed: int,
    click_scale: float = 1.0,
    intervention_share: float = DEFAULT_INTERVENTION_SHARE,
    click_hyperparameters: Mapping[str, Mapping[str, float]] | None = None,
    pdgd_learning_rate: float | None = None,
    judged_top: int | None = CLICK_DEPTH,
) -> dict[str, Arm]:
    """The arms of the click experiment (besides Uni-Con), by name: per learner in
    `learners` its judged arm (the ceiling: "<learner> judged"), naive click pairs
    ("<learner> naive": click > skipped above, > next unclicked) and IPS-weighted pairs
    of each click with every other shown result ("<learner> ips": Propensity SVM-Rank's
    pairs, unbiased under position bias; `ranking.click_pairs`); then "pdgd". With
    `judged_top` K, also "<learner> judged@K": judged feedback on the top K shown only
    (`CLICK_DEPTH`), a control that reads no clicks, from its own seed stream (the other
    arms' streams do not depend on it).

    Every learner starts from Uni-Con's direction (all ones on the shared scaler), judged
    and click arms alike, so each starts where the baseline serves and a gain is what
    it learned: the judged arms and PDGD at Uni-Con's weights, the click pair arms at
    `click_scale` times them (`margin_scale`, module docstring). The click pair arms
    learn with `click_hyperparameters` (per learner, over its defaults; None: each spec's,
    `ranking.learners.click_hyperparameters`; the judged arms
    keep the defaults they were calibrated with).
    Each arm's clicks and coins come from its own child stream of `seed`."""
    streams = iter(np.random.SeedSequence([seed, 2]).spawn(3 * len(learners) + 1))
    start = UniCon(scaler=scaler).weights_

    def rng() -> np.random.Generator:
        return np.random.default_rng(next(streams))

    if not (np.isfinite(click_scale) and click_scale > 0):
        raise ValueError(f"click_scale must be finite and > 0, got {click_scale}")

    def ranker(algo: str, scale: float = 1.0, **hyper: float) -> OnlineRanker:
        return OnlineRanker(algo=algo, scaler=scaler, warm_start=scale * start, **hyper)

    if click_hyperparameters is None:
        click_hyperparameters = ranking_learners.click_hyperparameters()
    arms: dict[str, Arm] = {}
    controls = iter(np.random.SeedSequence([seed, 3]).spawn(len(learners)))
    for algo in learners:
        hyper = dict(click_hyperparameters.get(algo, {}))
        arms[f"{algo} judged"] = JudgedArm(ranker(algo), judged, rng())
        if judged_top is not None:
            control = np.random.default_rng(next(controls))
            arms[f"{algo} judged@{judged_top}"] = JudgedArm(ranker(algo), judged_top, control)
        arms[f"{algo} naive"] = ClickPairArm(ranker(algo, click_scale, **hyper), click_model, rng())
        arms[f"{algo} ips"] = ClickPairArm(
            ranker(algo, click_scale, **hyper),
            click_model,
            rng(),
            PropensityEstimator(),
            intervention_share,
            losers="shown",
        )
    given = {} if pdgd_learning_rate is None else {"learning_rate": pdgd_learning_rate}
    pdgd = ranking_learners.impression_model("pdgd", given, scaler, start)  # its declared defaults
    arms["pdgd"] = PDGDArm(pdgd, click_model, rng())
    return arms
