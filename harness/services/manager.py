"""Start, reuse, stop and restart the local Kafka, Redis and Prometheus under one root.

Everything a run needs lives under the root: data, logs (`<root>/<service>/*.log`)
and `state.json`. `up()` is idempotent: services the state file lists that are alive
and answer are reused as they are. The Kafka jars live in a cache shared by all roots.

The `Topology` says how many of each: one Kafka node and one Redis (the default), or a
Kafka cluster of N nodes and a Redis primary with replicas watched by three Sentinels.
Every service's ports are chosen before any starts (the nodes of a quorum name each
other), and all are started before any is waited for (a node of a 3-node quorum is
not ready until a second one runs).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from rankstream.harness.services import state as state_file
from rankstream.harness.services.endpoints import Endpoints
from rankstream.harness.services.install import install_debian_packages, missing_packages
from rankstream.harness.services.kafka import KafkaService, node_name
from rankstream.harness.services.process import (
    free_port,
    is_running,
    port_is_free,
    spawn,
    terminate,
    wait_until,
)
from rankstream.harness.services.progress import Progress
from rankstream.harness.services.prometheus import PrometheusService, write_scrape_target
from rankstream.harness.services.redis import (
    PRIMARY,
    RedisService,
    SentinelService,
    current_primary_port,
    replica_name,
    sentinel_name,
    sentinel_url,
)
from rankstream.harness.services.service import Service
from rankstream.harness.services.service_error import ServiceError
from rankstream.stream.settings import Settings

SENTINELS = 3  # a majority survives the loss of one, and a quorum of 2 can agree


@dataclass(frozen=True)
class Topology:
    """How many Kafka nodes and Redis replicas (with replicas come three Sentinels)."""

    kafka_brokers: int = 1
    redis_replicas: int = 0

    def __post_init__(self) -> None:
        if self.kafka_brokers < 1 or self.kafka_brokers == 2:
            raise ValueError(
                f"kafka_brokers must be 1 or >= 3 (a 2-node quorum survives no failure), "
                f"got {self.kafka_brokers}"
            )
        if self.redis_replicas < 0:
            raise ValueError(f"redis_replicas must be >= 0, got {self.redis_replicas}")

    @property
    def sentinels(self) -> int:
        return SENTINELS if self.redis_replicas else 0

    def services(self, root: Path, cache: Path) -> list[Service]:
        nodes = self.kafka_brokers
        replicated = bool(self.redis_replicas)
        return [
            *(KafkaService(root, cache, node, nodes) for node in range(1, nodes + 1)),
            RedisService(root, cache, PRIMARY, replicated),
            *(
                RedisService(root, cache, replica_name(i), replicated)
                for i in range(1, self.redis_replicas + 1)
            ),
            *(
                SentinelService(root, cache, sentinel_name(i), self.redis_replicas, SENTINELS)
                for i in range(1, self.sentinels + 1)
            ),
            PrometheusService(root, cache),
        ]


def default_root() -> Path:
    """Where `rankstream services` keeps a developer's services: $DATA_DIR/services."""
    return Path(Settings.from_env().data_dir) / "services"


