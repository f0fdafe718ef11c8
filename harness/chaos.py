"""Fault injection on the real pipeline, checked against an uninterrupted reference.

`run_chaos` produces `triplets` seeded simulator-shaped triplets (wire version 2,
`QUERIES_PER_MESSAGE` judged queries a message as the simulator sends them, unless
`queries_per_message` says otherwise) into a fresh topic
prefix on the configured Kafka (a producer thread, concurrently with consuming), runs
`rankstream worker online` as a subprocess and, at seeded points of its stored progress,
injects faults:

* ``kill``            SIGKILL the worker (a restart resumes from its last checkpoint);
* ``restart-kafka``   stop and start the broker (`ServiceManager.restart`, data kept);
* ``restart-redis``   stop and start Redis cleanly (AOF flushed on shutdown);
* ``crash-redis``     SIGKILL redis-server, then start it again from its AOF;
* ``lose-checkpoint`` roll every model back by one version in Redis: exactly the state
  an AOF that lost its last second of writes comes back with (a SIGKILLed process keeps
  its writes in the page cache, so only this rollback makes the loss certain);
* ``zombie``          SIGSTOP the worker, start a second one, let it checkpoint every
  model, SIGCONT the first: its next save must be refused (fencing).

On the replicated services (`rankstream services up --cluster`), the cluster faults of
`harness.cluster_faults` (``kill-leader``, ``pause-broker``, ``kill-redis-primary``,
each timed until recovered, figures in `recovery`) and ``kill-serve``: two serve
processes run through the whole run with an engine retrying once on the other
(`harness.serve_failover`), one is SIGKILLed and started again; the engine's figures
are in `serving`. The producer is not paused for these: acks=all and the idempotent
producer must carry every record through a leader change.

The harness is the worker's supervisor: whatever way the worker ends (killed, fenced
exit 3, idle exit while a service was away) it is started again, until it exits 0 with
every model's stored offsets at the end of the topic. The producer is paced so the
stream lasts `seconds_per_fault` per fault; it is flushed and paused while the broker
restarts, so what is tested is the consumer side (see docs/reference/guarantees.md).

The reference is a second, uninterrupted `OnlineWorker` in this process reading the
same topic with the same options into an in-memory store; it also counts every
consumed `seq` against 0..n-1 (`lost`/`duplicated` of the log itself). The chaos
models must then have bit-identical weights (sha256 per model), `triplets_seen == n`
and offsets at the end of the topic.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from rankstream.harness.generator import MEAN_QUERY_TRIPLETS
from rankstream.producers.feedback_batching import QUERIES_PER_MESSAGE
from rankstream.stream.settings import Settings
from rankstream.workers.runtime import EXIT_FENCED

CLUSTER_EVENTS = ("kill-leader", "pause-broker", "kill-redis-primary", "kill-serve")
EVENT_KINDS = (
    "kill", "restart-kafka", "restart-redis", "crash-redis", "lose-checkpoint", "zombie",
    *CLUSTER_EVENTS,
)  # fmt: skip
# faults that can wait for a held stream's tail (module doc of _Producer)
HELD_STREAM_EVENTS = frozenset({*CLUSTER_EVENTS, "kill"})
SERVICE_EVENTS = frozenset(
    {"restart-kafka", "restart-redis", "crash-redis", "kill-leader", "pause-broker",
     "kill-redis-primary"}
)  # fmt: skip
_POLL_S = 0.2
_EVENT_JITTER_S = 1.0  # a fault lands up to this long after the checkpoint that armed it
_ROLLBACK_SCRIPT = """
local v = tonumber(redis.call('HGET', KEYS[1], 'version') or '0')
if v == 0 then return 0 end
redis.call('DEL', KEYS[1] .. ':v:' .. v)
redis.call('ZREM', KEYS[1] .. ':versions', v)
local previous = redis.call('HGETALL', KEYS[1] .. ':v:' .. (v - 1))
redis.call('DEL', KEYS[1])
if #previous == 0 then return 0 end
redis.call('HSET', KEYS[1], unpack(previous))
return v - 1
"""


class ChaosError(RuntimeError):
    """The run could not be completed (not a wrong result: those are in ChaosResult)."""


@dataclass(frozen=True)
class Event:
    """Inject `kind` once every model's stored triplets_seen >= `at`, `delay` s later."""

    at: int
    kind: str
    delay: float


