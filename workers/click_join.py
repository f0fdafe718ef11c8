"""The click join: impressions + clicks -> inverse-propensity-weighted triplets.

`ClickJoinHandler` runs on the stream runtime (`workers.runtime`) like the online worker:
`rankstream worker click-join` runs it as a process, the embedded `rankstream serve` on a
thread. It reads the impressions and clicks topics, joins them by impression id in event
time (`stream.click_window`: the window, default 30 minutes, `RANKSTREAM_CLICK_WINDOW_SECONDS`;
clicks that overtook their impression wait `RANKSTREAM_CLICK_GRACE_SECONDS`), and for each
closed session emits the preference pairs of its clicks (`ranking.click_pairs`: by default
a click over every other shown result, the pairs whose IPS-weighted expectation is
unbiased; with `losers="skips"` over the skipped results above it and the next unclicked
one below) as triplets (the clicked result rel 1, the other
rel 0) on the triplets topic, weighted 1 / P(examined at the clicked rank) (wire version
3), so OPR..AROW learn from clicks unchanged. Late clicks, clicks for unknown impressions
and for candidates their impression did not show are dead-lettered with their reason and
counted (`rankstream_dead_letters_total{reason}`). A stream quiet for a window and a grace
of wall time closes its open sessions (`tick`): event time alone would keep the last
sessions of a quiet stream waiting for the next traffic.

Impression learners. Each closed session also teaches the learners that learn from
impressions and clicks directly (`ranking.learners.impression_learners`: PDGD; option
`--learn`), on the impression's candidates in displayed order and its clicks. A model
starts from the stored Uni-Con (its scaler and weights; fitted on the first impression
when the store has none), is saved in the join's checkpoint (so it learns every session
exactly once, like the pairs), and is published at each checkpoint that changed it as
store model `<name>` of kind "plackett_luce" (`selection.scoring`), which serve shows as
Plackett-Luce samples. PDGD's rho is computed with the model's current scores, also for
sessions another model served: the paper's update on its own samples, and the same
pairs weighed by how its model would have swapped them on anyone else's.

Propensities. The weights come from the join's current estimate
(`ranking.propensity.PropensityEstimator`, from the impressions a server randomized,
`randomize`: the top shuffled or ranks 1 and k swapped, read back from each impression's
`intervention`; the 1/rank prior until the data outweigh it), taken before the
session itself is counted. Propensities are clipped below at `min_propensity` (0.1 by
default: no pair weighs more than 10). The estimate is measured at ranks 1..10 only and
extrapolated below, and 1/p of a small, noisy p is where IPS variance comes from; a click
at rank 50 under the 1/rank prior would weigh 50 and one pair would outweigh dozens of
judged ones in OPR's unbounded step (Joachims et al. clip for the same reason). The
estimate is published at each checkpoint as store model `propensities` (kind
"propensities", one version per change) and as `rankstream_click_propensity{rank}`.

Counterfactual estimates. Each batch of closed sessions is also added to the live
counterfactual click-DCG@10 of every stored model, the logged order and the engine's
(`selection.live_estimates`, IPS and SNIPS with intervals, weighted by the same
propensities and clipping as the pairs): this is where the logged impressions meet their
clicks, once each. The running moments are saved in the join's checkpoint (so a session
counts exactly once, like its pairs) and published at each checkpoint that changed them
as the record `counterfactual` (`/v1/models`) and as `rankstream_counterfactual_*`.

Exactly once, with kafka-python (no transactions): the output is derived only from state
committed with the offsets. The pairs of the sessions an input message closed become
output messages (one, or several cut at `OUTPUT_MESSAGE_BYTES` of phi: a function of the
log alone, so a restarted join cuts its output where an uninterrupted one does) in an
*outbox* in memory; a checkpoint saves the window, the estimator, the input offsets and
the outbox in one fenced store write, and only then sends the outbox (acks=all) and
flushes. Each output message has a deterministic key `<name>:<n>` (n counts the join's
messages, saved with the state). A join that restarts with a non-empty outbox does not
know how much of it reached Kafka: it reads the triplets topic from the end offsets
recorded when those messages entered the outbox and sends only the ones whose key it
does not find. Inputs after the checkpoint are re-read and re-joined; what they produced
before the crash was never sent. The residual gap: a send still in a dead process's
socket buffer when the successor reads the topic (the successor starts in seconds, the
send lands in milliseconds), and a zombie join woken after its successor re-sent its
outbox (fencing stops its next save, not a send it has already begun). Dead letters are
at least once, keyed "topic:partition:offset" (as the online worker's)."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

import numpy as np

from rankstream.ranking import learners
from rankstream.ranking.baselines import UNI_CON, UniCon
from rankstream.ranking.click_pairs import click_pairs
from rankstream.ranking.propensity import PropensityEstimator
from rankstream.ranking.scaling import Standardizer
from rankstream.ranking.triplets import TripletBlock
from rankstream.selection.click_race import (
    INTERLEAVING_KIND,
    INTERLEAVING_RECORD,
    REOPEN_FACTOR,
    InterleavingRace,
    learned_count,
    session_outcomes,
)
from rankstream.selection.engine_ranking import ENGINE, guardrail_evidence
from rankstream.selection.judged_race import (
    CLICKS,
    ChampionPolicy,
    publish_champion,
    stored_champion,
)
from rankstream.selection.live_estimates import (
    COUNTERFACTUAL_KIND,
    COUNTERFACTUAL_RECORD,
    LiveEstimates,
)
from rankstream.selection.scoring import PLACKETT_LUCE_KIND
from rankstream.stream.click_schema import (
    Click,
    Decoded,
    Impression,
    decode_clicks,
    decode_impressions,
    encode_clicks,
)
from rankstream.stream.click_window import ClickWindow, Closed, PendingClick, Rejected
from rankstream.stream.errors import TRANSIENT
from rankstream.stream.message_groups import within_budget
from rankstream.stream.schema import (
    BAD_SCHEMA,
    WEIGHTED_TRIPLETS_VERSION,
    SchemaError,
    encode_triplets,
)
from rankstream.stream.settings import Settings
from rankstream.stream.store import WIDTH_KEY, Fence, ModelStore, fenced_save
from rankstream.stream.transport import Message, TopicPartition, Transport
from rankstream.telemetry import prometheus_metrics as metrics
from rankstream.telemetry.structured_log import get_logger, log_event
from rankstream.workers.click_join_options import JoinOptions
from rankstream.workers.runtime import Handler, OptionsRuntime, StreamRuntime

log = get_logger("rankstream.worker.click_join")

JOIN_KIND = "click-join"
PROPENSITIES_MODEL = "propensities"
PROPENSITIES_KIND = "propensities"
_SCAN_DEADLINE_S = 60.0
ESTIMATE_BATCH = 256
"""Closed sessions the live estimates take at once (and at every checkpoint)."""
OUTPUT_MESSAGE_BYTES = 256 * 1024
"""An output message's phi budget: well under Kafka's 1 MB message limit at any width."""
T = TypeVar("T")


@dataclass
class JoinCounters:
    impressions: int = 0  # impressions read (new ones)
    clicks: int = 0  # click rows read (session-over rows included)
    sessions: int = 0  # sessions closed
    triplets: int = 0  # triplets emitted (into the outbox)
    sent: int = 0  # output messages sent and acknowledged
    dead_letters: int = 0
    stale_interleavings: int = 0  # interleaved sessions drafted against an earlier champion
    learned: int = 0  # sessions the impression learners learned (each learner counts)
    refused: int = 0  # sessions an impression learner refused (non-finite update; logged)

    def to_json(self) -> dict[str, int]:
        return dict(self.__dict__)


def click_query_id(impression: Impression) -> int:
    """The query id of an impression's triplets: the caller's, else the first 60 bits of
    its id's hex digits (an uuid4 hex), else of its UTF-8 bytes."""
    if impression.query_id is not None:
        return int(impression.query_id)
    digits = impression.impression_id[:15]
    try:
        return int(digits, 16)
    except ValueError:
        return int.from_bytes(impression.impression_id.encode()[:7].ljust(7, b"\0"), "big")


