"""A search engine that ranks with rankstream and feeds back its users' partial judgments.

Written only against the HTTP API: the standard library and numpy, no rankstream import
(`tests/test_serve_engine_loop.py` checks that), so it is what a team with its own CBIR
engine would write. Its queries come from an .npz file (candidate ids, phi and the
ground-truth grades of each query's candidates), which stands in for the engine's own
retrieval and its users.

For each query: POST /v1/rank (the champion), then the user judges some of the served
top 50 (each with probability `--judge`, the rest left unjudged: null), then POST
/v1/feedback with those grades and the ranking's `model_versions` echoed back.
Prints one JSON summary: queries, which model/version served them, triplets produced.

    python tests/engine_loop.py --url http://127.0.0.1:8000 --data queries.npz [--token T]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
import urllib.error
import urllib.request

import numpy as np


def call(url: str, path: str, body: dict | None, token: str | None) -> dict:
    """One request; JSON in and out; raises on any status but 200."""
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(
        url + path, data=data, method="GET" if body is None else "POST"
    )
    request.add_header("Content-Type", "application/json")
    if token:
        request.add_header("Authorization", f"Bearer {token}")
    with urllib.request.urlopen(request, timeout=30) as reply:
        return json.load(reply)


def wait_live(url: str, seconds: float = 60) -> None:
    deadline = time.monotonic() + seconds
    while True:
        try:
            call(url, "/healthz", None, None)
            return
        except (urllib.error.URLError, ConnectionError):
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--url", required=True)
    parser.add_argument("--data", required=True)
    parser.add_argument("--token", default=None)
    parser.add_argument("--judge", type=float, default=0.6, help="P(a top-50 result is judged)")
    parser.add_argument("--top", type=int, default=50)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    data = np.load(args.data)
    ids, phi, truth = data["candidate_ids"], data["phi"], data["relevance"]
    rng = np.random.default_rng(args.seed)
    wait_live(args.url)
    served: list[tuple[str, int]] = []
    triplets = 0
    for q in range(len(ids)):
        ranking = call(
            args.url,
            "/v1/rank",
            {"candidate_ids": ids[q].tolist(), "phi": phi[q].tolist()},
            args.token,
        )
        served.append((ranking["model"], ranking["version"]))
        grade = dict(zip(ids[q].tolist(), truth[q].tolist(), strict=True))
        top = ranking["candidate_ids"][: args.top]
        judged = {c for c in top if rng.random() < args.judge}
        relevance = [grade[c] if c in judged else None for c in ids[q].tolist()]
        receipt = call(
            args.url,
            "/v1/feedback",
            {
                "query_id": q,
                "candidate_ids": ids[q].tolist(),
                "phi": phi[q].tolist(),
                "relevance": relevance,
                "model": ranking["model"],
                "version": ranking["version"],
                "model_versions": ranking["model_versions"],
            },
            args.token,
        )
        triplets += receipt["triplets"]
    by_model: dict[str, int] = {}
    for name, _ in served:
        by_model[name] = by_model.get(name, 0) + 1
    summary = {"queries": len(served), "served_by": by_model, "triplets": triplets,
               "first": served[0], "last": served[-1]}  # fmt: skip
    print(json.dumps(summary))
    return 0


if __name__ == "__main__":
    sys.exit(main())
