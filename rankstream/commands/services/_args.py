"""The `--root` option the three `rankstream services` commands share, and `up`'s topology.

Kept here, not in `rankstream.harness.services`, because every command's `add_arguments` runs
on every `rankstream` invocation: importing the services package (its manager pulls
in urllib, http.client, subprocess helpers) cost every command ~0.2 s of start-up.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rankstream.commands._options import add_options, chosen
from rankstream.workers.options import option

if TYPE_CHECKING:
    from rankstream.harness.services import ServiceManager


@dataclass(frozen=True)
class RootOptions:
    """Where the services live (every `services` command)."""

    root: str | None = option(None, "services directory (none: $RANKSTREAM_DATA_DIR/services)")


@dataclass(frozen=True)
class TopologyOptions:
    """How many of each `services up` starts (`harness.services.manager.Topology`)."""

    kafka_brokers: int | None = option(
        None,
        "Kafka nodes: 1 (none), or a KRaft cluster of N >= 3 (a quorum of N controllers; "
        "topics with 3 replicas, min.insync.replicas 2)",
        metavar="N",
    )
    redis_replicas: int | None = option(
        None,
        "Redis replicas of the primary (none: 0); R >= 1 adds 3 Sentinels (automatic "
        "failover) and RANKSTREAM_REDIS_URL becomes a redis+sentinel:// URL",
        metavar="R",
    )
    cluster: bool = option(False, "the replicated set: --kafka-brokers 3 --redis-replicas 2")


def add_root_argument(parser: argparse.ArgumentParser) -> None:
    add_options(parser, RootOptions, json_when=None)


def add_topology_arguments(parser: argparse.ArgumentParser) -> None:
    add_options(parser, TopologyOptions, json_when=None)


def manager_for(args: argparse.Namespace) -> ServiceManager:
    """The manager under --root: `up`'s topology options when given, else the one recorded
    under the root by the last `up` (one node of each before any)."""
    from rankstream.harness.services import ServiceManager, default_root
    from rankstream.harness.services.manager import Topology

    root = chosen(RootOptions, args).root
    asked = chosen(TopologyOptions, args)  # all unset for `down` and `status`
    topology = None
    if asked.cluster:
        topology = Topology(kafka_brokers=3, redis_replicas=2)
    elif asked.kafka_brokers is not None or asked.redis_replicas is not None:
        topology = Topology(
            kafka_brokers=asked.kafka_brokers or 1, redis_replicas=asked.redis_replicas or 0
        )
    return ServiceManager(Path(root) if root else default_root(), topology=topology)


def managed(args: argparse.Namespace, verb: str) -> tuple[ServiceManager, Any]:
    """The manager under --root and what its `verb` ("up", "down") returned; a service
    that refused is a CommandError (one line, exit 1)."""
    from rankstream.commands._usage import CommandError, options_checked
    from rankstream.harness.services import ServiceError

    with options_checked():
        manager = manager_for(args)
    try:
        return manager, getattr(manager, verb)()
    except ServiceError as exc:
        raise CommandError(f"services {verb}: {exc}") from exc
