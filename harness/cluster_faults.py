"""The faults of `rankstream chaos --cluster`, each timed until the cluster recovers.

On the replicated services (`rankstream services up --cluster`: three KRaft nodes,
a Redis primary with two replicas under three Sentinels):

* ``kill-leader``        SIGKILL the Kafka node leading the partition being written and
  read; timed until another node leads it (election) and until the killed node, started
  again on its ports, is back in sync (rejoin);
* ``pause-broker``       SIGSTOP the leading node past the broker session timeout (the
  controller fences it and moves leadership), then SIGCONT; timed the same way;
* ``kill-redis-primary`` SIGKILL the Redis primary; timed until the Sentinels name
  another (failover) and until the killed node is back as a replica of it (rejoin).

The producer keeps sending through all of them (acks=all, idempotent), so these test
the producing side as well as the consuming one.
"""

from __future__ import annotations

import logging
import os
import signal
import time
from collections.abc import Callable
from typing import Any

from rankstream.harness.services.kafka import node_name
from rankstream.stream.settings import Settings

# KRaft's broker.session.timeout.ms is 9 s: a node silent for longer is fenced
BROKER_SESSION_TIMEOUT_S = 9.0
PAUSE_S = BROKER_SESSION_TIMEOUT_S + 4.0
RECOVERY_DEADLINE_S = 180.0  # guards against a hang; not what is measured
_POLL_S = 0.2


class RecoveryTimeoutError(RuntimeError):
    """The cluster did not recover from a fault within RECOVERY_DEADLINE_S."""


def _wait(condition: Callable[[], bool], what: str) -> float:
    """Seconds until condition() holds (polled); RecoveryTimeoutError past the deadline."""
    started = time.monotonic()
    while not condition():
        if time.monotonic() - started > RECOVERY_DEADLINE_S:
            raise RecoveryTimeoutError(f"{what}: not within {RECOVERY_DEADLINE_S:.0f} s")
        time.sleep(_POLL_S)
    return round(time.monotonic() - started, 2)


class ClusterFaults:
    """Injects the faults above on `manager`'s services for `topic` (partition 0)."""

    def __init__(self, manager: Any, settings: Settings, topic: str) -> None:
        from kafka import KafkaAdminClient

        from rankstream.stream.kafka_transport import client_config

        self.manager, self.topic = manager, topic
        self.nodes = manager.topology.kafka_brokers
        if self.nodes < 3 or not manager.topology.redis_replicas:
            raise ValueError(
                "cluster faults need `rankstream services up --cluster` "
                f"(3 Kafka nodes, Redis replicas); the services run as {manager.topology}"
            )
        self.admin = KafkaAdminClient(**client_config(settings), request_timeout_ms=5000)
        logging.getLogger("kafka").setLevel(logging.CRITICAL)  # refused connections, by design

    def close(self) -> None:
        self.admin.close()

    def partition(self) -> tuple[int, list[int]]:
        """(leader, in-sync replicas) of partition 0; (-1, []) when unknown right now."""
        from kafka.errors import KafkaError

        try:
            [topic] = self.admin.describe_topics([self.topic])
        except (KafkaError, OSError, ValueError):
            return -1, []
        for partition in topic.get("partitions", []):
            if partition["partition_index"] == 0:
                return int(partition["leader_id"]), list(partition["isr_nodes"])
        return -1, []

    def _leader(self) -> int:
        _wait(lambda: self.partition()[0] >= 0, f"{self.topic}[0] has no leader")
        return self.partition()[0]

    def _moved_from(self, node: int) -> Callable[[], bool]:
        return lambda: self.partition()[0] not in (-1, node)

    def _in_sync(self, node: int) -> Callable[[], bool]:
        return lambda: node in self.partition()[1]

    def kill_leader(self) -> dict[str, float]:
        node = self._leader()
        name = node_name(node, self.nodes)
        os.kill(self._pid(name), signal.SIGKILL)
        election = _wait(self._moved_from(node), f"no new leader after killing {name}")
        started = time.monotonic()
        self.manager.start(name)
        _wait(self._in_sync(node), f"{name} not back in sync")
        return {"election_s": election, "rejoin_s": round(time.monotonic() - started, 2)}

    def pause_broker(self) -> dict[str, float]:
        node = self._leader()
        name = node_name(node, self.nodes)
        pid = self._pid(name)
        started = time.monotonic()
        os.kill(pid, signal.SIGSTOP)
        try:
            election = _wait(self._moved_from(node), f"no new leader while {name} is paused")
            time.sleep(max(0.0, PAUSE_S - (time.monotonic() - started)))
        finally:
            os.kill(pid, signal.SIGCONT)
        resumed = time.monotonic()
        _wait(self._in_sync(node), f"{name} not back in sync after SIGCONT")
        return {
            "paused_s": round(resumed - started, 2),
            "election_s": election,
            "rejoin_s": round(time.monotonic() - resumed, 2),
        }

    def kill_redis_primary(self) -> dict[str, float]:
        name = self.manager.redis_primary()
        if name is None:
            raise RecoveryTimeoutError("the Sentinels name no Redis primary")
        os.kill(self._pid(name), signal.SIGKILL)
        failover = _wait(
            lambda: self.manager.redis_primary() not in (None, name),
            f"the Sentinels did not replace the killed primary {name}",
        )
        started = time.monotonic()
        self.manager.start(name)  # ready = a replica with its link to the new primary up
        return {"failover_s": failover, "rejoin_s": round(time.monotonic() - started, 2)}

    def _pid(self, name: str) -> int:
        pid = self.manager.pid(name)
        if pid is None:
            raise RecoveryTimeoutError(f"{name} is not running")
        return int(pid)
