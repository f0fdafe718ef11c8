"""`rankstream bench serve`: /v1/rank latency and throughput while the champion reloads.

Set-up (before any clock): a fresh key prefix in the configured Redis holds Uni-Con, an
OPAR-I model named champion by an evaluator record, and nothing else; `rankstream serve
--workers off` runs as its own process on a free loopback port (`harness.serve_process`).

While it is measured, a thread of this process saves a new version of the champion every
`reload_seconds` (what an online worker's checkpoints do), and after each save polls a
2-candidate ranking every 5 ms until the new version answers: the reload lag, from just
before the save to the first answer served by it.

Per body format (Arrow IPC in and out, then JSON in and out; 300 candidates x 36):

* fixed rate: `harness.http_load` in its own process sends requests on an open-loop
  schedule (`rate` req/s for `seconds`), latency measured from each request's scheduled
  time (so queueing counts); p50/p99 and the rate achieved;
* sustained: wrk (Debian's package, apt-get installed here as root like the services'
  packages) closed-loop with 4 connections for `seconds`, the requests/s the server
  keeps up; without wrk (not root, no apt) the figure is null and `sustained_note` and
  the progress lines say why. Over it, and until the impressions it caused are written,
  the server's CPU time per answer (`cpu_us_per_request`: /proc's user + system time of
  all its threads / its /v1/rank answers, Linux only): the server is busy throughout, so
  idle threads hardly count, and time other processes take from it does not count at
  all, which makes it the steadier measure of what a mode costs on a shared machine.
  When the Kafka broker runs on this machine (a bootstrap address on loopback:
  `harness.listening_processes` finds the processes listening there), the broker's CPU
  time over the same window, per answer of the server measured, is
  `broker_cpu_us_per_request`: what the impressions cost where they are written, on the
  same cores (null for a remote broker or the embedded transport).

Impression logging on vs off, and interleaving on vs off, in the same run: one serve
process per mode on the same store, measured one after the other in every round, the
order rotating round by round (each mode goes first in turn), so drifts in the machine's
load fall on all alike, and every run starts once the logging servers' queues have
drained (no run pays for a backlog the one before it left, e.g. wrk's flood):

* `on`: as deployed by default (every ranking logged to the impressions topic, on the
  configured transport; interleaving off), the reference;
* `off`: `RANKSTREAM_IMPRESSION_LOGGING=off`;
* one server per `interleaving_share` S (default 0.2, the share planned for compose and
  the click demo, and 1, every request): logging on and `RANKSTREAM_INTERLEAVING_SHARE=S`,
  the champion drafted with Uni-Con. Its `share_measured` is what it did, from its
  /metrics: interleaved / all /v1/rank answers over the runs (the reference's count of
  interleaved answers is reported too: 0).

With `compare_processes` N, one more logging server in the same rounds runs N serving
processes on its port (`serve.processes`; every other server here runs one), interleaving
at the first share (0 without one): `processes` gives its figures and, against the
one-process server of that share (the reference at share 0), `cost` (paired per round as
above); its CPU per answer sums its processes'.

The floor, in the same rounds: the same bodies answered by `harness.floor_app`'s two
endpoints on the same server stack (uvicorn as serve runs it), which only parse the body
into arrays and answer a fixed ranking: `floor` a Starlette route, `floor asgi` a bare
ASGI callable. `to_floor` gives every serve's figures as ratios to each (`_cost`): what
serve adds to what the stack itself costs.

Per body format the report gives each one's p50/p99, sustained rate and CPU per answer
(medians over the rounds) and, against the reference (`impression_logging_cost`: on /
off; per share, `cost`: interleaved / on), the ratios of those medians, each round's
paired p99, sustained and CPU-per-answer ratios with their median and quartiles (the
spread over rounds), and the impressions the reference wrote and dropped (its /metrics).
The reference also answers the reload lag's 2-candidate probes (a few a second among
thousands: they hardly move its CPU per answer).

Interleaving as an engine meets it: serve interleaves only once it has heard clicks
(`selection.click_race.Interleaver`; a POST /v1/clicks to any of a port's processes), and
the load posts none, so before any round every logging server ranks once and is posted a
click on that impression (`_hear_clicks`). Each interleaving server's `share_measured`
comes with its 99% Clopper-Pearson interval (`share_interval_99`; every champion ranking
is interleaved with probability S, independently), and a progress line says when S is
outside it.

With `baseline_python`, one more server `baseline` in the same rounds runs another
install's serve (that python's `-m rankstream serve`, e.g. the code before a change):
impression logging on, interleaving at the first share (0 without one), one process (it
is given only variables this bench's servers all take; Settings ignores the ones it does
not know, older ones included, so RANKSTREAM_API_PROCESSES=1 is harmless there). Its
figures are `baseline` per body format, with `cost`: the paired ratios to it (`_cost`)
of the reference (`on`), of the one-process server at its share (`interleaved`: the same
work as the baseline's) and of the several-process server (`processes`); the top level's
`baseline` says which python and which install (`installed_from`) it ran.

After the rounds of each body format, the reference (and the several-process server) run
once more, open loop at 80% of their median sustained requests/s for `seconds`
(`at_80_percent`, `_at_rate`): the rate asked and achieved, p50/p99, and the impressions
logged and dropped meanwhile, from its /metrics before and after (once every logging
server's queue drained; the reference's count includes the reload lag's probes).

Each is repeated `repeats` times and the medians are reported, with the load average
seen (the machine is shared). Before the first round of each body format every server
takes 1 s at the fixed rate, unmeasured (a fresh server's first requests are slow). At
the end the bench's models and topics are deleted.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
import uuid
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
from scipy.stats import binomtest

from rankstream.harness.bench_options import ServeBenchOptions
from rankstream.harness.floor_app import FloorProcess
from rankstream.harness.listening_processes import (
    cpu_seconds,
    listening_pids,
    local_ports,
    parent_and_ticks,
)
from rankstream.harness.serve_process import ServeProcess, free_port, installed_from, settings_env
from rankstream.ranking import learners
from rankstream.serve.bodies import ARROW
from rankstream.simulators.judged_feedback import SERVED_CANDIDATES
from rankstream.stream.connect import open_store, open_transport
from rankstream.stream.settings import DEFAULT_PHI_DIM as PHI_DIM
from rankstream.stream.settings import Settings
from rankstream.stream.store import ModelStore

SERVED = learners.worker_defaults()[0]  # any linear learner: the bench times serving it
MODES = {  # the servers compared in the same rounds, besides one per interleaving share
    "on": "impression logging on, interleaving off",
    "off": "impression logging off",
    "floor": "the floor: Starlette on uvicorn, body parsed into arrays, a fixed answer",
    "floor asgi": "the floor: a bare ASGI callable on uvicorn, the same",
}
FLOORS = {"floor": "starlette", "floor asgi": "asgi"}  # mode -> harness.floor_app kind
BASELINE = "baseline"  # the server another install runs (`baseline_python`)
PROBE = {"candidate_ids": [1, 2], "phi": [[0.5] * PHI_DIM, [0.25] * PHI_DIM]}  # 2 candidates
AT_RATE = 0.8  # `at_80_percent`: the share of the sustained rate it runs at


def _publish(store: ModelStore, rng: np.random.Generator) -> None:
    from rankstream.ranking.baselines import UniCon
    from rankstream.ranking.online import OnlineRanker
    from rankstream.ranking.scaling import Standardizer

    scaler = Standardizer().fit(rng.random((3000, PHI_DIM)))
    meta, arrays = UniCon(scaler=scaler).to_state()
    store.save("uni_con", kind="linear", meta=meta, arrays=arrays, offsets={}, expected_version=0)
    _checkpoint(store, rng, scaler)
    meta = {"champion": SERVED, "rolling_ndcg": {SERVED: 0.9}, "counts": {SERVED: 50}}
    store.save("evaluator", kind="scores", meta=meta, arrays={}, offsets={}, expected_version=0)
    del OnlineRanker


def _checkpoint(store: ModelStore, rng: np.random.Generator, scaler: Any = None) -> int:
    """A new version of the champion with fresh weights (a worker's checkpoint)."""
    from rankstream.ranking.online import OnlineRanker
    from rankstream.ranking.scaling import Standardizer

    if scaler is None:
        stored = store.load(SERVED)
        scaler = OnlineRanker.from_state(stored.meta, stored.arrays).scaler  # type: ignore[union-attr]
    assert isinstance(scaler, Standardizer)
    model = OnlineRanker(SERVED, scaler=scaler, warm_start=rng.standard_normal(PHI_DIM))
    meta, arrays = model.to_state()
    current = store.latest_versions().get(SERVED, 0)
    return store.save(
        SERVED, kind="online", meta=meta, arrays=arrays, offsets={}, expected_version=current
    )


def _bodies(directory: Path, rng: np.random.Generator) -> dict[str, Path]:
    ids = rng.permutation(10**6)[:SERVED_CANDIDATES].astype(np.int64)
    phi = rng.random((SERVED_CANDIDATES, PHI_DIM), dtype=np.float32)
    table = pa.table(
        {
            "candidate_ids": ids,
            "phi": pa.FixedSizeListArray.from_arrays(pa.array(phi.reshape(-1)), PHI_DIM),
        }
    )
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema) as writer:
        writer.write_table(table)
    paths = {"arrow": directory / "rank.arrow", "json": directory / "rank.json"}
    paths["arrow"].write_bytes(sink.getvalue().to_pybytes())
    body = {"candidate_ids": ids.tolist(), "phi": phi.astype(np.float64).round(6).tolist()}
    paths["json"].write_text(json.dumps(body))
    return paths


