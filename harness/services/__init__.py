"""Real Kafka, Redis and Prometheus on this machine, for development and tests.

    from rankstream.harness.services import ServiceManager
    endpoints = ServiceManager(root).up()      # installs on first use; idempotent
    os.environ.update(endpoints.env())         # RANKSTREAM_KAFKA_BOOTSTRAP, ...
    add_scrape_target("worker-online", "127.0.0.1:9108")

Kafka runs from Maven Central jars (deploy/kafka), Redis and Prometheus from Debian
packages, each as a detached process of ours under the root — never systemd.
"""

from __future__ import annotations

from pathlib import Path

from rankstream.harness.services.endpoints import Endpoints
from rankstream.harness.services.manager import ServiceManager, default_root
from rankstream.harness.services.prometheus import write_scrape_target
from rankstream.harness.services.service_error import ServiceError


def add_scrape_target(job: str, address: str, root: Path | None = None) -> Path:
    """Have the Prometheus under root (default: the developer's) scrape host:port as job."""
    targets_dir = Path(root or default_root()) / "prometheus" / "targets"
    return write_scrape_target(targets_dir, job, address)


__all__ = [
    "Endpoints",
    "ServiceError",
    "ServiceManager",
    "add_scrape_target",
    "default_root",
]
