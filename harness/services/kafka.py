"""KRaft Kafka from Maven Central jars: one node, or a cluster of N nodes.

Every node is one JVM that is both broker and controller; in a cluster the N
controllers are the Raft quorum (`controller.quorum.voters`), topics get three replicas
and `min.insync.replicas` 2 (deploy/kafka/server.properties.template). deploy/kafka/pom.xml
pins the version; the jars are resolved once into the shared cache. Every node's
storage is formatted once with the root's one cluster id, and kept with its ports
across restarts so producers and consumers reconnect.
"""

from __future__ import annotations

import base64
import contextlib
import logging
import uuid
from collections.abc import Iterator, Mapping
from pathlib import Path
from string import Template

from rankstream.harness.services.install import DEPLOY_DIR, ensure_kafka_jars
from rankstream.harness.services.process import accepts_tcp, log_tail
from rankstream.harness.services.progress import Progress
from rankstream.harness.services.service import Service
from rankstream.harness.services.service_error import ServiceError

JVM_OPTIONS = ("-XX:+UseG1GC", "-Djava.awt.headless=true")
HEAP_ONE_NODE = ("-Xmx512m", "-Xms256m")
HEAP_CLUSTER_NODE = ("-Xmx256m", "-Xms128m")  # three JVMs share a small machine
CLUSTER_REPLICATION = (3, 2)  # (replication factor, min.insync.replicas) on >= 3 nodes


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


def node_name(node_id: int, nodes: int) -> str:
    """ "kafka" for the one-node setup, "kafka-<id>" for the nodes of a cluster."""
    return "kafka" if nodes == 1 else f"kafka-{node_id}"


class KafkaService(Service):
    """Node `node_id` of `nodes`; the other nodes' ports are in `peers` (by name)."""

    name = "kafka"
    port_names = ("port", "controller_port")
    startup_timeout = 90.0  # ~5-15 s normally; a shared 2-core box can be much slower
    stop_timeout = 30.0  # controlled shutdown flushes logs and the metadata snapshot

    jar_dir: Path | None = None

    def __init__(self, root: Path, cache_dir: Path, node_id: int = 1, nodes: int = 1) -> None:
        if not 1 <= node_id <= nodes:
            raise ValueError(f"node_id must be 1..{nodes}, got {node_id}")
        if nodes == 2:
            raise ValueError("a 2-node controller quorum survives no failure: use 1 or >= 3")
        self.name = node_name(node_id, nodes)
        self.node_id, self.nodes = node_id, nodes
        super().__init__(root, cache_dir)

    @property
    def cluster_id_path(self) -> Path:
        """One cluster id per services root, shared by every node's storage."""
        return self.dir.parent / "kafka-cluster-id"

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
        replication, min_insync = CLUSTER_REPLICATION if self.nodes >= 3 else (1, 1)
        properties.write_text(
            template.substitute(
                node_id=self.node_id,
                quorum_voters=self.quorum_voters(ports),
                broker_port=ports["port"],
                controller_port=ports["controller_port"],
                log_dirs=self.data_dir,
                replication_factor=replication,
                min_insync_replicas=min_insync,
            )
        )
        heap = HEAP_ONE_NODE if self.nodes == 1 else HEAP_CLUSTER_NODE
        java = ["java", *heap, *JVM_OPTIONS, *self._log_options(), "-cp", f"{self.jar_dir}/*"]
        if not (self.data_dir / "meta.properties").exists():
            self._format(java, properties, progress)
        return [*java, "kafka.Kafka", str(properties)]

    def quorum_voters(self, ports: Mapping[str, int]) -> str:
        """`id@127.0.0.1:controller_port` for every node (this one's from `ports`)."""
        everyone = {**self.peers, self.name: ports}
        names = {node: node_name(node, self.nodes) for node in range(1, self.nodes + 1)}
        missing = sorted(name for name in names.values() if name not in everyone)
        if missing:
            raise ServiceError(f"{self.name}: no ports known for {missing}")
        return ",".join(
            f"{node}@127.0.0.1:{everyone[name]['controller_port']}" for node, name in names.items()
        )

    def cluster_id(self) -> str:
        if not self.cluster_id_path.exists():
            self.cluster_id_path.parent.mkdir(parents=True, exist_ok=True)
            self.cluster_id_path.write_text(random_cluster_id())
        return self.cluster_id_path.read_text().strip()

    def _log_options(self) -> list[str]:
        log4j = DEPLOY_DIR / "kafka" / "log4j.properties"
        return [f"-Dlog4j.configuration=file:{log4j}", f"-Dkafka.logs.dir={self.dir}"]

    def _format(self, java: list[str], properties: Path, progress: Progress) -> None:
        import subprocess

        command = [*java, "kafka.tools.StorageTool", "format", "--ignore-formatted"]
        command += [f"--cluster-id={self.cluster_id()}", f"--config={properties}"]
        with progress.step("formatting Kafka storage (KRaft)"), open(self.log_path, "ab") as log:
            if subprocess.run(command, stdout=log, stderr=subprocess.STDOUT).returncode:
                raise ServiceError(f"kafka storage format failed:\n{log_tail(self.log_path)}")

    def is_ready(self, ports: Mapping[str, int]) -> bool:
        """The port is open and the broker answers a DescribeCluster request that lists it.

        (A node of a cluster answers only once a controller quorum has formed.)
        """
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
                brokers = admin.describe_cluster().get("brokers") or []
                return any(b.get("broker_id", b.get("node_id")) == self.node_id for b in brokers)
            except KafkaError:
                return False
            finally:
                admin.close()

    def address(self, ports: Mapping[str, int]) -> str:
        return f"127.0.0.1:{ports['port']}"