class Reloader(threading.Thread):
    """Saves a champion checkpoint every `every` s; measures save -> first served."""

    def __init__(self, store: ModelStore, url: str, every: float) -> None:
        super().__init__(name="reloader", daemon=True)
        self.store, self.url, self.every = store, url, every
        self.lags: list[float] = []
        self.stop = threading.Event()
        self.rng = np.random.default_rng(1)
        self.probe = json.dumps(PROBE).encode()

    def served_version(self) -> int:
        request = urllib.request.Request(
            self.url + "/v1/rank", self.probe, {"Content-Type": "application/json"}
        )
        with urllib.request.urlopen(request, timeout=5) as reply:
            return int(json.load(reply)["version"])

    def run(self) -> None:
        while not self.stop.wait(self.every):
            started = time.perf_counter()
            version = _checkpoint(self.store, self.rng)
            while self.served_version() < version and time.perf_counter() - started < 10:
                time.sleep(0.005)
            self.lags.append(time.perf_counter() - started)


def _load(url_port: int, body: Path, kind: str, rate: float, options: ServeBenchOptions) -> dict:
    command = [
        sys.executable,
        "-m",
        "rankstream.harness.http_load",
        "--port",
        str(url_port),
        "--body",
        str(body),
        "--content-type",
        ARROW if kind == "arrow" else "application/json",
        "--rate",
        str(rate),
        "--seconds",
        str(options.seconds),
        "--connections",
        str(options.connections),
    ]
    if kind == "arrow":
        command += ["--header", f"Accept: {ARROW}"]
    done = subprocess.run(command, capture_output=True, text=True, timeout=options.seconds + 120)
    if done.returncode != 0:
        raise RuntimeError(f"http_load failed: {done.stderr[-2000:]}")
    return json.loads(done.stdout)


