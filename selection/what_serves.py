"""What serves now: the one rule, and the simulator's view of the store that applies it.

`serves_now(requested, champion, servable)` is the only place that decides which model
answers a ranking: a named model if it is servable; none or `champion`: the champion,
else Uni-Con while the champion is not servable (not stored yet, or not loadable). The
engine's own ranking (`selection.engine_ranking`, the model `engine`) is servable only
for a request that carries its scores; it answers every champion request that carries
them when `engine_first`: serve's shadow mode (`RANKSTREAM_SHADOW`), or the kill switch,
the engine pinned (`rankstream model pin engine 1`: back to the engine's order at once,
whatever the champion; `model unpin engine` lifts it). A champion request without
engine_scores while the champion is the engine gets Uni-Con (the champion is not
servable for it), as any unservable champion does. Serve
(`serve.registry.Snapshot.resolve`, over its loaded snapshot), the simulator and both
demos (`ServingModel`, over the store's scorable models) call it; `served_version` is
the other half: a pinned model (`selection.pins`) serves its pinned version, every other
its newest.

The champion is the champion record's (`selection.judged_race.stored_champion`: the
record `champion` either race writes, else the evaluator's), read again only when one
of those records changed. Uni-Con serves until a learned model beats it on evidence.
How a stored model scores is `selection.scoring`.
"""

from __future__ import annotations

import logging
from collections.abc import Collection, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from rankstream.ranking.baselines import UNI_CON
from rankstream.selection.click_race import INTERLEAVING_RECORD, refused_challengers
from rankstream.selection.engine_ranking import ENGINE, ENGINE_VERSION, EngineScorer
from rankstream.selection.judged_race import CHAMPION_RECORD, stored_champion
from rankstream.selection.pins import pin_record_name, pinned_model
from rankstream.selection.scoring import EVALUATOR_RECORD, Scorer, ScorerCache
from rankstream.stream.settings import DEFAULT_PHI_DIM
from rankstream.stream.store import ModelStore, StoredModel
from rankstream.telemetry import prometheus_metrics as metrics
from rankstream.telemetry.structured_log import get_logger, log_event

CHAMPION = "champion"  # what a request or `--serving` names to be served the champion


class UnknownModelError(LookupError):
    """The requested model or version is not servable; `field` is "model" or "version"."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(message)
        self.field = field


def serves_now(
    requested: str | None, champion: str, servable: Collection[str], engine_first: bool = False
) -> str:
    """The model that answers a ranking (module docstring): `requested` if servable; None
    or `champion`: the engine when `engine_first` and it is servable (its scores came
    with the request), else the champion, else Uni-Con. UnknownModelError if none is."""
    if requested is not None and requested != CHAMPION:
        if requested in servable:
            return requested
        raise UnknownModelError(
            "model", f"unknown model {requested!r}; servable: {sorted(servable)}"
        )
    if engine_first and ENGINE in servable:
        return ENGINE
    if champion in servable:
        return champion
    if UNI_CON in servable:
        return UNI_CON
    raise UnknownModelError("model", "no model is loaded yet (the store has none)")


def served_version(newest: int, pinned: StoredModel | None) -> int:
    """The version a model serves: its pinned one (`selection.pins`), else its newest."""
    return pinned.version if pinned is not None else newest


log = get_logger("rankstream.serving")


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
    kind has no scorer, falls back to Uni-Con. A pinned model (`selection.pins`) is served
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
        self._record_version: tuple[int, int] = (0, 0)
        self._pins: dict[str, tuple[int, StoredModel | None]] = {}  # name -> (record v, pin)
        self._latest: Mapping[str, int] = {}  # the store's versions at the last refresh
        self._race: tuple[int, Mapping[str, Any]] = (0, {})  # the published click race
        self._engine: EngineScorer | None = None  # this query's engine ranking, if sent

    def others(self, served: Served) -> Mapping[str, Served]:
        """Every other scorable model at the version it would serve (its pinned one, else
        its newest, as of the last `refresh`), loaded only when looked up: the challengers
        an interleaved ranking drafts against (`selection.click_race`) read one or two."""
        return _Others(self, served)

    def refused(self, champion: str) -> frozenset[str]:
        """The challengers the click race refused against `champion` (not to be drafted,
        `selection.click_race.refused_challengers`), re-read when its record changed."""
        version = self._latest.get(INTERLEAVING_RECORD, 0)
        if version != self._race[0]:
            record = self.store.load(INTERLEAVING_RECORD) if version else None
            summary = {} if record is None else record.meta.get("interleaving", {})
            self._race = (version, summary)
        return refused_challengers(self._race[1], champion)

    @property
    def engine_pinned(self) -> bool:
        """The kill switch (`rankstream model pin engine 1`), as of the last `refresh`."""
        return self._pinned(ENGINE, self._latest) is not None

    def _load(self, name: str, version: int) -> Served:
        if name == ENGINE and self._engine is not None:  # this query's engine ranking
            return Served(ENGINE, version, self._engine, {})
        held = self._pinned(name, self._latest)
        if held is not None:
            return Served(name, held.version, self.cache.adopt(held), {})
        scorer = self.cache.get(name, version)
        if scorer is None:
            raise LookupError(f"model {name!r} v{version} vanished from the store")
        return Served(name, version, scorer, {})

    def refresh(self, engine: np.ndarray | None = None, engine_first: bool = False) -> Served:
        """What ranks the next query. `engine`: its engine_scores (`selection.engine_ranking`),
        which make the model `engine` servable for it, as serve's request that carries them
        does (`serves_now`): as the champion, as a challenger (`others`), and first when
        `engine_first` (shadow mode) or the engine is pinned (the kill switch)."""
        latest = self._latest = self.store.latest_versions()
        self.cache.learn_kinds(sorted(latest))
        versions = {n: v for n, v in sorted(latest.items()) if self.cache.scorable(n)}
        champion = self._read_champion(latest) if self.serving == CHAMPION else UNI_CON
        self._engine = None if engine is None else EngineScorer(engine)
        if self._engine is not None:
            versions[ENGINE] = latest.get(ENGINE, ENGINE_VERSION)
        pinned = self.engine_pinned  # read every query: the kill switch's gauge too
        first = self._engine is not None and (engine_first or pinned)
        name = serves_now(self.serving, champion, versions, first)
        if name == ENGINE:
            assert self._engine is not None
            if self.current is None or self.current.name != ENGINE:
                self._switch(ENGINE, versions[ENGINE], self._engine)
            return Served(ENGINE, versions[ENGINE], self._engine, versions)
        held = self._pinned(name, latest)
        version = served_version(versions[name], held)
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
            metrics.MODEL_PINNED.labels(model=name).set(float(cached[1] is not None))
        return cached[1]

    def _read_champion(self, latest: Mapping[str, int]) -> str:
        versions = (latest.get(EVALUATOR_RECORD, 0), latest.get(CHAMPION_RECORD, 0))
        if versions != self._record_version:
            champion = stored_champion(self.store, latest)
            self._record_version = versions
            if champion is not None:
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


class _Others(Mapping[str, Served]):
    """`ServingModel.others`: name -> Served, loaded (through the LRU) on lookup."""

    def __init__(self, serving: ServingModel, served: Served) -> None:
        self._serving = serving
        self._versions = {n: v for n, v in served.model_versions.items() if n != served.name}

    def __getitem__(self, name: str) -> Served:
        return self._serving._load(name, self._versions[name])

    def __iter__(self) -> Iterator[str]:
        return iter(self._versions)

    def __len__(self) -> int:
        return len(self._versions)
