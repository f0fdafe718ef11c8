"""`rankstream serve` on several processes sharing its port (`serve.processes`).

Which process answers a connection is the kernel's choice, so to know, every test but
the unit ones stops all processes but one (SIGSTOP: a stopped process accepts nothing,
and the socket's other process takes every new connection), asks on fresh connections,
and lets it go again. With that: every process answers with the same model and version,
and a new version reaches each of them; /metrics (the parent's) adds up what each process
counted; SIGTERM ends the group within the grace even with a process that cannot stop
(stopped: the parent SIGKILLs it at the grace); a killed process is started again on the
same port and its counts are kept.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import tempfile
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from rankstream.harness.serve_process import ServeProcess
from rankstream.ranking.online import OnlineRanker
from rankstream.ranking.scaling import Standardizer
from rankstream.serve.processes import (
    METRICS_PREFIX,
    restart_delay,
    serving_processes,
    stale_metrics_directories,
    usable_cores,
)
from rankstream.stream.connect import open_store
from rankstream.stream.settings import DEFAULT_PHI_DIM as PHI_DIM
from rankstream.stream.settings import Settings

PROCESSES = 2
HANG_GUARD_S = 60.0  # guards against a hang only, never the thing tested
GRACE_S = 3.0
MARGIN_S = 5.0  # a loaded 2-core machine: scheduling, not waiting
K = 12
RNG = np.random.default_rng(42)
PHI = RNG.random((K, PHI_DIM)).round(6).tolist()
BODY = json.dumps({"candidate_ids": list(range(K)), "phi": PHI, "model": "uni_con"}).encode()


def test_one_process_where_state_lives_in_one_process(tmp_path: Path) -> None:
    shared = Settings(kafka_bootstrap="127.0.0.1:9092", redis_url="redis://127.0.0.1:6379/0")
    assert serving_processes(replace(shared, api_processes=3), workers=False) == 3
    assert serving_processes(shared, workers=False) == usable_cores()  # 0: one per core
    assert serving_processes(replace(shared, api_processes=3), workers=True) == 1
    assert serving_processes(replace(shared, redis_url=None, api_processes=3), False) == 1
    assert serving_processes(replace(shared, kafka_bootstrap=None, api_processes=3), False) == 1
    assert serving_processes(Settings(api_processes=3), workers=False) == 1


def _save_champion(settings: Settings, weight: float) -> int:
    """A new version of uni_con, its weights all `weight`; its version."""
    store = open_store(settings)
    scaler = Standardizer().fit(np.vstack([-np.ones(PHI_DIM), np.ones(PHI_DIM)]))
    ranker = OnlineRanker("opar1", scaler=scaler, warm_start=np.full(PHI_DIM, weight))
    meta, arrays = ranker.to_state()
    stored = store.load("uni_con")
    version = store.save("uni_con", kind="online", meta=meta, arrays=arrays, offsets={},
                         expected_version=0 if stored is None else stored.version)  # fmt: skip
    store.close()
    return version


def _children(parent: int) -> list[int]:
    """The serving processes of `parent` (its spawned children, not multiprocessing's
    resource tracker), from /proc."""
    pids = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            command = (entry / "cmdline").read_bytes()
        except OSError:
            continue
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        if ppid == parent and b"spawn_main" in command:
            pids.append(int(entry.name))
    return sorted(pids)


def _state(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return "gone"


@contextlib.contextmanager
def _only(server: ServeProcess, pid: int) -> Iterator[None]:
    """Every serving process but `pid` stopped (SIGSTOP, until stopped for sure): new
    connections go to `pid` alone."""
    others = [p for p in _children(server.process.pid) if p != pid]
    for other in others:
        os.kill(other, signal.SIGSTOP)
    try:
        for other in others:
            _until(lambda other=other: _state(other) == "T", f"process {other} stopped")
        yield
    finally:
        for other in others:
            os.kill(other, signal.SIGCONT)


def _until(done, what: str) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + HANG_GUARD_S
    while not done():
        assert time.monotonic() < deadline, f"not within {HANG_GUARD_S:g} s: {what}"
        time.sleep(0.05)


def _rank(server: ServeProcess) -> dict:
    """One ranking, on a new connection."""
    request = urllib.request.Request(server.url + "/v1/rank", BODY,
                                     {"Content-Type": "application/json"})  # fmt: skip
    with urllib.request.urlopen(request, timeout=HANG_GUARD_S) as reply:
        return json.load(reply)


def _started(server: ServeProcess, log: Path, processes: int = PROCESSES) -> list[int]:
    """The serving processes' pids once the parent says every one serves."""
    _until(lambda: "serving processes started" in log.read_text(), "every process serving")
    pids = _children(server.process.pid)
    assert len(pids) == processes, pids
    return pids