def _wrk(port: int, body: Path, kind: str, seconds: float, directory: Path) -> float | None:
    """wrk's closed-loop requests/s (4 connections, 1 thread), None without wrk."""
    wrk = shutil.which("wrk")
    if wrk is None:
        return None
    script = directory / f"{kind}.lua"
    content_type = ARROW if kind == "arrow" else "application/json"
    script.write_text(
        f'wrk.method = "POST"\nwrk.headers["Content-Type"] = "{content_type}"\n'
        + (f'wrk.headers["Accept"] = "{ARROW}"\n' if kind == "arrow" else "")
        + f'local f = io.open("{body}", "rb")\nwrk.body = f:read("*a")\nf:close()\n'
    )
    done = subprocess.run(
        [
            wrk,
            "-t1",
            "-c4",
            f"-d{max(int(seconds), 1)}s",
            "-s",
            str(script),
            f"http://127.0.0.1:{port}/v1/rank",
        ],
        capture_output=True,
        text=True,
        timeout=seconds + 60,
    )
    if "Non-2xx" in done.stdout:
        raise RuntimeError(f"wrk saw errors:\n{done.stdout}")
    found = re.search(r"Requests/sec:\s+([\d.]+)", done.stdout)
    return float(found.group(1)) if found else None


def ensure_wrk(directory: Path) -> str | None:
    """Install Debian's wrk if it is missing; None when it is there, else why not."""
    from rankstream.harness.services.install import install_debian_packages
    from rankstream.harness.services.progress import Progress
    from rankstream.harness.services.service_error import ServiceError

    if shutil.which("wrk") is not None:
        return None
    try:
        install_debian_packages(["wrk"], directory / "apt-get-wrk.log", Progress())
    except ServiceError as error:
        return f"sustained rate not measured: {error}"
    return None


