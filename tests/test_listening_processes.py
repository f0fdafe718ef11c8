"""The bench finds a local service by the address it listens on, and reads its CPU time."""

from __future__ import annotations

import os
import socket
import subprocess

from rankstream.harness.listening_processes import (
    cpu_seconds,
    listening_pids,
    local_ports,
    parent_and_ticks,
)


def test_only_loopback_addresses_are_local() -> None:
    addresses = ["127.0.0.1:9092", "localhost:9093", "[::1]:9094", "kafka:9095", "10.0.0.7:9096"]
    assert local_ports(addresses) == {9092, 9093, 9094}
    assert local_ports(["", "127.0.0.1:", "127.0.0.1:x"]) == set()


def test_the_process_listening_on_a_port_is_found() -> None:
    with socket.socket() as listening, socket.socket() as bound_only:
        listening.bind(("127.0.0.1", 0))
        listening.listen()
        bound_only.bind(("127.0.0.1", 0))  # bound, not listening: not a service
        port, other = listening.getsockname()[1], bound_only.getsockname()[1]
        assert listening_pids({port}) == {os.getpid()}
        assert listening_pids({other}) == set()
    assert listening_pids({port}) == set()  # closed


def test_cpu_time_is_read_and_an_ended_process_gives_none() -> None:
    ended = subprocess.Popen(["true"])
    ended.wait()
    sum(i * i for i in range(200_000))  # some CPU time of our own
    assert (cpu_seconds({os.getpid()}) or 0.0) > 0.0
    assert parent_and_ticks(os.getpid())[0] == os.getppid()  # type: ignore[index]
    assert cpu_seconds({ended.pid}) is None and parent_and_ticks(ended.pid) is None
    assert cpu_seconds({os.getpid(), ended.pid}) is None
    assert cpu_seconds(set()) is None