class ServiceManager:
    """The local services under `root`; see the module docstring.

    `topology` None: the one recorded under the root by the last `up`, else the default.
    """

    def __init__(
        self,
        root: Path,
        cache_dir: Path | None = None,
        progress: Progress | None = None,
        topology: Topology | None = None,
    ) -> None:
        self.root = Path(root).resolve()
        cache = Path(cache_dir) if cache_dir else Path(Settings.from_env().data_dir) / "cache"
        self.progress = progress or Progress()
        recorded = state_file.load_topology(self.root)
        self.topology = topology or (Topology(**recorded) if recorded else Topology())
        self.services: dict[str, Service] = {
            service.name: service for service in self.topology.services(self.root, cache)
        }

    # -- whole set ----------------------------------------------------------------

    def up(self) -> Endpoints:
        """Install what is missing, start what is not running, wait until all answer."""
        with state_file.locked(self.root):
            self._install(list(self.services))
            states = state_file.load(self.root)
            self._refuse_other_topology(states)
            starting = [name for name in self.services if not self._running(name, states)]
            taken = {p for s in states.values() for p in s.ports.values()}
            for name in starting:
                recorded = states[name].ports if name in states else {}
                ports = self._ports(self.services[name], recorded, keep=False, taken=taken)
                states[name] = state_file.ServiceState(ports=ports)
                taken |= set(ports.values())
            try:
                for name in starting:
                    states[name].pid = self._spawn(name, states)
            finally:
                state_file.save(self.root, states, asdict(self.topology))
            for name in self.services:
                self._wait_ready(name, states[name], reused=name not in starting)
            return self._endpoints(states)

    def down(self) -> list[str]:
        """Stop every service (SIGTERM, then SIGKILL after its timeout); the ones that ran.

        Idempotent: with nothing running it stops nothing and returns [].
        """
        with state_file.locked(self.root):
            states = state_file.load(self.root)
            stopped = [name for name in reversed(list(self.services)) if self._stop(name, states)]
            state_file.save(self.root, states)
            return stopped

    def status(self) -> dict[str, dict[str, Any]]:
        """Per service: running, ready, pid, ports, address (no side effects)."""
        states = state_file.load(self.root)
        report: dict[str, dict[str, Any]] = {}
        for name, service in self.services.items():
            entry = states.get(name, state_file.ServiceState())
            running = is_running(entry.pid, service.dir)
            report[name] = {
                "running": running,
                "ready": running and service.is_ready(entry.ports),
                "pid": entry.pid if running else None,
                "ports": entry.ports,
                "address": service.address(entry.ports) if entry.ports else None,
                "log": str(service.log_path),
            }
        return report

    def endpoints(self) -> Endpoints:
        """The addresses from the state file (whether or not the services are up)."""
        return self._endpoints(state_file.load(self.root))

    # -- one service (the reliability tests restart Kafka and Redis mid-stream) ----

    def start(self, name: str) -> None:
        """Start one service on its recorded ports (no-op if it is already running)."""
        with state_file.locked(self.root):
            self._install([name])
            states = state_file.load(self.root)
            running = self._running(name, states)
            if not running:
                recorded = states[name].ports if name in states else {}
                ports = self._ports(self._service(name), recorded, keep=True)
                states[name] = state_file.ServiceState(ports=ports)
                states[name].pid = self._spawn(name, states)
                state_file.save(self.root, states)
            self._wait_ready(name, states[name], reused=running)

    def stop(self, name: str) -> None:
        """Stop one service; its data and ports are kept for the next start."""
        with state_file.locked(self.root):
            states = state_file.load(self.root)
            self._stop(name, states)
            state_file.save(self.root, states)

    def restart(self, name: str) -> None:
        self.stop(name)
        self.start(name)

    def pid(self, name: str) -> int | None:
        """The pid of a running service, None when it is not running."""
        entry = state_file.load(self.root).get(name)
        running = entry is not None and is_running(entry.pid, self._service(name).dir)
        return entry.pid if running else None  # type: ignore[union-attr]

    def kafka_nodes(self) -> list[str]:
        """The names of the Kafka nodes ("kafka", or "kafka-1".."kafka-N")."""
        nodes = self.topology.kafka_brokers
        return [node_name(node, nodes) for node in range(1, nodes + 1)]

    def redis_nodes(self) -> list[str]:
        return [PRIMARY, *(replica_name(i) for i in range(1, self.topology.redis_replicas + 1))]

    def redis_primary(self) -> str | None:
        """Which Redis node the Sentinels name the primary now (the one Redis without)."""
        states = state_file.load(self.root)
        if not self.topology.sentinels:
            return PRIMARY
        port = current_primary_port({n: s.ports for n, s in states.items()})
        return next(
            (n for n in self.redis_nodes() if states.get(n) and states[n].ports["port"] == port),
            None,
        )

    def add_scrape_target(self, job: str, address: str) -> Path:
        """Have Prometheus scrape host:port as `job` (see prometheus.write_scrape_target)."""
        targets_dir = self._service("prometheus").targets_dir  # type: ignore[attr-defined]
        return write_scrape_target(targets_dir, job, address)

    # -- internals -------------------------------------------------------------------

    def _service(self, name: str) -> Service:
        try:
            return self.services[name]
        except KeyError:
            known = list(self.services)
            raise ValueError(f"unknown service {name!r}; expected one of {known}") from None

    def _refuse_other_topology(self, states: dict[str, state_file.ServiceState]) -> None:
        """Services running under the root in another layout are not silently mixed in."""
        recorded = state_file.load_topology(self.root)
        if recorded is None or Topology(**recorded) == self.topology:
            return
        running = [n for n in states if is_running(states[n].pid, self.root / n)]
        if running:
            raise ServiceError(
                f"services under {self.root} run as {recorded} ({', '.join(running)}); "
                f"stop them (`rankstream services down`) before starting {asdict(self.topology)}"
            )

    def _install(self, names: list[str]) -> None:
        binaries = dict(pair for n in names for pair in self._service(n).apt_binaries)
        install_debian_packages(
            missing_packages(binaries), self.root / "apt-get.log", self.progress
        )
        for name in names:
            self._service(name).ensure_installed(self.progress)

    def _running(self, name: str, states: dict[str, state_file.ServiceState]) -> bool:
        entry = states.get(name)
        return entry is not None and is_running(entry.pid, self._service(name).dir)

    def _spawn(self, name: str, states: dict[str, state_file.ServiceState]) -> int:
        """Start `name` on its ports in `states`, telling it every service's ports."""
        service = self._service(name)
        service.peers = {n: s.ports for n, s in states.items() if s.ports}
        ports = states[name].ports
        with self.progress.step(f"starting {name} on {service.address(ports)}"):
            return spawn(service.command(ports, self.progress), service.log_path, service.dir)

    def _wait_ready(self, name: str, entry: state_file.ServiceState, reused: bool) -> None:
        service = self._service(name)
        assert entry.pid is not None
        what = f"{name}: reusing pid {entry.pid}" if reused else f"waiting for {name}"
        with self.progress.step(what):
            wait_until(
                lambda: service.is_ready(entry.ports), service.startup_timeout,
                name, entry.pid, service.dir, service.log_path,
            )  # fmt: skip

    @staticmethod
    def _ports(
        service: Service, recorded: dict[str, int], keep: bool, taken: set[int] | None = None
    ) -> dict[str, int]:
        """The recorded ports if they are all free again, else fresh ones (or an error).

        Fresh ones avoid `taken` (ports chosen for the other services being started).
        """
        wanted = set(service.port_names)
        if set(recorded) == wanted and all(port_is_free(p) for p in recorded.values()):
            return dict(recorded)
        if keep and recorded:
            raise ServiceError(
                f"{service.name}: its ports {recorded} are taken by another process; "
                "cannot restart it where clients expect it"
            )
        avoid = set(taken or ())
        ports: dict[str, int] = {}
        while len(ports) < len(wanted):
            port = free_port()
            if port not in avoid and port not in ports.values():
                ports[service.port_names[len(ports)]] = port
        return ports

    def _stop(self, name: str, states: dict[str, state_file.ServiceState]) -> bool:
        """Stop `name` if it runs; whether it did."""
        service = self._service(name)
        entry = states.get(name)
        if entry is None or entry.pid is None:
            return False
        running = is_running(entry.pid, service.dir)
        if running:
            with self.progress.step(f"stopping {name} (pid {entry.pid})"):
                terminate(entry.pid, service.dir, service.stop_timeout)
        entry.pid = None
        return running

    def _endpoints(self, states: dict[str, state_file.ServiceState]) -> Endpoints:
        def ports(name: str) -> dict[str, int]:
            entry = states.get(name)
            if entry is None or not entry.ports:
                raise ServiceError(f"{name} has never been started under {self.root}")
            return entry.ports

        def address(name: str) -> str:
            return self.services[name].address(ports(name))

        kafka = ",".join(address(name) for name in self.kafka_nodes())
        sentinels = [sentinel_name(i) for i in range(1, self.topology.sentinels + 1)]
        redis = (
            sentinel_url([ports(name)["port"] for name in sentinels])
            if sentinels
            else address(PRIMARY)
        )
        return Endpoints(kafka, redis, address("prometheus"))
