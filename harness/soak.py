"""The soak test: the real pipeline at a sustained rate for a long time, memory and lag watched.

`run_soak` starts `rankstream worker online`, `rankstream worker evaluator` and
`rankstream simulate --rate R` as subprocesses on the configured Kafka and Redis (a
fresh topic prefix), each serving /metrics on its own 127.0.0.1 port. Every
`sample_seconds` it scrapes those endpoints (triplets produced and consumed, queries
evaluated, the worker's consumer lag in records) and reads each process's resident
memory from /proc/PID/status. After `seconds` the simulator is stopped and the
workers get `drain_seconds` to catch up; then every process is stopped cleanly.

Verdicts (the run fails unless all hold):

* memory: for each process, the median RSS of the last fifth of the run minus the
  median RSS of the first fifth after warm-up is below `rss_growth_mib` (medians, so one
  GC or buffer spike does not decide it; warm-up covers the collection load, numba
  compilation and the first checkpoints);
* lag: after warm-up the worker's lag never exceeds `lag_bound_records` (it keeps up
  with the sustained rate) and after the producer stops it falls to at most
  `drained_lag_records` within `drain_seconds`;
* liveness: no process exits early, and the worker consumed triplets.

Results: `summary.json` (options, per-process RSS figures, rates, lags, verdicts) and
`soak.png` (throughput, lag and RSS over time) in `out`.

Run it as `python -m rankstream.harness.soak` (`make soak`). With no Kafka/Redis configured it
starts its own under `out/services` and stops them afterwards.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import statistics
import subprocess
import sys
import time
import urllib.request
import uuid
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from rankstream.stream.settings import Settings

PROCESSES = ("online", "evaluator", "simulate")
_COMMANDS = {
    "online": ["worker", "online"],
    "evaluator": ["worker", "evaluator"],
    "simulate": ["simulate"],
}
_COUNTERS = {  # what each process's /metrics contributes to a sample
    "online": ("rankstream_triplets_consumed_total", "rankstream_consumer_lag_records"),
    "evaluator": ("rankstream_queries_evaluated_total",),
    "simulate": ("rankstream_triplets_produced_total",),
}


@dataclass(frozen=True)
class SoakOptions:
    """How long, how fast, and the bounds the run must stay within."""

    seconds: float = 600.0
    rate: float = 2000.0  # triplets/s the simulator is limited to
    images: int = 20_000  # collection size (small: the soak is about the pipeline)
    sample_seconds: float = 5.0
    warmup_seconds: float = 60.0
    rss_growth_mib: float = 64.0
    lag_bound_records: int = 50_000
    drained_lag_records: int = 1_000
    drain_seconds: float = 60.0
    startup_seconds: float = 180.0  # for the first sample with every endpoint answering
    seed: int = 0

    def __post_init__(self) -> None:
        if not (self.seconds > 0 and self.rate > 0 and self.sample_seconds > 0):
            raise ValueError("seconds, rate and sample_seconds must be > 0")
        if not 0 <= self.warmup_seconds < self.seconds:
            raise ValueError("warmup_seconds must be in [0, seconds)")
        if self.images < 1000:
            raise ValueError(f"images must be >= 1000, got {self.images}")


@dataclass
class Sample:
    """One look at the pipeline, `t` seconds after the first full sample."""

    t: float
    produced: float
    consumed: float
    evaluated: float
    lag: float
    rss_mib: dict[str, float]


@dataclass
class SoakResult:
    options: dict[str, Any]
    samples: list[Sample]
    rss: dict[str, dict[str, float]] = field(default_factory=dict)
    rates: dict[str, float] = field(default_factory=dict)
    lag: dict[str, float] = field(default_factory=dict)
    verdicts: dict[str, bool] = field(default_factory=dict)
    failures: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.failures and all(self.verdicts.values())

    def summary(self) -> dict[str, Any]:
        return {
            "ok": self.ok,
            "options": self.options,
            "rss_mib": self.rss,
            "rates_per_s": self.rates,
            "lag_records": self.lag,
            "verdicts": self.verdicts,
            "failures": self.failures,
            "samples": len(self.samples),
        }


# --- measuring ------------------------------------------------------------------------
def rss_mib(pid: int) -> float:
    """Resident set size of `pid` in MiB, from /proc (VmRSS)."""
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024.0
    raise ValueError(f"/proc/{pid}/status has no VmRSS line")


def scrape(port: int, names: tuple[str, ...], timeout: float = 2.0) -> dict[str, float]:
    """Sum of every sample of each named metric at 127.0.0.1:port/metrics."""
    from prometheus_client.parser import text_string_to_metric_families

    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=timeout) as reply:
        text = reply.read().decode()
    totals = dict.fromkeys(names, 0.0)
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name in totals:
                totals[sample.name] += sample.value
    return totals


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


# --- verdicts -------------------------------------------------------------------------
def judge(
    samples: list[Sample], options: SoakOptions, drained_lag: float | None, run_seconds: float
) -> SoakResult:
    """Turn the samples into RSS/rate/lag figures and the pass/fail verdicts."""
    result = SoakResult(options=asdict(options), samples=samples)
    steady = [s for s in samples if options.warmup_seconds <= s.t <= run_seconds]
    if len(steady) < 4:
        result.failures.append(f"only {len(steady)} samples after warm-up; need >= 4")
        return result
    fifth = max(1, len(steady) // 5)
    for name in PROCESSES:
        first = statistics.median(s.rss_mib[name] for s in steady[:fifth])
        last = statistics.median(s.rss_mib[name] for s in steady[-fifth:])
        peak = max(s.rss_mib[name] for s in samples)
        result.rss[name] = {
            "after_warmup": round(first, 1),
            "end": round(last, 1),
            "growth": round(last - first, 1),
            "peak": round(peak, 1),
        }
    span = steady[-1].t - steady[0].t
    for key in ("produced", "consumed", "evaluated"):
        delta = getattr(steady[-1], key) - getattr(steady[0], key)
        result.rates[key] = round(delta / span, 1) if span > 0 else 0.0
    result.lag = {
        "max_after_warmup": max(s.lag for s in steady),
        "median_after_warmup": statistics.median(s.lag for s in steady),
        "after_drain": drained_lag if drained_lag is not None else -1.0,
    }
    result.verdicts = {
        "rss_bounded": all(r["growth"] < options.rss_growth_mib for r in result.rss.values()),
        "lag_bounded": result.lag["max_after_warmup"] <= options.lag_bound_records,
        "lag_drained": drained_lag is not None and drained_lag <= options.drained_lag_records,
        "consumed": steady[-1].consumed > steady[0].consumed,
    }
    return result


# --- running --------------------------------------------------------------------------
class _Pipeline:
    """The three subprocesses, their metrics ports and logs."""

    def __init__(self, settings: Settings, options: SoakOptions, out: Path) -> None:
        self.ports = {name: free_port() for name in PROCESSES}
        self.procs: dict[str, subprocess.Popen[bytes]] = {}
        self.settings, self.options, self.out = settings, options, out
        self.prefix = f"soak{uuid.uuid4().hex[:10]}"

    def _env(self, name: str) -> dict[str, str]:
        env = dict(os.environ)
        env.update(
            {
                "RANKSTREAM_KAFKA_BOOTSTRAP": self.settings.kafka_bootstrap or "",
                "RANKSTREAM_REDIS_URL": self.settings.redis_url or "",
                "RANKSTREAM_TOPIC_PREFIX": self.prefix,
                "RANKSTREAM_METRICS_HOST": "127.0.0.1",
                "RANKSTREAM_METRICS_PORT": str(self.ports[name]),
                "RANKSTREAM_DATA_DIR": self.settings.data_dir,
            }
        )
        return env

    def start(self) -> None:
        extra = {
            "simulate": [
                "--rate",
                str(self.options.rate),
                "--images",
                str(self.options.images),
                "--seed",
                str(self.options.seed),
                "--triplets",
                str(10**12),
            ]
        }
        for name in PROCESSES:
            argv = [sys.executable, "-m", "rankstream", *_COMMANDS[name], *extra.get(name, [])]
            log = open(self.out / f"{name}.log", "wb")  # noqa: SIM115 - lives as long as the process
            self.procs[name] = subprocess.Popen(
                argv, env=self._env(name), stdout=log, stderr=subprocess.STDOUT
            )

    def dead(self) -> list[str]:
        return [
            f"{n} exited with {p.returncode}" for n, p in self.procs.items() if p.poll() is not None
        ]

    def sample(self, t: float) -> Sample:
        values: dict[str, float] = {}
        for name in PROCESSES:
            values.update(scrape(self.ports[name], _COUNTERS[name]))
        return Sample(
            t=round(t, 2),
            produced=values["rankstream_triplets_produced_total"],
            consumed=values["rankstream_triplets_consumed_total"],
            evaluated=values["rankstream_queries_evaluated_total"],
            lag=values["rankstream_consumer_lag_records"],
            rss_mib={n: round(rss_mib(p.pid), 1) for n, p in self.procs.items()},
        )

    def stop(self, name: str, timeout: float = 60.0) -> None:
        proc = self.procs.get(name)
        if proc is None or proc.poll() is not None:
            return
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()

    def stop_all(self) -> None:
        for name in reversed(PROCESSES):
            self.stop(name)


def _wait_for_first_sample(
    pipeline: _Pipeline, options: SoakOptions, say: Callable[[str], None]
) -> None:
    deadline = time.monotonic() + options.startup_seconds
    while True:
        if dead := pipeline.dead():
            raise RuntimeError(f"soak: {'; '.join(dead)} during start-up (see logs)")
        try:
            if pipeline.sample(0.0).consumed > 0:
                return
        except OSError:
            pass
        if time.monotonic() > deadline:
            raise RuntimeError(f"soak: no triplets consumed within {options.startup_seconds}s")
        say("starting: waiting for the first consumed triplets")
        time.sleep(1.0)


def run_soak(
    settings: Settings,
    options: SoakOptions,
    out: Path,
    say: Callable[[str], None] = lambda _text: None,
) -> SoakResult:
    """Run the pipeline for `options.seconds`, sampling; write summary.json and soak.png."""
    if not (settings.kafka_bootstrap and settings.redis_url):
        raise ValueError("the soak runs through real Kafka and Redis; configure both")
    out.mkdir(parents=True, exist_ok=True)
    pipeline = _Pipeline(settings, options, out)
    samples: list[Sample] = []
    failures: list[str] = []
    drained: float | None = None
    pipeline.start()
    try:
        _wait_for_first_sample(pipeline, options, say)
        start = time.monotonic()
        while (t := time.monotonic() - start) < options.seconds:
            if dead := pipeline.dead():
                failures.extend(dead)
                break
            samples.append(pipeline.sample(t))
            s = samples[-1]
            say(
                f"{t:5.0f}/{options.seconds:.0f}s produced {s.produced:.0f} consumed "
                f"{s.consumed:.0f} lag {s.lag:.0f} rss "
                + " ".join(f"{n}={v:.0f}M" for n, v in s.rss_mib.items())
            )
            time.sleep(options.sample_seconds)
        run_seconds = time.monotonic() - start
        pipeline.stop("simulate")
        drained = _drain(pipeline, options, start, samples, say)
    finally:
        pipeline.stop_all()
    result = judge(samples, options, drained, run_seconds)
    result.failures[:0] = failures
    (out / "summary.json").write_text(
        json.dumps({**result.summary(), "sample_series": [asdict(s) for s in samples]}, indent=1)
    )
    plot(samples, options, out / "soak.png")
    return result


def _drain(
    pipeline: _Pipeline,
    options: SoakOptions,
    start: float,
    samples: list[Sample],
    say: Callable[[str], None],
) -> float | None:
    """Sample the workers (simulator stopped) until the lag is small or time runs out."""
    deadline = time.monotonic() + options.drain_seconds
    lag: float | None = None
    while time.monotonic() < deadline:
        time.sleep(min(options.sample_seconds, 2.5))
        try:
            values = scrape(pipeline.ports["online"], _COUNTERS["online"])
        except OSError:
            return lag
        lag = values["rankstream_consumer_lag_records"]
        say(f"draining: lag {lag:.0f}")
        if (
            lag <= options.drained_lag_records
            and samples
            and (values["rankstream_triplets_consumed_total"] >= samples[-1].produced)
        ):
            break
    return lag


def plot(samples: list[Sample], options: SoakOptions, path: Path) -> None:
    """Throughput, lag and RSS against time, the warm-up shaded."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(3, 1, figsize=(9, 9), sharex=True)
    ts = [s.t for s in samples]
    for key in ("produced", "consumed"):
        values = [getattr(s, key) for s in samples]
        rates = [0.0] + [
            (b - a) / max(tb - ta, 1e-9)
            for a, b, ta, tb in zip(values, values[1:], ts, ts[1:], strict=False)
        ]
        axes[0].plot(ts, rates, label=f"{key} triplets/s")
    axes[0].axhline(options.rate, color="grey", ls=":", label="target rate")
    axes[1].plot(ts, [s.lag for s in samples], color="tab:red")
    axes[1].axhline(options.lag_bound_records, color="grey", ls=":", label="lag bound")
    for name in PROCESSES:
        axes[2].plot(ts, [s.rss_mib[name] for s in samples], label=name)
    axes[0].set_ylabel("triplets/s")
    axes[1].set_ylabel("consumer lag (records)")
    axes[2].set_ylabel("RSS (MiB)")
    axes[2].set_xlabel("seconds")
    for ax in axes:
        ax.axvspan(0, options.warmup_seconds, color="0.92")
        ax.legend(loc="upper right", fontsize=8)
    fig.suptitle(f"rankstream soak: {options.rate:g} triplets/s for {options.seconds:g}s")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