def _median(runs: list[dict], key: Callable[[dict], float]) -> float:
    return round(statistics.median(key(r) for r in runs), 3)


def _settled(server: ServeProcess, seconds: float = 120.0) -> None:
    """Wait until the logging server's impression queue is empty, so no measurement
    pays for a backlog the one before it left (wrk's flood)."""
    deadline = time.monotonic() + seconds
    while server.impression_counts()["waiting"] > 0 and time.monotonic() < deadline:
        time.sleep(0.25)


def _cpu_seconds(server: ServeProcess | FloorProcess) -> float | None:
    """The serve process's CPU time so far (user + system, every thread), its serving
    processes' included (`serve.processes`), from Linux's /proc; None elsewhere."""
    stats = _stats()
    root = server.process.pid
    if root not in stats:
        return None
    tree = {root}
    while True:  # the pids whose parent is in the tree, until none is added
        grown = tree | {pid for pid, (ppid, _) in stats.items() if ppid in tree}
        if grown == tree:
            break
        tree = grown
    ticks = sum(stats[pid][1] for pid in tree)
    return ticks / os.sysconf("SC_CLK_TCK")


def _stats() -> dict[int, tuple[int, int]]:
    """pid -> (parent pid, user + system clock ticks) of every process in /proc."""
    stats = {}
    for entry in Path("/proc").iterdir():
        seen = parent_and_ticks(int(entry.name)) if entry.name.isdigit() else None
        if seen is not None:  # else not a process, or it ended
            stats[int(entry.name)] = seen
    return stats


def _cpu_per_request(
    server: ServeProcess | FloorProcess, cpu_before: float | None, counts_before: dict[str, float]
) -> float | None:
    """Its CPU microseconds per /v1/rank answer since `cpu_before`/`counts_before`."""
    cpu = _cpu_seconds(server)
    ranked = server.ranking_counts()["ranked"] - counts_before["ranked"]
    if cpu is None or cpu_before is None or ranked <= 0:
        return None
    return round((cpu - cpu_before) / ranked * 1e6, 1)


def _broker_per_request(
    brokers: set[int], cpu_before: float | None, answers: float
) -> float | None:
    """The local brokers' CPU microseconds since `cpu_before` per answer (`answers`)."""
    cpu = cpu_seconds(brokers)
    if cpu is None or cpu_before is None or answers <= 0:
        return None
    return round((cpu - cpu_before) / answers * 1e6, 1)


def _summary(runs: list[dict], sustained: list[float | None]) -> dict[str, Any]:
    measured = [rps for rps in sustained if rps is not None]
    cpu = [r["cpu_us_per_request"] for r in runs if r.get("cpu_us_per_request") is not None]
    broker = [r["broker_cpu_us_per_request"] for r in runs
              if r.get("broker_cpu_us_per_request") is not None]  # fmt: skip
    return {
        "cpu_us_per_request": round(statistics.median(cpu), 1) if cpu else None,
        "broker_cpu_us_per_request": round(statistics.median(broker), 1) if broker else None,
        "p50_ms": _median(runs, lambda r: r["latency_ms"]["p50"]),
        "p99_ms": _median(runs, lambda r: r["latency_ms"]["p99"]),
        "achieved_rate": _median(runs, lambda r: r["achieved_rate"]),
        "errors": sum(r["errors"] for r in runs),
        "sustained_rps": round(statistics.median(measured), 1)
        if len(measured) == len(sustained)
        else None,
        "runs": runs,
        "sustained_runs": sustained,
    }


