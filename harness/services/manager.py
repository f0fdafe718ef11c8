"""Start, reuse, stop and restart the local Kafka, Redis and Prometheus under one root.

Everything a run needs lives under the root: data, logs (`<root>/<service>/*.log`)
and `state.json`. `up()` is idempotent: services the state file lists that are alive
and answer are reused as they are. The Kafka jars live in a cache shared by all roots.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from rankstream.harness.services import state as state_file
from rankstream.harness.services.base import Service
from rankstream.harness.services.endpoints import Endpoints
from rankstream.harness.services.errors import ServiceError
from rankstream.harness.services.install import install_debian_packages, missing_packages
from rankstream.harness.services.kafka import KafkaService
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
from rankstream.harness.services.redis import RedisService
from rankstream.stream.settings import Settings

SERVICE_TYPES: tuple[type[Service], ...] = (KafkaService, RedisService, PrometheusService)


def default_root() -> Path:
    """Where `rankstream services` keeps a developer's services: $DATA_DIR/services."""
    return Path(Settings.from_env().data_dir) / "services"


class ServiceManager:
    """The local services under `root`; see the module docstring."""

    def __init__(
        self, root: Path, cache_dir: Path | None = None, progress: Progress | None = None
    ) -> None:
        self.root = Path(root).resolve()
        cache = Path(cache_dir) if cache_dir else Path(Settings.from_env().data_dir) / "cache"
        self.progress = progress or Progress()
        self.services: dict[str, Service] = {
            kind.name: kind(self.root, cache) for kind in SERVICE_TYPES
        }

    # -- whole set ----------------------------------------------------------------

    def up(self) -> Endpoints:
        """Install what is missing, start what is not running, wait until all answer."""
        with state_file.locked(self.root):
            self._install(list(self.services))
            states = state_file.load(self.root)
            for name in self.services:
                states[name] = self._ensure_running(name, states.get(name))
                state_file.save(self.root, states)
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
            states[name] = self._ensure_running(name, states.get(name), keep_ports=True)
            state_file.save(self.root, states)

    def stop(self, name: str) -> None:
        """Stop one service; its data and ports are kept for the next start."""
        with state_file.locked(self.root):
            states = state_file.load(self.root)
            self._stop(name, states)
            state_file.save(self.root, states)

    def restart(self, name: str) -> None:
        self.stop(name)
        self.start(name)

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

    def _install(self, names: list[str]) -> None:
        binaries = dict(pair for n in names for pair in self._service(n).apt_binaries)
        install_debian_packages(
            missing_packages(binaries), self.root / "apt-get.log", self.progress
        )
        for name in names:
            self._service(name).ensure_installed(self.progress)

    def _ensure_running(
        self, name: str, entry: state_file.ServiceState | None, keep_ports: bool = False
    ) -> state_file.ServiceState:
        service = self._service(name)
        entry = entry or state_file.ServiceState()
        if is_running(entry.pid, service.dir):
            assert entry.pid is not None
            with self.progress.step(f"{name}: reusing pid {entry.pid}"):
                wait_until(
                    lambda: service.is_ready(entry.ports), service.startup_timeout,
                    name, entry.pid, service.dir, service.log_path,
                )  # fmt: skip
            return entry
        ports = self._ports(service, entry.ports, keep_ports)
        with self.progress.step(f"starting {name} on {service.address(ports)}"):
            pid = spawn(service.command(ports, self.progress), service.log_path, service.dir)
            wait_until(
                lambda: service.is_ready(ports), service.startup_timeout,
                name, pid, service.dir, service.log_path,
            )  # fmt: skip
        return state_file.ServiceState(pid=pid, ports=ports)

    @staticmethod
    def _ports(service: Service, recorded: dict[str, int], keep: bool) -> dict[str, int]:
        """The recorded ports if they are all free again, else fresh ones (or an error)."""
        wanted = set(service.port_names)
        if set(recorded) == wanted and all(port_is_free(p) for p in recorded.values()):
            return dict(recorded)
        if keep and recorded:
            raise ServiceError(
                f"{service.name}: its ports {recorded} are taken by another process; "
                "cannot restart it where clients expect it"
            )
        ports: dict[str, int] = {}
        while len(ports) < len(wanted):
            port = free_port()
            if port not in ports.values():
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
        def address(name: str) -> str:
            entry = states.get(name)
            if entry is None or not entry.ports:
                raise ServiceError(f"{name} has never been started under {self.root}")
            return self.services[name].address(entry.ports)

        return Endpoints(address("kafka"), address("redis"), address("prometheus"))
