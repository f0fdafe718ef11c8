"""An online model together with the stream position it covers, and its fenced saves.

Exactly-once rests on two rules kept here:

* a model's offsets advance only when the message at that offset has been applied to
  its weights (or skipped as a dead letter), in offset order per partition, so the
  offsets saved with the weights are exactly the messages those weights include;
* a save names the version this worker last loaded or saved and that save's identity
  (`expected_version`, `expected_write_id`); the store refuses it when someone else
  wrote since (`FencingError`), even if a lost write let them reuse our number (ABA).

Scaling: raw phi on the wire is not standardized. A model holds whole messages back
until it has seen `scaler_rows` triplets, fits its `Standardizer` on their phi1 rows then
their phi2 rows (each triplet's gathered phi[p1], phi[p2]), freezes it, then learns the
held messages in order. Which messages are held
depends only on the log, so a restarted worker fits the identical scaler; and a model
with no scaler yet is never saved (its stored position stays at the start), so a crash
while messages are held loses nothing.

Start: a model's weights start at zero when its scaler is frozen, whatever the triplets
are (judged, or the click join's IPS-weighted click pairs). `eval clicks` used to start
its click pair learners elsewhere, at Uni-Con's direction scaled so its shown scores
spread by the hinge's margin of 1, because at Uni-Con's own scale most shown pairs lie
beyond the margin and a hinge rule then takes only the step against the current order
of a pair learned both ways (two equally attractive results under IPS), flattening what
Uni-Con knew. Zero is inside every pair's margin from the first update, which is the
regime that start was built to reach, so it is kept here: one start for every stream,
fitted on nothing the model has not seen (an engine's features need no calibration
queries), and a model that is not served before it has learned (the champion serves
until a race says otherwise). `eval clicks` now measures this start
(`rankstream.evals.click_deployment`).
"""

from __future__ import annotations

import hashlib
import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from rankstream.ranking.online import OnlineRanker, learn_many_together, uni_con_direction
from rankstream.ranking.scaling import Standardizer
from rankstream.ranking.triplets import TripletBlock, pair_table
from rankstream.stream.store import Fence, ModelStore, StoredModel, check_kind, fenced_save
from rankstream.workers.online_worker_options import DEFAULT_SCALER_ROWS

MODEL_KIND = "online"


@dataclass(frozen=True)
class _Rows:
    """One message's triplets in normalized form: x_i = phi[p1[i]] - phi[p2[i]], label y_i,
    importance weight w_i (None: all 1, the unweighted rule bit for bit)."""

    phi: np.ndarray
    p1: np.ndarray
    p2: np.ndarray
    y: np.ndarray
    w: np.ndarray | None = None

    @property
    def clicks(self) -> bool:
        """Click triplets: an importance-weighted block is the click join's (judged
        feedback is unweighted, triplets version 2), which the linear rules learn in
        their regularized reading (`ranking.online`, "Click triplets")."""
        return self.w is not None


@dataclass
class _Held:
    """A message waiting for the scaler: its position and its rows (None = skip only)."""

    topic: str
    partition: int
    offset: int
    rows: _Rows | None


