"""Where a process finds its transport, store and metrics endpoint: the deployment settings.

Configuration comes from the environment (`RANKSTREAM_*`), read here by `Settings.from_env`
and nowhere else, so this class is the one list of what the system can be told. Unset
Kafka/Redis settings mean the embedded default (no services). It lives in `stream/`, the
lowest layer that needs it; the layers above receive a `Settings`, never the environment.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field

ENV_PREFIX = "RANKSTREAM_"
DEFAULT_PHI_DIM = 36  # the paper's phi: 9 descriptors x 4 similarity measures


def _env(name: str, default: str | None = None) -> str | None:
    value = os.environ.get(ENV_PREFIX + name)
    return value if value not in (None, "") else default


def _int_env(name: str, default: int) -> int:
    value = _env(name)
    if value is None:
        return default
    try:
        return int(value)
    except ValueError:
        raise ValueError(f"{ENV_PREFIX}{name} must be an integer, got {value!r}") from None


def default_data_dir() -> str:
    """~/.cache/rankstream: the caches (collections, face features, Kafka jars, services)."""
    return os.path.expanduser("~/.cache/rankstream")


@dataclass(frozen=True)
class Settings:
    """What a process needs to find its transport, store and metrics endpoint."""

    kafka_bootstrap: str | None = None  # host:port[,host:port]; None = embedded transport
    redis_url: str | None = None  # redis://[user:pass@]host:port/db; None = embedded store
    redis_password: str | None = None  # overrides the URL's password (secrets from env files)
    prometheus_url: str | None = None  # http://host:port of the Prometheus that scrapes workers
    metrics_port: int | None = None  # Prometheus /metrics port; None = no HTTP exporter
    metrics_host: str = "127.0.0.1"  # bind address of /metrics; 0.0.0.0 only when asked
    topic_prefix: str = "rankstream"
    # Kafka security pass-through (kafka-python names)
    kafka_security_protocol: str = "PLAINTEXT"
    kafka_sasl_mechanism: str | None = None
    kafka_sasl_username: str | None = None
    kafka_sasl_password: str | None = None
    kafka_ssl_cafile: str | None = None
    kafka_ssl_certfile: str | None = None  # client certificate (PEM) for mutual TLS
    kafka_ssl_keyfile: str | None = None  # its private key (PEM)
    data_dir: str = field(default_factory=default_data_dir)
    # the HTTP API (`rankstream serve`): bind address, port, bearer token, body limit
    api_host: str = "127.0.0.1"  # 0.0.0.0 only when asked (compose)
    api_port: int = 8000
    api_token: str | None = None  # set: every route but /healthz and /readyz requires it
    api_max_body_bytes: int = 8 * 1024 * 1024
    # The width d of phi(query, image) this deployment learns from: every message,
    # recording and stored model must have it (others are refused, never misread).
    phi_dim: int = DEFAULT_PHI_DIM

    def __post_init__(self) -> None:
        if isinstance(self.phi_dim, bool) or not isinstance(self.phi_dim, int) or self.phi_dim < 1:
            raise ValueError(f"phi_dim must be an integer >= 1, got {self.phi_dim!r}")

    @property
    def triplets_topic(self) -> str:
        return f"{self.topic_prefix}.triplets"

    @property
    def queries_topic(self) -> str:
        return f"{self.topic_prefix}.queries"

    @property
    def dead_letter_topic(self) -> str:
        return f"{self.topic_prefix}.dead-letter"

    @classmethod
    def from_env(cls) -> Settings:
        """The Settings the environment describes (unset = the defaults)."""
        port = _env("METRICS_PORT")
        width = _env("PHI_DIM")
        defaults = cls()
        return cls(
            kafka_bootstrap=_env("KAFKA_BOOTSTRAP"),
            redis_url=_env("REDIS_URL"),
            redis_password=_env("REDIS_PASSWORD"),
            prometheus_url=_env("PROMETHEUS_URL"),
            metrics_port=int(port) if port is not None else None,
            metrics_host=_env("METRICS_HOST", defaults.metrics_host),
            topic_prefix=_env("TOPIC_PREFIX", defaults.topic_prefix),
            kafka_security_protocol=_env(
                "KAFKA_SECURITY_PROTOCOL", defaults.kafka_security_protocol
            ),
            kafka_sasl_mechanism=_env("KAFKA_SASL_MECHANISM"),
            kafka_sasl_username=_env("KAFKA_SASL_USERNAME"),
            kafka_sasl_password=_env("KAFKA_SASL_PASSWORD"),
            kafka_ssl_cafile=_env("KAFKA_SSL_CAFILE"),
            kafka_ssl_certfile=_env("KAFKA_SSL_CERTFILE"),
            kafka_ssl_keyfile=_env("KAFKA_SSL_KEYFILE"),
            data_dir=_env("DATA_DIR", defaults.data_dir),
            api_host=_env("API_HOST", defaults.api_host),
            api_port=_int_env("API_PORT", defaults.api_port),
            api_token=_env("API_TOKEN"),
            api_max_body_bytes=_int_env("API_MAX_BODY_BYTES", defaults.api_max_body_bytes),
            phi_dim=_positive_int("PHI_DIM", width) if width is not None else DEFAULT_PHI_DIM,
        )


def _positive_int(name: str, value: str) -> int:
    """An integer >= 1 read from RANKSTREAM_<name>; ValueError naming the variable."""
    try:
        number = int(value)
    except ValueError:
        number = 0
    if number < 1:
        raise ValueError(f"{ENV_PREFIX}{name} must be an integer >= 1, got {value!r}")
    return number
