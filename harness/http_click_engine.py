"""A search engine nobody here wrote: it ranks through `rankstream serve` over HTTP and
posts only its users' clicks.

HTTP only (`POST /v1/rank`, `POST /v1/clicks`, `GET /v1/models`, `GET /openapi.json`),
the standard library and numpy: no rankstream import (tests/test_http_click_engine.py
checks that), so what it measures is what an engine that connects over HTTP gets. It is
built off rankstream's home test beds on purpose:

* its own collection (`QueryStream`): per query `candidates` results whose raw
  descriptors are heavy-tailed (log-normal), counts (Poisson) and bounded scores, each
  with a query-specific offset and scale; graded 0, 1, 2 by a hidden linear score of the
  scaled descriptors plus noise (the top 5% of a query: 2, the next 10%: 1). The hidden
  weights are mostly positive (equal weights rank well), some zero and some negative (a
  learned model can do better);
* its own scaling: per-query min-max (each descriptor in [0, 1] within its query), not
  rankstream's standardisation;
* its own width (`width`, any >= 4);
* its own users (`ClickModel`): rank k of the shown list is examined with probability
  (1/k)^eta (position bias); an examined result of grade g is clicked with probability
  `click[g]` (trust bias: `click[0]` > 0 clicks irrelevant results); after a click of
  grade g the user stops with probability `stop[g]` (none by default). `USER_MODELS`
  holds the three named ones; `ClickModel.parse` reads others.

An impression: POST /v1/rank with no model (the champion, possibly interleaved), the user
clicks on the top `shown` results, POST /v1/clicks with those clicks, and the session is
closed in the same request when serve's API offers a per-impression flag for it (its name
read from /openapi.json), else by a second POST with an empty clicks list (the "session
over" row). Every ranking the engine asks for, for its users or to measure, is closed, so
no session is left to wait for the click window (the join emits closed sessions in
arrival order, so one open session holds back every later one).

Measured: the users' NDCG@50 on what they were shown, Uni-Con's on the same queries
(every `reference_every`-th impression's query also ranked with `"model": "uni_con"`;
closed at once, it teaches nothing: no clicks), the champion that served each
impression, and at `checkpoints` the true NDCG@50 of every servable model on `fresh`
queries never shown to users, each ranked through /v1/rank by model name, with its
paired difference from Uni-Con's (mean, standard error).
"""

from __future__ import annotations

import json
import math
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

UNI_CON = "uni_con"
GRADES = 3  # 0 irrelevant, 1 relevant, 2 highly relevant
AT = 50  # NDCG@50


# --- the engine's users ---------------------------------------------------------------------
@dataclass(frozen=True)
class ClickModel:
    """Position-biased, trust-biased users: examine rank k with (1/k)^eta; click an
    examined result of grade g with `click[g]`; stop after a click of grade g with
    `stop[g]` (empty: never stop)."""

    name: str
    eta: float
    click: tuple[float, ...]
    stop: tuple[float, ...] = ()

    def __post_init__(self) -> None:
        if len(self.click) != GRADES or (self.stop and len(self.stop) != GRADES):
            raise ValueError(f"{self.name}: click (and stop) need {GRADES} probabilities")
        if not all(0.0 <= p <= 1.0 for p in (*self.click, *self.stop)) or self.eta < 0:
            raise ValueError(f"{self.name}: probabilities in [0, 1] and eta >= 0")

    @classmethod
    def parse(cls, text: str) -> ClickModel:
        """A named model (`USER_MODELS`) or `pbm:ETA:C0,C1,C2[:S0,S1,S2]`.

        >>> ClickModel.parse("pbm:1.5:0.1,0.5,0.9").click
        (0.1, 0.5, 0.9)
        >>> ClickModel.parse("informational").eta
        1.2
        """
        if text in USER_MODELS:
            return USER_MODELS[text]
        parts = text.split(":")
        if parts[0] != "pbm" or len(parts) not in (3, 4):
            raise ValueError(f"click model {text!r}: one of {', '.join(USER_MODELS)} or "
                             "pbm:ETA:C0,C1,C2[:S0,S1,S2]")  # fmt: skip
        numbers = [tuple(float(v) for v in part.split(",")) for part in parts[2:]]
        return cls(text, float(parts[1]), *numbers)

    def clicks(self, grades: np.ndarray, rng: np.random.Generator) -> list[int]:
        """The 0-based ranks clicked on a shown list of `grades` (best first)."""
        ranks = np.arange(1, len(grades) + 1, dtype=np.float64)
        examined = rng.random(len(grades)) < ranks**-self.eta
        attracted = rng.random(len(grades)) < np.asarray(self.click)[grades]
        clicked = np.flatnonzero(examined & attracted).tolist()
        if not self.stop:
            return clicked
        kept = []
        for rank in clicked:
            kept.append(rank)
            if rng.random() < self.stop[grades[rank]]:
                break
        return kept


