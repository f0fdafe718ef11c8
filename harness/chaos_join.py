"""SIGKILLs of the click join mid-stream, checked against an uninterrupted join.

`run_join_chaos` writes one seeded stream of impressions and clicks (`join_stream`:
position-based users, examination (1/k)^1, a share of the impressions swapped as a
server does with `ranking.propensity.randomize`, every session closed by its
"session over" row) twice, into two fresh topic prefixes on the configured Kafka, paced
so the stream lasts `seconds_per_kill` per kill. On the first, `rankstream worker
click-join` runs as a subprocess and is SIGKILLed at seeded points of its stored progress
(sessions checkpointed), each time restarted, until it exits idle with its offsets at the
end of both input topics. On the second, an in-process join runs uninterrupted. Then:

* the triplets topics must hold the same messages: every output key once (no message lost
  or duplicated) with byte-identical values;
* an online worker (every default learner) learns each triplets topic, and the weights
  must be bit-identical (sha256 per model), as must those of the learners the join
  teaches itself (PDGD, published as store model `pdgd`).
"""

from __future__ import annotations

import dataclasses
import os
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from rankstream.ranking.baselines import UNI_CON
from rankstream.stream.settings import Settings

_POLL_S = 0.1


@dataclass(frozen=True)
class JoinChaosPlan:
    impressions: int = 5_000
    kills: int = 5
    seed: int = 0
    shown: int = 20  # results an impression shows
    intervention_share: float = 0.2
    checkpoint_records: int = 400
    seconds_per_kill: float = 3.0
    idle_seconds: float = 3.0
    stall_seconds: float = 120.0

    def __post_init__(self) -> None:
        if self.impressions < 10 or self.kills < 0 or self.shown < 2:
            raise ValueError("impressions >= 10, kills >= 0 and shown >= 2 are needed")
        if self.kills > self.impressions // 10:
            raise ValueError("at most one kill per 10 impressions")
        if not 0 <= self.intervention_share <= 1:
            raise ValueError("intervention_share must lie in [0, 1]")
        if self.checkpoint_records < 1 or min(self.seconds_per_kill, self.idle_seconds) <= 0:
            raise ValueError("checkpoint_records, seconds_per_kill and idle_seconds must be > 0")

    def kill_points(self) -> list[int]:
        """Stored sessions at which each kill is armed: one per equal slice of the stream."""
        rng = np.random.default_rng(self.seed)
        slot = self.impressions / (self.kills + 1)
        return [int(slot * (i + rng.uniform(0.25, 0.75))) for i in range(self.kills)]

    def join_options(self) -> Any:
        from rankstream.workers.click_join_options import JoinOptions

        return JoinOptions(
            checkpoint_records=self.checkpoint_records,
            checkpoint_seconds=1.0,
            exit_when_idle=self.idle_seconds,
        )


@dataclass
class JoinChaosResult:
    kills: int
    impressions: int
    messages: int  # output messages of the uninterrupted join
    triplets: int
    lost: int  # output messages of the reference missing from the chaos run
    duplicated: int  # output keys found more than once
    differing: int  # keys whose message bytes differ
    identical_weights: bool
    models: dict[str, dict[str, str]]
    worker_starts: int
    exits: dict[str, int]
    seconds: float
    log_dir: str

    @property
    def ok(self) -> bool:
        return (
            self.identical_weights
            and self.lost == 0
            and self.duplicated == 0
            and self.differing == 0
            and self.messages > 0
        )

    def to_json(self) -> dict[str, Any]:
        return {**dataclasses.asdict(self), "ok": self.ok}


