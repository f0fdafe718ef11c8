"""The `--root` option the three `rankstream services` commands share, and `up`'s topology.

Kept here, not in `rankstream.harness.services`, because every command's `add_arguments` runs
on every `rankstream` invocation: importing the services package (its manager pulls
in urllib, http.client, subprocess helpers) cost every command ~0.2 s of start-up.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from rankstream.harness.services import ServiceManager


def add_root_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--root",
        type=Path,
        default=None,
        help="services directory (default: $RANKSTREAM_DATA_DIR/services)",
    )


def add_topology_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--kafka-brokers",
        type=int,
        default=None,
        metavar="N",
        help="Kafka nodes: 1 (default), or a KRaft cluster of N >= 3 (a quorum of N "
        "controllers; topics with 3 replicas, min.insync.replicas 2)",
    )
    parser.add_argument(
        "--redis-replicas",
        type=int,
        default=None,
        metavar="R",
        help="Redis replicas of the primary (default 0); R >= 1 adds 3 Sentinels (automatic "
        "failover) and RANKSTREAM_REDIS_URL becomes a redis+sentinel:// URL",
    )
    parser.add_argument(
        "--cluster",
        action="store_true",
        help="the replicated set: --kafka-brokers 3 --redis-replicas 2",
    )


def manager_for(args: argparse.Namespace) -> ServiceManager:
    """The manager under --root: `up`'s topology options when given, else the one recorded
    under the root by the last `up` (one node of each before any)."""
    from rankstream.harness.services import ServiceManager, default_root
    from rankstream.harness.services.manager import Topology

    topology = None
    if getattr(args, "cluster", False):
        topology = Topology(kafka_brokers=3, redis_replicas=2)
    elif getattr(args, "kafka_brokers", None) is not None or (
        getattr(args, "redis_replicas", None) is not None
    ):
        topology = Topology(
            kafka_brokers=args.kafka_brokers or 1, redis_replicas=args.redis_replicas or 0
        )
    return ServiceManager(args.root or default_root(), topology=topology)


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