@dataclass
class TrackedModel:
    """One online ranker (created once its scaler is frozen) and the offsets it covers."""

    name: str
    algo: str
    params: dict[str, float] = field(default_factory=dict)  # OnlineRanker keyword args
    ranker: OnlineRanker | None = None  # None until the scaler is fitted
    scaler_rows: int = DEFAULT_SCALER_ROWS
    fence: Fence = field(default_factory=Fence)  # the save last loaded or made here
    offsets: dict[str, dict[int, int]] = field(default_factory=dict)
    dirty: bool = False
    _held: list[_Held] = field(default_factory=list)
    _held_rows: int = 0

    @property
    def version(self) -> int:
        """Version last loaded or saved by this process; 0 = never stored."""
        return self.fence.version

    # --- position -------------------------------------------------------------------
    def next_offset(self, topic: str, partition: int) -> int | None:
        """The next offset this model has not yet covered; None = from the beginning."""
        return self.offsets.get(topic, {}).get(partition)

    def covers(self, topic: str, partition: int, offset: int) -> bool:
        next_offset = self.next_offset(topic, partition)
        return next_offset is not None and offset < next_offset

    def _advance(self, topic: str, partition: int, offset: int) -> None:
        self.offsets.setdefault(topic, {})[partition] = offset + 1
        self.dirty = True

    @property
    def held_rows(self) -> int:
        return self._held_rows

    @property
    def triplets_seen(self) -> int:
        return 0 if self.ranker is None else self.ranker.n_seen

    @property
    def n_updates(self) -> int:
        return 0 if self.ranker is None else self.ranker.n_updates

    @property
    def weights(self) -> np.ndarray:
        return np.zeros(0) if self.ranker is None else self.ranker.weights

    @property
    def checkpointable(self) -> bool:
        """Saved only once the scaler is frozen: before that nothing has been learned."""
        return self.dirty and self.ranker is not None

    # --- learning -------------------------------------------------------------------
    def learn(
        self,
        topic: str,
        partition: int,
        offset: int,
        phi1: np.ndarray,
        phi2: np.ndarray,
        y: np.ndarray,
        x: np.ndarray | None = None,
    ) -> int:
        """Apply one message's rows in the pair layout; returns its weight updates.

        The pair-layout entry (tests, warm-ups): the worker and replay learn
        `TripletBlock`s through `learn_together`. `x` is accepted for older callers
        and ignored: x = phi1 - phi2 is formed inside the compiled loop.

        Raises ValueError (model and offsets unchanged) when the ranker rejects the
        batch, e.g. a row that would make the weights non-finite.
        """
        rows = _Rows(*pair_table(phi1, phi2), np.asarray(y))
        return self._apply(topic, partition, offset, rows)

    def skip(self, topic: str, partition: int, offset: int) -> None:
        """Move past a message that holds nothing to learn (dead-lettered)."""
        if self._held:
            self._held.append(_Held(topic, partition, offset, None))
        else:
            self._advance(topic, partition, offset)

    def _fit_scaler_when_ready(self) -> int:
        if self._held_rows < self.scaler_rows:
            return 0
        held_rows = [h.rows for h in self._held if h.rows is not None]
        scaler = Standardizer().fit(
            np.vstack([r.phi[r.p1] for r in held_rows] + [r.phi[r.p2] for r in held_rows])
        )
        self.ranker = OnlineRanker(algo=self.algo, scaler=scaler, **self.params)
        # click triplets' anchor: Uni-Con over the held messages' candidates (their tables)
        candidates = np.vstack([np.asarray(r.phi, dtype=np.float64) for r in held_rows])
        self.ranker.anchor_towards(uni_con_direction(scaler, candidates))
        held, self._held, self._held_rows = self._held, [], 0
        updates = 0
        for h in held:
            if h.rows is None:
                self._advance(h.topic, h.partition, h.offset)
                continue
            try:
                updates += self._apply(h.topic, h.partition, h.offset, h.rows)
            except ValueError:
                self._advance(h.topic, h.partition, h.offset)  # rejected by the ranker
        return updates

    def _hold(self, topic: str, partition: int, offset: int, rows: _Rows) -> int:
        self._held.append(_Held(topic, partition, offset, rows))
        self._held_rows += len(rows.y)
        return self._fit_scaler_when_ready()

    def _apply(self, topic: str, partition: int, offset: int, rows: _Rows) -> int:
        result = _learn_rows([self], topic, partition, offset, rows)[0]
        if isinstance(result, ValueError):
            raise result
        return result

    # --- state ----------------------------------------------------------------------
    def to_state(self) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
        """The ranker's own state (weights, scaler, counters) plus `triplets_seen`.

        Anything that reads the store rebuilds the ranker with
        `OnlineRanker.from_state(stored.meta, stored.arrays)`.
        """
        if self.ranker is None:
            raise ValueError(f"model {self.name!r} has no scaler yet; nothing to save")
        meta, arrays = self.ranker.to_state()
        meta.update(triplets_seen=int(self.ranker.n_seen), scaler_rows=self.scaler_rows)
        return meta, arrays

    @classmethod
    def from_stored(cls, stored: StoredModel) -> TrackedModel:
        """Rebuild a model exactly as it was saved (weights, scaler, offsets, counters)."""
        check_kind(stored, MODEL_KIND)
        ranker = OnlineRanker.from_state(stored.meta, stored.arrays)
        if ranker.scaler is None:
            raise ValueError(f"stored model {stored.name!r} has no scaler")
        return cls(
            name=stored.name,
            algo=ranker.algo,
            params=ranker.params,
            ranker=ranker,
            scaler_rows=int(stored.meta.get("scaler_rows", DEFAULT_SCALER_ROWS)),
            fence=Fence.of(stored),
            offsets={t: dict(parts) for t, parts in stored.offsets.items()},
        )