# --- command line -------------------------------------------------------------------
def _parse(argv: list[str] | None) -> tuple[SoakOptions, Path, bool]:
    defaults = SoakOptions()
    parser = argparse.ArgumentParser(
        prog="python -m rankstream.harness.soak",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    for name in (
        "seconds",
        "rate",
        "images",
        "sample_seconds",
        "warmup_seconds",
        "rss_growth_mib",
        "lag_bound_records",
        "drained_lag_records",
        "drain_seconds",
        "seed",
    ):
        default = getattr(defaults, name)
        parser.add_argument(
            f"--{name.replace('_', '-')}",
            type=type(default),
            default=default,
            help=f"default {default}",
        )
    parser.add_argument("--out", type=Path, default=Path("report/soak"))
    parser.add_argument("--json", action="store_true", help="print the summary as one JSON")
    args = parser.parse_args(argv)
    fields = {k: v for k, v in vars(args).items() if k not in ("out", "json")}
    return SoakOptions(**fields), args.out, args.json


def main(argv: list[str] | None = None) -> int:
    from rich.console import Console

    options, out, as_json = _parse(argv)
    err = Console(stderr=True)
    settings = Settings.from_env()
    manager = None
    if not (settings.kafka_bootstrap and settings.redis_url):
        from dataclasses import replace

        from rankstream.harness.services import ServiceManager

        manager = ServiceManager(out.resolve() / "services")
        with err.status("soak: starting Kafka and Redis"):
            for name in ("kafka", "redis"):
                manager.start(name)
        status = manager.status()
        settings = replace(
            settings,
            kafka_bootstrap=status["kafka"]["address"],
            redis_url=status["redis"]["address"],
        )
    try:
        with err.status("soak: starting") as status:
            result = run_soak(settings, options, out, say=lambda t: status.update(f"soak: {t}"))
    finally:
        if manager is not None:
            manager.down()
    summary = result.summary()
    if as_json:
        print(json.dumps(summary))
    else:
        err.print_json(json.dumps(summary))
        err.print(f"plot: {out / 'soak.png'}; summary: {out / 'summary.json'}")
    return 0 if result.ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