class ClickJoinHandler(Handler):
    """The click join on the stream runtime (see the module docstring)."""

    name = "click-join"

    def __init__(self, settings: Settings, options: JoinOptions | None = None) -> None:
        self.settings = settings
        self.options = options or JoinOptions()
        self.window = ClickWindow(settings.click_window_s, settings.click_grace_s)
        o = self.options
        self.estimator = PropensityEstimator(o.depth, o.prior_eta, o.prior_clicks)
        self.counters = JoinCounters()
        self.offsets: dict[str, dict[int, int]] = {}
        self.fence = Fence()
        self.propensity_fence = Fence()
        self.next_seq = 0  # seq of the join's next triplet
        self.next_message = 0  # n of the join's next output message
        self.outbox: list[tuple[bytes, bytes]] = []  # (key, value) not yet acknowledged
        self.outbox_triplets: list[int] = []  # the triplets of each outbox message
        self.scan_from: dict[int, int] | None = None  # triplets end offsets before the outbox
        self.maybe_sent = False  # some of the outbox may be in Kafka already
        self.dirty = False
        self._published: list[float] | None = None
        self._hydrate_below: dict[int, int] = {}
        self.policy = ChampionPolicy.from_settings(settings)
        self.race = InterleavingRace(self.policy)  # credited clicks -> the champion
        self.pending_switch: dict[str, Any] | None = None  # decided, not yet in the store
        self.interleaving_fence = Fence()
        self._published_race: dict[str, Any] | None = None
        self.learned: dict[str, Any] = {}  # the impression learners' models by name (PDGD)
        self.learned_fences: dict[str, Fence] = {}
        self._published_learned: dict[str, int] = {}  # updates each model had when published
        self.estimates = LiveEstimates(min_propensity=self.options.min_propensity)
        self.counterfactual_fence = Fence()
        self._published_estimates: dict[str, Any] | None = None
        self.estimating: list[tuple[Impression, np.ndarray, np.ndarray]] = []  # not added yet
        self.clock: Callable[[], float] = time.monotonic  # wall time of the quiet rule
        self._last_input = self.clock()

    # --- the runtime's calls --------------------------------------------------------------
    def topics(self) -> dict[str, int]:
        n = self.options.partitions
        return {self.settings.impressions_topic: n, self.settings.clicks_topic: n}

    def extra_topics(self) -> dict[str, int]:
        return {self.settings.triplets_topic: 1, self.settings.dead_letter_topic: 1}

    def load(self, runtime: StreamRuntime) -> None:
        """The stored join (window, estimator, offsets, outbox), or a fresh one."""
        store = runtime.store
        stored = store.load(self.options.name)
        self.propensity_fence = Fence.of(store.load(PROPENSITIES_MODEL))
        self.interleaving_fence = Fence.of(store.load(INTERLEAVING_RECORD))
        self.counterfactual_fence = Fence.of(store.load(COUNTERFACTUAL_RECORD))
        self.estimates.refresh(store, self.settings.phi_dim)
        for name in self.options.taught:
            learners.impression_model(name).warm_up()  # its compiled loop, before traffic
            published = store.load(name)
            if published is not None and published.kind != PLACKETT_LUCE_KIND:
                raise ValueError(
                    f"store model {name!r} is a {published.kind!r}, not an impression "
                    f"learner's {PLACKETT_LUCE_KIND!r}"
                )
            self.learned_fences[name] = Fence.of(published)
        if stored is None:
            self._follow_champion(store)
            return
        if stored.kind != JOIN_KIND:
            raise ValueError(f"store model {stored.name!r} is a {stored.kind!r}, not a click join")
        self.fence = Fence.of(stored)
        self.offsets = {t: dict(p) for t, p in stored.offsets.items()}
        state = stored.meta["join"]
        self.window = ClickWindow.from_state(state["window"])
        self.estimator = PropensityEstimator.from_state(state["estimator"])
        self.counters = JoinCounters(**state["counters"])
        self.next_seq, self.next_message = int(state["next_seq"]), int(state["next_message"])
        keys = state["outbox_keys"]
        values = _split(stored.arrays["outbox"], stored.arrays["outbox_ends"])
        self.outbox = list(zip((k.encode() for k in keys), values, strict=True))
        self.outbox_triplets = [int(n) for n in state["outbox_triplets"]]
        self.scan_from = None if state["scan_from"] is None else {
            int(p): int(o) for p, o in state["scan_from"].items()
        }  # fmt: skip
        self.maybe_sent = bool(self.outbox)
        for name, meta in state.get("learned", {}).items():
            if name in self.options.taught:
                prefix = f"learned.{name}."
                arrays = {k[len(prefix) :]: v for k, v in stored.arrays.items()
                          if k.startswith(prefix)}  # fmt: skip
                self.learned[name] = learners.impression_model_from_state(meta, arrays)
                self._published_learned[name] = -1  # publish what was restored once
        saved = state.get("interleaving", {})
        self.race = InterleavingRace.from_state(self.policy, saved.get("race", {}))
        self.race.export()
        self.pending_switch = saved.get("pending_switch")
        self.estimates.restore(state.get("counterfactual", {}))
        self.estimates.export()
        self._publish_switch(store)
        self._follow_champion(store)
        log_event(
            log,
            "join loaded",
            version=stored.version,
            window_sessions=len(self.window.sessions),
            outbox=len(self.outbox),
            **self.counters.to_json(),
        )

    def positions(self, partitions: Sequence[TopicPartition]) -> dict[TopicPartition, int | None]:
        """Clicks: the next offset saved. Impressions: the oldest open session's, so the
        impressions of the restored window are re-read (`ClickWindow.hydrate`)."""
        oldest = self.window.resume_offsets(self.settings.impressions_topic)
        found: dict[TopicPartition, int | None] = {}
        for topic, partition in partitions:
            stored = self.offsets.get(topic, {}).get(partition)
            if topic == self.settings.impressions_topic and stored is not None:
                self._hydrate_below[partition] = stored
                stored = min(stored, oldest.get(partition, stored))
            found[(topic, partition)] = stored
        return found

    def process(self, runtime: StreamRuntime, messages: Sequence[Message]) -> int:
        records = 0
        if messages:
            self._last_input = self.clock()
        for message in messages:
            if message.topic == self.settings.impressions_topic:
                if message.offset < self._hydrate_below.get(message.partition, 0):
                    self._hydrate(message)
                    self._emit(runtime)  # a restored session may be closed and now whole
                    continue
                records += self._impressions(runtime, message)
            else:
                records += self._clicks(runtime, message)
            self.offsets.setdefault(message.topic, {})[message.partition] = message.offset + 1
            self.dirty = True
            self._emit(runtime)
        return records

    def tick(self, runtime: StreamRuntime) -> None:
        """A quiet stream's last sessions: when nothing has been read for a window and a
        grace of wall time, every open session is over (`ClickWindow.close_all`)."""
        window = self.window
        if not (window.sessions or window.early):
            return
        quiet = self.clock() - self._last_input
        if quiet < window.window_s + window.grace_s:
            return
        sessions = len(window.sessions)
        try:
            self._rejected(runtime, window.close_all())
            self.dirty = True
            self._emit(runtime)
        except TRANSIENT as exc:  # not the runtime's retry of a tick: the window is half closed
            raise RuntimeError(f"closing a quiet stream's sessions failed: {exc!r}") from exc
        log_event(log, "quiet: sessions closed", sessions=sessions, quiet_seconds=round(quiet, 1))

    def checkpoint(self, runtime: StreamRuntime) -> dict[str, Any]:
        """Save the join with its offsets and outbox, then send the outbox (module doc).
        Whatever entered the outbox made the join dirty, so it is saved before it is sent."""
        saved: dict[str, Any] = {}
        self._estimate()  # the sessions in this save are in its estimates
        if self.dirty:
            if self.outbox and self.scan_from is None:
                self.scan_from = runtime.transport.end_offsets(self.settings.triplets_topic)
            self._save(runtime.store, runtime.writer)
            saved[self.options.name] = self.fence.version
            self.dirty = False
        if self.outbox:
            self._send_outbox(runtime)
            saved["sent"] = self.counters.sent
        self._publish_switch(runtime.store)
        self._follow_champion(runtime.store)
        self._reopen_refused(runtime.store)
        race = self._publish_race(runtime.store, runtime.writer)
        if race is not None:
            saved[INTERLEAVING_RECORD] = race
        version = self._publish_propensities(runtime.store, runtime.writer)
        if version is not None:
            saved[PROPENSITIES_MODEL] = version
        saved.update(self._publish_learned(runtime.store, runtime.writer))
        estimates = self._publish_estimates(runtime.store, runtime.writer)
        if estimates is not None:
            saved[COUNTERFACTUAL_RECORD] = estimates
        return saved

    def summary(self) -> dict[str, Any]:
        return {
            **self.counters.to_json(),
            "window_sessions": len(self.window.sessions),
            "waiting_clicks": self.window.waiting,
            "propensities": [round(p, 4) for p in self.propensities().tolist()],
        }

    # --- input ----------------------------------------------------------------------------
    def _hydrate(self, message: Message) -> None:
        try:
            decoded = decode_impressions(message.value, width=self.settings.phi_dim)
        except SchemaError:
            return  # it was dead-lettered the first time it was read
        for row, impression in _rows(decoded):
            self.window.hydrate(impression, (message.topic, message.partition, message.offset, row))

    def _decoded(
        self, runtime: StreamRuntime, message: Message, decode: Callable[[bytes], Any]
    ) -> Any:
        """`decode(message.value)`; a bad message, or each bad row, dead-lettered with its
        reason (None for a bad message)."""
        try:
            decoded = decode(message.value)
        except SchemaError as exc:
            runtime.dead_letter(message, exc.reason, exc.detail, counted_in=self.counters)
            return None
        for row, reason, detail in decoded.rejects:
            runtime.dead_letter(message, reason, detail, [row], counted_in=self.counters)
        return decoded

    def _impressions(self, runtime: StreamRuntime, message: Message) -> int:
        width = self.settings.phi_dim
        decoded = self._decoded(runtime, message, lambda v: decode_impressions(v, width=width))
        if decoded is None:
            return 0
        for row, impression in _rows(decoded):
            if self.window.knows(impression.impression_id):
                runtime.dead_letter(
                    message,
                    BAD_SCHEMA,
                    "impression id seen before",
                    [row],
                    counted_in=self.counters,
                )
                continue
            source = (message.topic, message.partition, message.offset, row)
            self._rejected(runtime, self.window.add_impression(impression, source))
        self.counters.impressions += len(decoded.records)
        return len(decoded.records)

    def _clicks(self, runtime: StreamRuntime, message: Message) -> int:
        decoded = self._decoded(runtime, message, decode_clicks)
        if decoded is None:
            return 0
        for row, click in _rows(decoded):
            at = click.time if click.time is not None else message.timestamp_ms / 1000.0
            source = (message.topic, message.partition, message.offset, row)
            pending = PendingClick(click.candidate_id, at, source)
            self._rejected(runtime, self.window.add_click(click.impression_id, pending))
        self.counters.clicks += len(decoded.records)
        return len(decoded.records)

    # --- output ---------------------------------------------------------------------------
    def propensities(self) -> np.ndarray:
        """The current estimate at ranks 1..depth."""
        return self.estimator.propensities(self.options.depth)

    def _emit(self, runtime: StreamRuntime) -> None:
        """Closed sessions -> their pairs as output messages in the outbox (`_seal`);
        unknown clicks -> dead letters."""
        unknown, ready = self.window.unknown(), self.window.ready()
        if unknown or ready:
            self.dirty = True  # the window changed: the next checkpoint saves it first
        self._rejected(runtime, unknown)
        blocks = []
        counts = _SessionCounts()
        for closed in ready:
            self._rejected(runtime, closed.rejects)
            self._credit(closed)
            self._teach(runtime.store, closed)
            counts.add(closed.clicked)
            p = self.estimator.propensities(len(closed.clicked))  # before the session counts
            self.estimating.append((closed.impression, closed.clicked, p))
            block = self._pairs(closed, p)
            if block is not None:
                blocks.append(block)
        counts.export()
        if len(self.estimating) >= ESTIMATE_BATCH:
            self._estimate()
        if ready:
            lag = time.time() - ready[-1].impression.time
            metrics.JOIN_LAG_SECONDS.set(max(0.0, lag))
        metrics.JOIN_WAITING.set(len(self.window.sessions))
        self._seal(blocks)

    def _seal(self, blocks: list[TripletBlock]) -> None:
        """Sessions' pairs -> output messages in the outbox, in order, each at most
        `OUTPUT_MESSAGE_BYTES` of phi (one session's table always fits one message)."""
        for message in within_budget(blocks, lambda block: block.phi.nbytes,
                                     OUTPUT_MESSAGE_BYTES):  # fmt: skip
            self._post(message)

    def _post(self, blocks: list[TripletBlock]) -> None:
        """One output message of `blocks` into the outbox, keyed by the join's name and n."""
        block = TripletBlock.concatenate(blocks).compact()  # once a message, not a session
        key = f"{self.options.name}:{self.next_message}".encode()
        # version 3 even when every weight is 1 (only rank-1 clicks): a version-3 message
        # is click triplets, which the online worker learns in their regularized reading
        data = encode_triplets(block, version=WEIGHTED_TRIPLETS_VERSION)
        self.outbox.append((key, data))
        self.outbox_triplets.append(len(block))
        self.next_message += 1
        self.counters.triplets += len(block)

    def _pairs(self, closed: Closed, propensities: np.ndarray) -> TripletBlock | None:
        """One session's pairs (None without any), weighted by `propensities` (the
        estimate before this session); counts it in the estimator."""
        impression, clicked = closed.impression, closed.clicked
        pairs = click_pairs(clicked, propensities, self.options.min_propensity,
                            self.options.losers)  # fmt: skip
        self.estimator.observe(impression.intervention, clicked)
        self.counters.sessions += 1
        if not len(pairs):
            return None
        seq = self.next_seq + np.arange(len(pairs), dtype=np.int64)
        self.next_seq += len(pairs)
        return TripletBlock(
            seq=seq,
            query_id=np.full(len(pairs), click_query_id(impression), dtype=np.int64),
            p1=pairs.winner.astype(np.int32),
            p2=pairs.loser.astype(np.int32),
            rel1=np.ones(len(pairs), np.int8),
            rel2=np.zeros(len(pairs), np.int8),
            image_id=impression.candidate_ids,
            phi=impression.phi,
            weight=pairs.weight.astype(np.float32),
        )

    # --- impression learners -----------------------------------------------------------
    def _teach(self, store: ModelStore, closed: Closed) -> None:
        """Each impression learner learns the session: its candidates in displayed order
        and their clicks. A refused update (non-finite) leaves the model unchanged."""
        impression = closed.impression
        ranking = np.arange(len(closed.clicked))
        for name in self.options.taught:
            model = self.learned.get(name)
            if model is None:
                model = self.learned[name] = self._new_model(name, store, impression.phi)
            try:
                model.learn(impression.phi, ranking, closed.clicked)
            except ValueError as exc:
                self.counters.refused += 1
                log_event(log, "session refused", model=name,
                          impression_id=impression.impression_id, error=str(exc))  # fmt: skip
                continue
            self.counters.learned += 1

    def _new_model(self, name: str, store: ModelStore, phi: np.ndarray) -> Any:
        """A fresh model at Uni-Con: the stored one's scaler and weights, else Uni-Con
        fitted on this impression's candidates (a store without Uni-Con yet)."""
        stored = store.load(UNI_CON)
        if stored is not None and stored.meta.get("kind") == UniCon.kind:
            unicon = UniCon.from_state(stored.meta, stored.arrays)
            if unicon.weights.shape == (phi.shape[1],) and unicon.scaler_ is not None:
                return learners.impression_model(name, scaler=unicon.scaler_,
                                                 warm_start=unicon.weights)  # fmt: skip
        unicon = UniCon(scaler=Standardizer().fit(np.asarray(phi, dtype=np.float64)))
        return learners.impression_model(name, scaler=unicon.scaler_, warm_start=unicon.weights)

    def _publish_learned(self, store: ModelStore, writer: str) -> dict[str, int]:
        """A new version of each impression learner's model that learned since its last
        one (after the checkpoint that holds it was saved)."""
        published: dict[str, int] = {}
        for name, model in self.learned.items():
            if self._published_learned.get(name) == model.n_updates:
                continue
            meta, arrays = model.to_state()
            meta.update({"writer": writer, "source": self.options.name,
                         WIDTH_KEY: self.settings.phi_dim})  # fmt: skip
            fence = self.learned_fences.setdefault(name, Fence())
            version = fenced_save(store, name, fence, kind=PLACKETT_LUCE_KIND, meta=meta,
                                  arrays=arrays, offsets={})  # fmt: skip
            self._published_learned[name] = model.n_updates
            metrics.MODEL_VERSION.labels(model=name).set(version)
            published[name] = version
        return published

    # --- interleaving -------------------------------------------------------------------
    def _credit(self, closed: Closed) -> None:
        """An interleaved session's outcomes into the race (`selection.click_race`); a
        decided switch waits for the checkpoint that saves it (`_publish_switch`)."""
        impression = closed.impression
        if impression.teams is None or len(impression.team_models) < 2:
            return
        if impression.team_models[0] != self.race.incumbent:
            self.counters.stale_interleavings += 1  # drafted against an earlier champion
            return
        previous = self.race.incumbent
        outcomes = session_outcomes(impression.team_models, impression.teams, closed.clicked)
        for challenger, value in outcomes.items():
            version = impression.model_versions.get(challenger)
            if challenger != previous and self.race.observe(challenger, [value],
                                                            version) is not None:  # fmt: skip
                evidence = guardrail_evidence(previous, challenger, self.race.decided, CLICKS)
                self.pending_switch = {"champion": challenger, "previous": previous,
                                       "evidence": evidence}  # fmt: skip
                log_event(log, "champion switched", decided_by=CLICKS, incumbent=previous,
                          **self.race.decided)  # fmt: skip
                return  # the other challengers' outcomes were against the old champion

    def _publish_switch(self, store: ModelStore) -> None:
        """Write a saved switch to the champion record (compare-and-set: if the judged
        race switched first, this race follows that champion instead)."""
        switch = self.pending_switch
        if switch is None:
            return
        champion, landed = publish_champion(
            store, switch["champion"], previous=switch["previous"], decided_by=CLICKS,
            evidence=switch["evidence"],
        )  # fmt: skip
        if landed:
            metrics.CHAMPION_SWITCHES.inc()
        self.pending_switch = None
        self.race.follow(champion)
        self.dirty = True

    def _follow_champion(self, store: ModelStore) -> None:
        """Every race starts over when the stored champion is not the race's incumbent."""
        champion = stored_champion(store)
        if champion is not None and self.race.follow(champion):
            log_event(log, "interleaving races restarted", champion=champion)
            self.dirty = True

    def _reopen_refused(self, store: ModelStore) -> None:
        """Each refused challenger (`selection.click_race`, "Refused challengers"): what its
        refused version had learned, read once from the store (its newest version's if
        that one is gone: later, so it re-opens later, never sooner); its race re-opened
        once a newer stored version learned `REOPEN_FACTOR` times as much."""
        if not self.race.refusals:
            return
        latest = store.latest_versions()
        for name, refusal in sorted(self.race.refusals.items()):
            # the engine never changes: its race re-opens when the champion it was refused
            # against changed (learned twice as much), which may have drifted below it
            subject = self.race.incumbent if name == ENGINE else name
            newest = latest.get(subject)
            if newest is None:
                continue
            if refusal["learned"] is None:
                at = (None if name == ENGINE else refusal["version"]) or newest
                stored = store.load_version(subject, at) or store.load(subject)
                if stored is None:
                    continue
                refusal["learned"] = learned_count(stored.meta, stored.version)
                refusal["version"] = stored.version if refusal["version"] is None else at
                self.dirty = True
            if newest <= refusal["version"] or refusal.get("checked") == newest:
                continue
            stored = store.load(subject)
            if stored is None:
                continue
            refusal["checked"] = stored.version  # each new version read once
            learned = learned_count(stored.meta, stored.version)
            if learned > refusal["learned"] and learned >= REOPEN_FACTOR * refusal["learned"]:
                self.race.reopen(name, stored.version, learned)
            self.dirty = True

    def _publish_race(self, store: ModelStore, writer: str) -> int | None:
        """The race's evidence as the record `interleaving` when it changed (/v1/models)."""
        summary = self.race.summary()
        if summary == self._published_race:
            return None
        version = fenced_save(
            store, INTERLEAVING_RECORD, self.interleaving_fence, kind=INTERLEAVING_KIND,
            meta={"writer": writer, "source": self.options.name, "interleaving": summary},
            arrays={}, offsets={},
        )  # fmt: skip
        self._published_race = summary
        return version

    def _estimate(self) -> None:
        """The closed sessions not yet in the live estimates, added at once (one pass per
        model over a batch, not one per session: measured ~0.6 ms CPU a session in batches
        of 256 against ~3.8 ms one at a time, 8 models and 50 results shown, on a busy
        2-core machine)."""
        if self.estimating:
            self.estimates.add(self.estimating)
            self.estimating = []

    def _publish_estimates(self, store: ModelStore, writer: str) -> int | None:
        """The live counterfactual estimates (`selection.live_estimates`) as the record
        `counterfactual` when they changed (`/v1/models`), their gauges; then the stored
        models to estimate from here on (their newest versions)."""
        summary = self.estimates.summary()
        version = None
        if summary != self._published_estimates:
            self.estimates.export()
            version = fenced_save(
                store, COUNTERFACTUAL_RECORD, self.counterfactual_fence,
                kind=COUNTERFACTUAL_KIND,
                meta={"writer": writer, "source": self.options.name, "counterfactual": summary},
                arrays={}, offsets={},
            )  # fmt: skip
            self._published_estimates = summary
        self.estimates.refresh(store, self.settings.phi_dim)
        return version

    def _send_outbox(self, runtime: StreamRuntime) -> None:
        """Send what the last save holds and is not in Kafka yet; flush; empty the outbox."""
        present = self._already_sent(runtime.transport) if self.maybe_sent else set()
        self.maybe_sent = True  # from here a failure leaves the outbox partly sent
        producer, topic = runtime.producer, self.settings.triplets_topic
        sending = [(k, v) for k, v in self.outbox if k not in present]
        for key, value in sending:
            producer.send(topic, value, key=key)
        producer.flush(timeout=runtime.settings.api_deadline_s * 6)
        metrics.TRIPLETS_PRODUCED.inc(self._outbox_triplets(present))
        self.counters.sent += len(sending)
        if present:
            log_event(log, "outbox resent", skipped=len(present), sent=len(sending))
        self.outbox, self.outbox_triplets = [], []
        self.scan_from, self.maybe_sent = None, False
        self.dirty = True  # the next save records the empty outbox

    def _outbox_triplets(self, skipped: set[bytes]) -> int:
        """Triplets in the outbox's messages but the `skipped` ones."""
        return sum(
            n for (key, _), n in zip(self.outbox, self.outbox_triplets, strict=True)
            if key not in skipped
        )  # fmt: skip

    def _already_sent(self, transport: Transport) -> set[bytes]:
        """Keys of the outbox found in the triplets topic past `scan_from`."""
        topic = self.settings.triplets_topic
        wanted = {k for k, _ in self.outbox}
        ends = transport.end_offsets(topic)
        start = self.scan_from or {}
        todo = {p: e for p, e in ends.items() if e > start.get(p, 0)}
        found: set[bytes] = set()
        if not todo:
            return found
        consumer = transport.consumer(None)
        try:
            consumer.assign([(topic, p) for p in todo])
            for p in todo:
                consumer.seek(topic, p, start.get(p, 0))
            deadline = time.monotonic() + _SCAN_DEADLINE_S
            while any(consumer.position(topic, p) < e for p, e in todo.items()):
                if time.monotonic() > deadline:
                    raise TimeoutError(f"reading back {topic} took over {_SCAN_DEADLINE_S:g} s")
                for message in consumer.poll(timeout_ms=500, max_records=500):
                    if message.key in wanted:
                        found.add(message.key)
        finally:
            consumer.close()
        return found

    def _save(self, store: ModelStore, writer: str) -> None:
        values = [v for _, v in self.outbox]
        ends = np.cumsum([len(v) for v in values], dtype=np.int64)
        meta = {
            "writer": writer,
            "checkpoint_ms": time.time_ns() // 1_000_000,
            "join": {
                "window": self.window.to_state(),
                "estimator": self.estimator.to_state(),
                "counters": self.counters.to_json(),
                "next_seq": self.next_seq,
                "next_message": self.next_message,
                "outbox_keys": [k.decode() for k, _ in self.outbox],
                "outbox_triplets": self.outbox_triplets,
                "scan_from": None
                if self.scan_from is None
                else {str(p): o for p, o in self.scan_from.items()},
                "interleaving": {
                    "race": self.race.to_state(),
                    "pending_switch": self.pending_switch,
                },
                "learned": {},
                "counterfactual": self.estimates.to_state(),
            },
        }
        arrays = {
            "outbox": np.frombuffer(b"".join(values), dtype=np.uint8),
            "outbox_ends": ends,
        }
        for name, model in self.learned.items():
            model_meta, model_arrays = model.to_state()
            meta["join"]["learned"][name] = model_meta
            arrays.update({f"learned.{name}.{k}": v for k, v in model_arrays.items()})
        fenced_save(
            store, self.options.name, self.fence, kind=JOIN_KIND, meta=meta, arrays=arrays,
            offsets=self.offsets,
        )  # fmt: skip
        metrics.mark_checkpoint(self.options.name)

    def _publish_propensities(self, store: ModelStore, writer: str) -> int | None:
        """A new version of `propensities` when the estimate changed; the gauges."""
        current = self.propensities()
        for rank, p in enumerate(current[: metrics.PROPENSITY_RANKS].tolist(), start=1):
            metrics.CLICK_PROPENSITY.labels(rank=str(rank)).set(p)
        if self._published == current.tolist():
            return None
        meta = {
            "writer": writer,
            "source": self.options.name,
            "estimator": self.estimator.to_state(),
            "min_propensity": self.options.min_propensity,
        }
        version = fenced_save(
            store, PROPENSITIES_MODEL, self.propensity_fence, kind=PROPENSITIES_KIND, meta=meta,
            arrays={"propensity": current}, offsets={},
        )  # fmt: skip
        self._published = current.tolist()
        return version

    # --- dead letters ---------------------------------------------------------------------
    def _rejected(self, runtime: StreamRuntime, rejected: list[Rejected]) -> None:
        for r in rejected:
            topic, partition, offset, row = r.source
            click = Click(r.impression_id, r.candidate_id, time=r.time)
            original = Message(topic, partition, offset, r.impression_id.encode(),
                               encode_clicks([click]), 0)  # fmt: skip
            runtime.dead_letter(original, r.reason, r.detail, [row], counted_in=self.counters)


