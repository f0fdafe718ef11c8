"""`rankstream chaos`: the seeded fault schedule, the worker command line, and the
short form on real Kafka and Redis (SIGKILLs at seeded points -> bit-identical weights).
"""

from __future__ import annotations

import dataclasses
import os
import signal
import subprocess
import sys

import pytest

from rankstream.cli import build_parser
from rankstream.harness.chaos import EVENT_KINDS, ChaosPlan, run_chaos, worker_argv
from rankstream.stream.settings import Settings
from rankstream.workers.online_worker_options import WorkerOptions
from rankstream.workers.options import from_arguments


def test_schedule_is_seeded_one_fault_per_slice_of_the_stream() -> None:
    plan = ChaosPlan(triplets=100_000, kills=3, counts={"zombie": 1, "crash-redis": 2}, seed=7)
    events = plan.events()
    assert (
        events
        == ChaosPlan(
            triplets=100_000, kills=3, counts={"zombie": 1, "crash-redis": 2}, seed=7
        ).events()
    )
    assert sorted(e.kind for e in events) == sorted(["kill"] * 3 + ["zombie"] + ["crash-redis"] * 2)
    slot = plan.triplets / (len(events) + 1)
    for i, event in enumerate(events):  # the i-th fault lies inside the i-th slice
        assert slot * i < event.at < slot * (i + 1)
        assert 0 <= event.delay < 1.0
    other = ChaosPlan(triplets=100_000, kills=3, counts={"zombie": 1, "crash-redis": 2}, seed=8)
    assert [e.at for e in other.events()] != [e.at for e in events]


@pytest.mark.parametrize(
    "bad",
    [
        {"kills": -1},
        {"counts": {"meteor": 1}},
        {"counts": {"kill": 2}},
        {"counts": {"zombie": -1}},
        {"triplets": 0},
        {"triplets": 2_000, "kills": 5},  # fewer than two messages per fault
        {"queries_per_message": 0},
        {"seconds_per_fault": 0.0},
    ],
)
def test_bad_plans_are_refused(bad: dict) -> None:
    with pytest.raises(ValueError):
        ChaosPlan(**{"triplets": 100_000, **bad})


def test_the_worker_command_line_means_the_reference_options() -> None:
    """The killed workers and the in-process reference must run the same options."""
    options = ChaosPlan(triplets=100_000, kills=2).worker_options()
    argv = worker_argv(options)
    assert argv[:3] == [sys.executable, "-m", "rankstream.cli"]
    args = build_parser().parse_args(argv[3:])
    assert from_arguments(WorkerOptions, args) == options  # every field, not a chosen few
    group = dataclasses.replace(options, group="g", per_partition=True, hyper={"C": 0.5})
    assert from_arguments(WorkerOptions, build_parser().parse_args(worker_argv(group)[3:])) == group
    assert set(EVENT_KINDS) >= {"kill", "zombie", "lose-checkpoint"}


def test_cli_refuses_without_kafka_and_redis() -> None:
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("RANKSTREAM_KAFKA_BOOTSTRAP", "RANKSTREAM_REDIS_URL")
    }
    done = subprocess.run(
        [sys.executable, "-m", "rankstream.cli", "chaos", "--json"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2 and done.stdout == ""
    assert "RANKSTREAM_KAFKA_BOOTSTRAP" in done.stderr


@pytest.mark.timeout(300)
def test_short_chaos_three_kills_is_exactly_once_and_bit_identical(
    service_settings: Settings,
) -> None:
    result = run_chaos(service_settings, ChaosPlan(triplets=200_000, kills=3, seed=1))
    assert (result.kills, result.events_missed) == (3, 0)
    assert result.exits.get(str(-signal.SIGKILL)) == 3
    assert result.worker_starts == 4
    assert (result.lost, result.duplicated) == (0, 0)
    assert result.identical, result.models
    assert {m["triplets_seen"] for m in result.models.values()} == {200_000}
