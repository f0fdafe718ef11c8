"""`rankstream eval http-engine`: an engine nobody here wrote, clicks only, over HTTP.

For each click model and seed, a fresh deployment: the embedded default (`rankstream
serve` alone, its workers in process) or the real services (Kafka and Redis from the
settings; `serve` then runs no workers, so the online worker, the evaluator and the click
join start as their own processes, as compose runs them), on a data directory and topic
prefix of its own, with no RANKSTREAM_* setting but its width (and `env`, what the caller
adds). `harness.http_click_engine.ClickEngine` then searches through its HTTP API only
and measures; the processes are stopped and their logs kept under `workdir`.
"""

from __future__ import annotations

import subprocess
import sys
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path
from typing import Any

from rankstream.harness.http_click_engine import (
    Api,
    ClickEngine,
    ClickModel,
    EngineOptions,
    EngineRun,
    summarize,
)
from rankstream.harness.serve_process import free_port, settings_env
from rankstream.stream.settings import Settings

EMBEDDED, SERVICES = "embedded", "services"
# what `serve` runs in process in the embedded default, as separate processes
SERVICE_WORKERS = (("worker", "online"), ("worker", "evaluator"), ("worker", "click-join"))


@contextmanager
def deployment(
    settings: Settings, workdir: Path, width: int, env: Mapping[str, str] | None = None
) -> Iterator[str]:
    """A fresh `rankstream serve` (plus the workers when `settings` name services) on a
    free loopback port; yields its URL, stops every process it started on the way out."""
    workdir.mkdir(parents=True, exist_ok=True)
    port = free_port()
    variables = settings_env(
        settings,
        RANKSTREAM_PHI_DIM=str(width),
        RANKSTREAM_API_PORT=str(port),
        RANKSTREAM_METRICS_PORT=str(free_port()),
        **dict(env or {}),
    )
    commands = [("serve",)]
    if settings.kafka_bootstrap:
        commands = [*SERVICE_WORKERS, *commands]
    processes: list[subprocess.Popen] = []
    logs = []
    try:
        for words in commands:
            log = (workdir / f"{'-'.join(words)}.log").open("w")
            logs.append(log)
            worker_env = dict(variables)
            if words != ("serve",):  # its own metrics port each
                worker_env["RANKSTREAM_METRICS_PORT"] = str(free_port())
            processes.append(subprocess.Popen(
                [sys.executable, "-m", "rankstream", *words],
                env=worker_env, stdout=log, stderr=subprocess.STDOUT,
            ))  # fmt: skip
        yield f"http://127.0.0.1:{port}"
    finally:
        for process in reversed(processes):
            process.terminate()
        for process in processes:
            try:
                process.wait(timeout=60)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        for log in logs:
            log.close()


def evaluate_http_engine(
    settings: Settings,
    click_models: Sequence[str],
    seeds: Sequence[int],
    options: EngineOptions,
    workdir: Path,
    env: Mapping[str, str] | None = None,
    progress: Callable[[str], None] | None = None,
) -> dict[str, Any]:
    """Every (click model, seed) on its own fresh deployment; the runs and, per click
    model, `summarize`'s view across seeds."""
    say = progress or (lambda _: None)
    models = [ClickModel.parse(name) for name in click_models]
    report: dict[str, Any] = {
        "deployment": SERVICES if settings.kafka_bootstrap else EMBEDDED,
        "width": options.width,
        "env": dict(env or {}),
        "click_models": {},
    }
    for users in models:
        runs: list[EngineRun] = []
        for seed in seeds:
            tag = f"{users.name}-{seed}".replace(":", "_").replace(",", "_")
            run_settings = replace(
                settings,
                topic_prefix=f"{settings.topic_prefix}.he{uuid.uuid4().hex[:8]}",
                data_dir=str(workdir / tag / "data"),
            )
            say(f"{users.name}, seed {seed}: {options.impressions} impressions")
            with deployment(run_settings, workdir / tag, options.width, env) as url:
                engine = ClickEngine(
                    Api(url), users, replace(options, seed=seed),
                    progress=lambda line, tag=tag: say(f"{tag}: {line}"),
                )  # fmt: skip
                runs.append(engine.run())
        report["click_models"][users.name] = {
            "summary": summarize(runs),
            "runs": [run.report() for run in runs],
        }
    return report