def join_stream(plan: JoinChaosPlan, width: int) -> list[tuple[str, bytes, bytes]]:
    """(kind "imp"/"click", key, value) messages: each impression, then its clicks message."""
    from rankstream.ranking.propensity import SWAP, randomize
    from rankstream.stream.click_schema import (
        Click,
        Impression,
        encode_clicks,
        encode_impressions,
        impression_key,
    )

    rng = np.random.default_rng(plan.seed)
    examined = 1.0 / np.arange(1, plan.shown + 1)
    out = []
    for i in range(plan.impressions):
        iid = uuid.UUID(int=int(rng.integers(0, 2**63)) << 64 | i).hex
        ids = rng.choice(100_000, plan.shown, replace=False).astype(np.int64)
        phi = rng.standard_normal((plan.shown, width)).astype(np.float32)
        shown = randomize(np.arange(plan.shown), SWAP, plan.intervention_share, rng)
        order = shown.order
        t = 1_700_000_000.0 + 0.1 * i
        impression = Impression(
            iid, t, UNI_CON, 1, {UNI_CON: 1}, ids[order], phi[order],
            shown_probability=shown.probability, intervention=shown.intervention,
        )  # fmt: skip
        attractive = 0.1 + 0.8 * (phi[order, 0] > 0.5)
        clicked = rng.random(plan.shown) < examined * attractive
        clicks = [Click(iid, int(c), time=t + 0.05) for c in ids[order][clicked]]
        clicks.append(Click.no_click(iid, time=t + 0.06))
        key = impression_key(iid)
        out.append(("imp", key, encode_impressions([impression])))
        out.append(("click", key, encode_clicks(clicks)))
    return out


class StreamProducer(threading.Thread):
    """Sends the stream to one prefix's topics at a pace (all at once with rate None)."""

    def __init__(self, settings: Settings, messages: list, rate: float | None) -> None:
        super().__init__(name="join-chaos-producer", daemon=True)
        self.settings, self.messages, self.rate = settings, messages, rate
        self.error: BaseException | None = None
        self.stopping = threading.Event()

    def run(self) -> None:
        from rankstream.stream.connect import open_transport

        try:
            transport = open_transport(self.settings)
            producer = transport.producer()
            topics = {"imp": self.settings.impressions_topic, "click": self.settings.clicks_topic}
            started = time.monotonic()
            for n, (kind, key, value) in enumerate(self.messages):
                if self.stopping.is_set():
                    break
                if self.rate is not None:
                    time.sleep(max(0.0, started + n / self.rate - time.monotonic()))
                producer.send(topics[kind], value, key=key)
            producer.flush()
            producer.close()
            transport.close()
        except Exception as exc:  # re-raised by the supervisor
            self.error = exc

    def stop(self, timeout: float = 30.0) -> None:
        """Stop sending (what was sent is flushed) and wait for the thread."""
        self.stopping.set()
        self.join(timeout)


def _env(settings: Settings) -> dict[str, str]:
    env = dict(
        os.environ,
        RANKSTREAM_KAFKA_BOOTSTRAP=settings.kafka_bootstrap or "",
        RANKSTREAM_REDIS_URL=settings.redis_url or "",
        RANKSTREAM_TOPIC_PREFIX=settings.topic_prefix,
        RANKSTREAM_PHI_DIM=str(settings.phi_dim),
        RANKSTREAM_CLICK_WINDOW_SECONDS=repr(settings.click_window_s),
        RANKSTREAM_CLICK_GRACE_SECONDS=repr(settings.click_grace_s),
    )
    env.pop("RANKSTREAM_METRICS_PORT", None)
    if settings.redis_password:
        env["RANKSTREAM_REDIS_PASSWORD"] = settings.redis_password
    return env


def _argv(options: Any) -> list[str]:
    from rankstream.workers.options import to_argv

    return [sys.executable, "-m", "rankstream.cli", "worker", "click-join", *to_argv(options)]


def _inputs_done(settings: Settings, transport: Any, offsets: dict) -> bool:
    for topic in (settings.impressions_topic, settings.clicks_topic):
        for p, end in transport.end_offsets(topic).items():
            if offsets.get(topic, {}).get(p) != end:
                return False
    return True


