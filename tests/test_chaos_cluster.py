"""`rankstream chaos --cluster`, short form, on a real replicated set (issue 28).

Three KRaft nodes (RF 3, min.insync.replicas 2) and a Redis primary with two replicas
under three Sentinels, started by the harness under a temporary root. One of each
cluster fault mid-stream: the partition leader SIGKILLed, the leader paused past the
broker session timeout, the Redis primary SIGKILLed (Sentinel failover), a serve
process SIGKILLed under an engine retrying once on the other. The producer is not
paused for any of them. Premises hold on every run: the stream's tail waits until
every fault has been injected (so none is missed however slow the machine), and the
recovery deadlines only guard against a hang. `make long-test` runs it (not `make
test`: minutes of start-up and faults on two cores); `make chaos` runs the long form.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from rankstream.harness.chaos import CLUSTER_EVENTS, ChaosPlan, run_chaos
from rankstream.stream.settings import Settings, parse_sentinel_url

# Three JVMs, three Redis and three Sentinels on CI's two cores: `make long-test` (and
# the long form, `make chaos`), not `make test`.
pytestmark = [pytest.mark.services, pytest.mark.long]


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[object]:
    """The replicated services for this module (stopped after it)."""
    from rankstream.harness.services import ServiceError, ServiceManager
    from rankstream.harness.services.manager import Topology

    manager = ServiceManager(tmp_path_factory.mktemp("cluster"), topology=Topology(3, 2))
    try:
        manager.up()
    except ServiceError as exc:
        manager.down()
        if os.environ.get("CI", "").strip().lower() in ("1", "true", "yes"):
            pytest.fail(f"replicated services unavailable: {exc}", pytrace=False)
        pytest.skip(f"replicated services unavailable: {exc}")
    try:
        yield manager
    finally:
        manager.down()


def _settings(manager: object, tmp_path: Path) -> Settings:
    endpoints = manager.endpoints()  # type: ignore[attr-defined]
    return Settings(
        kafka_bootstrap=endpoints.kafka_bootstrap,
        redis_url=endpoints.redis_url,
        topic_prefix="cluster",
        data_dir=str(tmp_path),
    )


def test_the_cluster_is_three_kafka_nodes_and_redis_behind_three_sentinels(cluster, tmp_path):
    settings = _settings(cluster, tmp_path)
    assert len(settings.kafka_bootstrap.split(",")) == 3  # type: ignore[union-attr]
    assert len(parse_sentinel_url(settings.redis_url).sentinels) == 3  # type: ignore[arg-type]
    assert cluster.redis_primary() in cluster.redis_nodes()  # type: ignore[attr-defined]


def test_one_of_each_cluster_fault_mid_stream_changes_nothing(cluster, tmp_path):
    plan = ChaosPlan(
        triplets=150_000,
        kills=1,
        counts={kind: 1 for kind in CLUSTER_EVENTS},
        seed=3,
        seconds_per_fault=6.0,
    )
    result = run_chaos(_settings(cluster, tmp_path), plan, manager=cluster)
    summary = result.to_json()
    assert result.events == {"kill": 1, **{kind: 1 for kind in CLUSTER_EVENTS}}, summary
    assert result.events_missed == 0, summary
    assert result.identical and result.lost == 0 and result.duplicated == 0, summary
    assert all(m["triplets_seen"] == plan.triplets for m in result.models.values()), summary
    (leader,) = result.recovery["kill-leader"]
    (paused,) = result.recovery["pause-broker"]
    (failover,) = result.recovery["kill-redis-primary"]
    assert leader["election_s"] >= 0 and paused["paused_s"] >= 9.0, summary
    assert failover["failover_s"] > 0, summary
    serving = result.serving
    assert serving is not None and serving["requests"] > 0, summary
    assert serving["versions_with_two_weights"] == 0, summary
    assert result.ok, summary
