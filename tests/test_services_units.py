"""Harness pieces that need no running service: targets, ports, pids, cluster ids."""

from __future__ import annotations

import base64
import json
import socket
import subprocess

import pytest

from rankstream.harness.services import Endpoints, ServiceError, add_scrape_target
from rankstream.harness.services.kafka import KafkaService, random_cluster_id
from rankstream.harness.services.manager import ServiceManager
from rankstream.harness.services.process import is_running, port_is_free, terminate


def test_endpoints_env_is_what_settings_reads(monkeypatch):
    from rankstream.stream.settings import Settings

    endpoints = Endpoints("127.0.0.1:9092", "redis://127.0.0.1:6379/0", "http://127.0.0.1:9090")
    for name, value in endpoints.env().items():
        monkeypatch.setenv(name, value)
    settings = Settings.from_env()
    assert settings.kafka_bootstrap == endpoints.kafka_bootstrap
    assert settings.redis_url == endpoints.redis_url
    assert endpoints.env()["RANKSTREAM_PROMETHEUS_URL"] == endpoints.prometheus_url


def test_scrape_targets_merge_per_job_and_reject_bad_input(tmp_path):
    path = add_scrape_target("worker-online", "127.0.0.1:9101", root=tmp_path)
    add_scrape_target("worker-online", "127.0.0.1:9102", root=tmp_path)
    add_scrape_target("worker-online", "127.0.0.1:9101", root=tmp_path)
    assert json.loads(path.read_text()) == [
        {"targets": ["127.0.0.1:9101", "127.0.0.1:9102"], "labels": {"job": "worker-online"}}
    ]
    with pytest.raises(ValueError, match="job name"):
        add_scrape_target("../escape", "127.0.0.1:1", root=tmp_path)
    with pytest.raises(ValueError, match="host:port"):
        add_scrape_target("ok", "127.0.0.1", root=tmp_path)


def test_cluster_id_is_16_bytes_of_url_safe_base64_never_option_like():
    ids = {random_cluster_id() for _ in range(500)}  # ~1 in 64 raw ids starts with '-'
    assert len(ids) == 500
    for cluster_id in ids:
        assert len(cluster_id) == 22 and not cluster_id.startswith("-")
        assert len(base64.urlsafe_b64decode(cluster_id + "==")) == 16


def test_restart_refuses_ports_another_process_took(tmp_path):
    with socket.socket() as squatter:
        squatter.bind(("127.0.0.1", 0))
        squatter.listen()
        taken = squatter.getsockname()[1]
        assert not port_is_free(taken)
        service = KafkaService(tmp_path, tmp_path)
        recorded = {"port": taken, "controller_port": taken + 1}
        with pytest.raises(ServiceError, match="taken"):
            ServiceManager._ports(service, recorded, keep=True)
        fresh = ServiceManager._ports(service, recorded, keep=False)
    assert set(fresh) == {"port", "controller_port"} and taken not in fresh.values()
    assert len(set(fresh.values())) == 2


def test_a_pid_counts_only_in_its_own_directory_and_terminate_is_idempotent(tmp_path):
    other = tmp_path / "elsewhere"
    other.mkdir()
    proc = subprocess.Popen(["sleep", "60"], cwd=tmp_path, start_new_session=True)
    try:
        assert is_running(proc.pid, tmp_path)
        assert not is_running(proc.pid, other)
        terminate(proc.pid, tmp_path, timeout=5)
        assert not is_running(proc.pid, tmp_path)
        terminate(proc.pid, tmp_path, timeout=5)  # already gone: no error
    finally:
        proc.kill()
        proc.wait()
    assert not is_running(None, tmp_path)


def test_unknown_service_name_is_a_value_error(tmp_path):
    with pytest.raises(ValueError, match="unknown service"):
        ServiceManager(tmp_path).stop("zookeeper")


def test_a_cluster_topology_names_every_node_and_shares_one_quorum(tmp_path):
    """Three Kafka nodes list the same three voters; a replicated Redis adds 3 Sentinels."""
    from rankstream.harness.services.manager import Topology

    manager = ServiceManager(tmp_path, tmp_path / "cache", topology=Topology(3, 2))
    assert manager.kafka_nodes() == ["kafka-1", "kafka-2", "kafka-3"]
    assert list(manager.services) == [
        "kafka-1", "kafka-2", "kafka-3", "redis", "redis-replica-1", "redis-replica-2",
        "sentinel-1", "sentinel-2", "sentinel-3", "prometheus",
    ]  # fmt: skip
    peers = {f"kafka-{i}": {"port": 9000 + i, "controller_port": 9100 + i} for i in (1, 2, 3)}
    voters = set()
    for name in manager.kafka_nodes():
        node = manager.services[name]
        node.peers = peers
        voters.add(node.quorum_voters(peers[name]))  # type: ignore[attr-defined]
    assert voters == {"1@127.0.0.1:9101,2@127.0.0.1:9102,3@127.0.0.1:9103"}


@pytest.mark.parametrize("brokers", [0, 2])
def test_a_quorum_that_survives_no_failure_is_refused(brokers):
    from rankstream.harness.services.manager import Topology

    with pytest.raises(ValueError, match="kafka_brokers must be 1 or >= 3"):
        Topology(kafka_brokers=brokers)
