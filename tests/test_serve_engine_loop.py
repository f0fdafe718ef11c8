"""An engine written only against the HTTP API learns a better champion through rankstream.

`tests/engine_loop.py` (stdlib + numpy, no rankstream import) ranks 300 queries with the
champion through POST /v1/rank and feeds back partial judgments (about 60% of each
served top 50) through POST /v1/feedback. From an empty store: the first requests
calibrate Uni-Con (stamped with the deployment's width, refitted until it has seen
RANKSTREAM_UNICON_CALIBRATION candidates), the online workers learn from the feedback,
the evaluator's paired test switches the champion from Uni-Con to a learned model, and
/v1/rank serves that model's versions. After 150 queries the engine waits for that
switch (bounded: a deadline only guards a hang), then measures NDCG@50 of the served
and of Uni-Con's rankings of the same queries against its ground truth: the learned
champion must rank better. At widths 8, 10, 36 and 128 in the embedded default
(`rankstream serve` alone: one process), and at 128 on the real services (Kafka, Redis;
the workers as their own processes): what depends on the width (the messages' and the
models' encodings, the learners) is the same code on both, so the embedded runs (and
tests/test_width_pipeline.py) cover the widths, and this run the services at the widest.

The queries are the stream generator's (`harness.generator.TripletGenerator`, fixed
seed per width): candidates graded 0-4 by a hidden linear scorer of random signs, which
equal weights (Uni-Con) rank poorly and a learned linear model recovers; per-query
NDCG@50 differences of about 0.2 make the test by betting switch long before the engine
waits: in 4 runs of the four embedded widths Uni-Con served 43-100 of the first 150
queries and the engine never had to wait (settle searches 0 in all 16).
"""

from __future__ import annotations

import ast
import json
import os
import socket
import subprocess
import sys
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from rankstream.harness.generator import TripletGenerator
from rankstream.stream.settings import Settings

LOOP = Path(__file__).with_name("engine_loop.py")
QUERIES, CANDIDATES = 300, 100
LEARNED = {"opr", "opar1", "opar2", "ogdr", "arow"}


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def get(url: str) -> dict:
    with urllib.request.urlopen(url, timeout=10) as reply:
        return json.load(reply)


def post(url: str, body: dict) -> dict:
    request = urllib.request.Request(
        url, json.dumps(body).encode(), headers={"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(request, timeout=10) as reply:
        return json.load(reply)


def queries_of(width: int, directory: Path) -> tuple[Path, dict]:
    """QUERIES queries of CANDIDATES candidates at `width`, as the engine's own data."""
    generator = TripletGenerator(seed=width, width=width)
    drawn = [generator.candidates(CANDIDATES) for _ in range(QUERIES)]
    path = directory / f"queries-{width}.npz"
    np.savez(
        path,
        candidate_ids=np.stack([ids for ids, _, _ in drawn]),
        phi=np.stack([phi for _, phi, _ in drawn]),
        relevance=np.stack([relevance for _, _, relevance in drawn]),
    )
    return path, {"candidate_ids": drawn[0][0], "phi": drawn[0][1]}


def env_of(settings: Settings, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("RANKSTREAM_")}
    env.update(RANKSTREAM_TOPIC_PREFIX=settings.topic_prefix, RANKSTREAM_DATA_DIR=settings.data_dir)
    if settings.kafka_bootstrap:
        env["RANKSTREAM_KAFKA_BOOTSTRAP"] = settings.kafka_bootstrap
    if settings.redis_url:
        env["RANKSTREAM_REDIS_URL"] = settings.redis_url
    env.update(extra)
    return env


def start(*command: str, env: dict[str, str], log: Path) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "rankstream", *command],
        env=env, stdout=log.open("w"), stderr=subprocess.STDOUT,
    )  # fmt: skip


@pytest.fixture
def processes() -> Iterator[list[subprocess.Popen]]:
    running: list[subprocess.Popen] = []
    yield running
    for process in running:
        process.terminate()
    for process in running:
        try:
            process.wait(timeout=60)
        except subprocess.TimeoutExpired:
            process.kill()


def run_engine_and_check(url: str, data: tuple[Path, dict]) -> None:
    path, first = data
    loop = subprocess.run(
        [sys.executable, str(LOOP), "--url", url, "--data", str(path),
         "--settle-after", str(QUERIES // 2), "--settle-seconds", "300"],
        capture_output=True, text=True, timeout=900,
    )  # fmt: skip
    assert loop.returncode == 0, loop.stderr[-3000:]
    summary = json.loads(loop.stdout)
    print("engine loop summary:", json.dumps(summary))  # shown by `pytest -rP`
    assert summary["queries"] == QUERIES and summary["triplets"] > 10_000
    assert summary["first"][0] == "uni_con"  # a fresh store starts on Uni-Con
    assert summary["settled_on"] in LEARNED
    # the second half: the learned champion ranks the same queries better than Uni-Con
    assert summary["measured_queries"] == QUERIES - QUERIES // 2
    assert summary["served_ndcg_at_50"] > summary["unicon_ndcg_at_50"] + 0.05, summary

    listing = get(url + "/v1/models")
    assert listing["champion"] in LEARNED
    assert listing["race"]["alpha"] == 0.01 and listing["race"]["delta"] == 0.005
    unicon = get(url + "/v1/models/uni_con")
    # calibrated on the first ceil(1000 / CANDIDATES) requests' candidates, then final
    assert unicon["version"] == -(-1000 // CANDIDATES)
    body = {"candidate_ids": first["candidate_ids"].tolist(), "phi": first["phi"].tolist()}
    ranking = post(url + "/v1/rank", body)
    latest = {m["name"]: m for m in get(url + "/v1/models")["models"]}[ranking["model"]]
    assert ranking["model"] in LEARNED and ranking["requested"] == "champion"
    assert ranking["version"] <= latest["version"]  # a version the store holds, newest or close


def test_the_loop_never_imports_rankstream() -> None:
    imported = set()
    for node in ast.walk(ast.parse(LOOP.read_text())):
        if isinstance(node, ast.Import):
            imported |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            imported.add((node.module or "").split(".")[0])
    allowed = {"__future__", "argparse", "json", "sys", "time", "urllib", "numpy"}
    assert "rankstream" not in imported and imported <= allowed


@pytest.mark.parametrize("width", [8, 10, 36, 128])
def test_an_engine_learns_through_the_api_in_the_embedded_default(
    width: int, processes, embedded_settings: Settings, tmp_path: Path
) -> None:
    port = free_port()
    env = env_of(embedded_settings, RANKSTREAM_API_PORT=str(port), RANKSTREAM_PHI_DIM=str(width))
    processes.append(start("serve", env=env, log=tmp_path / "serve.log"))
    run_engine_and_check(f"http://127.0.0.1:{port}", queries_of(width, tmp_path))


@pytest.mark.parametrize("width", [128])
def test_an_engine_learns_through_the_api_on_the_real_services(
    width: int, processes, service_settings: Settings, tmp_path: Path
) -> None:
    port = free_port()
    env = env_of(service_settings, RANKSTREAM_API_PORT=str(port), RANKSTREAM_PHI_DIM=str(width))
    processes.append(start("worker", "online", env=env, log=tmp_path / "online.log"))
    processes.append(start("worker", "evaluator", env=env, log=tmp_path / "evaluator.log"))
    processes.append(start("serve", env=env, log=tmp_path / "serve.log"))
    run_engine_and_check(f"http://127.0.0.1:{port}", queries_of(width, tmp_path))
