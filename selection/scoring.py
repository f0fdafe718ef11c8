"""Models read back from the store as scorers: how a stored model scores.

`SCORERS` maps a stored model's kind to a factory that rebuilds it as a `Scorer`
(`score(phi (k, d) float32) -> (k,) float64`, higher = more relevant, d the deployment's
width `Settings.phi_dim`). A stored model of another width is refused
(`stream.store.WrongWidthError`) before it is rebuilt, and a scorer refuses phi of
another width, so a model is never fed features it was not trained on. The simulator
ranks with one, the evaluator scores every model with them, and the HTTP API serves
them (`serve.registry`), so none can disagree on how a model scores. A worker that
publishes a new kind registers its factory here (`SCORERS["cmds_dml"] = ...`).

Kinds "linear" (Uni-Con and the other baselines, written with their own `to_state`)
and "online" (the online worker's checkpoints, `OnlineRanker.to_state`) are both
w . phi through the stored Standardizer, so one factory serves both: it dispatches on
the state's own `meta["kind"]`. Kind "plackett_luce" (the impression learners the click
join publishes: PDGD, `ranking.pdgd`) scores w . phi too, and its scorer says
`plackett_luce`: serve, the interleaver and the simulated engine show a Plackett-Luce
sample of its scores (`served_order`), the policy it learns as, while the judged
evaluator scores its deterministic ranking.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable
from typing import Any, Protocol

import numpy as np

from rankstream.ranking import learners
from rankstream.ranking.baselines import BestFea, LinearScorer, RankSVM, UniCon
from rankstream.ranking.batch_models import BATCH_KINDS, scorer_from_state
from rankstream.ranking.online import OnlineRanker
from rankstream.ranking.pdgd import plackett_luce_intervention, sample_ranking
from rankstream.ranking.propensity import randomize
from rankstream.ranking.validation import as_float_matrix
from rankstream.stream.settings import DEFAULT_PHI_DIM
from rankstream.stream.store import ModelStore, StoredModel, check_width, stored_width

EVALUATOR_RECORD = "evaluator"
SCORES_KIND = "scores"
PLACKETT_LUCE_KIND = "plackett_luce"  # an impression learner's model (PDGD)


class Scorer(Protocol):
    def score(self, phi: np.ndarray) -> np.ndarray: ...


ScorerFactory = Callable[[StoredModel], Scorer]


class CheckedScorer:
    """Wraps a model's scoring: validates phi (k, width), returns finite float64 (k,)."""

    def __init__(
        self,
        name: str,
        version: int,
        score_fn: Callable[[np.ndarray], Any],
        width: int,
        plackett_luce: bool = False,
    ) -> None:
        self.name, self.version, self.width = name, version, width
        self._score = score_fn
        self.plackett_luce = plackett_luce  # served as Plackett-Luce samples of its scores

    def score(self, phi: np.ndarray) -> np.ndarray:
        phi = as_float_matrix(phi, "phi", self.width)
        scores = np.asarray(self._score(phi), dtype=np.float64).reshape(-1)
        if scores.shape != (phi.shape[0],):
            raise ValueError(
                f"model {self.name!r} v{self.version} returned {scores.shape} scores "
                f"for {phi.shape[0]} candidates"
            )
        if not np.isfinite(scores).all():
            raise ValueError(f"model {self.name!r} v{self.version} returned NaN or Inf scores")
        return scores


_LINEAR_STATES: dict[str, Callable[[dict, dict], Any]] = {
    "online_ranker": OnlineRanker.from_state,
    **{cls.kind: cls.from_state for cls in (LinearScorer, UniCon, BestFea, RankSVM)},
}


def linear_scorer(stored: StoredModel) -> Scorer:
    """w . phi (through the stored scaler) of an online ranker or a linear baseline."""
    state_kind = stored.meta.get("kind")
    rebuild = _LINEAR_STATES.get(state_kind)
    if rebuild is None:
        raise ValueError(
            f"model {stored.name!r} (kind {stored.kind!r}) holds state {state_kind!r}; "
            f"linear states are {sorted(_LINEAR_STATES)}"
        )
    model = rebuild(stored.meta, stored.arrays)
    width = stored_width(stored)
    if model.weights.shape != (width,):
        raise ValueError(
            f"model {stored.name!r} has {model.weights.shape[0]} weights, its width is {width}"
        )
    return CheckedScorer(stored.name, stored.version, model.score, width)


def plackett_luce_scorer(stored: StoredModel) -> Scorer:
    """An impression learner's stored model (`ranking.learners.impression_learners`): its
    scores w . phi, marked to be served as Plackett-Luce samples."""
    model = learners.impression_model_from_state(stored.meta, stored.arrays)
    width = stored_width(stored)
    if model.weights.shape != (width,):
        raise ValueError(
            f"model {stored.name!r} has {model.weights.shape[0]} weights, its width is {width}"
        )
    return CheckedScorer(stored.name, stored.version, model.score, width, plackett_luce=True)


SCORERS: dict[str, ScorerFactory] = {
    "linear": linear_scorer,
    "online": linear_scorer,
    PLACKETT_LUCE_KIND: plackett_luce_scorer,
}


