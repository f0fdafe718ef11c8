"""What the HTTP API serves: an immutable snapshot of loaded models, swapped on every change.

A `Snapshot` holds, for every scorable model in the store, the version to serve (its
newest, or its pinned version, `selection.pins`) already rebuilt as a scorer, plus the
evaluator's champion and rolling scores. A request reads `registry.snapshot` once and
uses only that object, so it can never see a half-loaded model: a new snapshot is built
completely (new versions loaded, unchanged ones reused) and only then replaces the old
one, by a single reference assignment.

Hot reload: a thread subscribes to the store's `model-updated` announcements (Redis
pub/sub, or the embedded store's queue) and rebuilds on each (announcements arriving
together are coalesced into one rebuild). Pub/sub is fire-and-forget, so the thread also
rebuilds every `poll_seconds` without one; a rebuild that finds nothing new costs one
`latest_versions()` call. The lag from a save (`created_ms`) to the swap that serves it
is `rankstream_serving_reload_lag_seconds`.

Requests for an exact older version (`model` + `version`) are loaded on demand through
an LRU (`selection.scoring.ScorerCache`); the snapshot holds only what is served by default.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from rankstream.ranking.baselines import UNI_CON
from rankstream.selection.click_race import INTERLEAVING_RECORD
from rankstream.selection.engine_ranking import ENGINE, ENGINE_KIND, ENGINE_VERSION, EngineScorer
from rankstream.selection.judged_race import CHAMPION_RECORD, stored_champion
from rankstream.selection.live_estimates import COUNTERFACTUAL_RECORD
from rankstream.selection.pins import is_pin_record, pins
from rankstream.selection.scoring import (
    EVALUATOR_RECORD,
    SCORERS,
    Scorer,
    ScorerCache,
    scorer_for,
)
from rankstream.selection.unicon_baseline import calibrating
from rankstream.selection.what_serves import UnknownModelError, served_version, serves_now
from rankstream.stream.errors import TRANSIENT
from rankstream.stream.settings import DEFAULT_PHI_DIM
from rankstream.stream.store import ModelStore, StoredModel
from rankstream.telemetry import prometheus_metrics as metrics
from rankstream.telemetry.structured_log import get_logger, log_event

log = get_logger("rankstream.serve.registry")


@dataclass(frozen=True)
class LoadedModel:
    """One model version, rebuilt as a scorer."""

    name: str
    version: int
    kind: str
    scorer: Scorer
    created_ms: int
    triplets_seen: int | None
    pinned: bool = False
    calibrating: bool = False  # Uni-Con still wanting candidates (`selection.unicon_baseline`)

    @classmethod
    def of(cls, stored: StoredModel, width: int, pinned: bool = False) -> LoadedModel:
        """`stored` rebuilt as a scorer of `width`-wide phi (WrongWidthError otherwise)."""
        seen = stored.meta.get("triplets_seen")
        return cls(
            name=stored.name,
            version=stored.version,
            kind=stored.kind,
            scorer=scorer_for(stored, width),
            created_ms=stored.created_ms,
            triplets_seen=int(seen) if isinstance(seen, int | float) else None,
            pinned=pinned,
            calibrating=stored.name == UNI_CON and calibrating(stored),
        )


@dataclass(frozen=True)
class Snapshot:
    """Everything a request needs, never mutated after it is published."""

    models: Mapping[str, LoadedModel]  # name -> the version served by default
    latest: Mapping[str, int]  # scorable name -> newest version (what feedback stamps)
    champion: str
    scores: Mapping[str, Any]  # the evaluator record's meta (rolling NDCG@50, counts)
    kinds: Mapping[str, str] = field(default_factory=dict)  # every stored name's kind
    stored: Mapping[str, int] = field(default_factory=dict)  # every stored name's version
    pin_versions: Mapping[str, int] = field(default_factory=dict)  # pin record -> version
    pinned: Mapping[str, StoredModel] = field(default_factory=dict)  # name -> pinned copy
    built_at: float = 0.0

    def resolve(
        self, model: str | None, engine: LoadedModel | None = None, engine_first: bool = False
    ) -> LoadedModel:
        """The default-served version of `model`, by the one rule of what serves now
        (`selection.what_serves.serves_now`, the simulator's too) over the loaded models
        and, when the request carried its scores, the engine's ranking (`engine`)."""
        models = self.models if engine is None else self.with_engine(engine)
        return models[serves_now(model, self.champion, models, engine_first)]

    def with_engine(self, engine: LoadedModel) -> Mapping[str, LoadedModel]:
        """The loaded models and this request's engine ranking (`engine_model`)."""
        return {**self.models, ENGINE: engine}

    def engine_model(self, scores: np.ndarray) -> LoadedModel:
        """The engine's ranking of one request (`selection.engine_ranking`) as a model:
        its scores, its one version, pinned while the kill switch holds it."""
        return LoadedModel(
            ENGINE, self.stored.get(ENGINE, ENGINE_VERSION), ENGINE_KIND, EngineScorer(scores),
            0, None, pinned=ENGINE in self.pinned,
        )  # fmt: skip

    @property
    def engine_pinned(self) -> bool:
        """The kill switch (`selection.what_serves`): the engine answers champion requests."""
        return ENGINE in self.pinned

    @property
    def ready(self) -> bool:
        """A default ranking request can be answered: the champion or Uni-Con is loaded,
        or Uni-Con is not stored yet, so the first one publishes it (`serve.app`). The
        workers' records (the evaluator's scores, the click join's propensities and
        interleaving evidence, a reservoir) serve nothing and change none of this; a
        stored model that cannot be loaded (another width, a broken state) does."""
        return self.champion in self.models or UNI_CON in self.models or self.needs_unicon

    @property
    def needs_unicon(self) -> bool:
        """No Uni-Con is stored: the next default ranking request calibrates one."""
        return UNI_CON not in self.stored


EMPTY = Snapshot(models={}, latest={}, champion=UNI_CON, scores={})


class ModelRegistry:
    """Builds snapshots from the store and keeps the newest one in `snapshot`."""

    def __init__(
        self,
        store: ModelStore,
        poll_seconds: float = 1.0,
        cache_size: int = 32,
        width: int = DEFAULT_PHI_DIM,
    ) -> None:
        if not poll_seconds > 0:
            raise ValueError(f"poll_seconds must be > 0, got {poll_seconds}")
        self.store = store
        self.poll_seconds = poll_seconds
        self.width = width  # the deployment's phi width: other widths are not served
        self.snapshot: Snapshot = EMPTY
        self.store_ok = False  # the last rebuild reached the store
        self.versions = ScorerCache(store, cache_size, width)  # exact versions asked for
        self._build_lock = threading.Lock()
        self._versions_lock = threading.Lock()  # not the build lock: a stalled rebuild
        # must never hold up a request for an exact version
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    # --- building ------------------------------------------------------------------------
    def refresh(self) -> Snapshot:
        """Build and publish a new snapshot if anything changed; returns the current one."""
        with self._build_lock:
            try:
                latest = self.store.latest_versions()
                snapshot = self._build(self.snapshot, latest)
            except TRANSIENT as exc:
                self.store_ok = False
                log_event(log, "store unavailable", level=logging.WARNING, error=repr(exc))
                return self.snapshot
            self.store_ok = True
            if snapshot is not self.snapshot:
                self._publish(snapshot)
            return self.snapshot

    def _build(self, old: Snapshot, latest: dict[str, int]) -> Snapshot:
        if latest == dict(old.stored) and old is not EMPTY:
            return old  # nothing saved since: the common case, one call to the store
        kinds = dict(old.kinds)
        for name in latest:
            if name not in kinds:  # a new name: learn its kind once
                stored = self.store.load(name)
                if stored is not None:
                    kinds[name] = stored.kind
        scorable = {n: v for n, v in latest.items() if kinds.get(n) in SCORERS}
        pin_versions = {n: v for n, v in latest.items() if is_pin_record(n)}
        pinned = old.pinned
        if pin_versions != dict(old.pin_versions):
            pinned = pins(self.store, pin_versions)
        scores, champion = self._scores(old, latest)
        models = {}
        for name, version in sorted(scorable.items()):
            loaded = self._load(name, version, pinned.get(name), old.models.get(name))
            if loaded is not None:
                models[name] = loaded
        return Snapshot(
            models, scorable, champion, scores, kinds, latest, pin_versions, pinned, time.time()
        )

    def _load(
        self, name: str, version: int, held: StoredModel | None, current: LoadedModel | None
    ) -> LoadedModel | None:
        """The version to serve (pinned or newest), reusing `current` when it is that one."""
        want = served_version(version, held)
        if current is not None and current.version == want and current.pinned == bool(held):
            return current
        stored = held if held is not None else self.store.load_version(name, version)
        if stored is None:  # trimmed between the two reads: keep what we had
            return current
        try:
            return LoadedModel.of(stored, self.width, pinned=held is not None)
        except ValueError as exc:  # an unusable state: keep serving the previous one
            log_event(log, "model not loaded", level=logging.WARNING, model=name,
                      version=stored.version, error=str(exc)[:200])  # fmt: skip
            return current

    def _scores(self, old: Snapshot, latest: Mapping[str, int]) -> tuple[Mapping[str, Any], str]:
        """The evaluator record's meta with the click join's `interleaving` evidence and
        `counterfactual` estimates (`selection.live_estimates`), and the champion
        (`selection.judged_race`: the champion record's, else the evaluator's); re-read
        only when one of the four records changed."""
        versions = [latest.get(name) for name in (EVALUATOR_RECORD, CHAMPION_RECORD,
                                                  INTERLEAVING_RECORD,
                                                  COUNTERFACTUAL_RECORD)]  # fmt: skip
        if not any(versions):
            return {}, UNI_CON
        if old.scores.get("_versions") == versions:
            return old.scores, old.champion
        meta: dict[str, Any] = {"_versions": versions}
        evaluator = self.store.load(EVALUATOR_RECORD) if versions[0] else None
        if evaluator is not None:
            meta.update(evaluator.meta)
        interleaving = self.store.load(INTERLEAVING_RECORD) if versions[2] else None
        if interleaving is not None:
            meta["interleaving"] = interleaving.meta.get("interleaving", {})
        estimates = self.store.load(COUNTERFACTUAL_RECORD) if versions[3] else None
        if estimates is not None:
            meta["counterfactual"] = estimates.meta.get("counterfactual", {})
        decided = self.store.load(CHAMPION_RECORD) if versions[1] else None
        if decided is not None:  # who decided the current champion, and on what evidence
            meta["champion_decision"] = {k: v for k, v in decided.meta.items() if k != "champion"}
        champion = stored_champion(self.store, latest) or UNI_CON
        return meta, champion

    def _publish(self, snapshot: Snapshot) -> None:
        previous = self.snapshot
        self.snapshot = snapshot  # one reference assignment: requests see old or new
        now = time.time()
        engine = [ENGINE] if ENGINE in snapshot.stored else []  # the kill switch, 0 or 1
        for name in {*previous.pinned, *snapshot.pinned, *snapshot.models, *engine}:
            metrics.MODEL_PINNED.labels(model=name).set(float(name in snapshot.pinned))
        for name, loaded in snapshot.models.items():
            before = previous.models.get(name)
            if before is not None and before.version == loaded.version:
                continue
            metrics.SERVING_MODEL_VERSION.labels(model=name).set(loaded.version)
            if before is not None:  # a new checkpoint: how long from saved to served
                metrics.SERVING_RELOAD_LAG.observe(max(now - loaded.created_ms / 1000, 0.0))
        if previous.champion != snapshot.champion or previous is EMPTY:
            metrics.SERVING_MODEL_INFO.labels(model=previous.champion).set(0)
            metrics.SERVING_MODEL_INFO.labels(model=snapshot.champion).set(1)
            if previous is not EMPTY:
                metrics.SERVING_SWITCHES.inc()
            log_event(log, "champion served", champion=snapshot.champion,
                      previous=previous.champion)  # fmt: skip

    # --- exact versions -----------------------------------------------------------------------
    def version(self, snapshot: Snapshot, name: str, version: int) -> LoadedModel:
        """NAME at exactly VERSION (from the snapshot, or loaded once through the LRU)."""
        loaded = snapshot.models.get(name)
        if loaded is not None and loaded.version == version:
            return loaded
        if name not in snapshot.models:
            raise UnknownModelError(
                "model", f"unknown model {name!r}; servable: {sorted(snapshot.models)}"
            )
        with self._versions_lock:
            scorer = self.versions.get(name, version)
        if scorer is None:
            raise UnknownModelError("version", f"model {name!r} has no stored version {version}")
        return LoadedModel(name, version, snapshot.kinds.get(name, ""), scorer, 0, None)

    # --- the reload thread -------------------------------------------------------------------
    def start(self) -> None:
        """Build the first snapshot, then follow announcements (and poll) on a thread."""
        self.refresh()
        self._thread = threading.Thread(target=self._follow, name="model-reload", daemon=True)
        self._thread.start()

    def _follow(self) -> None:
        announcements = None
        while not self._stop.is_set():
            try:
                if announcements is None:
                    announcements = self.store.listen()
                announced = announcements.get(timeout=self.poll_seconds)
                while announced is not None:  # coalesce a burst into one rebuild
                    announced = announcements.get(timeout=0)
            except TRANSIENT as exc:
                log_event(log, "announcements lost; polling", level=logging.WARNING,
                          error=repr(exc))  # fmt: skip
                announcements = None
                self._stop.wait(self.poll_seconds)
            if not self._stop.is_set():
                self.refresh()
        if announcements is not None:
            announcements.close()

    def stop(self, timeout: float = 5.0) -> None:
        """Stop following; wait at most `timeout` seconds (the thread is a daemon: a
        rebuild stuck on a stalled store does not keep the process alive)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=timeout)