def _serving(settings: Settings, log: Path, **env: str) -> ServeProcess:
    """Serve on PROCESSES processes: ready inside `with`, stopped after."""
    return ServeProcess(settings, log, RANKSTREAM_API_PROCESSES=str(PROCESSES), **env)


def _requests_counted(server: ServeProcess) -> float:
    return server.ranking_counts()["ranked"]


def test_every_process_answers_with_the_same_model_and_version_and_reloads(
    services, service_settings: Settings, tmp_path: Path
) -> None:
    first = _save_champion(service_settings, 1.0)
    log = tmp_path / "serve.log"
    with _serving(service_settings, log) as server:
        pids = _started(server, log)
        answers = {}
        for pid in pids:
            with _only(server, pid):
                answers[pid] = _rank(server)
        assert {(a["model"], a["version"]) for a in answers.values()} == {("uni_con", first)}
        assert len({tuple(a["candidate_ids"]) for a in answers.values()}) == 1
        assert len({tuple(a["scores"]) for a in answers.values()}) == 1
        second = _save_champion(service_settings, -1.0)  # the reversed order
        for pid in pids:
            with _only(server, pid):
                _until(lambda: _rank(server)["version"] == second, f"{pid} serving {second}")
                answer = _rank(server)
            assert answer["candidate_ids"] == answers[pid]["candidate_ids"][::-1]


def test_metrics_add_up_what_every_process_counted(
    services, service_settings: Settings, tmp_path: Path
) -> None:
    _save_champion(service_settings, 1.0)
    log = tmp_path / "serve.log"
    with _serving(service_settings, log) as server:
        pids = _started(server, log)
        before = _requests_counted(server)
        asked = {pid: 3 + i for i, pid in enumerate(pids)}  # a different count each
        for pid, times in asked.items():
            with _only(server, pid):
                for _ in range(times):
                    _rank(server)
        total = sum(asked.values())
        assert _requests_counted(server) - before == total
        _until(lambda: server.impression_counts()["logged"] >= total, "impressions written")
        counts = server.impression_counts()
        assert (counts["logged"], counts["dropped"]) == (total, 0)
        assert counts["waiting"] == 0


def test_sigterm_stops_the_group_within_the_grace_even_with_a_stuck_process(
    services, service_settings: Settings, tmp_path: Path
) -> None:
    _save_champion(service_settings, 1.0)
    log = tmp_path / "serve.log"
    env = {"RANKSTREAM_API_GRACE_SECONDS": str(GRACE_S)}
    with _serving(service_settings, log, **env) as server:
        stuck, other = _started(server, log)
        os.kill(stuck, signal.SIGSTOP)  # it cannot stop by itself: the parent must end it
        _until(lambda: _state(stuck) == "T", "the process stopped")
        started = time.monotonic()
        server.process.send_signal(signal.SIGTERM)
        try:
            code = server.process.wait(timeout=GRACE_S + MARGIN_S)
        except subprocess.TimeoutExpired:
            pytest.fail(f"serve did not exit within {GRACE_S + MARGIN_S:g} s of SIGTERM")
        took = time.monotonic() - started
        assert code == 0
        assert _state(stuck) == _state(other) == "gone"
    assert took <= GRACE_S + MARGIN_S


def test_a_killed_process_is_started_again_and_its_counts_kept(
    services, service_settings: Settings, tmp_path: Path
) -> None:
    version = _save_champion(service_settings, 1.0)
    log = tmp_path / "serve.log"
    with _serving(service_settings, log) as server:
        victim, survivor = _started(server, log)
        with _only(server, victim):
            _rank(server)
            _rank(server)
        counted = _requests_counted(server)
        os.kill(victim, signal.SIGKILL)
        _until(lambda: len(set(_children(server.process.pid)) - {victim, survivor}) == 1,
               "a new process started")  # fmt: skip
        (replacement,) = set(_children(server.process.pid)) - {survivor}
        assert replacement != victim
        _until(lambda: log.read_text().count('"event":"serving"') == PROCESSES + 1, "it serves")
        with _only(server, replacement):
            assert _rank(server)["version"] == version
        assert _requests_counted(server) == counted + 1  # the dead process's two kept
        assert server.process.poll() is None


