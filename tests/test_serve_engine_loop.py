"""An engine written only against the HTTP API learns a better champion through rankstream.

`tests/engine_loop.py` (stdlib + numpy, no rankstream import) ranks 300 queries with the
champion through POST /v1/rank and feeds back partial judgments (about 60% of each
served top 50) through POST /v1/feedback. The online workers learn from them, the
evaluator scores every model on them (NDCG@50 over the judged candidates), the champion
changes from Uni-Con to a learned model, and /v1/rank then serves that model's version.
Once in the embedded default (`rankstream serve` alone: one process), once on the real
services (Kafka, Redis; the workers as their own processes).
"""

from __future__ import annotations

import ast
import json
import os
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from rankstream.simulators.collection import build_collection
from rankstream.simulators.feedback import FeedbackSimulator
from rankstream.simulators.retrieval import CandidateIndex
from rankstream.stream.settings import Settings

LOOP = Path(__file__).with_name("engine_loop.py")
QUERIES = 300
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


@pytest.fixture(scope="module")
def queries(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict]:
    """300 queries of a 20,000-image synthetic collection, as the engine's own data."""
    collection = build_collection(n_images=20_000, seed=0, progress=False)
    index = CandidateIndex.build(collection, seed=0, progress=False)
    simulator = FeedbackSimulator(collection, seed=3, index=index)
    drawn = [simulator.next_query() for _ in range(QUERIES)]
    path = tmp_path_factory.mktemp("engine") / "queries.npz"
    np.savez(
        path,
        candidate_ids=np.stack([q.candidate_ids for q in drawn]),
        phi=np.stack([q.phi for q in drawn]),
        relevance=np.stack([q.relevance for q in drawn]),
    )
    return path, {"candidate_ids": drawn[0].candidate_ids, "phi": drawn[0].phi}


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


def run_engine_and_check(url: str, data: tuple[Path, dict], tmp_path: Path) -> None:
    path, first = data
    loop = subprocess.run(
        [sys.executable, str(LOOP), "--url", url, "--data", str(path)],
        capture_output=True, text=True, timeout=900,
    )  # fmt: skip
    assert loop.returncode == 0, loop.stderr[-3000:]
    summary = json.loads(loop.stdout)
    assert summary["queries"] == QUERIES and summary["triplets"] > 10_000
    assert summary["first"][0] == "uni_con"  # a fresh store starts on Uni-Con

    deadline = time.monotonic() + 120
    while True:  # the evaluator has the last queries to score; the champion moves
        listing = get(url + "/v1/models")
        if listing["champion"] in LEARNED:
            break
        assert time.monotonic() < deadline, f"champion never left Uni-Con: {listing}"
        time.sleep(1)
    champion = listing["champion"]
    entry = {m["name"]: m for m in listing["models"]}[champion]
    assert (
        entry["rolling_ndcg_at_50"]
        > {m["name"]: m for m in listing["models"]}["uni_con"]["rolling_ndcg_at_50"]
    )
    body = {"candidate_ids": first["candidate_ids"].tolist(), "phi": first["phi"].tolist()}
    ranking = post(url + "/v1/rank", body)
    latest = {m["name"]: m for m in get(url + "/v1/models")["models"]}[ranking["model"]]
    assert ranking["model"] in LEARNED and ranking["requested"] == "champion"
    assert ranking["version"] >= entry["served_version"]
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


def test_an_engine_learns_through_the_api_in_the_embedded_default(
    queries, processes, embedded_settings: Settings, tmp_path: Path
) -> None:
    port = free_port()
    env = env_of(embedded_settings, RANKSTREAM_API_PORT=str(port))
    processes.append(start("serve", env=env, log=tmp_path / "serve.log"))
    run_engine_and_check(f"http://127.0.0.1:{port}", queries, tmp_path)


def test_an_engine_learns_through_the_api_on_the_real_services(
    queries, processes, service_settings: Settings, tmp_path: Path
) -> None:
    port = free_port()
    env = env_of(service_settings, RANKSTREAM_API_PORT=str(port))
    processes.append(start("worker", "online", env=env, log=tmp_path / "online.log"))
    processes.append(start("worker", "evaluator", env=env, log=tmp_path / "evaluator.log"))
    processes.append(start("serve", env=env, log=tmp_path / "serve.log"))
    run_engine_and_check(f"http://127.0.0.1:{port}", queries, tmp_path)
