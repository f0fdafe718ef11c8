"""`rankstream bench ingest`: judged queries/s through POST /v1/feedback into Kafka.

Set-up (before the clock): a fresh topic/key prefix; Uni-Con in the configured Redis;
`rankstream serve --workers off` as its own process; in this process the real online
worker (every online learner) and the evaluator, each on a thread of its stream runtime,
counting what they consume. A feedback body template (300 candidates x 36 phi, about 30
of the top 50 judged with grades 0..3, the rest null) is written once; `harness.http_load
--numbered` sends `queries` copies of it, each with its own query id, closed-loop over
`connections` keep-alive connections from its own process.

Clock: from the first request to the last answer (each answered only once the broker
acknowledged its triplets and judged query). Reported: judged queries/s, and the
triplets/s they yield (the receipts' counts).

Then nothing may be lost or duplicated: the online worker's consumed triplet seq numbers
must be exactly 0..n-1 once each (n = the receipts' total; one server numbers them), and
the evaluator must have evaluated every query id exactly once. Repeated `repeats` times
on fresh prefixes; medians, with the load average seen. Topics and models are deleted.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np

from rankstream.harness.accounting import SeqCounter
from rankstream.harness.bench_options import IngestBenchOptions
from rankstream.harness.serve_process import ServeProcess
from rankstream.simulators.judged_feedback import SERVED_CANDIDATES
from rankstream.stream.connect import open_store, open_transport
from rankstream.stream.settings import DEFAULT_PHI_DIM as PHI_DIM
from rankstream.stream.settings import Settings
from rankstream.workers.evaluator import Evaluator, EvaluatorOptions
from rankstream.workers.online_worker import OnlineWorker, WorkerOptions


def feedback_template(rng: np.random.Generator) -> bytes:
    """A feedback body with `__N__` where the query id goes."""
    relevance: list[int | None] = [None] * SERVED_CANDIDATES
    for i in np.flatnonzero(rng.random(50) < 0.6):
        relevance[int(i)] = int(rng.integers(0, 4))
    body = {
        "query_id": 0,
        "candidate_ids": rng.permutation(10**6)[:SERVED_CANDIDATES].tolist(),
        "phi": rng.random((SERVED_CANDIDATES, PHI_DIM)).round(6).tolist(),
        "relevance": relevance,
        "model": "uni_con",
        "version": 1,
    }
    return json.dumps(body).replace('"query_id": 0', '"query_id": __N__', 1).encode()


@dataclass
class IngestRun:
    queries: int
    seconds: float
    triplets: int
    lost_triplets: int
    duplicated_triplets: int
    lost_queries: int
    duplicated_queries: int
    errors: int

    @property
    def queries_per_s(self) -> float:
        return self.queries / self.seconds

    @property
    def triplets_per_s(self) -> float:
        return self.triplets / self.seconds


def publish_unicon(settings: Settings) -> None:
    """Uni-Con in the store, so a server under load is ready (it serves a model)."""
    from rankstream.ranking.baselines import UniCon

    store = open_store(settings)
    meta, arrays = UniCon().fit(np.random.default_rng(0).random((3000, PHI_DIM))).to_state()
    store.save("uni_con", kind="linear", meta=meta, arrays=arrays, offsets={}, expected_version=0)
    store.close()


def _send(server: ServeProcess, body: Path, options: IngestBenchOptions) -> dict:
    command = [
        sys.executable,
        "-m",
        "rankstream.harness.http_load",
        "--port",
        str(server.port),
        "--path",
        "/v1/feedback",
        "--body",
        str(body),
        "--rate",
        "1",
        "--connections",
        str(options.connections),
        "--numbered",
        str(options.queries),
    ]
    done = subprocess.run(command, capture_output=True, text=True, timeout=3600)
    if done.returncode != 0:
        raise RuntimeError(f"http_load failed: {done.stderr[-2000:]}")
    return json.loads(done.stdout)


def run_once(settings: Settings, options: IngestBenchOptions, directory: Path) -> IngestRun:
    run = replace(
        settings, topic_prefix=f"{settings.topic_prefix}.bench-ingest-{uuid.uuid4().hex[:8]}"
    )
    publish_unicon(run)
    transport = open_transport(run)
    transport.ensure_topics({run.triplets_topic: 1, run.queries_topic: 1, run.dead_letter_topic: 1})
    seqs = SeqCounter()
    online = OnlineWorker(run, WorkerOptions(), on_block=seqs)
    evaluator = Evaluator(run, EvaluatorOptions(history=options.queries + 10))
    threads = [threading.Thread(target=w.run, daemon=True) for w in (online, evaluator)]
    for thread in threads:
        thread.start()
    server = ServeProcess(run, directory / "serve.log")
    body = directory / "feedback.json"
    body.write_bytes(feedback_template(np.random.default_rng(0)))
    try:
        server.wait_ready()
        sent = _send(server, body, options)
        n = sent["triplets"]
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and (
            sum(len(c) for c in seqs.chunks) < n or evaluator.queries_evaluated < options.queries
        ):
            time.sleep(0.2)
        time.sleep(1.0)  # anything duplicated late arrives too
    finally:
        server.stop()
        for worker in (online, evaluator):
            worker.stop()
        for thread in threads:
            thread.join(timeout=60)
    lost, duplicated = seqs.lost_and_duplicated(n)
    seen = Counter(scores.query_id for scores in evaluator.history)
    _clean(run, transport)
    return IngestRun(
        queries=sent["answered"],
        seconds=sent["seconds"],
        triplets=n,
        lost_triplets=lost,
        duplicated_triplets=duplicated,
        lost_queries=sum(1 for q in range(options.queries) if seen[q] == 0),
        duplicated_queries=sum(max(c - 1, 0) for c in seen.values()),
        errors=sent["errors"],
    )


def _clean(settings: Settings, transport: Any) -> None:
    store = open_store(settings)
    for name in store.names():
        store.delete(name)
    store.close()
    transport.delete_topics(
        [settings.triplets_topic, settings.queries_topic, settings.dead_letter_topic]
    )
    transport.close()


def run_ingest_bench(
    settings: Settings, options: IngestBenchOptions, progress: Callable[[str], None] = print
) -> dict[str, Any]:
    directory = Path(tempfile.mkdtemp(prefix="bench-ingest-"))
    load_before = os.getloadavg()
    runs = []
    for repeat in range(options.repeats):
        progress(f"run {repeat + 1}/{options.repeats}: {options.queries} judged queries")
        runs.append(run_once(settings, options, directory))
        r = runs[-1]
        progress(f"  {r.queries_per_s:.0f} queries/s, {r.triplets_per_s:.0f} triplets/s, "
                 f"lost {r.lost_triplets}/{r.lost_queries}, "
                 f"duplicated {r.duplicated_triplets}/{r.duplicated_queries}")  # fmt: skip
    return {
        "queries": options.queries,
        "connections": options.connections,
        "candidates": SERVED_CANDIDATES,
        "queries_per_s": round(statistics.median(r.queries_per_s for r in runs), 1),
        "triplets_per_s": round(statistics.median(r.triplets_per_s for r in runs), 1),
        "lost": sum(r.lost_triplets + r.lost_queries for r in runs),
        "duplicated": sum(r.duplicated_triplets + r.duplicated_queries for r in runs),
        "errors": sum(r.errors for r in runs),
        "runs": [dict(r.__dict__, queries_per_s=round(r.queries_per_s, 1),
                      triplets_per_s=round(r.triplets_per_s, 1)) for r in runs],
        "loadavg_before": [round(x, 2) for x in load_before],
        "loadavg_after": [round(x, 2) for x in os.getloadavg()],
        "cpus": os.cpu_count(),
    }  # fmt: skip
