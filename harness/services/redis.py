"""Redis from the Debian package, as our own process with an append-only file.

AOF with fsync every second means a restarted Redis comes back with its data (the
reliability tests restart it mid-stream); RDB snapshots are off (`--save ''`).
"""

from __future__ import annotations

import shutil
from collections.abc import Mapping

from rankstream.harness.services.base import Service
from rankstream.harness.services.progress import Progress


class RedisService(Service):
    name = "redis"
    apt_binaries = (("redis-server", "redis-server"),)
    startup_timeout = 20.0

    def command(self, ports: Mapping[str, int], progress: Progress) -> list[str]:
        self.dir.mkdir(parents=True, exist_ok=True)
        return [
            shutil.which("redis-server") or "redis-server",
            "--port", str(ports["port"]),
            "--bind", "127.0.0.1",
            "--daemonize", "no",
            "--appendonly", "yes",
            "--appendfsync", "everysec",
            "--save", "",
            "--dir", str(self.dir),  # logs go to stdout -> redis.log
        ]  # fmt: skip

    def is_ready(self, ports: Mapping[str, int]) -> bool:
        import redis

        client = redis.Redis.from_url(self.address(ports), socket_timeout=1.0)
        try:
            return bool(client.ping())
        except redis.RedisError:
            return False
        finally:
            client.close()

    def address(self, ports: Mapping[str, int]) -> str:
        return f"redis://127.0.0.1:{ports['port']}/0"
