"""Which local processes listen on some addresses, and their CPU time: what a bench reads
to say what a service on the same machine (a Kafka broker) spent on its load.

Linux only (/proc/net/tcp, /proc/<pid>/fd, /proc/<pid>/stat); elsewhere, and for an
address that is not on this machine, no process is found.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path

LISTEN = "0A"  # the TCP state "listen" in /proc/net/tcp
LOCAL_HOSTS = {"127.0.0.1", "localhost", "::1", "0.0.0.0", "::"}


def local_ports(addresses: Iterable[str]) -> set[int]:
    """The ports of the `host:port` addresses whose host is this machine's loopback."""
    ports = set()
    for address in addresses:
        host, _, port = address.strip().rpartition(":")
        if host.strip("[]") in LOCAL_HOSTS and port.isdigit():
            ports.add(int(port))
    return ports


def listening_pids(ports: set[int]) -> set[int]:
    """The pids of the processes holding a TCP socket that listens on one of `ports`."""
    inodes = _listening_inodes(ports)
    if not inodes:
        return set()
    pids = set()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fds = os.scandir(entry / "fd")
        except OSError:  # it ended, or is not ours to read
            continue
        with fds:
            for fd in fds:
                try:
                    target = os.readlink(fd.path)
                except OSError:
                    continue
                if target.startswith("socket:[") and target[8:-1] in inodes:
                    pids.add(int(entry.name))
                    break
    return pids


def _listening_inodes(ports: set[int]) -> set[str]:
    inodes = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            lines = Path(table).read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            fields = line.split()
            port = int(fields[1].rsplit(":", 1)[1], 16)
            if fields[3] == LISTEN and port in ports:
                inodes.add(fields[9])
    return inodes


def parent_and_ticks(pid: int) -> tuple[int, int] | None:
    """(parent pid, user + system clock ticks of every thread) of `pid`, from
    /proc/<pid>/stat; None once it ended."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = stat.rsplit(")", 1)[1].split()  # after the command name: state, ppid, ...
    return int(fields[1]), int(fields[11]) + int(fields[12])


def cpu_seconds(pids: set[int]) -> float | None:
    """The user + system CPU time of `pids` so far (every thread), None if one is gone
    (or there are none)."""
    seen = [parent_and_ticks(pid) for pid in pids]
    if not seen or None in seen:
        return None
    return sum(ticks for _, ticks in seen) / os.sysconf("SC_CLK_TCK")  # type: ignore[misc]