def _supervise(
    settings: Settings, plan: JoinChaosPlan, producer: StreamProducer, log_dir: Path, say: Any
) -> tuple[int, Counter[str], int]:
    """Run, kill and restart the join subprocess; (kills, exits, starts)."""
    from rankstream.harness.chaos import writer_pid
    from rankstream.stream.connect import open_store, open_transport

    store, transport = open_store(settings), open_transport(settings)
    options, pending = plan.join_options(), plan.kill_points()
    exits: Counter[str] = Counter()
    starts = kills = 0
    proc = None
    last = (-1, time.monotonic())  # (stored sessions, when they last changed)
    try:
        while True:
            if proc is None or proc.poll() is not None:
                if proc is not None:
                    exits[str(proc.returncode)] += 1
                    stored = store.load(options.name)
                    if (
                        proc.returncode == 0
                        and not producer.is_alive()
                        and stored is not None
                        and _inputs_done(settings, transport, stored.offsets)
                        and not stored.meta["join"]["outbox_keys"]
                    ):
                        return kills, exits, starts
                    if sum(n for c, n in exits.items() if c not in ("0", "-9")) > 3:
                        raise RuntimeError(f"the join keeps failing: {dict(exits)}; {log_dir}")
                starts += 1
                with open(log_dir / f"join-{starts}.log", "wb") as log:
                    proc = subprocess.Popen(_argv(options), env=_env(settings), stderr=log,
                                            stdout=subprocess.DEVNULL)  # fmt: skip
            if producer.error is not None:
                raise RuntimeError(f"producing the stream failed: {producer.error!r}")
            stored = store.load(options.name)
            sessions = 0 if stored is None else stored.meta["join"]["counters"]["sessions"]
            if sessions != last[0]:
                last = (sessions, time.monotonic())
            elif time.monotonic() - last[1] > plan.stall_seconds:
                raise RuntimeError(f"the join made no progress; logs in {log_dir}")
            mine = stored is not None and writer_pid(stored) == proc.pid
            if pending and sessions >= pending[0] and mine:
                say(f"kill {kills + 1} at {sessions:,} sessions checkpointed")
                proc.send_signal(signal.SIGKILL)
                proc.wait()
                pending.pop(0)
                kills += 1
                continue
            time.sleep(_POLL_S)
    finally:
        if proc is not None and proc.poll() is None:
            proc.kill()
            proc.wait()
        store.close()
        transport.close()


def _output(settings: Settings) -> list[tuple[bytes, bytes]]:
    from rankstream.stream.connect import open_transport

    transport = open_transport(settings)
    topic = settings.triplets_topic
    try:
        ends = transport.end_offsets(topic)
        consumer = transport.consumer(None)
        consumer.assign([(topic, p) for p in ends])
        for p in ends:
            consumer.seek_to_beginning(topic, p)
        found: list[tuple[bytes, bytes]] = []
        deadline = time.monotonic() + 120
        while any(consumer.position(topic, p) < e for p, e in ends.items()):
            if time.monotonic() > deadline:
                raise RuntimeError(f"reading {topic} back took over 120 s")
            found += [(m.key, m.value) for m in consumer.poll(timeout_ms=500, max_records=500)]
        consumer.close()
        return found
    finally:
        transport.close()


def _learned(settings: Settings) -> dict[str, str]:
    """An online worker (default learners, in memory) over the join's triplets: sha256s."""
    from rankstream.stream.connect import open_transport
    from rankstream.stream.embedded_store import EmbeddedModelStore
    from rankstream.workers.checkpoint import weights_sha256
    from rankstream.workers.online_worker import OnlineWorker, WorkerOptions

    transport = open_transport(settings)
    ends = transport.end_offsets(settings.triplets_topic)
    worker = OnlineWorker(
        settings,
        WorkerOptions(scaler_rows=200, exit_when_idle=30.0),
        transport=transport,
        store=EmbeddedModelStore(),
    )

    def done(w: OnlineWorker) -> bool:
        return all(
            m.next_offset(settings.triplets_topic, p) == e
            for m in w.models
            for p, e in ends.items()
        )

    try:
        worker.run(until=done)
    finally:
        transport.close()
    return {m.name: weights_sha256(m.weights) for m in worker.models}


