"""A one-node KRaft Kafka (broker + controller in one JVM) from Maven Central jars.

deploy/kafka/pom.xml pins the version; the jars are resolved once into the shared
cache. The storage is formatted once per services root (a fresh cluster id), and
kept with its ports across restarts so producers and consumers reconnect.
"""

from __future__ import annotations

import base64
import contextlib
import logging
import uuid
from collections.abc import Iterator, Mapping
from pathlib import Path
from string import Template

from rankstream.harness.services.base import Service
from rankstream.harness.services.errors import ServiceError
from rankstream.harness.services.install import DEPLOY_DIR, ensure_kafka_jars
from rankstream.harness.services.process import accepts_tcp, log_tail
from rankstream.harness.services.progress import Progress

JVM_OPTIONS = ("-Xmx512m", "-Xms256m", "-XX:+UseG1GC", "-Djava.awt.headless=true")


def random_cluster_id() -> str:
    """What `kafka-storage.sh random-uuid` prints: 16 random bytes, url-safe base64.

    Like Kafka's own Uuid.randomUuid, never one starting with '-': the storage tool's
    argument parser would take it for an option.
    """
    while True:
        cluster_id = base64.urlsafe_b64encode(uuid.uuid4().bytes).rstrip(b"=").decode()
        if not cluster_id.startswith("-"):
            return cluster_id


@contextlib.contextmanager
def _quiet_kafka_logs() -> Iterator[None]:
    """kafka-python logs every refused connection while the broker boots; hush it."""
    logger = logging.getLogger("kafka")
    level = logger.level
    logger.setLevel(logging.CRITICAL)
    try:
        yield
    finally:
        logger.setLevel(level)


class KafkaService(Service):
    name = "kafka"
    port_names = ("port", "controller_port")
    startup_timeout = 90.0  # ~5-15 s normally; a shared 2-core box can be much slower
    stop_timeout = 30.0  # controlled shutdown flushes logs and the metadata snapshot

    jar_dir: Path | None = None

    @property
    def data_dir(self) -> Path:
        return self.dir / "data"

    def ensure_installed(self, progress: Progress) -> None:
        self.jar_dir = ensure_kafka_jars(self.cache_dir, self.dir / "maven.log", progress)

    def command(self, ports: Mapping[str, int], progress: Progress) -> list[str]:
        if self.jar_dir is None:
            self.ensure_installed(progress)
        self.dir.mkdir(parents=True, exist_ok=True)
        template = Template((DEPLOY_DIR / "kafka" / "server.properties.template").read_text())
        properties = self.dir / "server.properties"
        properties.write_text(
            template.substitute(
                broker_port=ports["port"],
                controller_port=ports["controller_port"],
                log_dirs=self.data_dir,
            )
        )
        java = ["java", *JVM_OPTIONS, *self._log_options(), "-cp", f"{self.jar_dir}/*"]
        if not (self.data_dir / "meta.properties").exists():
            self._format(java, properties, progress)
        return [*java, "kafka.Kafka", str(properties)]

    def _log_options(self) -> list[str]:
        log4j = DEPLOY_DIR / "kafka" / "log4j.properties"
        return [f"-Dlog4j.configuration=file:{log4j}", f"-Dkafka.logs.dir={self.dir}"]

    def _format(self, java: list[str], properties: Path, progress: Progress) -> None:
        import subprocess

        command = [*java, "kafka.tools.StorageTool", "format", "--ignore-formatted"]
        command += [f"--cluster-id={random_cluster_id()}", f"--config={properties}"]
        with progress.step("formatting Kafka storage (KRaft)"), open(self.log_path, "ab") as log:
            if subprocess.run(command, stdout=log, stderr=subprocess.STDOUT).returncode:
                raise ServiceError(f"kafka storage format failed:\n{log_tail(self.log_path)}")

    def is_ready(self, ports: Mapping[str, int]) -> bool:
        """The port is open and the broker answers a metadata (DescribeCluster) request."""
        if not accepts_tcp(ports["port"]):
            return False
        from kafka import KafkaAdminClient
        from kafka.errors import KafkaError

        with _quiet_kafka_logs():
            try:
                admin = KafkaAdminClient(
                    bootstrap_servers=self.address(ports),
                    bootstrap_timeout_ms=3000,
                    request_timeout_ms=3000,
                )
            except KafkaError:
                return False
            try:
                return bool(admin.describe_cluster().get("brokers"))
            except KafkaError:
                return False
            finally:
                admin.close()

    def address(self, ports: Mapping[str, int]) -> str:
        return f"127.0.0.1:{ports['port']}"
