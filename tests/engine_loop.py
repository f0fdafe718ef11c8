"""A search engine that ranks with rankstream and feeds back its users' partial judgments.

Written only against the HTTP API: the standard library and numpy, no rankstream import
(`tests/test_serve_engine_loop.py` checks that), so it is what a team with its own CBIR
engine would write. Its queries come from an .npz file (candidate ids, phi and the
ground-truth grades of each query's candidates), which stands in for the engine's own
retrieval and its users.

For each query: POST /v1/rank (the champion), then the user judges some of the served
top 50 (each with probability `--judge`, the rest left unjudged: null), then POST
/v1/feedback with those grades and the ranking's `model_versions` echoed back. The
same query is also ranked by Uni-Con (`"model": "uni_con"`), so the engine can measure
what the champion gained: NDCG@50 of both rankings against its ground truth (gain
2^grade - 1, discount 1/log2(rank + 1)). With `--settle-after N` the engine waits after
N queries (at most `--settle-seconds`) until GET /v1/models names another champion than
Uni-Con, searching its first N queries again meanwhile (its users keep searching; new
query ids), so the queries after N, never seen, measure the learned champion; it exits
3 if no switch came.
Prints one JSON summary: queries, which model/version served them, triplets produced,
the mean NDCG@50 of the served and of Uni-Con's rankings over the queries after N.

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


def call(url: str, path: str, body: dict | None, token: str | None, attempts: int = 30) -> dict:
    """One request; JSON in and out; raises on any status but 200.

    A 503 is the API's "not now" (a wait on Kafka or the store passed its deadline) and a
    409 "the first attempt is still in flight": the engine waits (`Retry-After`, else 1 s)
    and sends the same request again, at most `attempts` times. Feedback is idempotent by
    its query id, so a repeat is never counted twice; it gets the first attempt's answer.
    """
    data = None if body is None else json.dumps(body).encode()
    attempt = 1
    while True:
        request = urllib.request.Request(
            url + path, data=data, method="GET" if body is None else "POST"
        )
        request.add_header("Content-Type", "application/json")
        if token:
            request.add_header("Authorization", f"Bearer {token}")
        try:
            with urllib.request.urlopen(request, timeout=30) as reply:
                return json.load(reply)
        except urllib.error.HTTPError as exc:
            if exc.code not in (409, 503) or attempt == attempts:
                raise
            retry_after = float(exc.headers.get("Retry-After") or 1)
            print(f"{path}: {exc.code}, retry {attempt} in {retry_after:g} s", file=sys.stderr)
            time.sleep(min(retry_after, 10.0))
            attempt += 1


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


def ndcg_at_50(ranked_ids: list[int], grade: dict[int, int]) -> float:
    """NDCG@50 of a ranking against the ground-truth grades of all its candidates."""
    discount = 1.0 / np.log2(np.arange(2, 52))
    gains = np.array([2.0 ** grade[c] - 1.0 for c in ranked_ids[:50]])
    ideal = np.sort([2.0**g - 1.0 for g in grade.values()])[::-1][:50]
    best = float(ideal @ discount[: len(ideal)])
    return float(gains @ discount[: len(gains)]) / best if best > 0 else 0.0


class Engine:
    """The engine's state: its queries, its users' coin, what served and what it learned."""

    def __init__(self, args: argparse.Namespace) -> None:
        data = np.load(args.data)
        self.ids, self.phi, self.truth = data["candidate_ids"], data["phi"], data["relevance"]
        self.args = args
        self.rng = np.random.default_rng(args.seed)
        self.served: list[tuple[str, int]] = []
        self.triplets = 0

    def rank(self, q: int, model: str | None = None) -> dict:
        body = {"candidate_ids": self.ids[q].tolist(), "phi": self.phi[q].tolist()}
        if model is not None:
            body["model"] = model
        return call(self.args.url, "/v1/rank", body, self.args.token)

    def grades(self, q: int) -> dict[int, int]:
        return dict(zip(self.ids[q].tolist(), self.truth[q].tolist(), strict=True))

    def search(self, q: int, query_id: int) -> dict:
        """One user's search: the champion's ranking, then feedback on its judged top."""
        ranking = self.rank(q)
        self.served.append((ranking["model"], ranking["version"]))
        grade = self.grades(q)
        top = ranking["candidate_ids"][: self.args.top]
        judged = {c for c in top if self.rng.random() < self.args.judge}
        relevance = [grade[c] if c in judged else None for c in self.ids[q].tolist()]
        receipt = call(
            self.args.url,
            "/v1/feedback",
            {
                "query_id": query_id,
                "candidate_ids": self.ids[q].tolist(),
                "phi": self.phi[q].tolist(),
                "relevance": relevance,
                "model": ranking["model"],
                "version": ranking["version"],
                "model_versions": ranking["model_versions"],
            },
            self.args.token,
        )
        self.triplets += receipt["triplets"]
        return ranking

    def settle(self, first: int) -> tuple[str | None, int]:
        """Search the first `first` queries again (new query ids) until the service names
        another champion than Uni-Con, at most --settle-seconds; (champion, searches)."""
        deadline = time.monotonic() + self.args.settle_seconds
        searches = 0
        while time.monotonic() < deadline:
            champion = call(self.args.url, "/v1/models", None, self.args.token)["champion"]
            if champion != "uni_con":
                return champion, searches
            for _ in range(10):
                self.search(searches % first, len(self.ids) + searches)
                searches += 1
        return None, searches


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--url", required=True)
    parser.add_argument("--data", required=True)
    parser.add_argument("--token", default=None)
    parser.add_argument("--judge", type=float, default=0.6, help="P(a top-50 result is judged)")
    parser.add_argument("--top", type=int, default=50)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--settle-after", type=int, default=None, metavar="N")
    parser.add_argument("--settle-seconds", type=float, default=120.0)
    args = parser.parse_args()
    engine = Engine(args)
    wait_live(args.url)
    measured: list[tuple[float, float]] = []  # (served, Uni-Con) NDCG@50 after settling
    settled, searches = None, 0
    for q in range(len(engine.ids)):
        if q == args.settle_after:
            settled, searches = engine.settle(q)
            if settled is None:
                print(f"no champion but Uni-Con after {q} + {searches} queries", file=sys.stderr)
                return 3
        ranking = engine.search(q, q)
        if settled is not None:
            grade = engine.grades(q)
            unicon = engine.rank(q, "uni_con")
            measured.append(
                (
                    ndcg_at_50(ranking["candidate_ids"], grade),
                    ndcg_at_50(unicon["candidate_ids"], grade),
                )
            )
    by_model: dict[str, int] = {}
    for name, _ in engine.served:
        by_model[name] = by_model.get(name, 0) + 1
    summary = {"queries": len(engine.ids), "searches": len(engine.served), "served_by": by_model,
               "triplets": engine.triplets, "first": engine.served[0], "last": engine.served[-1],
               "settled_on": settled, "settle_searches": searches}  # fmt: skip
    if measured:
        pairs = np.array(measured)
        summary.update(measured_queries=len(pairs), served_ndcg_at_50=float(pairs[:, 0].mean()),
                       unicon_ndcg_at_50=float(pairs[:, 1].mean()))  # fmt: skip
    print(json.dumps(summary))
    return 0


if __name__ == "__main__":
    sys.exit(main())