USER_MODELS = {
    model.name: model
    for model in (
        # the engine: 80% of the relevant, 15% of the irrelevant results examined
        ClickModel("informational", 1.2, (0.15, 0.8, 0.8)),
        # looks at few results, clicks the one it wants, rarely anything else
        ClickModel("navigational", 2.0, (0.05, 0.5, 0.95)),
        # clicks hardly depend on relevance: nothing worth learning
        ClickModel("almost-random", 1.2, (0.4, 0.45, 0.5)),
    )
}


# --- the engine's collection ----------------------------------------------------------------
def hidden_weights(width: int, seed: int) -> np.ndarray:
    """The collection's true relevance weights: 60% positive, 20% zero, 20% negative."""
    rng = np.random.default_rng([seed, 7])
    kinds = rng.permutation(np.arange(width) % 5)  # 0,1,2: positive, 3: zero, 4: negative
    weights = np.where(kinds < 3, rng.uniform(0.5, 1.5, width), 0.0)
    return np.where(kinds == 4, -rng.uniform(0.3, 1.0, width), weights)


def min_max(raw: np.ndarray) -> np.ndarray:
    """Each column scaled to [0, 1] within its query (a constant column: 0)."""
    low, high = raw.min(axis=0), raw.max(axis=0)
    span = np.where(high > low, high - low, 1.0)
    return (raw - low) / span


@dataclass
class Query:
    candidate_ids: np.ndarray  # (k,) int64, distinct
    phi: np.ndarray  # (k, width) the engine's features, per-query min-max
    grades: np.ndarray  # (k,) 0..2


