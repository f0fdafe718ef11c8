"""`rankstream chaos`: kill and restart the online worker (and its services); check exactly-once.

Worker kills need only the configured Kafka and Redis. Broker and Redis restarts need
the `ServiceManager` that runs them (`rankstream services up --root DIR`), which must
be the one the configuration points at. `--cluster` runs the faults of a replicated
deployment (`rankstream services up --cluster`): Kafka leader kills, a paused broker,
Redis primary kills (Sentinel failover) and a serve process killed under an engine.
Exit status 0 only when the final weights are bit-identical to an uninterrupted run,
nothing was lost or applied twice, and no version was served with two weights.

`--join` runs the click join's chaos instead (`harness.chaos_join`): `--kills` SIGKILLs of
`rankstream worker click-join` on a stream of `--impressions` impressions and their clicks;
exit 0 only when its triplets topic holds every message of an uninterrupted join once,
byte for byte, and the online learners learn bit-identical weights from both.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING

from rankstream.commands._json_output import add_json_argument, print_json
from rankstream.commands._shared_args import add_seed_argument

if TYPE_CHECKING:
    from rich.console import Console

    from rankstream.stream.settings import Settings

# fault kind (rankstream.harness.chaos.EVENT_KINDS) -> what one occurrence does
_FAULTS = {
    "restart-kafka": "clean broker restarts mid-stream (needs --services-root)",
    "restart-redis": "clean Redis restarts mid-stream (needs --services-root)",
    "crash-redis": "SIGKILLs of redis-server, restarted from its AOF",
    "lose-checkpoint": "roll every model back one version in Redis (lost AOF tail)",
    "zombie": "freeze the worker, let a successor take over, wake it",
    "kill-leader": "SIGKILLs of the Kafka node leading the stream's partition (cluster)",
    "pause-broker": "SIGSTOPs of that node past the broker session timeout (cluster)",
    "kill-redis-primary": "SIGKILLs of the Redis primary: Sentinel failover (cluster)",
    "kill-serve": "SIGKILLs of one of two serve processes under a retrying engine",
}
# --cluster: the fault run (each count unless given explicitly)
CLUSTER_COUNTS = {"kill-leader": 5, "pause-broker": 1, "kill-redis-primary": 3, "kill-serve": 1}
CLUSTER_SECONDS_PER_FAULT = 30.0  # a cluster fault takes 5-30 s to recover from
_FAULT_FLAGS = {"lose-checkpoint": "--lose-checkpoints", "zombie": "--zombies"}


def _fault_flag(kind: str) -> str:
    return _FAULT_FLAGS.get(kind, f"--{kind}")


def _fault_dest(kind: str) -> str:
    return _fault_flag(kind)[2:].replace("-", "_")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--kills",
        type=int,
        default=None,
        metavar="K",
        help="SIGKILLs of the worker at seeded points (default 10; 0 with --cluster)",
    )
    parser.add_argument(
        "--cluster",
        action="store_true",
        help="the replicated deployment's faults: "
        + ", ".join(f"{_fault_flag(k)} {n}" for k, n in CLUSTER_COUNTS.items())
        + " (needs `rankstream services up --cluster`)",
    )
    parser.add_argument(
        "--seconds-per-fault",
        type=float,
        default=None,
        metavar="S",
        help=f"stream time per fault (default 4; {CLUSTER_SECONDS_PER_FAULT:g} with --cluster)",
    )
    parser.add_argument(
        "--triplets", type=int, default=3_000_000, metavar="N", help="triplets produced"
    )
    add_seed_argument(parser, "stream and fault schedule seed")
    _add_join_arguments(parser)
    for kind, what in _FAULTS.items():
        parser.add_argument(
            _fault_flag(kind),
            dest=_fault_dest(kind),
            type=int,
            default=None,
            metavar="R",
            help=what,
        )
    parser.add_argument(
        "--checkpoint-records",
        type=int,
        default=None,
        metavar="N",
        help="worker checkpoint interval (default: ~4 checkpoints per fault)",
    )
    parser.add_argument(
        "--services-root",
        type=Path,
        default=None,
        metavar="DIR",
        help="root of `rankstream services` (default: $RANKSTREAM_DATA_DIR/services)",
    )
    add_json_argument(parser)


def _add_join_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--join",
        action="store_true",
        help="SIGKILL the click join instead of the online worker (--kills, --impressions)",
    )
    parser.add_argument(
        "--impressions",
        type=int,
        default=5_000,
        metavar="N",
        help="with --join: impressions (each with its clicks) produced (default 5000)",
    )


def run(args: argparse.Namespace) -> int:
    from rich.console import Console

    from rankstream.commands._real_services import real_services_settings
    from rankstream.commands._usage import options_checked
    from rankstream.harness.chaos import SERVICE_EVENTS, ChaosError, ChaosPlan, run_chaos

    settings = real_services_settings("chaos")
    err = Console(stderr=True)
    if args.join:
        return _run_join(args, settings, err)
    defaults = CLUSTER_COUNTS if args.cluster else {}
    counts = {kind: getattr(args, _fault_dest(kind)) for kind in _FAULTS}
    counts = {k: defaults.get(k, 0) if n is None else n for k, n in counts.items()}
    counts = {kind: n for kind, n in counts.items() if n}
    kills = args.kills if args.kills is not None else (0 if args.cluster else 10)
    seconds = args.seconds_per_fault or (CLUSTER_SECONDS_PER_FAULT if args.cluster else 4.0)
    with options_checked():
        plan = ChaosPlan(
            triplets=args.triplets,
            kills=kills,
            counts=counts,
            seed=args.seed,
            checkpoint_records=args.checkpoint_records,
            seconds_per_fault=seconds,
        )
    manager = None
    if SERVICE_EVENTS & set(counts):
        manager, problem = _manager_for(args.services_root, settings)
        if problem:
            err.print(problem)
            return 2
    try:
        with err.status("chaos: starting") as status:
            result = run_chaos(
                settings, plan, manager=manager, say=lambda text: status.update(f"chaos: {text}")
            )
    except ChaosError as exc:
        err.print(f"chaos failed: {exc}")
        return 1
    _print_summary(result.to_json(), args.json)
    return 0 if result.ok and result.events_missed == 0 else 1


def _run_join(args: argparse.Namespace, settings: Settings, err: Console) -> int:
    from rankstream.commands._usage import options_checked
    from rankstream.harness.chaos_join import JoinChaosPlan, run_join_chaos

    with options_checked():
        plan = JoinChaosPlan(
            impressions=args.impressions,
            kills=10 if args.kills is None else args.kills,
            seed=args.seed,
            seconds_per_kill=args.seconds_per_fault or 3.0,
        )
    try:
        with err.status("chaos --join: starting") as status:
            result = run_join_chaos(
                settings,
                plan,
                say=lambda text: status.update(f"chaos --join: {text}"),
            )
    except RuntimeError as exc:
        err.print(f"chaos --join failed: {exc}")
        return 1
    _print_summary(result.to_json(), args.json)
    return 0 if result.ok else 1


def _print_summary(summary: dict, as_json: bool) -> None:
    """A chaos run's summary: one JSON object, or one `key: value` line each."""
    if as_json:
        print_json(summary)
        return
    for key, value in summary.items():
        print(f"{key}: {value}")


def _manager_for(root: Path | None, settings: object) -> tuple[object, str | None]:
    """The ServiceManager under `root`, or why it cannot restart the configured services."""
    from rankstream.harness.services import ServiceError, ServiceManager
    from rankstream.harness.services.manager import default_root

    manager = ServiceManager(root or default_root())
    try:
        endpoints = manager.endpoints()
    except ServiceError as exc:
        return manager, f"service restarts need the services' root (--services-root): {exc}"
    configured = (settings.kafka_bootstrap, settings.redis_url)  # type: ignore[attr-defined]
    if (endpoints.kafka_bootstrap, endpoints.redis_url) != configured:
        return manager, (
            f"the services under {manager.root} listen on "
            f"{endpoints.kafka_bootstrap} and {endpoints.redis_url}, not on the "
            f"configured {configured[0]} and {configured[1]}"
        )
    return manager, None
