"""Models read back from the store as scorers, and the champion policy that picks one to serve.

`SCORERS` maps a stored model's kind to a factory that rebuilds it as a `Scorer`
(`score(phi (k, d) float32) -> (k,) float64`, higher = more relevant, d the deployment's
width `Settings.phi_dim`). A stored model of another width is refused
(`stream.store.WrongWidthError`) before it is rebuilt, and a scorer refuses phi of
another width, so a model is never fed features it was not trained on. The simulator
ranks with one, the evaluator scores every model with them, so the two can never
disagree on how a model scores. A worker that publishes a new kind registers its
factory here (`SCORERS["cmds_dml"] = ...`).

Kinds "linear" (Uni-Con and the other baselines, written with their own `to_state`)
and "online" (the online worker's checkpoints, `OnlineRanker.to_state`) are both
w . phi through the stored Standardizer, so one factory serves both: it dispatches on
the state's own `meta["kind"]`.

The champion is chosen by the evaluator (`workers.champion`: a paired sequential test
of each challenger against the incumbent), which publishes it as the model `evaluator`
(kind "scores", meta {"champion": name, "race": ..., "rolling_ndcg": ...}), and
`ServingModel` reads that record to know what to serve. Uni-Con serves until a learned
model beats it on evidence.
"""

from __future__ import annotations

import logging
from collections import OrderedDict
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np

from rankstream.ranking.baselines import BestFea, LinearScorer, RankSVM, UniCon
from rankstream.ranking.online import OnlineRanker
from rankstream.ranking.validation import as_float_matrix
from rankstream.stream.settings import DEFAULT_PHI_DIM
from rankstream.stream.store import ModelStore, StoredModel, check_width, stored_width
from rankstream.workers import metrics
from rankstream.workers.logging import get_logger, log_event
from rankstream.workers.pins import pin_record_name, pinned_model

UNI_CON = "uni_con"
CHAMPION = "champion"
EVALUATOR_RECORD = "evaluator"
SCORES_KIND = "scores"

log = get_logger("rankstream.serving")


class Scorer(Protocol):
    def score(self, phi: np.ndarray) -> np.ndarray: ...


ScorerFactory = Callable[[StoredModel], Scorer]


class CheckedScorer:
    """Wraps a model's scoring: validates phi (k, width), returns finite float64 (k,)."""

    def __init__(
        self, name: str, version: int, score_fn: Callable[[np.ndarray], Any], width: int
    ) -> None:
        self.name, self.version, self.width = name, version, width
        self._score = score_fn

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


SCORERS: dict[str, ScorerFactory] = {"linear": linear_scorer, "online": linear_scorer}


# --- batch models (the batch worker's kinds; owned with workers/batch_models.py) -------
def batch_scorer(stored: StoredModel) -> Scorer:
    """cMDS-DML kNN relevance or RankMKL decision values, rebuilt by `workers.batch_models`."""
    from rankstream.workers.batch_models import scorer_from_state

    model = scorer_from_state(stored.kind, stored.meta, stored.arrays)
    return CheckedScorer(stored.name, stored.version, model.score, stored_width(stored))


SCORERS["cmds_dml"] = batch_scorer
SCORERS["rankmkl"] = batch_scorer


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
        """Load each unknown name once (its latest version) to learn its kind."""
        for name in names:
            if name not in self.kinds:
                stored = self.store.load(name)
                if stored is not None:
                    self.kinds[name] = stored.kind
                    if stored.kind in SCORERS:
                        self._entries[(name, stored.version)] = scorer_for(stored, self.width)


@dataclass(frozen=True)
class Served:
    """What ranked one query: the model, its version and scorer, every model's version."""

    name: str
    version: int
    scorer: Scorer
    model_versions: dict[str, int]


class ServingModel:
    """The simulator's view of the store: the model to rank with, refreshed each query.

    `serving` is a model name or `champion`. `refresh()` costs one `latest_versions()`
    call when nothing changed; a new champion or a new version of the served model is
    loaded once (through the LRU). A champion that is not (yet) in the store, or whose
    kind has no scorer, falls back to Uni-Con. A pinned model (`workers.pins`) is served
    at its pinned version; the stamps still carry every model's newest version, so the
    evaluator keeps scoring them.
    """

    def __init__(
        self,
        store: ModelStore,
        serving: str = CHAMPION,
        cache_size: int = 16,
        width: int = DEFAULT_PHI_DIM,
    ) -> None:
        self.store = store
        self.serving = serving
        self.cache = ScorerCache(store, cache_size, width)
        self.current: Served | None = None
        self.switches = 0
        self._champion: str = UNI_CON
        self._record_version = 0
        self._pins: dict[str, tuple[int, StoredModel | None]] = {}  # name -> (record v, pin)

    def refresh(self) -> Served:
        latest = self.store.latest_versions()
        self.cache.learn_kinds(sorted(latest))
        versions = {n: v for n, v in sorted(latest.items()) if self.cache.scorable(n)}
        name = self.serving if self.serving != CHAMPION else self._read_champion(latest)
        if name not in versions:
            if self.serving != CHAMPION:
                raise LookupError(f"serving model {name!r} is not in the store (or not scorable)")
            name = UNI_CON
        if UNI_CON not in versions and name == UNI_CON:
            raise LookupError("Uni-Con is not in the store; publish it before serving")
        version = versions[name]
        held = self._pinned(name, latest)
        if held is not None:
            version = held.version
        if self.current is None or (self.current.name, self.current.version) != (name, version):
            scorer = self.cache.adopt(held) if held is not None else self.cache.get(name, version)
            if scorer is None:  # trimmed between the two reads: serve what we have
                if self.current is not None:
                    return Served(
                        self.current.name, self.current.version, self.current.scorer, versions
                    )
                raise LookupError(f"model {name!r} v{version} vanished from the store")
            self._switch(name, version, scorer)
        assert self.current is not None
        return Served(self.current.name, self.current.version, self.current.scorer, versions)

    def _pinned(self, name: str, latest: Mapping[str, int]) -> StoredModel | None:
        """NAME's pinned version, re-read only when its pin record changed."""
        record_version = latest.get(pin_record_name(name), 0)
        cached = self._pins.get(name)
        if cached is None or cached[0] != record_version:
            record = self.store.load(pin_record_name(name)) if record_version else None
            cached = self._pins[name] = (record_version, pinned_model(record))
        return cached[1]

    def _read_champion(self, latest: Mapping[str, int]) -> str:
        version = latest.get(EVALUATOR_RECORD, 0)
        if version != self._record_version:
            record = self.store.load(EVALUATOR_RECORD)
            if record is not None:
                self._record_version = record.version
                champion = record.meta.get("champion")
                if isinstance(champion, str) and champion:
                    self._champion = champion
        return self._champion

    def _switch(self, name: str, version: int, scorer: Scorer) -> None:
        previous = self.current
        self.current = Served(name, version, scorer, {})
        if previous is not None and previous.name == name:
            return  # a newer version of the same model: not a switch
        if previous is not None:
            metrics.SERVING_MODEL_INFO.labels(model=previous.name).set(0)
        metrics.SERVING_MODEL_INFO.labels(model=name).set(1)
        metrics.SERVING_SWITCHES.inc()
        self.switches += 1
        log_event(
            log,
            "serving model switched",
            level=logging.INFO,
            previous=None if previous is None else previous.name,
            model=name,
            version=version,
            mode=self.serving,
        )