@dataclass(frozen=True)
class ChaosPlan:
    """What to run and which faults to inject; `events()` is the seeded schedule."""

    triplets: int = 3_000_000
    kills: int = 10
    counts: dict[str, int] = field(default_factory=dict)  # other EVENT_KINDS -> how many
    seed: int = 0
    queries_per_message: int = QUERIES_PER_MESSAGE  # as the simulator sends them
    checkpoint_records: int | None = None  # None: about four checkpoints between faults
    checkpoint_seconds: float = 2.0
    idle_seconds: float = 4.0
    scaler_rows: int = 2000
    stall_seconds: float = 300.0
    seconds_per_fault: float = 4.0  # the producer's pace gives each fault this much stream

    def __post_init__(self) -> None:
        if self.triplets < 1 or self.queries_per_message < 1:
            raise ValueError("triplets and queries_per_message must be >= 1")
        unknown = set(self.counts) - set(EVENT_KINDS) | ({"kill"} & set(self.counts))
        if unknown:
            raise ValueError(f"unknown fault kinds {sorted(unknown)}; kills go in `kills`")
        if self.kills < 0 or any(n < 0 for n in self.counts.values()):
            raise ValueError("fault counts must be >= 0")
        if self.n_events > self.triplets // (2 * self.message_triplets):
            raise ValueError(
                f"{self.n_events} faults need at least "
                f"{2 * self.n_events * self.message_triplets} triplets (two messages a fault)"
            )
        if self.checkpoint_records is not None and self.checkpoint_records < 1:
            raise ValueError("checkpoint_records must be >= 1")
        if (
            not min(
                self.checkpoint_seconds,
                self.idle_seconds,
                self.stall_seconds,
                self.seconds_per_fault,
            )
            > 0
        ):
            raise ValueError(
                "checkpoint_seconds, idle_seconds, stall_seconds and seconds_per_fault must be > 0"
            )

    @property
    def n_events(self) -> int:
        return self.kills + sum(self.counts.values())

    @property
    def message_triplets(self) -> int:
        """Triplets a message holds on average (simulator-shaped judged queries)."""
        return self.queries_per_message * MEAN_QUERY_TRIPLETS

    @property
    def records_per_checkpoint(self) -> int:
        if self.checkpoint_records is not None:
            return self.checkpoint_records
        return max(self.message_triplets, self.triplets // (4 * (self.n_events + 1)))

    @property
    def rate(self) -> float:
        """Triplets per second produced: the stream lasts (faults + 1) x seconds_per_fault."""
        return self.triplets / (self.seconds_per_fault * (self.n_events + 1))

    def events(self) -> list[Event]:
        """One fault per equal slice of the stream, at a seeded point inside it."""
        rng = np.random.default_rng(self.seed)
        kinds = ["kill"] * self.kills + [
            k for k in EVENT_KINDS for _ in range(self.counts.get(k, 0))
        ]
        kinds = [str(k) for k in rng.permutation(np.array(kinds, dtype=object))]
        slot = self.triplets / (len(kinds) + 1)
        return [
            Event(
                at=int(slot * (i + rng.uniform(0.25, 0.75))),
                kind=kind,
                delay=float(rng.uniform(0.0, _EVENT_JITTER_S)),
            )
            for i, kind in enumerate(kinds)
        ]

    def worker_options(self) -> Any:
        """The options of both the chaos workers and the reference (one source)."""
        from rankstream.workers.online_worker import LINEAR_ALGOS, WorkerOptions

        return WorkerOptions(
            algos=LINEAR_ALGOS,
            checkpoint_records=self.records_per_checkpoint,
            checkpoint_seconds=self.checkpoint_seconds,
            exit_when_idle=self.idle_seconds,
            scaler_rows=self.scaler_rows,
        )


@dataclass
class ChaosResult:
    kills: int
    triplets: int
    identical: bool
    lost: int
    duplicated: int
    events: dict[str, int]  # faults injected, by kind
    events_missed: int  # scheduled faults the stream ended before
    worker_starts: int
    exits: dict[str, int]  # worker exit codes seen ("-9" = SIGKILL, "3" = fenced)
    zombies_fenced: int  # zombies whose late save was refused
    redis_crash_versions_lost: int  # checkpoint versions a SIGKILLed Redis came back without
    models: dict[str, dict[str, Any]]
    # cluster faults: per kind, each occurrence's recovery times (harness.cluster_faults)
    recovery: dict[str, list[dict[str, float]]]
    serving: dict[str, Any] | None  # the engine's figures (harness.serve_failover)
    seconds: float
    log_dir: str

    def to_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @property
    def ok(self) -> bool:
        served_right = self.serving is None or (
            self.serving["versions_with_two_weights"] == 0 and self.serving["requests"] > 0
        )
        return self.identical and self.lost == 0 and self.duplicated == 0 and served_right


def worker_argv(options: Any) -> list[str]:
    """`rankstream worker online` with every field of `options` (a WorkerOptions)."""
    from rankstream.workers.options import to_argv

    return [sys.executable, "-m", "rankstream.cli", "worker", "online", *to_argv(options)]


def worker_env(settings: Settings) -> dict[str, str]:
    """This process's environment pointed at `settings` (no metrics port: ports clash)."""
    env = dict(os.environ)
    env.pop("RANKSTREAM_METRICS_PORT", None)
    values = {
        "KAFKA_BOOTSTRAP": settings.kafka_bootstrap,
        "REDIS_URL": settings.redis_url,
        "REDIS_PASSWORD": settings.redis_password,
        "TOPIC_PREFIX": settings.topic_prefix,
        "PHI_DIM": str(settings.phi_dim),
    }
    env.update({f"RANKSTREAM_{k}": v for k, v in values.items() if v is not None})
    return env


def forget_latest_checkpoints(settings: Settings, names: list[str]) -> int:
    """Roll each model back one version in Redis, as a Redis that lost its last writes.

    Returns how many versions were removed. Written against `stream.redis_store`'s key
    layout; atomic (one Lua script per model).
    """
    from rankstream.stream.redis_store import redis_client

    client = redis_client(settings.redis_url or "", settings.redis_password)
    try:
        script = client.register_script(_ROLLBACK_SCRIPT)
        removed = 0
        for name in names:
            key = f"{settings.topic_prefix}:model:{name}"
            before = int(client.hget(key, "version") or 0)
            removed += before - int(script(keys=[key]))
        return removed
    finally:
        client.close()


def writer_pid(stored: Any) -> int | None:
    """The pid in a checkpoint's `writer` ("host:pid:nonce"), None if unreadable."""
    try:
        return int(str(stored.meta["writer"]).rsplit(":", 2)[1])
    except (KeyError, IndexError, ValueError):
        return None


class _Supervisor:
    """Runs, restarts and injures the worker subprocess; watches its stored progress."""

    def __init__(
        self,
        settings: Settings,
        plan: ChaosPlan,
        manager: Any | None,
        log_dir: Path,
        say: Callable[[str], None],
    ) -> None:
        from rankstream.stream.connect import open_store, open_transport
        from rankstream.workers.resilience import transient_errors

        self.settings, self.plan, self.manager, self.say = settings, plan, manager, say
        self.options = plan.worker_options()
        self.log_dir = log_dir
        self.store = open_store(settings)
        self.transport = open_transport(settings)
        self.transient = transient_errors()
        self.proc: subprocess.Popen[bytes] | None = None
        self.producer: _Producer | None = None
        self.starts = 0
        self.exits: Counter[str] = Counter()
        self.injected: Counter[str] = Counter()
        self.zombies_fenced = 0
        self.versions_lost = 0
        self.cluster: Any | None = None  # ClusterFaults, set by run_chaos when needed
        self.serve: Any | None = None  # ServePair, likewise
        self.recovery: dict[str, list[dict[str, float]]] = {}

    # --- the worker ---------------------------------------------------------------------
    def start_worker(self) -> subprocess.Popen[bytes]:
        self.starts += 1
        with open(self.log_dir / f"worker-{self.starts}.log", "wb") as log:
            proc = subprocess.Popen(
                worker_argv(self.options),
                env=worker_env(self.settings),
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=log,
            )
        return proc

    def stop_all(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()

    def close(self) -> None:
        """Close our own clients: an open Kafka client keeps refreshing metadata forever."""
        try:
            self.store.close()
        finally:
            self.transport.close()

    def crashed_too_often(self) -> bool:
        """Exits that are neither clean, fenced nor our SIGKILL: a bug, not a fault."""
        expected = {"0", str(EXIT_FENCED), str(-signal.SIGKILL)}
        return sum(n for code, n in self.exits.items() if code not in expected) > 3

    # --- what the store says --------------------------------------------------------------
    def stored(self) -> list[Any] | None:
        """Every model's latest checkpoint (None entries if missing); None if unreachable."""
        try:
            return [self.store.load(name) for name in self.options.algos]
        except self.transient:
            return None

    @staticmethod
    def progress(models: list[Any]) -> int:
        return min(0 if m is None else int(m.meta["triplets_seen"]) for m in models)

    def checkpointed_by(self, models: list[Any], proc: subprocess.Popen[bytes]) -> bool:
        return all(m is not None and writer_pid(m) == proc.pid for m in models)

    def at_end(self, models: list[Any]) -> bool:
        topic = self.settings.triplets_topic
        try:
            ends = self.transport.end_offsets(topic)
        except self.transient:
            return False
        return all(
            m is not None and all(m.offsets.get(topic, {}).get(p) == end for p, end in ends.items())
            for m in models
        )

    # --- faults ------------------------------------------------------------------------------
    def inject(self, event: Event) -> None:
        assert self.proc is not None
        self.say(f"fault {event.kind} at {event.at:,} triplets")
        if event.kind in SERVICE_EVENTS and self.manager is None:
            raise ChaosError(f"{event.kind} needs the ServiceManager that runs the services")
        if event.kind == "kill":
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait()
        elif event.kind == "restart-kafka":
            assert self.producer is not None
            with self.producer.paused():
                self.manager.restart("kafka")
        elif event.kind == "restart-redis":
            self.manager.restart("redis")
        elif event.kind == "crash-redis":
            self.crash_redis()
        elif event.kind == "lose-checkpoint":
            forget_latest_checkpoints(self.settings, list(self.options.algos))
        elif event.kind == "zombie":
            self.zombie()
        elif event.kind in CLUSTER_EVENTS:
            fault = (
                self.serve.kill_one
                if event.kind == "kill-serve"
                else getattr(self.cluster, event.kind.replace("-", "_"))
            )
            try:
                self.recovery.setdefault(event.kind, []).append(fault())
            except RuntimeError as exc:  # a recovery or a serve start past its deadline
                raise ChaosError(f"{event.kind}: {exc}") from exc
        self.injected[event.kind] += 1

    def crash_redis(self) -> None:
        """SIGKILL redis-server (no shutdown fsync), count lost versions, start it again."""
        pid = self.manager.status()["redis"]["pid"]
        before = self.stored()
        if pid is None:
            raise ChaosError("redis is not running under the service manager")
        os.kill(pid, signal.SIGKILL)
        deadline = time.monotonic() + 30
        while self.manager.status()["redis"]["running"] and time.monotonic() < deadline:
            with contextlib.suppress(ChildProcessError):
                os.waitpid(pid, os.WNOHANG)  # our child when this process started it
            time.sleep(0.05)
        self.manager.start("redis")
        after = self.stored()
        if before is not None and after is not None:
            self.versions_lost += sum(
                max(0, (b.version if b else 0) - (a.version if a else 0))
                for b, a in zip(before, after, strict=True)
            )

    def zombie(self) -> None:
        """Freeze the worker, let a successor checkpoint everything, then wake it."""
        assert self.proc is not None
        old = self.proc
        old.send_signal(signal.SIGSTOP)
        try:
            self.proc = new = self.start_worker()
            deadline = time.monotonic() + self.plan.stall_seconds
            while new.poll() is None:
                models = self.stored()
                if models is not None and self.checkpointed_by(models, new):
                    break
                if time.monotonic() > deadline:
                    raise ChaosError("the successor of a frozen worker never checkpointed")
                time.sleep(_POLL_S)
        finally:
            old.send_signal(signal.SIGCONT)
        try:
            code = old.wait(timeout=self.plan.stall_seconds)
        except subprocess.TimeoutExpired:
            old.kill()
            raise ChaosError("a woken zombie worker neither saved nor exited") from None
        self.exits[str(code)] += 1
        models = self.stored() or []
        if code == EXIT_FENCED and all(m is None or writer_pid(m) != old.pid for m in models):
            self.zombies_fenced += 1

    # --- the loop ------------------------------------------------------------------------
    def run(self, producer: _Producer) -> int:
        """Supervise until the worker exits 0 at the end of the topic; returns faults missed."""
        self.producer = producer
        producer_done = producer.done
        pending = self.plan.events()
        self.proc = self.start_worker()
        last_change, last_seen = time.monotonic(), (-1, 0)
        while True:
            models = self.stored()
            code = self.proc.poll()
            if code is not None:
                self.exits[str(code)] += 1
                if code == 0 and producer_done() and models is not None and self.at_end(models):
                    return len(pending)
                if self.crashed_too_often():
                    raise ChaosError(
                        f"the worker keeps failing (exits {dict(self.exits)}); "
                        f"logs in {self.log_dir}"
                    )
                self.proc = self.start_worker()
                continue
            if models is None:
                time.sleep(_POLL_S)
                continue
            progress = self.progress(models)
            if (progress, self.starts) != last_seen:
                last_seen, last_change = (progress, self.starts), time.monotonic()
                self.say(
                    f"{progress:,}/{self.plan.triplets:,} triplets checkpointed; "
                    f"{sum(self.injected.values())}/{self.plan.n_events} faults"
                )
            elif time.monotonic() - last_change > self.plan.stall_seconds:
                raise ChaosError(
                    f"no progress for {self.plan.stall_seconds:.0f} s; worker "
                    f"logs in {self.log_dir}"
                )
            if pending and pending[0].kind not in HELD_STREAM_EVENTS:
                producer.release.set()  # this fault needs the stream flowing (see _Producer)
            if pending and self._armed(pending[0], models, progress):
                time.sleep(pending[0].delay)
                if self.proc.poll() is None:
                    self.inject(pending.pop(0))
                    if not pending:
                        producer.release.set()
                    continue
            time.sleep(_POLL_S)

    def _armed(self, event: Event, models: list[Any], progress: int) -> bool:
        """Due, and the current worker is consuming (it has checkpointed every model).

        A cluster fault hits the services, not the worker: due is enough. So is a worker
        kill while the producer holds the stream's tail (a worker with nothing new never
        checkpoints, and killing an idle worker is still a fault to recover from).
        """
        held = self.producer is not None and self.producer.holding.is_set()
        return progress >= event.at and (
            event.kind in CLUSTER_EVENTS
            or (held and event.kind == "kill")
            or self.checkpointed_by(models, self.proc)
        )


def _reference(settings: Settings, options: Any, n_triplets: int) -> tuple[dict, int, int]:
    """An uninterrupted in-process worker on the same topic: per-model sha256, seq lost/dup."""
    from rankstream.harness.accounting import SeqCounter
    from rankstream.stream.connect import open_transport
    from rankstream.stream.embedded_store import EmbeddedModelStore
    from rankstream.workers.checkpoint import weights_sha256
    from rankstream.workers.online_worker import OnlineWorker

    transport = open_transport(settings)
    ends = transport.end_offsets(settings.triplets_topic)
    seqs = SeqCounter()
    worker = OnlineWorker(
        settings,
        dataclasses.replace(options, exit_when_idle=30.0),
        transport=transport,
        store=EmbeddedModelStore(),
        on_block=seqs,
    )

    def done(w: OnlineWorker) -> bool:
        return all(
            m.next_offset(settings.triplets_topic, p) == end
            for m in w.models
            for p, end in ends.items()
        )

    try:
        if worker.run(until=done) != 0:
            raise ChaosError("the reference worker did not finish cleanly")
    finally:
        transport.close()
    hashes = {m.name: (weights_sha256(m.weights), m.triplets_seen) for m in worker.models}
    lost, duplicated = seqs.lost_and_duplicated(n_triplets)
    return hashes, lost, duplicated


class _Producer(threading.Thread):
    """Generates, encodes (the current wire version) and sends the seeded simulator-shaped
    stream (`pipeline_bench.stream_messages`, seq 0..n-1) at `plan.rate`.

    Paced, so that faults land while the stream flows rather than after it ended.
    `gate` is held around every send: holding it pauses the stream (a broker restart
    is done with the producer flushed and paused, so only the consumer side is tested).
    Cluster faults take their time (a leader election, a JVM start), so in a plan with
    any, the stream's tail waits for `release` (set once every fault is injected): the
    last fault never finds the stream already over, however slow the machine. A pending
    fault that needs the stream flowing (a zombie, a lost checkpoint, a service restart:
    not in HELD_STREAM_EVENTS) releases it at once; plans without cluster faults never
    hold it.
    """

    def __init__(self, settings: Settings, plan: ChaosPlan) -> None:
        from rankstream.stream.connect import open_transport

        super().__init__(name="chaos-producer", daemon=True)
        self.settings, self.plan = settings, plan
        self.transport = open_transport(settings)
        self.producer = self.transport.producer()
        self.gate = threading.Lock()
        self.release = threading.Event()
        self.holding = threading.Event()  # set while the tail waits for `release`
        events = plan.events()
        # two messages past the last fault's point: enough stream to arm it
        self.hold_at = events[-1].at + 2 * plan.message_triplets if events else 0
        if not any(event.kind in CLUSTER_EVENTS for event in events):
            self.release.set()
        self.error: BaseException | None = None

    def run(self) -> None:
        from rankstream.harness.pipeline_bench import StreamSpec, stream_messages
        from rankstream.stream.schema import block_key, encode_triplets

        try:
            plan = self.plan
            blocks = stream_messages(
                StreamSpec(plan.triplets, plan.queries_per_message, seed=plan.seed)
            )
            started, sent = time.monotonic(), 0
            for block in blocks:
                if sent >= self.hold_at and not self.release.is_set():
                    self.holding.set()
                    self.release.wait()
                    self.holding.clear()
                    started = time.monotonic() - sent / self.plan.rate  # no burst after it
                time.sleep(max(0.0, started + sent / self.plan.rate - time.monotonic()))
                with self.gate:
                    self.producer.send(
                        self.settings.triplets_topic, encode_triplets(block), key=block_key(block)
                    )
                sent += len(block)
            with self.gate:
                self.producer.flush()
                self.producer.close()
            self.transport.close()
        except Exception as exc:  # re-raised by `done` in the supervising thread
            self.error = exc

    @contextlib.contextmanager
    def paused(self) -> Iterator[None]:
        with self.gate:
            if self.is_alive():
                self.producer.flush()
            yield

    def done(self) -> bool:
        if self.error is not None:
            raise ChaosError(f"producing the stream failed: {self.error!r}") from self.error
        return not self.is_alive()


def _start_cluster_faults(supervisor: _Supervisor, say: Callable[[str], None]) -> None:
    """The fault injector and the serve pair, when the plan has cluster faults."""
    counts = supervisor.plan.counts
    if any(counts.get(kind) for kind in CLUSTER_EVENTS if kind != "kill-serve"):
        from rankstream.harness.cluster_faults import ClusterFaults

        if supervisor.manager is None:
            raise ChaosError("cluster faults need the ServiceManager that runs the services")
        try:
            supervisor.cluster = ClusterFaults(
                supervisor.manager, supervisor.settings, supervisor.settings.triplets_topic
            )
        except ValueError as exc:
            raise ChaosError(str(exc)) from exc
    if any(counts.get(kind) for kind in CLUSTER_EVENTS):
        from rankstream.harness.serve_failover import ServePair

        say("starting two serve processes and the engine in front of them")
        model = supervisor.options.algos[0]
        supervisor.serve = ServePair(supervisor.settings, supervisor.log_dir, model)


def _stop_cluster_faults(supervisor: _Supervisor) -> dict[str, Any] | None:
    """Close the injector; stop the serve pair and return its engine's figures."""
    if supervisor.cluster is not None:
        supervisor.cluster.close()
    return supervisor.serve.close() if supervisor.serve is not None else None


def run_chaos(
    settings: Settings,
    plan: ChaosPlan,
    *,
    manager: Any | None = None,
    say: Callable[[str], None] = lambda _: None,
) -> ChaosResult:
    """Run `plan` on a fresh topic prefix and compare with the reference (module doc)."""
    from rankstream.workers.checkpoint import weights_sha256

    if not (settings.kafka_bootstrap and settings.redis_url):
        raise ChaosError("chaos runs through real Kafka and Redis: configure both")
    started = time.perf_counter()
    run_settings = dataclasses.replace(
        settings,
        topic_prefix=f"{settings.topic_prefix}.chaos-{uuid.uuid4().hex[:10]}",
        metrics_port=None,
    )
    log_dir = Path(settings.data_dir) / "chaos" / run_settings.topic_prefix
    log_dir.mkdir(parents=True, exist_ok=True)
    supervisor = _Supervisor(run_settings, plan, manager, log_dir, say)
    serving = None
    try:
        supervisor.transport.ensure_topics(
            {run_settings.triplets_topic: 1, run_settings.dead_letter_topic: 1}
        )
        _start_cluster_faults(supervisor, say)
        producer = _Producer(run_settings, plan)
        producer.start()
        try:
            missed = supervisor.run(producer)
        finally:
            producer.release.set()  # never left waiting when the run ends early
            supervisor.stop_all()
            serving = _stop_cluster_faults(supervisor)
        say("reference run (uninterrupted, same topic)")
        reference, lost, duplicated = _reference(run_settings, supervisor.options, plan.triplets)
        stored_models = supervisor.stored() or []
    finally:
        supervisor.close()
    models, identical = {}, True
    for stored in stored_models:
        if stored is None:
            raise ChaosError("a model is missing from Redis after the run")
        sha, seen = weights_sha256(stored.arrays["weights"]), int(stored.meta["triplets_seen"])
        ref_sha, _ = reference[stored.name]
        identical &= sha == ref_sha
        models[stored.name] = {
            "weights_sha256": sha,
            "reference_sha256": ref_sha,
            "triplets_seen": seen,
            "version": stored.version,
        }
        lost = max(lost, plan.triplets - seen)
        duplicated = max(duplicated, seen - plan.triplets)
    return ChaosResult(
        kills=supervisor.injected["kill"],
        triplets=plan.triplets,
        identical=identical,
        lost=lost,
        duplicated=duplicated,
        events=dict(supervisor.injected),
        events_missed=missed,
        worker_starts=supervisor.starts,
        exits=dict(supervisor.exits),
        zombies_fenced=supervisor.zombies_fenced,
        redis_crash_versions_lost=supervisor.versions_lost,
        models=models,
        recovery=supervisor.recovery,
        serving=serving,
        seconds=round(time.perf_counter() - started, 1),
        log_dir=str(log_dir),
    )