def _quartiles(values: list[float]) -> list[float] | None:
    """[25th, 75th] percentile: the spread of per-round ratios (None without any)."""
    if not values:
        return None
    return [round(float(q), 3) for q in np.percentile(values, [25, 75])]


def _cost(on: dict[str, Any], off: dict[str, Any]) -> dict[str, Any]:
    """`on` / `off` (two servers measured in the same rounds): the ratios of the medians,
    and each round's paired ratio with their median and quartiles (the spread)."""
    paired = [
        a["latency_ms"]["p99"] / b["latency_ms"]["p99"]
        for a, b in zip(on["runs"], off["runs"], strict=True)
        if b["latency_ms"]["p99"] > 0
    ]
    sustained = [
        a / b
        for a, b in zip(on["sustained_runs"], off["sustained_runs"], strict=True)
        if a is not None and b
    ]
    cpu = [
        a["cpu_us_per_request"] / b["cpu_us_per_request"]
        for a, b in zip(on["runs"], off["runs"], strict=True)
        if a.get("cpu_us_per_request") and b.get("cpu_us_per_request")
    ]
    return {
        "cpu_ratio_paired_median": round(statistics.median(cpu), 3) if cpu else None,
        "cpu_ratio_paired_quartiles": _quartiles(cpu),
        "cpu_ratio_paired": [round(r, 3) for r in cpu],
        "p50_ratio": round(on["p50_ms"] / off["p50_ms"], 3) if off["p50_ms"] else None,
        "p99_ratio": round(on["p99_ms"] / off["p99_ms"], 3) if off["p99_ms"] else None,
        "p99_ratio_paired_median": round(statistics.median(paired), 3) if paired else None,
        "p99_ratio_paired_quartiles": _quartiles(paired),
        "p99_ratio_paired": [round(r, 3) for r in paired],
        "sustained_ratio": round(on["sustained_rps"] / off["sustained_rps"], 3)
        if on["sustained_rps"] and off["sustained_rps"]
        else None,
        "sustained_ratio_paired_median": round(statistics.median(sustained), 3)
        if sustained
        else None,
        "sustained_ratio_paired": [round(r, 3) for r in sustained],
    }


