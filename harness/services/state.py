"""`<root>/state.json`: the topology, each service's pid and ports, and a lock.

Ports stay in the file after a stop, so a restart listens where clients expect; the
topology (how many Kafka nodes, Redis replicas) stays so that `down`, `status` and a
restart find every service without being told the layout again.
"""

from __future__ import annotations

import fcntl
import json
import os
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path


@dataclass
class ServiceState:
    pid: int | None = None
    ports: dict[str, int] = field(default_factory=dict)


def _raw(root: Path) -> dict:
    path = root / "state.json"
    return json.loads(path.read_text()) if path.exists() else {}


def load(root: Path) -> dict[str, ServiceState]:
    return {
        name: ServiceState(pid=entry.get("pid"), ports=dict(entry.get("ports", {})))
        for name, entry in _raw(root).get("services", {}).items()
    }


def load_topology(root: Path) -> dict[str, int] | None:
    """The topology recorded by the last `up`, None before any."""
    topology = _raw(root).get("topology")
    return dict(topology) if topology is not None else None


def save(
    root: Path, states: dict[str, ServiceState], topology: dict[str, int] | None = None
) -> None:
    """Write the states; the recorded topology is kept unless a new one is given."""
    root.mkdir(parents=True, exist_ok=True)
    topology = topology if topology is not None else load_topology(root)
    tmp = root / "state.json.tmp"
    payload: dict = {"services": {name: asdict(state) for name, state in states.items()}}
    if topology is not None:
        payload["topology"] = topology
    tmp.write_text(json.dumps(payload, indent=2, sort_keys=True))
    os.replace(tmp, root / "state.json")


@contextmanager
def locked(root: Path) -> Iterator[None]:
    """One manager at a time per root (two `services up` at once would race)."""
    root.mkdir(parents=True, exist_ok=True)
    with open(root / ".lock", "w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)
