"""`rankstream serve` on several processes sharing one port: every core answers.

One Python process ranks on one interpreter lock. `serve_processes` runs several, each the
server `serve.app.serve` runs (the same routes, grace and watchdog), on one listening
socket the parent binds (port 0: the kernel's pick, the port `on_listening` is given):

* each process has its own model registry, following the store's announcements and
  polling it like one process does, so a hot reload reaches every process within the
  bound one has; its own impression log and producers; the idempotency desk is the
  store's (`serve.delivery`: keys claimed with SET NX), so a retry answered by another
  process is still a repeat;
* the processes are spawned (fresh interpreters: nothing the parent started, its metrics
  thread, is forked) and given the socket; the kernel hands each connection to a process
  that is accepting, and a process accepts only once started (its registry loaded), so
  /readyz, answered by the process that took the connection, speaks for one that serves;
  `on_listening` is called once every process has started;
* /metrics (the parent's exporter) is the sum over the processes: prometheus_client's
  multiprocess mode, in a directory the parent creates and removes; gauges combine as
  their `multiprocess_mode` says (`telemetry.prometheus_metrics`).

Supervision, by the parent:

* SIGTERM or SIGINT: sent on to every process as SIGTERM; each stops within the grace
  (`serve.app.serve`), and any still running at the grace is SIGKILLed: the group stops
  within `Settings.api_grace_s`;
* a process that exits after it started (killed, crashed) is started again on the same
  socket, at once the first time and after 1, 2, 4 ... 30 s while each new one ends soon
  after its start (`restart_delay`); the socket stays open in the parent, so connections
  wait in its backlog meanwhile rather than being refused;
* a process that exits before it started (the store unreachable, say) stops the group,
  exit code 1, as one process that cannot start exits;
* the parent killed (SIGKILL): Linux kills the processes with it (PR_SET_PDEATHSIG), so the
  port is free for a new serve at once, as after one process was killed. The metrics
  directory it leaves is named with its pid; the next group to start removes every such
  directory whose process is gone (`stale_metrics_directories`).

Several processes need shared services: with the embedded transport or store (one
process's memory) or the embedded workers, `serving_processes` is 1.
"""

from __future__ import annotations

import contextlib
import ctypes
import multiprocessing
import os
import shutil
import signal
import socket
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from multiprocessing.connection import Connection, wait
from multiprocessing.process import BaseProcess
from typing import Any

from rankstream.stream.settings import Settings

MULTIPROC_DIR = "PROMETHEUS_MULTIPROC_DIR"  # prometheus_client reads it at its import
METRICS_PREFIX = "rankstream-serve-metrics-"  # then the parent's pid, "-", a random part
CLICKS_HEARD = "clicks-heard"  # beside the metrics files, which are *.db
BACKLOG = 2048  # uvicorn's default
_TICK_S = 0.2  # how often the parent looks at the clock while it waits
RESTART_SETTLED_S = 60.0  # a process that served this long ended for a reason of its own
RESTART_DELAY_MAX_S = 30.0
_PR_SET_PDEATHSIG = 1  # linux/prctl.h


def usable_cores() -> int:
    """The cores this process may run on (its affinity), else the machine's."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


def serving_processes(settings: Settings, workers: bool) -> int:
    """How many processes serve: `settings.api_processes` (0: one per usable core), but one
    where state lives in one process's memory (the embedded transport or store, or the
    embedded workers learning in it)."""
    if workers or not settings.kafka_bootstrap or not settings.redis_url:
        return 1
    return settings.api_processes or usable_cores()


def bind(host: str, port: int) -> socket.socket:
    """The listening socket the processes share (as uvicorn binds its own)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
        sock.listen(BACKLOG)
    except OSError:
        sock.close()
        raise
    sock.set_inheritable(True)
    return sock


def _die_with(parent: int) -> None:
    """Linux: the kernel SIGKILLs this process when its parent ends, however it ended."""
    try:
        prctl = ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):  # not Linux: a killed parent leaves it running
        return
    prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
    if os.getppid() != parent:  # the parent ended before the line above
        os._exit(1)