def _save_challenger(settings: Settings) -> None:
    """`opar1`, a model unlike uni_con's weights: a challenger to draft."""
    store = open_store(settings)
    scaler = Standardizer().fit(np.vstack([-np.ones(PHI_DIM), np.ones(PHI_DIM)]))
    warm = np.linspace(-1.0, 1.0, PHI_DIM)
    meta, arrays = OnlineRanker("opar1", scaler=scaler, warm_start=warm).to_state()
    stored = store.load("opar1")
    store.save("opar1", kind="online", meta=meta, arrays=arrays, offsets={},
               expected_version=0 if stored is None else stored.version)  # fmt: skip
    store.close()


def _post(server: ServeProcess, path: str, body: dict) -> dict:
    """One JSON POST, on a new connection."""
    request = urllib.request.Request(server.url + path, json.dumps(body).encode(),
                                     {"Content-Type": "application/json"})  # fmt: skip
    with urllib.request.urlopen(request, timeout=HANG_GUARD_S) as reply:
        return json.load(reply)


def test_clicks_posted_to_one_process_let_every_process_interleave(
    services, service_settings: Settings, tmp_path: Path
) -> None:
    """An engine whose clicks reach one process and rankings another is interleaved all
    the same (share 1: every champion ranking, once clicks were heard anywhere)."""
    _save_champion(service_settings, 1.0)
    _save_challenger(service_settings)
    query = {"candidate_ids": list(range(K)), "phi": PHI}  # no model named: the champion's
    log = tmp_path / "serve.log"
    with _serving(service_settings, log, RANKSTREAM_INTERLEAVING_SHARE="1") as server:
        hearing, other = _started(server, log)
        with _only(server, other):
            _post(server, "/v1/rank", query)
            assert server.ranking_counts()["interleaved"] == 0  # no click heard yet
        with _only(server, hearing):
            shown = _post(server, "/v1/rank", query)
            session = {"impression_id": shown["impression_id"], "clicks": []}
            _post(server, "/v1/clicks", {"impressions": [session]})
        interleaved = server.ranking_counts()["interleaved"]
        with _only(server, other):
            _post(server, "/v1/rank", query)
            assert server.ranking_counts()["interleaved"] == interleaved + 1


def test_a_process_that_keeps_ending_soon_after_its_start_is_restarted_ever_later() -> None:
    assert [restart_delay(n) for n in range(1, 9)] == [0.0, 1.0, 2.0, 4.0, 8.0, 16.0, 30.0, 30.0]


def _metrics_directories(pid: int) -> list[Path]:
    return sorted(Path(tempfile.gettempdir()).glob(f"{METRICS_PREFIX}{pid}-*"))


def test_a_killed_groups_metrics_directory_is_removed_by_the_next_group(
    services, service_settings: Settings, tmp_path: Path
) -> None:
    _save_champion(service_settings, 1.0)
    with _serving(service_settings, tmp_path / "killed.log") as killed:
        _started(killed, tmp_path / "killed.log")
        (left,) = _metrics_directories(killed.process.pid)
        killed.process.kill()  # SIGKILL: no `finally` runs in the parent
        killed.process.wait(timeout=HANG_GUARD_S)
        assert left.is_dir()
    with _serving(service_settings, tmp_path / "next.log") as after:
        _started(after, tmp_path / "next.log")
        assert not left.exists()
        assert len(_metrics_directories(after.process.pid)) == 1  # its own stays


def test_only_directories_of_processes_that_are_gone_are_stale(tmp_path: Path) -> None:
    ended = subprocess.Popen(["true"])
    ended.wait()  # its pid names no process now
    gone = tmp_path / f"{METRICS_PREFIX}{ended.pid}-abc"
    alive = tmp_path / f"{METRICS_PREFIX}{os.getpid()}-def"
    unnamed = tmp_path / f"{METRICS_PREFIX}xyz"  # not named by a pid: not ours to judge
    other = tmp_path / "something-else"
    for directory in (gone, alive, unnamed, other):
        directory.mkdir()
    (tmp_path / f"{METRICS_PREFIX}{ended.pid}-file").write_text("")  # a file, not a directory
    assert stale_metrics_directories(str(tmp_path)) == [str(gone)]
