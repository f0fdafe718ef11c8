"""Detached child processes: spawn, recognise, wait for, stop; and free TCP ports.

Services outlive the command that started them (`rankstream services up` returns at
once), so they run in their own session and are found again by pid. A pid alone can be
reused by an unrelated process, so a pid only counts as ours while its working
directory is the service's own directory (its command line is no proof: redis-server
rewrites its process title).
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from rankstream.harness.services.service_error import ServiceError


def spawn(argv: Sequence[str], log_path: Path, cwd: Path) -> int:
    """Start `argv` detached (own session, no stdin), stdout+stderr appended to log_path."""
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with open(log_path, "ab") as log:
        proc = subprocess.Popen(
            list(argv),
            cwd=cwd,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    return proc.pid


def _proc_state(pid: int) -> str | None:
    """The one-letter state from /proc/<pid>/stat, or None when there is no such pid."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError, PermissionError):
        return None
    return stat.rsplit(")", 1)[1].split()[0]


def is_running(pid: int | None, workdir: Path) -> bool:
    """True if pid is alive (not a zombie) and runs in workdir."""
    if not pid:
        return False
    state = _proc_state(pid)
    if state is None or state in ("Z", "X"):
        return False
    try:
        return Path(os.readlink(f"/proc/{pid}/cwd")) == workdir
    except OSError:
        return False


def _reap(pid: int) -> None:
    """Collect the exit status if pid is our child, so it does not linger as a zombie."""
    with contextlib.suppress(ChildProcessError, OSError):
        os.waitpid(pid, os.WNOHANG)


def terminate(pid: int, workdir: Path, timeout: float) -> None:
    """SIGTERM the process group, wait up to timeout, then SIGKILL it. Idempotent."""
    if not is_running(pid, workdir):
        _reap(pid)
        return
    for sig, wait in ((signal.SIGTERM, timeout), (signal.SIGKILL, 10.0)):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pid, sig)  # started with start_new_session: pgid == pid
        deadline = time.monotonic() + wait
        while time.monotonic() < deadline:
            _reap(pid)
            if not is_running(pid, workdir):
                return
            time.sleep(0.1)
    raise ServiceError(f"process {pid} ({workdir}) survived SIGKILL")


def wait_until(
    ready: Callable[[], bool],
    timeout: float,
    what: str,
    pid: int,
    workdir: Path,
    log_path: Path,
) -> None:
    """Poll ready() until true; fail early (with the log tail) if the process dies.

    Dead means not running on two checks in a row: a JVM that had just been started
    was once seen as not running for a moment (its /proc entry unreadable) while it
    went on to start normally.
    """
    deadline = time.monotonic() + timeout
    seen_dead = False
    while time.monotonic() < deadline:
        if ready():
            return
        if not is_running(pid, workdir):
            if seen_dead:
                _reap(pid)
                raise ServiceError(f"{what} exited during start-up:\n{log_tail(log_path)}")
            seen_dead = True
        else:
            seen_dead = False
        time.sleep(0.25)
    raise ServiceError(f"{what} not ready after {timeout:.0f} s:\n{log_tail(log_path)}")


def log_tail(path: Path, lines: int = 15) -> str:
    try:
        text = path.read_text(errors="replace")
    except FileNotFoundError:
        return f"(no log at {path})"
    return "\n".join(text.splitlines()[-lines:])


def port_is_free(port: int, host: str = "127.0.0.1") -> bool:
    """Can a server bind host:port now? (SO_REUSEADDR, as servers set it.)"""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError:
            return False
    return True


def free_port(host: str = "127.0.0.1") -> int:
    """A port the kernel just handed out, so unlikely to collide with another engineer's."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


def accepts_tcp(port: int, host: str = "127.0.0.1", timeout: float = 0.5) -> bool:
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return True
    except OSError:
        return False