class _SessionCounts:
    """The click metrics of a batch of closed sessions, exported once a batch: five
    Prometheus calls a session were a tenth of the join's time (bench clicks)."""

    def __init__(self) -> None:
        self.sessions = self.clicks = 0
        self.reciprocal_rank = 0.0
        self.clicked_at = dict.fromkeys(metrics.CTR_CUTOFFS, 0)

    def add(self, clicked: np.ndarray) -> None:
        ranks = np.flatnonzero(clicked)
        self.sessions += 1
        self.clicks += len(ranks)
        if not len(ranks):
            return
        first = int(ranks[0]) + 1
        self.reciprocal_rank += 1.0 / first
        for k in metrics.CTR_CUTOFFS:
            if first <= k:
                self.clicked_at[k] += 1

    def export(self) -> None:
        if not self.sessions:
            return
        metrics.JOIN_IMPRESSIONS.inc(self.sessions)
        metrics.JOIN_CLICKS.inc(self.clicks)
        metrics.JOIN_RECIPROCAL_RANK.inc(self.reciprocal_rank)
        for k, n in self.clicked_at.items():
            if n:
                metrics.JOIN_CLICKED_AT.labels(k=str(k)).inc(n)


def _rows(decoded: Decoded[T]) -> list[tuple[int, T]]:
    """(row in the message, record) of a decoded message's good records."""
    bad = {row for row, _, _ in decoded.rejects}
    good = [r for r in range(len(decoded.records) + len(bad)) if r not in bad]
    return list(zip(good, decoded.records, strict=True))


def _split(values: np.ndarray, ends: np.ndarray) -> list[bytes]:
    """The outbox's messages from their bytes and end offsets (none for an empty one)."""
    data = np.asarray(values, dtype=np.uint8).tobytes()
    starts = np.concatenate([[0], ends[:-1]]).astype(np.int64)[: len(ends)]
    return [data[int(a) : int(b)] for a, b in zip(starts, ends, strict=True)]


class ClickJoin(OptionsRuntime[JoinOptions, ClickJoinHandler]):
    """The stream runtime running the click join."""

    def build_handler(self, settings: Settings, options: JoinOptions) -> ClickJoinHandler:
        return ClickJoinHandler(settings, options)