class QueryStream:
    """The engine's queries: `candidates` results each, features of `width`; `stream`
    picks the sequence (the users' queries and the held-out fresh ones differ)."""

    def __init__(self, width: int, seed: int, stream: int, candidates: int = 100) -> None:
        if width < 4 or candidates <= AT:
            raise ValueError("width >= 4 and more than 50 candidates a query")
        self.width, self.candidates = width, candidates
        self.weights = hidden_weights(width, seed)
        self.kinds = np.arange(width) % 3  # 0 log-normal, 1 Poisson count, 2 bounded score
        self.rng = np.random.default_rng([seed, stream])
        self.next_id = (seed * 1_000 + stream) * 10**9

    def query(self) -> Query:
        k, d, rng = self.candidates, self.width, self.rng
        # a query-specific mix of the hidden score into the raw descriptors
        latent = rng.normal(size=(k, d))
        raw = np.empty((k, d))
        heavy, counts, bounded = (self.kinds == j for j in range(3))
        offset, scale = rng.normal(0, 5, d), rng.uniform(0.2, 20, d)
        raw[:, heavy] = np.exp(latent[:, heavy] * 0.8) * scale[heavy] + offset[heavy]
        raw[:, counts] = rng.poisson(np.exp(1.5 + 0.6 * latent[:, counts]))
        raw[:, bounded] = 1 / (1 + np.exp(-latent[:, bounded])) * scale[bounded]
        phi = min_max(raw)
        score = phi @ self.weights + rng.normal(0, 0.25 * np.sqrt(d / 6), k)
        order = np.argsort(-score)
        grades = np.zeros(k, dtype=np.int64)
        grades[order[: max(1, k // 20)]] = 2
        grades[order[max(1, k // 20) : max(2, 3 * k // 20)]] = 1
        ids = self.next_id + rng.permutation(k * 10)[:k]
        self.next_id += k * 10
        return Query(ids.astype(np.int64), phi, grades)


def ndcg(ranked_grades: np.ndarray, all_grades: np.ndarray, at: int = AT) -> float:
    """NDCG@at: gain 2^g - 1, discount 1/log2(rank + 1), against the query's ideal."""
    discount = 1.0 / np.log2(np.arange(2, at + 2))
    gains = 2.0 ** np.asarray(ranked_grades[:at]) - 1.0
    ideal = np.sort(2.0 ** np.asarray(all_grades) - 1.0)[::-1][:at]
    best = float(ideal @ discount[: len(ideal)])
    return float(gains @ discount[: len(gains)]) / best if best > 0 else 0.0


# --- HTTP -----------------------------------------------------------------------------------
class Api:
    """JSON over HTTP to one serve; a 503 or 409 is retried after Retry-After (at most
    `attempts` times), anything else but 200 raises."""

    def __init__(self, url: str, token: str | None = None, attempts: int = 30) -> None:
        self.url, self.token, self.attempts = url.rstrip("/"), token, attempts

    def call(self, path: str, body: Any = None) -> Any:
        data = None if body is None else json.dumps(body).encode()
        for attempt in range(1, self.attempts + 1):
            request = urllib.request.Request(self.url + path, data=data,
                                             method="GET" if body is None else "POST")  # fmt: skip
            request.add_header("Content-Type", "application/json")
            if self.token:
                request.add_header("Authorization", f"Bearer {self.token}")
            try:
                with urllib.request.urlopen(request, timeout=60) as reply:
                    return json.load(reply)
            except urllib.error.HTTPError as exc:
                if exc.code not in (409, 503) or attempt == self.attempts:
                    detail = exc.read()[:500].decode(errors="replace")
                    raise RuntimeError(f"{path}: HTTP {exc.code}: {detail}") from None
                time.sleep(min(float(exc.headers.get("Retry-After") or 1), 10.0))
        raise AssertionError("unreachable")

    def wait_live(self, seconds: float = 120.0) -> None:
        """Wait until /healthz answers (at most `seconds`)."""
        deadline = time.monotonic() + seconds
        while True:
            try:
                self.call("/healthz")
                return
            except (urllib.error.URLError, ConnectionError, RuntimeError):
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.2)

    def ready(self) -> tuple[int, Any]:
        """/readyz's status and body (no retry: the engine only notes it)."""
        try:
            with urllib.request.urlopen(self.url + "/readyz", timeout=10) as reply:
                return reply.status, json.load(reply)
        except urllib.error.HTTPError as exc:
            return exc.code, json.loads(exc.read() or b"null")

    def close_flag(self) -> str | None:
        """The name of the clicks body's per-impression "session over" flag, if this serve
        has one: a boolean property of an impression's clicks entry in /openapi.json."""
        document = self.call("/openapi.json")
        found: list[str] = []

        def walk(node: Any) -> None:
            if isinstance(node, dict):
                props = node.get("properties")
                if isinstance(props, dict) and {"impression_id", "clicks"} <= set(props):
                    for name, spec in props.items():
                        if isinstance(spec, dict) and "boolean" in str(spec.get("type")):
                            found.append(name)
                for value in node.values():
                    walk(value)
            elif isinstance(node, list):
                for value in node:
                    walk(value)

        walk(document)
        return found[0] if found else None


def _phi_json(phi: np.ndarray) -> list[list[float]]:
    return np.round(phi, 6).tolist()


@dataclass
class Shown:
    """One ranking answered by /v1/rank: who ranked it, its impression and its grades."""

    model: str
    version: int
    impression_id: str
    grades: np.ndarray  # the shown order's grades
    candidate_ids: list[int]


# --- the engine -----------------------------------------------------------------------------
@dataclass
class EngineOptions:
    width: int = 36
    seed: int = 0
    candidates: int = 100
    shown: int = 50  # results a user sees (and NDCG@50 counts)
    impressions: int = 6_000
    checkpoints: tuple[int, ...] = ()  # impressions at which fresh queries are measured (+ end)
    fresh: int = 300  # held-out queries a checkpoint ranks with every model
    # every how many impressions the user's query is also ranked with Uni-Con (paired
    # users' figures on those impressions; 0: never)
    reference_every: int = 1
    batch: int = 25  # impressions whose clicks go in one POST /v1/clicks
    poll_every: int = 250  # impressions between GET /v1/models (champion, races)
    settle_seconds: float = 120.0  # at a checkpoint: wait at most this for learning to idle
    # ... and for these models to be stored (a fresh serve's online worker compiles its
    # loops before its first save: a minute or two on a busy machine with a cold cache)
    expect_models: tuple[str, ...] = ()
    close: str = "auto"  # "auto": the flag if serve has one, else "empty"; or "empty"


@dataclass
class EngineRun:
    """What one run measured (`report()` is its JSON)."""

    options: EngineOptions
    users: ClickModel
    close_by: str = ""
    ready_at_start: int | None = None  # /readyz's status before the first ranking
    served: list[str] = field(default_factory=list)  # model per impression
    users_ndcg: list[float] = field(default_factory=list)
    unicon_ndcg: list[float] = field(default_factory=list)  # Uni-Con on the same queries
    reference_at: list[int] = field(default_factory=list)  # ... of these impressions (0-based)
    clicks: int = 0
    polls: list[dict[str, Any]] = field(default_factory=list)
    checkpoints: list[dict[str, Any]] = field(default_factory=list)
    seconds: float = 0.0

    def switch(self) -> int | None:
        """The first impression (1-based) served by a champion other than Uni-Con."""
        for i, model in enumerate(self.served):
            if model != UNI_CON:
                return i + 1
        return None

    def users_window(self, start: int, stop: int | None = None) -> dict[str, Any]:
        """Users' and Uni-Con's NDCG@50 over impressions [start, stop), paired."""
        users = np.asarray(self.users_ndcg[start:stop])
        out: dict[str, Any] = {"impressions": len(users), "users_ndcg": _mean(users)}
        at = np.asarray(self.reference_at, dtype=np.int64)
        keep = (at >= start) & (at < (len(self.users_ndcg) if stop is None else stop))
        if keep.any():
            paired = np.asarray(self.users_ndcg)[at[keep]]
            unicon = np.asarray(self.unicon_ndcg)[keep]
            out.update(paired_impressions=int(keep.sum()), paired_users_ndcg=_mean(paired),
                       unicon_ndcg=_mean(unicon), **_paired(paired - unicon))  # fmt: skip
        return out

    def report(self) -> dict[str, Any]:
        n = len(self.users_ndcg)
        served: dict[str, int] = {}
        for model in self.served:
            served[model] = served.get(model, 0) + 1
        return {
            "options": {
                **asdict(self.options),
                "checkpoints": list(self.options.checkpoints),
                "expect_models": list(self.options.expect_models),
            },
            "users": asdict(self.users),
            "close_by": self.close_by,
            "ready_at_start": self.ready_at_start,
            "impressions": n,
            "clicks": self.clicks,
            "seconds": round(self.seconds, 1),
            "served_by": served,
            "final_champion": self.served[-1] if self.served else None,
            "switch_impression": self.switch(),
            "users_whole_run": self.users_window(0),
            "users_last_5000": self.users_window(max(0, n - 5000)),
            "checkpoints": self.checkpoints,
            "polls": self.polls,
        }


def _mean(values: np.ndarray) -> float | None:
    return float(values.mean()) if len(values) else None


def _paired(differences: np.ndarray) -> dict[str, Any]:
    """Mean paired difference, its standard error and a normal 95% interval."""
    if len(differences) < 2:
        return {"difference": _mean(differences), "se": None, "ci95": None}
    mean = float(differences.mean())
    se = float(differences.std(ddof=1) / math.sqrt(len(differences)))
    return {"difference": mean, "se": se, "ci95": [mean - 1.96 * se, mean + 1.96 * se]}


class ClickEngine:
    """The engine: its users search `options.impressions` times through `api`."""

    def __init__(
        self,
        api: Api,
        users: ClickModel,
        options: EngineOptions,
        progress: Callable[[str], None] | None = None,
    ) -> None:
        self.api, self.users, self.options = api, users, options
        self.queries = QueryStream(options.width, options.seed, 1, options.candidates)
        self.fresh = QueryStream(options.width, options.seed, 2, options.candidates)
        self.fresh_queries = [self.fresh.query() for _ in range(options.fresh)]
        self.rng = np.random.default_rng([options.seed, 3])
        self.progress = progress or (lambda _: None)
        self.flag: str | None = None
        self.open: list[dict[str, Any]] = []  # impressions' clicks not yet posted

    def rank(self, query: Query, model: str | None = None) -> Shown:
        body: dict[str, Any] = {"candidate_ids": query.candidate_ids.tolist(),
                                "phi": _phi_json(query.phi)}  # fmt: skip
        if model is not None:
            body["model"] = model
        answer = self.api.call("/v1/rank", body)
        grade = dict(zip(query.candidate_ids.tolist(), query.grades.tolist(), strict=True))
        ids = answer["candidate_ids"]
        return Shown(answer["model"], answer["version"], answer["impression_id"],
                     np.asarray([grade[c] for c in ids], dtype=np.int64), ids)  # fmt: skip

    def post(self, impression_id: str, clicks: list[dict[str, int]]) -> None:
        """Queue an impression's clicks; sent (and closed) `batch` at a time."""
        self.open.append({"impression_id": impression_id, "clicks": clicks})
        if len(self.open) >= self.options.batch:
            self.flush()

    def flush(self) -> None:
        if not self.open:
            return
        if self.flag:
            self.api.call("/v1/clicks",
                          {"impressions": [{**e, self.flag: True} for e in self.open]})  # fmt: skip
        else:
            clicked = [e for e in self.open if e["clicks"]]
            if clicked:
                self.api.call("/v1/clicks", {"impressions": clicked})
            ends = [{"impression_id": e["impression_id"], "clicks": []} for e in self.open]
            self.api.call("/v1/clicks", {"impressions": ends})  # the "session over" rows
        self.open.clear()

    def search(self, run: EngineRun) -> None:
        """One user's search: the champion's ranking, the user's clicks, posted."""
        query = self.queries.query()
        shown = self.rank(query)
        run.served.append(shown.model)
        top = shown.grades[: self.options.shown]
        run.users_ndcg.append(ndcg(top, query.grades))
        clicked = self.users.clicks(top, self.rng)
        run.clicks += len(clicked)
        ids = shown.candidate_ids
        self.post(shown.impression_id,
                  [{"candidate_id": ids[r], "position": r + 1} for r in clicked])  # fmt: skip
        every = self.options.reference_every
        if every and len(run.served) % every == 0:
            reference = self.rank(query, UNI_CON)
            run.reference_at.append(len(run.served) - 1)
            run.unicon_ndcg.append(ndcg(reference.grades, query.grades))
            self.post(reference.impression_id, [])  # ranked to measure, never shown

    def models(self) -> dict[str, Any]:
        return self.api.call("/v1/models")

    def poll(self, run: EngineRun, impressions: int) -> dict[str, Any]:
        listing = self.models()
        entry = {
            "impressions": impressions,
            "champion": listing["champion"],
            "versions": {m["name"]: m["version"] for m in listing["models"]},
            "interleaving": {
                m["name"]: _race(m.get("interleaving"))
                for m in listing["models"]
                if m.get("interleaving")
            },
        }
        run.polls.append(entry)
        return listing

    def settle(self) -> float:
        """Wait until every model of `expect_models` is servable and no model's version
        or triplets seen has moved for 3 s (learning caught up with the clicks), at most
        `settle_seconds`; the seconds waited."""
        start = time.monotonic()
        last, still_since = None, time.monotonic()
        while time.monotonic() - start < self.options.settle_seconds:
            models = self.models()["models"]
            state = {m["name"]: (m["version"], m.get("triplets_seen")) for m in models}
            servable = {m["name"] for m in models if m.get("servable")}
            if state != last or not set(self.options.expect_models) <= servable:
                last, still_since = state, time.monotonic()
            elif time.monotonic() - still_since >= 3.0:
                break
            time.sleep(0.5)
        return time.monotonic() - start

    def measure(self, run: EngineRun, impressions: int) -> dict[str, Any]:
        """True NDCG@50 of every servable model on the fresh queries, ranked by name."""
        self.flush()
        waited = self.settle()
        listing = self.models()
        names = sorted(m["name"] for m in listing["models"] if m.get("servable"))
        per_model: dict[str, np.ndarray] = {}
        versions: dict[str, int] = {}
        for name in names:
            values = []
            for query in self.fresh_queries:
                shown = self.rank(query, name)
                values.append(ndcg(shown.grades, query.grades))
                versions[name] = shown.version
                self.post(shown.impression_id, [])  # ranked to measure, never shown
            per_model[name] = np.asarray(values)
        self.flush()
        unicon = per_model.get(UNI_CON)
        models = {}
        for name, values in per_model.items():
            entry: dict[str, Any] = {"ndcg": float(values.mean()), "version": versions[name]}
            if unicon is not None and name != UNI_CON:
                entry.update({f"vs_uni_con_{k}": v for k, v in _paired(values - unicon).items()})
            models[name] = entry
        checkpoint = {
            "impressions": impressions,
            "settled_seconds": round(waited, 1),
            "champion": listing["champion"],
            "fresh_queries": len(self.fresh_queries),
            "models": models,
            "users": run.users_window(0, impressions),
        }
        run.checkpoints.append(checkpoint)
        summary = ", ".join(f"{n} {e['ndcg']:.3f}" for n, e in models.items())
        self.progress(f"{impressions} impressions: champion {listing['champion']}; {summary}")
        return checkpoint

    def run(self) -> EngineRun:
        options = self.options
        run = EngineRun(options, self.users)
        self.api.wait_live()
        run.ready_at_start = self.api.ready()[0]
        self.flag = self.api.close_flag() if options.close == "auto" else None
        run.close_by = f"flag {self.flag}" if self.flag else "empty clicks list"
        started = time.monotonic()
        marks = sorted({*options.checkpoints, options.impressions})
        for i in range(1, options.impressions + 1):
            self.search(run)
            if i % options.poll_every == 0:
                self.flush()
                self.poll(run, i)
            if i in marks:
                self.measure(run, i)
        run.seconds = time.monotonic() - started
        return run


def _race(race: dict[str, Any] | None) -> dict[str, Any] | None:
    if not race:
        return None
    keys = ("impressions", "wins", "losses", "ties", "decision")
    return {k: race.get(k) for k in keys if k in race}


def summarize(runs: Sequence[EngineRun]) -> dict[str, Any]:
    """Across runs (seeds) of one click model: per checkpoint, each model's worst and
    mean difference from Uni-Con; the median switch impression; users' losses."""
    by_mark: dict[int, dict[str, list[float]]] = {}
    for run in runs:
        for checkpoint in run.checkpoints:
            models = by_mark.setdefault(checkpoint["impressions"], {})
            for name, entry in checkpoint["models"].items():
                if name != UNI_CON:
                    models.setdefault(name, []).append(entry["vs_uni_con_difference"])
    switches = [run.switch() for run in runs]
    switched = sorted(s for s in switches if s is not None)
    return {
        "runs": len(runs),
        "checkpoints": {
            str(mark): {
                name: {"worst": min(d), "mean": float(np.mean(d))}
                for name, d in sorted(models.items())
            }
            for mark, models in sorted(by_mark.items())
        },
        "switch_impressions": switches,
        "median_switch": float(np.median(switched)) if len(switched) > len(runs) / 2 else None,
        "final_champions": [run.served[-1] if run.served else None for run in runs],
        "users_whole_run_vs_uni_con": [run.users_window(0).get("difference") for run in runs],
        "users_last_5000_vs_uni_con": [
            run.users_window(max(0, len(run.users_ndcg) - 5000)).get("difference") for run in runs
        ],
    }