def _serving_process(
    settings: Settings, poll_seconds: float, sock: socket.socket, started: Connection, parent: int
) -> None:
    """One serving process: `serve.app.serve` on the shared socket; says when started."""
    _die_with(parent)
    os.setpgid(0, 0)  # a terminal's Ctrl-C reaches the parent only, which sends SIGTERM
    from rankstream.serve.app import serve
    from rankstream.telemetry.structured_log import configure_logging

    configure_logging()
    code = serve(settings, poll_seconds, on_listening=lambda h, p: started.send(os.getpid()),
                 sockets=[sock], heard_flag=clicks_heard_flag())  # fmt: skip
    sys.exit(code)


@dataclass
class _Child:
    process: BaseProcess
    started: Connection  # the process sends its pid once it serves
    serving: bool = False
    started_at: float = 0.0  # time.monotonic() at its start


def restart_delay(quick_exits: int) -> float:
    """Seconds before a serving process that ended after it started is started again:
    at once the first time, then 1, 2, 4, ... up to 30 s while each new one ends within
    `RESTART_SETTLED_S` of its start, so a crash loop costs an interpreter's start-up every
    few seconds, not back to back on every core."""
    return 0.0 if quick_exits <= 1 else min(2.0 ** (quick_exits - 2), RESTART_DELAY_MAX_S)


class _Group:
    """The parent's side: start, watch, restart and stop the serving processes."""

    def __init__(self, settings: Settings, poll_seconds: float, sock: socket.socket) -> None:
        self.settings, self.poll_seconds, self.sock = settings, poll_seconds, sock
        self.context = multiprocessing.get_context("spawn")
        self.children: dict[int, _Child] = {}  # slot -> its current process
        self.restart_at: dict[int, float] = {}  # slot -> when to start it again
        self.quick_exits: dict[int, int] = {}  # slot -> ends in a row soon after a start
        self.stop_by: float | None = None  # set by SIGTERM/SIGINT
        self.failed = False

    def start(self, slot: int) -> None:
        receiving, sending = self.context.Pipe(duplex=False)
        process = self.context.Process(
            target=_serving_process, name=f"rankstream-serve-{slot}",
            args=(self.settings, self.poll_seconds, self.sock, sending, os.getpid()),
        )  # fmt: skip
        process.start()
        sending.close()
        self.children[slot] = _Child(process, receiving, started_at=time.monotonic())
        if self.stop_by is not None:  # the signal came while it was being started
            os.kill(process.pid, signal.SIGTERM)  # type: ignore[arg-type]

    def stop(self, sig: int = signal.SIGTERM, frame: Any = None) -> None:
        """Every process is sent SIGTERM, once; the group's clock starts."""
        if self.stop_by is not None:
            return
        self.stop_by = time.monotonic() + self.settings.api_grace_s
        for child in self.children.values():
            with contextlib.suppress(ProcessLookupError):
                os.kill(child.process.pid, signal.SIGTERM)  # type: ignore[arg-type]

    def run(self, processes: int, on_listening: Callable[[], None], log: Any) -> int:
        """Until every process has ended: start them, announce once all serve, restart one
        that ends after it started, stop all at a signal or when one could not start."""
        from prometheus_client.multiprocess import mark_process_dead

        from rankstream.telemetry.structured_log import log_event

        for slot in range(processes):
            self.start(slot)
        announced = False
        while self.children or self.restart_at:
            if self.stop_by is not None:
                self.restart_at.clear()
            for slot, at in list(self.restart_at.items()):
                if time.monotonic() >= at:
                    del self.restart_at[slot]
                    self.start(slot)
            waited = [c.started for c in self.children.values()]
            waited += [c.process.sentinel for c in self.children.values()]
            ready = wait(waited, timeout=_TICK_S)
            for slot, child in list(self.children.items()):
                if child.started in ready:
                    with contextlib.suppress(EOFError):  # it ended: its sentinel says so
                        child.started.recv()
                        child.serving = True
                if child.process.is_alive():
                    continue
                child.process.join()
                child.started.close()
                mark_process_dead(child.process.pid, os.environ[MULTIPROC_DIR])
                del self.children[slot]
                if self.stop_by is not None:
                    continue
                quick = time.monotonic() - child.started_at < RESTART_SETTLED_S
                self.quick_exits[slot] = self.quick_exits.get(slot, 0) + 1 if quick else 1
                delay = restart_delay(self.quick_exits[slot])
                log_event(log, "serving process ended", pid=child.process.pid,
                          exit_code=child.process.exitcode, slot=slot,
                          restarting=child.serving, restart_in_s=delay)  # fmt: skip
                if child.serving:
                    self.restart_at[slot] = time.monotonic() + delay
                else:
                    self.failed = True
                    self.stop()
            everyone = len(self.children) == processes
            if (
                not announced
                and everyone
                and self.stop_by is None
                and all(c.serving for c in self.children.values())
            ):
                announced = True
                on_listening()
            if self.stop_by is not None and time.monotonic() > self.stop_by:
                for child in self.children.values():  # the grace is over
                    with contextlib.suppress(ProcessLookupError):
                        os.kill(child.process.pid, signal.SIGKILL)  # type: ignore[arg-type]
        return 0 if announced and not self.failed else 1