def _taught(settings: Settings) -> dict[str, str]:
    """The join's own learners (PDGD) as published in the store: sha256s of the weights."""
    from rankstream.stream.connect import open_store
    from rankstream.workers.checkpoint import weights_sha256

    store = open_store(settings)
    found = {}
    for name in JoinChaosPlan().join_options().taught:
        stored = store.load(name)
        found[name] = "" if stored is None else weights_sha256(stored.arrays["weights"])
    return found


def run_join_chaos(
    settings: Settings, plan: JoinChaosPlan, say: Any = lambda _: None
) -> JoinChaosResult:
    """Run `plan` on fresh topic prefixes (module docstring)."""
    from rankstream.stream.connect import open_transport
    from rankstream.workers.click_join import ClickJoin

    if not (settings.kafka_bootstrap and settings.redis_url):
        raise RuntimeError("join chaos runs through real Kafka and Redis: configure both")
    started = time.perf_counter()
    run_id = uuid.uuid4().hex[:10]
    base = dataclasses.replace(settings, metrics_port=None)
    chaos = dataclasses.replace(base, topic_prefix=f"{settings.topic_prefix}.jc-{run_id}")
    reference = dataclasses.replace(base, topic_prefix=f"{settings.topic_prefix}.jr-{run_id}")
    log_dir = Path(settings.data_dir) / "chaos" / chaos.topic_prefix
    log_dir.mkdir(parents=True, exist_ok=True)
    messages = join_stream(plan, settings.phi_dim)
    for s in (chaos, reference):
        transport = open_transport(s)
        kinds = ("impressions", "clicks", "triplets", "dead-letter")
        transport.ensure_topics({s.topic(kind): 1 for kind in kinds})
        transport.close()
    say("stream and kills")
    rate = len(messages) / (plan.seconds_per_kill * (plan.kills + 1))
    producer = StreamProducer(chaos, messages, rate)
    producer.start()
    kills, exits, starts = _supervise(chaos, plan, producer, log_dir, say)
    producer.join()
    say("reference join (uninterrupted)")
    ref_producer = StreamProducer(reference, messages, None)
    ref_producer.run()
    if ref_producer.error is not None:
        raise RuntimeError(f"producing the reference stream failed: {ref_producer.error!r}")
    join = ClickJoin(reference, plan.join_options())
    if join.run() != 0:
        raise RuntimeError("the reference join did not finish cleanly")
    say("comparing the outputs and what the learners learn from them")
    ours, theirs = _output(chaos), _output(reference)
    counts = Counter(k for k, _ in ours)
    ours_by_key, theirs_by_key = dict(ours), dict(theirs)
    lost = sum(1 for k in theirs_by_key if k not in ours_by_key)
    differing = sum(1 for k, v in theirs_by_key.items() if k in ours_by_key and ours_by_key[k] != v)
    duplicated = sum(n - 1 for n in counts.values()) + sum(
        1 for k in ours_by_key if k not in theirs_by_key
    )
    learned = {**_learned(chaos), **_taught(chaos)}
    expected = {**_learned(reference), **_taught(reference)}
    from rankstream.stream.schema import decode_triplets

    triplets = sum(len(decode_triplets(v, width=settings.phi_dim)) for _, v in theirs)
    return JoinChaosResult(
        kills=kills,
        impressions=plan.impressions,
        messages=len(theirs),
        triplets=triplets,
        lost=lost,
        duplicated=duplicated,
        differing=differing,
        identical_weights=learned == expected,
        models={
            n: {"sha256": learned.get(n, ""), "reference_sha256": s} for n, s in expected.items()
        },
        worker_starts=starts,
        exits=dict(exits),
        seconds=round(time.perf_counter() - started, 1),
        log_dir=str(log_dir),
    )