# --- batch models (the batch worker's kinds; owned with ranking/batch_models.py) -------
def batch_scorer(stored: StoredModel) -> Scorer:
    """cMDS-DML kNN relevance or RankMKL decision values, rebuilt by `ranking.batch_models`."""
    model = scorer_from_state(stored.kind, stored.meta, stored.arrays)
    return CheckedScorer(stored.name, stored.version, model.score, stored_width(stored))


SCORERS.update(dict.fromkeys(BATCH_KINDS, batch_scorer))


def served_order(scorer: Scorer, scores: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """The order a model's ranking is shown in (serve, the interleaver, the simulated
    engine): its scores from high to low, ties in the request's order; for a
    `plackett_luce` scorer (PDGD) a Plackett-Luce sample of them, drawn with `rng`."""
    if getattr(scorer, "plackett_luce", False):
        return sample_ranking(scores, scores.shape[0], rng)
    return np.argsort(-scores, kind="stable")


def logged_order(
    scorer: Scorer,
    scores: np.ndarray,
    order: np.ndarray,
    rng: np.random.Generator,
    intervention: str,
    share: float,
) -> tuple[np.ndarray, str | None, float | None]:
    """(order, intervention, shown probability) of a logged ranking that is not interleaved
    (`rankstream serve`'s rule): a `plackett_luce` model's sample `order` as drawn, with
    its probability; any other model's `order` randomized on a `share` of the rankings by
    the `intervention` (`ranking.propensity.randomize`: `RANKSTREAM_INTERVENTION`,
    `RANKSTREAM_INTERVENTION_SHARE`), whose logged `intervention` the click join's
    propensity estimate reads back. The simulated engine shows its rankings by it, so the
    click demo and `eval clicks` estimate propensities from the interventions serve makes.
    Probability None: shown as ranked, no randomized policy to account for."""
    if getattr(scorer, "plackett_luce", False):
        return (order, *plackett_luce_intervention(scores, order))
    if share > 0:
        shown = randomize(order, intervention, share, rng)
        return shown.order, shown.intervention, shown.probability
    return order, None, None


def scorer_for(stored: StoredModel, width: int = DEFAULT_PHI_DIM) -> Scorer:
    """The stored model as a Scorer of `width`-wide phi; ValueError for a kind nobody
    registered, WrongWidthError (a ValueError) for a model of another width."""
    factory = SCORERS.get(stored.kind)
    if factory is None:
        raise ValueError(
            f"model {stored.name!r} has kind {stored.kind!r}, which has no scorer "
            f"(registered: {sorted(SCORERS)})"
        )
    return factory(check_width(stored, width))


class ScorerCache:
    """LRU of (name, version) -> Scorer, None when that version is gone (trimmed).

    Also remembers each name's kind, so a name whose kind has no scorer (a reservoir,
    the evaluator's own record) is loaded once, not on every query. Scorers take
    `width`-wide phi (the deployment's); a model of another width raises WrongWidthError.
    """

    def __init__(self, store: ModelStore, capacity: int = 64, width: int = DEFAULT_PHI_DIM) -> None:
        if capacity < 1:
            raise ValueError(f"capacity must be >= 1, got {capacity}")
        self.store = store
        self.capacity = capacity
        self.width = width
        self._entries: OrderedDict[tuple[str, int], Scorer | None] = OrderedDict()
        self.kinds: dict[str, str] = {}

    def scorable(self, name: str) -> bool | None:
        """True/False once the name's kind is known; None before its first load."""
        kind = self.kinds.get(name)
        return None if kind is None else kind in SCORERS

    def get(self, name: str, version: int) -> Scorer | None:
        """The scorer of exactly this version; None if the store no longer has it.

        Raises ValueError when the kind has no scorer or the state is unusable.
        """
        key = (name, int(version))
        if key in self._entries:
            self._entries.move_to_end(key)
            return self._entries[key]
        stored = self.store.load_version(name, int(version))
        scorer = None
        if stored is not None:
            self.kinds[name] = stored.kind
            scorer = scorer_for(stored, self.width)
        self._entries[key] = scorer
        while len(self._entries) > self.capacity:
            self._entries.popitem(last=False)
        return scorer

    def adopt(self, stored: StoredModel) -> Scorer:
        """The scorer of a model already in hand (a pin's copy), cached like any other."""
        key = (stored.name, stored.version)
        scorer = self._entries.get(key)
        if scorer is None:
            scorer = self._entries[key] = scorer_for(stored, self.width)
            self.kinds.setdefault(stored.name, stored.kind)
            while len(self._entries) > self.capacity:
                self._entries.popitem(last=False)
        self._entries.move_to_end(key)
        return scorer

    def learn_kinds(self, names: list[str]) -> None:
        """Load each unknown name once (its latest version) to learn its kind. A model that
        cannot score here (another width, an unusable state) is only not cached: `get`
        raises its ValueError to the caller that asks for it, so one bad model never stops
        the others being learned."""
        for name in names:
            if name not in self.kinds:
                stored = self.store.load(name)
                if stored is not None:
                    self.kinds[name] = stored.kind
                    if stored.kind in SCORERS:
                        try:
                            scorer = scorer_for(stored, self.width)
                        except ValueError:
                            continue
                        self._entries[(name, stored.version)] = scorer