def clicks_heard_flag() -> str | None:
    """The file by which the first serving process to accept a POST /v1/clicks tells the
    others that interleaving may begin (`selection.click_race.Interleaver`), in the
    group's directory (the parent's, inherited)."""
    directory = os.environ.get(MULTIPROC_DIR)
    return os.path.join(directory, CLICKS_HEARD) if directory else None


def stale_metrics_directories(parent: str | None = None) -> list[str]:
    """The metrics directories in `parent` (the temporary directory) whose serve is gone:
    named `METRICS_PREFIX` + a pid no process has now (a serve killed by SIGKILL could not
    remove its own). A directory whose pid is alive, or not named so, is not listed."""
    parent = parent or tempfile.gettempdir()
    stale = []
    with contextlib.suppress(OSError):
        for entry in os.scandir(parent):
            pid = entry.name.removeprefix(METRICS_PREFIX).partition("-")[0]
            if (
                entry.name.startswith(METRICS_PREFIX)
                and pid.isdigit()
                and entry.is_dir(follow_symlinks=False)
                and not _alive(int(pid))
            ):
                stale.append(entry.path)
    return sorted(stale)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process
        return True
    return True


@contextlib.contextmanager
def _metrics_directory() -> Iterator[str]:
    """A fresh directory for the processes' metrics files, which the parent's /metrics
    sums while it exists; removed at the end (and, if this process is SIGKILLed, by the
    next group to start: `stale_metrics_directories`)."""
    from rankstream.telemetry import prometheus_metrics

    for stale in stale_metrics_directories():
        shutil.rmtree(stale, ignore_errors=True)
    directory = tempfile.mkdtemp(prefix=f"{METRICS_PREFIX}{os.getpid()}-")
    os.environ[MULTIPROC_DIR] = directory  # the spawned processes inherit it
    prometheus_metrics.export_processes(directory)
    try:
        yield directory
    finally:
        prometheus_metrics.export_processes(None)
        os.environ.pop(MULTIPROC_DIR, None)
        shutil.rmtree(directory, ignore_errors=True)


def serve_processes(
    settings: Settings,
    processes: int,
    poll_seconds: float = 1.0,
    on_listening: Callable[[str, int], None] | None = None,
) -> int:
    """Serve the API from `processes` processes on one port until SIGTERM/SIGINT (module
    docstring); 0 once stopped, 1 when a process could not start."""
    from rankstream.telemetry.structured_log import get_logger, log_event

    log = get_logger("rankstream.serve.processes")
    sock = bind(settings.api_host, settings.api_port)
    host, port = sock.getsockname()[:2]
    group = _Group(settings, poll_seconds, sock)
    previous = {sig: signal.signal(sig, group.stop) for sig in (signal.SIGTERM, signal.SIGINT)}

    def listening() -> None:
        log_event(log, "serving processes started", processes=processes, port=int(port))
        if on_listening is not None:
            on_listening(str(host), int(port))

    try:
        with _metrics_directory():
            return group.run(processes, listening, log)
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        sock.close()
