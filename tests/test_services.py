"""The service harness on the real Kafka, Redis and Prometheus (one shared session)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
import urllib.parse
import urllib.request
import uuid

import pytest


def test_up_twice_reuses_the_same_processes(services):
    before = services.manager.status()
    endpoints = services.manager.up()
    after = services.manager.status()
    assert endpoints.kafka_bootstrap == services.kafka_bootstrap
    assert endpoints.redis_url == services.redis_url
    assert endpoints.prometheus_url == services.prometheus_url
    for name, entry in after.items():
        assert entry["ready"], name
        assert entry["pid"] == before[name]["pid"], name
        assert entry["ports"] == before[name]["ports"], name


def test_kafka_round_trip_including_a_1_mib_message(services):
    from kafka import KafkaAdminClient, KafkaConsumer, KafkaProducer

    topic = f"t{uuid.uuid4().hex[:12]}.roundtrip"
    with KafkaAdminClient(bootstrap_servers=services.kafka_bootstrap) as admin:
        admin.create_topics({topic: {"num_partitions": 1}}, wait_for_metadata=True)
    big = os.urandom(1 << 20)
    sent = [b"small", big]
    producer = KafkaProducer(
        bootstrap_servers=services.kafka_bootstrap, max_request_size=16 << 20, acks="all"
    )
    for value in sent:
        producer.send(topic, value=value, key=b"k").get(timeout=30)
    producer.close()
    consumer = KafkaConsumer(
        topic,
        bootstrap_servers=services.kafka_bootstrap,
        auto_offset_reset="earliest",
        enable_auto_commit=False,
        max_partition_fetch_bytes=16 << 20,
        fetch_max_bytes=32 << 20,
        consumer_timeout_ms=20_000,
    )
    received = []
    for record in consumer:
        received.append(record.value)
        if len(received) == len(sent):
            break
    consumer.close()
    assert received == sent


def test_redis_answers_and_keeps_an_append_only_file(services):
    import redis

    client = redis.Redis.from_url(services.redis_url)
    assert client.ping()
    assert client.config_get("appendonly") == {"appendonly": "yes"}
    assert client.config_get("appendfsync") == {"appendfsync": "everysec"}
    client.close()


def test_redis_restart_keeps_data_and_port(services):
    import redis

    key = f"t{uuid.uuid4().hex[:12]}:survives"
    client = redis.Redis.from_url(services.redis_url)
    client.set(key, b"\x00weights\xff")
    client.close()
    pid_before = services.manager.status()["redis"]["pid"]
    services.manager.restart("redis")
    status = services.manager.status()["redis"]
    assert status["ready"] and status["pid"] != pid_before
    assert status["address"] == services.redis_url
    client = redis.Redis.from_url(services.redis_url)
    assert client.get(key) == b"\x00weights\xff"
    client.delete(key)
    client.close()


def _prometheus_query(prometheus_url: str, promql: str) -> list[dict]:
    url = f"{prometheus_url}/api/v1/query?{urllib.parse.urlencode({'query': promql})}"
    with urllib.request.urlopen(url, timeout=5) as reply:
        return json.load(reply)["data"]["result"]


def test_prometheus_scrapes_a_target_added_at_run_time(services):
    from prometheus_client import CollectorRegistry, Gauge, start_http_server

    registry = CollectorRegistry()
    value = float(uuid.uuid4().int % 1000) + 0.5
    Gauge("rankstream_test_probe", "set by the services test", registry=registry).set(value)
    server, thread = start_http_server(0, addr="127.0.0.1", registry=registry)
    job = f"t{uuid.uuid4().hex[:12]}"
    try:
        services.manager.add_scrape_target(job, f"127.0.0.1:{server.server_port}")
        deadline = time.monotonic() + 60
        up: list[dict] = []
        while time.monotonic() < deadline:
            up = _prometheus_query(services.prometheus_url, f'up{{job="{job}"}}')
            if up and up[0]["value"][1] == "1":
                break
            time.sleep(0.5)
        assert up and up[0]["value"][1] == "1", f"target never came up: {up}"
        probe = _prometheus_query(services.prometheus_url, f'rankstream_test_probe{{job="{job}"}}')
        assert float(probe[0]["value"][1]) == value
    finally:
        server.shutdown()
        thread.join(timeout=5)


def _services_up(services, option: str) -> list[str]:
    """stdout lines of `rankstream services up OPTION` on the session's running services."""
    argv = [sys.executable, "-m", "rankstream", "services", "up", option]
    completed = subprocess.run(
        [*argv, "--root", str(services.root)],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    return completed.stdout.splitlines()


def test_services_up_env_prints_only_export_lines(services):
    lines = _services_up(services, "--env")
    assert all(re.fullmatch(r"export RANKSTREAM_[A-Z_]+=\S+", line) for line in lines), lines
    exported = dict(line.removeprefix("export ").split("=", 1) for line in lines)
    assert exported == services.manager.endpoints().env()


def test_services_up_json_prints_the_variables_addresses_and_pids(services):
    (line,) = _services_up(services, "--json")
    report = json.loads(line)
    assert report["root"] == str(services.root)
    assert report["env"] == services.manager.endpoints().env()
    status = services.manager.status()
    assert report["services"] == status and all(entry["pid"] for entry in status.values())


@pytest.mark.parametrize("command", ["status", "down"])
def test_cli_on_an_empty_root_starts_nothing(tmp_path, command):
    argv = [sys.executable, "-m", "rankstream", "services", command, "--root", str(tmp_path)]
    completed = subprocess.run([*argv, "--json"], capture_output=True, text=True, timeout=60)
    report = json.loads(completed.stdout)
    if command == "status":
        assert completed.returncode == 1 and report["ready"] is False
        assert not any(entry["running"] for entry in report["services"].values())
    else:
        assert completed.returncode == 0 and report == {"root": str(tmp_path), "stopped": []}
    assert not (tmp_path / "kafka").exists()
