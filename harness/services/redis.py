"""Redis from the Debian package: one server, or a primary, replicas and Sentinels.

Every server runs as our own process with an append-only file (fsync every second), so
a restarted Redis comes back with its data (the reliability tests restart it
mid-stream); RDB snapshots are off (`--save ''`).

Replicated (`rankstream services up --redis-replicas R`): "redis" starts as the
primary, "redis-replica-<i>" as its replicas, and three Sentinels ("sentinel-<i>",
`redis-server --sentinel`) watch it under the name `SENTINEL_MASTER` and promote a
replica when it stops answering for `DOWN_AFTER_MS`. A node that is (re)started asks
the Sentinels who the primary is now and replicates from it, so a killed primary comes
back as a replica of its successor. Clients connect through the Sentinels
(`stream.redis_store`: a `redis+sentinel://` URL).
"""

from __future__ import annotations

import shutil
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from rankstream.harness.services.progress import Progress
from rankstream.harness.services.service import Service

SENTINEL_MASTER = "rankstream"
SENTINEL_QUORUM = 2  # sentinels that must agree the primary is down (of 3)
DOWN_AFTER_MS = 2_000
FAILOVER_TIMEOUT_MS = 10_000
PRIMARY = "redis"


def replica_name(index: int) -> str:
    return f"redis-replica-{index}"


def sentinel_name(index: int) -> str:
    return f"sentinel-{index}"


def _redis_server() -> str:
    return shutil.which("redis-server") or "redis-server"


def _answers(port: int, call: Callable[[Any], Any]) -> Any | None:
    """call(client of 127.0.0.1:port) with 1 s timeouts; None if it does not answer."""
    import redis
    from redis.backoff import NoBackoff
    from redis.retry import Retry

    client = redis.Redis(
        port=port, socket_timeout=1.0, socket_connect_timeout=1.0, retry=Retry(NoBackoff(), 0)
    )
    try:
        return call(client)
    except redis.RedisError:
        return None
    finally:
        client.close()


def current_primary_port(peers: Mapping[str, Mapping[str, int]]) -> int | None:
    """The primary's port as the first answering Sentinel in `peers` reports it."""
    for name, ports in sorted(peers.items()):
        if name.startswith("sentinel-"):
            address = _answers(
                ports["port"], lambda c: c.sentinel_get_master_addr_by_name(SENTINEL_MASTER)
            )
            if address:
                return int(address[1])
    return None


class RedisService(Service):
    """A Redis server; with `replicated`, a member of the primary/replica set."""

    name = PRIMARY
    apt_binaries = (("redis-server", "redis-server"),)
    startup_timeout = 20.0

    def __init__(
        self, root: Path, cache_dir: Path, name: str = PRIMARY, replicated: bool = False
    ) -> None:
        self.name = name
        self.replicated = replicated
        super().__init__(root, cache_dir)

    def command(self, ports: Mapping[str, int], progress: Progress) -> list[str]:
        self.dir.mkdir(parents=True, exist_ok=True)
        argv = [
            _redis_server(),
            "--port", str(ports["port"]),
            "--bind", "127.0.0.1",
            "--daemonize", "no",
            "--appendonly", "yes",
            "--appendfsync", "everysec",
            "--save", "",
            "--dir", str(self.dir),  # logs go to stdout -> redis.log
        ]  # fmt: skip
        if self.replicated:
            primary = current_primary_port(self.peers) or self.peers[PRIMARY]["port"]
            if primary != ports["port"]:
                argv += ["--replicaof", "127.0.0.1", str(primary)]
            # a primary cut off from every replica stops taking writes within 10 s
            # instead of acknowledging what a failover would then throw away
            argv += ["--min-replicas-to-write", "1", "--min-replicas-max-lag", "10"]
        return argv

    def is_ready(self, ports: Mapping[str, int]) -> bool:
        """It answers; a replica also has its link to the primary up (synced once)."""
        info = _answers(ports["port"], lambda c: c.info("replication"))
        if not isinstance(info, dict):
            return False
        return info.get("role") == "master" or info.get("master_link_status") == "up"

    def address(self, ports: Mapping[str, int]) -> str:
        return f"redis://127.0.0.1:{ports['port']}/0"


class SentinelService(Service):
    """One Redis Sentinel watching the primary; ready once it knows the whole set."""

    apt_binaries = (("redis-server", "redis-server"),)
    startup_timeout = 40.0  # replicas are discovered from the primary's INFO every 10 s

    def __init__(
        self, root: Path, cache_dir: Path, name: str, replicas: int, sentinels: int
    ) -> None:
        self.name = name
        self.replicas, self.sentinels = replicas, sentinels
        super().__init__(root, cache_dir)

    def command(self, ports: Mapping[str, int], progress: Progress) -> list[str]:
        """Write the config once: a Sentinel rewrites it with what it learns (keep that)."""
        self.dir.mkdir(parents=True, exist_ok=True)
        config = self.dir / "sentinel.conf"
        if not config.exists():
            primary = self.peers[PRIMARY]["port"]
            config.write_text(
                "\n".join(
                    [
                        f"port {ports['port']}",
                        "bind 127.0.0.1",
                        "daemonize no",
                        f"dir {self.dir}",
                        f"sentinel monitor {SENTINEL_MASTER} 127.0.0.1 {primary} {SENTINEL_QUORUM}",
                        f"sentinel down-after-milliseconds {SENTINEL_MASTER} {DOWN_AFTER_MS}",
                        f"sentinel failover-timeout {SENTINEL_MASTER} {FAILOVER_TIMEOUT_MS}",
                        f"sentinel parallel-syncs {SENTINEL_MASTER} 1",
                        "",
                    ]
                )
            )
        return [_redis_server(), str(config), "--sentinel"]

    def is_ready(self, ports: Mapping[str, int]) -> bool:
        """It reports the primary, every replica and every other Sentinel."""
        master = _answers(ports["port"], lambda c: c.sentinel_master(SENTINEL_MASTER))
        if not isinstance(master, dict):
            return False
        return (
            int(master.get("num-slaves", 0)) >= self.replicas
            and int(master.get("num-other-sentinels", 0)) >= self.sentinels - 1
        )

    def address(self, ports: Mapping[str, int]) -> str:
        return f"127.0.0.1:{ports['port']}"


def sentinel_url(sentinel_ports: list[int], db: int = 0) -> str:
    """What `stream.redis_store.redis_client` takes to reach the primary via Sentinels."""
    hosts = ",".join(f"127.0.0.1:{port}" for port in sentinel_ports)
    return f"redis+sentinel://{hosts}/{SENTINEL_MASTER}/{db}"