def _to_floor(summaries: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Each serve's figures as ratios to each floor measured in the same rounds
    (`_cost`: CPU per answer, sustained requests/s, p50/p99, paired round by round)."""
    return {
        mode: {FLOORS[floor]: _cost(summary, summaries[floor]) for floor in FLOORS}
        for mode, summary in summaries.items()
        if mode not in FLOORS
    }


def _share_label(share: float) -> str:
    return f"interleaved {share:g}"


def _processes_label(processes: int) -> str:
    return f"{processes} processes"


def _post_json(url: str, body: dict[str, Any]) -> dict[str, Any]:
    request = urllib.request.Request(
        url, json.dumps(body).encode(), {"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(request, timeout=10) as reply:
        return json.load(reply)


def _hear_clicks(server: ServeProcess) -> None:
    """Rank once and post a click on that impression, as an engine would: serve
    interleaves only once it has heard clicks (`selection.click_race.Interleaver`)."""
    answer = _post_json(server.url + "/v1/rank", PROBE)
    click = {"candidate_id": answer["candidate_ids"][0], "position": 1}
    clicks = {"impression_id": answer["impression_id"], "clicks": [click]}
    _post_json(server.url + "/v1/clicks", clicks)


def _share_measured(
    share: float, before: dict[str, float], after: dict[str, float]
) -> dict[str, Any]:
    """A server's interleaved / ranked answers between two `ranking_counts`, with the
    99% Clopper-Pearson interval of that share (each champion ranking is interleaved
    with probability `share`, independently: `Interleaver._draft`)."""
    ranked = round(after["ranked"] - before["ranked"])
    interleaved = round(after["interleaved"] - before["interleaved"])
    if ranked <= 0:
        return {"share_measured": None, "share_interval_99": None}
    interval = binomtest(interleaved, ranked, share).proportion_ci(0.99, method="exact")
    return {
        "share_measured": round(interleaved / ranked, 4),
        "share_interval_99": [round(interval.low, 4), round(interval.high, 4)],
    }


def _share_line(label: str, share: float, measured: dict[str, Any]) -> str:
    interval = measured["share_interval_99"]
    outside = interval is not None and not interval[0] <= share <= interval[1]
    return (f"{label}: share measured {measured['share_measured']} (99% interval "
            f"{interval}){'; NOT the share asked' if outside else ''}")  # fmt: skip


def _at_rate(
    server: ServeProcess,
    sustained_rps: float | None,
    body: Path,
    kind: str,
    options: ServeBenchOptions,
    logging: list[ServeProcess],
) -> dict[str, Any]:
    """`server` open loop at AT_RATE of its sustained requests/s for `options.seconds`,
    and the impressions it logged and dropped meanwhile: its /metrics before, and after,
    once every logging server's queue drained."""
    if not sustained_rps:
        return {"rate": None, "note": "no sustained rate measured"}
    rate = round(AT_RATE * sustained_rps, 1)
    for other in logging:
        _settled(other)
    before = server.impression_counts()
    answered = _load(server.port, body, kind, rate, options)
    for other in logging:
        _settled(other)
    after = server.impression_counts()
    return {
        "rate": rate,
        "achieved_rate": answered["achieved_rate"],
        "p50_ms": answered["latency_ms"]["p50"],
        "p99_ms": answered["latency_ms"]["p99"],
        "errors": answered["errors"],
        "impressions_logged": round(after["logged"] - before["logged"]),
        "impressions_dropped": round(after["dropped"] - before["dropped"]),
        "impressions_waiting": round(after["waiting"]),  # as read (the reload probes go on)
    }


def _baseline_install(python: str, settings: Settings) -> dict[str, Any]:
    """Which code the baseline runs: where `python` imports rankstream from (as the
    server is started), and that checkout's commit when it is one; refused when it is
    this very install (the comparison would be of the code with itself)."""
    import rankstream

    found = installed_from(python, settings_env(settings))
    if Path(found).resolve() == Path(rankstream.__file__).parent.resolve():
        raise ValueError(f"baseline_python {python} runs this very install ({found})")
    done = subprocess.run(
        ["git", "-C", found, "rev-parse", "--short", "HEAD"],
        capture_output=True, text=True, timeout=30, check=False,
    )  # fmt: skip
    commit = done.stdout.strip() if done.returncode == 0 else None
    return {"python": python, "rankstream": found, "commit": commit}


def run_serve_bench(
    settings: Settings, options: ServeBenchOptions, progress: Callable[[str], None] = print
) -> dict[str, Any]:
    bench = replace(
        settings, topic_prefix=f"{settings.topic_prefix}.bench-serve-{uuid.uuid4().hex[:8]}"
    )
    baseline = (
        None
        if options.baseline_python is None
        else _baseline_install(options.baseline_python, bench)
    )
    store = open_store(bench)
    rng = np.random.default_rng(0)
    directory = Path(tempfile.mkdtemp(prefix="bench-serve-"))
    _publish(store, rng)
    one = {"RANKSTREAM_API_PROCESSES": "1"}  # one serving process unless compared
    servers: dict[str, ServeProcess | FloorProcess] = {  # "on", "off": no interleaving
        "on": ServeProcess(
            bench, directory / "serve-on.log", RANKSTREAM_IMPRESSION_LOGGING="on",
            RANKSTREAM_INTERLEAVING_SHARE="0", **one,
        ),
        "off": ServeProcess(
            bench, directory / "serve-off.log", RANKSTREAM_IMPRESSION_LOGGING="off",
            RANKSTREAM_INTERLEAVING_SHARE="0", **one,
        ),
    }  # fmt: skip
    for share in options.interleaving_share:  # the champion drafted with Uni-Con
        servers[_share_label(share)] = ServeProcess(
            bench,
            directory / f"serve-interleaved-{share:g}.log",
            RANKSTREAM_IMPRESSION_LOGGING="on",
            RANKSTREAM_INTERLEAVING_SHARE=repr(share),
            **one,
        )
    first_share = options.interleaving_share[0] if options.interleaving_share else 0.0
    same_work = _share_label(first_share) if options.interleaving_share else "on"
    processes = _processes_label(options.compare_processes)
    if options.compare_processes:  # `same_work` on several processes
        servers[processes] = ServeProcess(
            bench, directory / "serve-processes.log", RANKSTREAM_IMPRESSION_LOGGING="on",
            RANKSTREAM_INTERLEAVING_SHARE=repr(first_share),
            RANKSTREAM_API_PROCESSES=str(options.compare_processes),
        )  # fmt: skip
    baseline_share = first_share
    if options.baseline_python is not None:  # another install: only variables it knows
        servers[BASELINE] = ServeProcess(
            bench, directory / "serve-baseline.log", python=options.baseline_python,
            RANKSTREAM_IMPRESSION_LOGGING="on",
            RANKSTREAM_INTERLEAVING_SHARE=repr(baseline_share), **one,
        )  # fmt: skip
    for mode, kind in FLOORS.items():
        servers[mode] = FloorProcess(kind, free_port(), directory / f"{kind}-floor.log")
    logging = [s for n, s in servers.items() if isinstance(s, ServeProcess) and n != "off"]
    load_before = os.getloadavg()
    brokers = listening_pids(local_ports((bench.kafka_bootstrap or "").split(",")))
    progress(f"the local Kafka broker's CPU is measured too (pids {sorted(brokers)})" if brokers
             else "no Kafka broker on this machine: its CPU is not measured")  # fmt: skip
    wrk_note = ensure_wrk(directory)
    if wrk_note is not None:
        progress(wrk_note)
    try:
        for server in servers.values():
            server.wait_ready()
        labels = dict(MODES)
        if baseline is not None:
            labels[BASELINE] = (f"the baseline ({baseline['rankstream']}), impression logging "
                                f"on, {_share_label(baseline_share)}")  # fmt: skip
        for name, server in servers.items():  # so that the interleaving servers interleave
            if server in logging:
                progress(f"{name}: rank once and post a click on it (serve interleaves "
                         "once it heard clicks)")  # fmt: skip
                _hear_clicks(server)
        bodies = _bodies(directory, rng)
        reference = servers["on"]
        assert isinstance(reference, ServeProcess)
        reloader = Reloader(store, reference.url, options.reload_seconds)
        reloader.start()
        results: dict[str, Any] = {}
        for kind, rate in (("arrow", options.arrow_rate), ("json", options.json_rate)):
            modes = list(servers)
            runs: dict[str, list[dict]] = {m: [] for m in modes}
            sustained: dict[str, list[float | None]] = {m: [] for m in modes}
            for mode in modes:  # unmeasured: a fresh server's first requests are slow
                _load(servers[mode].port, bodies[kind], kind, rate, replace(options, seconds=1))
            for server in logging:
                _settled(server)
            counted = {m: servers[m].ranking_counts() for m in modes}
            for repeat in range(options.repeats):
                turn = repeat % len(modes)  # each goes first in turn
                for mode in modes[turn:] + modes[:turn]:
                    port = servers[mode].port
                    label = labels.get(mode, f"impression logging on, {mode}")
                    progress(f"{kind}: run {repeat + 1}/{options.repeats} at {rate:g} req/s, "
                             f"{label} (load average {os.getloadavg()[0]:.1f})")  # fmt: skip
                    run = _load(port, bodies[kind], kind, rate, options)
                    for server in logging:
                        _settled(server)
                    before = _cpu_seconds(servers[mode]), servers[mode].ranking_counts()
                    broker_before = cpu_seconds(brokers)
                    sustained[mode].append(
                        _wrk(port, bodies[kind], kind, options.seconds, directory)
                    )
                    for server in logging:
                        _settled(server)  # its impressions written: their cost counts too
                    run["cpu_us_per_request"] = _cpu_per_request(servers[mode], *before)
                    answers = servers[mode].ranking_counts()["ranked"] - before[1]["ranked"]
                    run["broker_cpu_us_per_request"] = _broker_per_request(
                        brokers, broker_before, answers
                    )
                    runs[mode].append(run)
            summaries = {m: _summary(runs[m], sustained[m]) for m in modes}
            on = summaries["on"]
            interleaving = []
            for share in options.interleaving_share:
                mode = _share_label(share)
                # what the server did: its interleaved / ranked answers over the runs
                measured = _share_measured(share, counted[mode], servers[mode].ranking_counts())
                progress(f"{kind}: " + _share_line(mode, share, measured))
                interleaving.append(
                    {
                        "share": share,
                        **measured,
                        **summaries[mode],
                        "cost": _cost(summaries[mode], on),  # both log impressions
                    }
                )
            at_rate: dict[str, dict[str, Any]] = {}
            for mode in ["on"] + ([processes] if options.compare_processes else []):
                server = servers[mode]
                assert isinstance(server, ServeProcess)
                sustained_rps = summaries[mode]["sustained_rps"]
                progress(f"{kind}: {mode} at {AT_RATE:.0%} of its sustained "
                         f"{sustained_rps} req/s for {options.seconds:g} s (impressions "
                         f"dropped?; load average {os.getloadavg()[0]:.1f})")  # fmt: skip
                at_rate[mode] = _at_rate(
                    server, sustained_rps, bodies[kind], kind, options, logging
                )
            answered = reference.ranking_counts()
            results[kind] = {
                "rate": rate,
                **on,
                "floor": {FLOORS[m]: summaries[m] for m in FLOORS},
                "to_floor": _to_floor(summaries),
                "sustained_note": wrk_note,
                "interleaved_answers": answered["interleaved"] - counted["on"]["interleaved"],
                "impressions_off": summaries["off"],
                "impression_logging_cost": _cost(on, summaries["off"]),
                "interleaving": interleaving,
                "at_80_percent": at_rate["on"],
            }
            if options.compare_processes:
                results[kind]["processes"] = {
                    "processes": options.compare_processes,
                    **summaries[processes],
                    "share": first_share,
                    **_share_measured(
                        first_share, counted[processes], servers[processes].ranking_counts()
                    ),
                    "cost": _cost(summaries[processes], summaries[same_work]),
                    "at_80_percent": at_rate[processes],
                }
            if baseline is not None:
                old = summaries[BASELINE]
                measured = _share_measured(
                    baseline_share, counted[BASELINE], servers[BASELINE].ranking_counts()
                )
                progress(f"{kind}: " + _share_line(BASELINE, baseline_share, measured))
                cost = {"on": _cost(on, old)}  # the reference against the baseline
                if options.interleaving_share:
                    cost["interleaved"] = _cost(summaries[same_work], old)
                if options.compare_processes:
                    cost["processes"] = _cost(summaries[processes], old)
                results[kind][BASELINE] = {"share": baseline_share, **measured, **old,
                                           "cost": cost}  # fmt: skip
        reloader.stop.set()
        reloader.join()
        results["impressions"] = reference.impression_counts()
        lags = np.asarray(reloader.lags)
        results["reload"] = {
            "every_s": options.reload_seconds,
            "reloads": len(lags),
            "lag_p50_s": round(float(np.percentile(lags, 50)), 4) if len(lags) else None,
            "lag_p99_s": round(float(np.percentile(lags, 99)), 4) if len(lags) else None,
            "lag_max_s": round(float(lags.max()), 4) if len(lags) else None,
        }
    finally:
        for server in servers.values():
            server.stop()
        for name in store.names():
            store.delete(name)
        store.close()
        transport = open_transport(bench)
        transport.delete_topics(bench.topics)
        transport.close()
    if baseline is not None:
        results[BASELINE] = baseline
    results["candidates"] = SERVED_CANDIDATES
    results["loadavg_before"] = [round(x, 2) for x in load_before]
    results["loadavg_after"] = [round(x, 2) for x in os.getloadavg()]
    results["cpus"] = os.cpu_count()
    return results
