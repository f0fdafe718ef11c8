"""Where the running services listen, in the form clients and `Settings` take."""

from __future__ import annotations

from dataclasses import dataclass

from rankstream.stream.settings import ENV_PREFIX


@dataclass(frozen=True)
class Endpoints:
    kafka_bootstrap: str  # host:port
    redis_url: str  # redis://host:port/0
    prometheus_url: str  # http://host:port

    def env(self) -> dict[str, str]:
        """The variables `Settings.from_env()` reads to use these services."""
        return {
            f"{ENV_PREFIX}KAFKA_BOOTSTRAP": self.kafka_bootstrap,
            f"{ENV_PREFIX}REDIS_URL": self.redis_url,
            f"{ENV_PREFIX}PROMETHEUS_URL": self.prometheus_url,
        }
