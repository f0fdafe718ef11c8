"""Keep deploy/docker-compose.cluster.yml (three Kafka nodes, Redis under Sentinel) true.

`docker compose config` merges it onto deploy/docker-compose.yml when the Docker CLI is
here (it needs no engine); the checks on the merged services run on the files
themselves too, so a machine without the CLI still checks the layout.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from rankstream.stream.settings import parse_sentinel_url

DEPLOY = Path(__file__).resolve().parents[1] / "deploy"
BASE = DEPLOY / "docker-compose.yml"
CLUSTER = DEPLOY / "docker-compose.cluster.yml"
KAFKA_NODES = ("kafka", "kafka-2", "kafka-3")
SENTINELS = ("sentinel-1", "sentinel-2", "sentinel-3")
APP_SERVICES = ("online-1", "online-2", "batch", "evaluator", "simulator", "serve")


class _ComposeLoader(yaml.SafeLoader):
    """Compose's merge tags: `!reset` and `!override` keep the value as written."""


_ComposeLoader.add_constructor("!reset", lambda loader, node: loader.construct_sequence(node))
_ComposeLoader.add_constructor("!override", lambda loader, node: loader.construct_sequence(node))


def _cluster_file() -> dict[str, Any]:
    return yaml.load(CLUSTER.read_text(), Loader=_ComposeLoader)


def _merged() -> dict[str, Any]:
    """`docker compose config` of both files, with throwaway secrets."""
    docker = shutil.which("docker")
    if (
        docker is None
        or subprocess.run([docker, "compose", "version"], capture_output=True).returncode
    ):
        pytest.skip(
            "the Docker CLI with Compose v2 is not installed (make compose-test installs it)"
        )
    env = {
        "RANKSTREAM_REDIS_PASSWORD": "x" * 16,
        "GRAFANA_ADMIN_PASSWORD": "y" * 16,
        "PATH": "/usr/bin:/bin:/usr/local/bin",
    }
    done = subprocess.run(
        [docker, "compose", "-f", str(BASE), "-f", str(CLUSTER), "config", "--format", "json"],
        capture_output=True, text=True, env=env, cwd=DEPLOY, timeout=60,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)["services"]


def test_three_kafka_nodes_form_one_quorum_with_replicated_topics() -> None:
    services = _cluster_file()["services"]
    environments = [services[name]["environment"] for name in KAFKA_NODES]
    voters = {env["KAFKA_CONTROLLER_QUORUM_VOTERS"] for env in environments}
    assert voters == {"1@kafka:9093,2@kafka-2:9093,3@kafka-3:9093"}
    assert len({env["CLUSTER_ID"] for env in environments}) == 1
    for env in environments:
        assert (env["KAFKA_DEFAULT_REPLICATION_FACTOR"], env["KAFKA_MIN_INSYNC_REPLICAS"]) == (3, 2)
        assert env["KAFKA_UNCLEAN_LEADER_ELECTION_ENABLE"] == "false"
    assert [services[name]["environment"].get("KAFKA_NODE_ID") for name in KAFKA_NODES[1:]] == [
        2,
        3,
    ]


def test_every_rankstream_container_reaches_the_cluster_through_the_sentinels() -> None:
    services = _cluster_file()["services"]
    for name in APP_SERVICES:
        env = services[name]["environment"]
        assert env["RANKSTREAM_KAFKA_BOOTSTRAP"].split(",") == [f"{n}:9092" for n in KAFKA_NODES]
        target = parse_sentinel_url(env["RANKSTREAM_REDIS_URL"])
        assert target.sentinels == tuple((s, 26379) for s in SENTINELS)
        assert target.master == "rankstream"
        assert set(services[name]["depends_on"]) >= {"kafka-2", "kafka-3", *SENTINELS}, name


def test_docker_compose_merges_the_override_into_a_replicated_deployment() -> None:
    services = _merged()
    images = {
        name: services[name]["image"] for name in (*KAFKA_NODES, "redis-replica-1", *SENTINELS)
    }
    assert {images[n] for n in KAFKA_NODES} == {"apache/kafka:3.9.1"}
    assert {images[n] for n in ("redis-replica-1", *SENTINELS)} == {"redis:7.4-alpine"}
    published = [p["published"] for s in services.values() for p in s.get("ports", [])]
    assert len(published) == len(set(published)), "two services publish one host port"
    assert all(p["host_ip"] == "127.0.0.1" for s in services.values() for p in s.get("ports", []))
    for name in KAFKA_NODES:
        env = services[name]["environment"]
        assert env["KAFKA_CONTROLLER_QUORUM_VOTERS"] == "1@kafka:9093,2@kafka-2:9093,3@kafka-3:9093"
    for name in ("redis-replica-1", "redis-replica-2"):
        assert services[name]["environment"]["REDIS_REPLICA_OF"] == "--replicaof redis 6379"
        assert services[name]["volumes"][0]["source"] == f"{name}-data"
    for name in APP_SERVICES:
        env = services[name]["environment"]
        assert env["RANKSTREAM_REDIS_URL"].startswith("redis+sentinel://"), name
        assert env["RANKSTREAM_REDIS_PASSWORD"] == "x" * 16, name  # the base file's secret stays
