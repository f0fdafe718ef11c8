"""`<root>/state.json`: each service's pid and ports, and a lock around changing it.

Ports stay in the file after a stop, so a restart listens where clients expect.
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


def load(root: Path) -> dict[str, ServiceState]:
    path = root / "state.json"
    if not path.exists():
        return {}
    raw = json.loads(path.read_text())
    return {
        name: ServiceState(pid=entry.get("pid"), ports=dict(entry.get("ports", {})))
        for name, entry in raw.get("services", {}).items()
    }


def save(root: Path, states: dict[str, ServiceState]) -> None:
    root.mkdir(parents=True, exist_ok=True)
    tmp = root / "state.json.tmp"
    payload = {"services": {name: asdict(state) for name, state in states.items()}}
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
