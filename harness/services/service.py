"""What the manager needs to know about one service; one subclass per service."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping
from pathlib import Path

from rankstream.harness.services.progress import Progress


class Service(ABC):
    """One local server process: its install, config, command line and readiness probe.

    `port_names` are the TCP ports it listens on; the manager picks them once and
    keeps them across restarts, so clients reconnect to the same address.
    """

    name: str
    port_names: tuple[str, ...] = ("port",)
    apt_binaries: tuple[tuple[str, str], ...] = ()  # (binary on PATH, Debian package)
    startup_timeout: float = 30.0
    stop_timeout: float = 15.0

    def __init__(self, root: Path, cache_dir: Path) -> None:
        self.dir = root / self.name
        self.cache_dir = cache_dir  # shared across roots (jars are not per test run)
        # Every service's ports under the root, by name, set by the manager before
        # `command`: the nodes of a Kafka quorum, a Redis replica and the sentinels
        # find each other there.
        self.peers: Mapping[str, Mapping[str, int]] = {}

    @property
    def log_path(self) -> Path:
        return self.dir / f"{self.name}.log"

    def ensure_installed(self, progress: Progress) -> None:  # noqa: B027 (optional hook)
        """Fetch anything beyond the Debian packages (which the manager installs)."""

    @abstractmethod
    def command(self, ports: Mapping[str, int], progress: Progress) -> list[str]:
        """Write config / prepare storage under self.dir; return the argv to run."""

    @abstractmethod
    def is_ready(self, ports: Mapping[str, int]) -> bool:
        """One quick probe: does the service answer a real request?"""

    @abstractmethod
    def address(self, ports: Mapping[str, int]) -> str:
        """What clients are given: bootstrap servers, a redis:// or http:// URL."""