def learn_together(
    models: list[TrackedModel], topic: str, partition: int, offset: int, block: TripletBlock
) -> list[int | ValueError]:
    """One message's block to several models: per model, its weight updates or the
    ValueError it raised (that model and its offsets unchanged; the others learn
    regardless).

    Models whose scaler is fitted share one compiled pass over the triplets in their
    normalized form (`ranking.online.learn_many_together`: x = phi[p1] - phi[p2] is
    gathered inside the loop; bit-identical to one `learn_many` each); the others hold
    the message until their scaler can be fitted. A weighted block (triplets version 3,
    the click join's) holds click triplets: each rule learns it in its importance-weighted
    form, regularized towards Uni-Con's direction (`ranking.online`, "Click triplets");
    an unweighted one exactly as before weights existed.
    """
    rows = _Rows(block.phi, block.p1, block.p2, block.y(), block.weight)
    return _learn_rows(models, topic, partition, offset, rows)


def _learn_rows(
    models: list[TrackedModel], topic: str, partition: int, offset: int, rows: _Rows
) -> list[int | ValueError]:
    """`learn_together` for rows in normalized form (from a block or the pair layout)."""
    results: dict[int, int | ValueError] = {}
    ready = [m for m in models if m.ranker is not None]
    if ready:
        before = [m.n_updates for m in ready]
        errors = (
            learn_many_together(
                [m.ranker for m in ready],
                rows.phi,
                rows.p1,
                rows.p2,
                rows.y,
                rows.w,
                clicks=rows.clicks,
            )
            if len(rows.y)
            else [None] * len(ready)
        )
        for model, updates_before, error in zip(ready, before, errors, strict=True):
            if error is None:
                model._advance(topic, partition, offset)
                results[id(model)] = model.n_updates - updates_before
            else:
                results[id(model)] = error
    for model in models:
        if model.ranker is None:  # after the ready ones: fitting here makes it ready
            results[id(model)] = model._hold(topic, partition, offset, rows)
    return [results[id(m)] for m in models]


def load_or_create(
    store: ModelStore,
    name: str,
    params: dict[str, float],
    scaler_rows: int,
    algo: str | None = None,
) -> TrackedModel:
    """The stored model with its offsets, or a fresh one that starts at the beginning.

    The model name is its algorithm (`opr`, `opar1`, ...) unless `algo` says otherwise
    (per-partition models, `workers.scaleout`). A stored model keeps the
    hyper-parameters it was trained with; `params` only shape a new one.
    """
    stored = store.load(name)
    if stored is None:
        return TrackedModel(
            name=name, algo=algo or name, params=dict(params), scaler_rows=scaler_rows
        )
    return TrackedModel.from_stored(stored)


def save_checkpoint(store: ModelStore, model: TrackedModel, writer: str) -> int:
    """Save weights with the offsets they cover, fenced on the save we last saw.

    FencingError when the stored model is not the one this process last loaded or
    saved (`stream.store.fenced_save`, which also recognises a save of ours that
    landed although it raised).
    """
    meta, arrays = model.to_state()
    meta["writer"] = writer
    meta["checkpoint_ms"] = time.time_ns() // 1_000_000
    version = fenced_save(
        store,
        model.name,
        model.fence,
        kind=MODEL_KIND,
        meta=meta,
        arrays=arrays,
        offsets=model.offsets,
    )
    model.dirty = False
    # here (+0.12 s of prometheus_client): direct replay imports this module, never saves
    from rankstream.telemetry import prometheus_metrics as metrics

    metrics.mark_checkpoint(model.name)
    return version


def weights_sha256(weights: np.ndarray) -> str:
    """sha256 of the weights as float64 little-endian bytes: equal iff bit-identical."""
    return hashlib.sha256(np.ascontiguousarray(weights, dtype="<f8").tobytes()).hexdigest()


def summarize(stored: StoredModel) -> dict[str, Any]:
    """`model show`'s summary; offsets as {topic: {"partition": next_offset}}.

    Models without a "weights" array (batch models) report weights_sha256 None.
    """
    weights = stored.arrays.get("weights")
    return {
        "name": stored.name,
        "version": stored.version,
        "n_updates": int(stored.meta.get("n_updates", 0)),
        "triplets_seen": int(stored.meta.get("triplets_seen", 0)),
        "offsets": {
            topic: {str(p): int(o) for p, o in sorted(parts.items())}
            for topic, parts in stored.offsets.items()
        },
        "weights_sha256": None if weights is None else weights_sha256(weights),
    }
