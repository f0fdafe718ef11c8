"""`rankstream serve` on the real Kafka and Redis while one of them is paused (SIGSTOP).

A client posts feedback every second with a 15 s timeout, ranks and asks /readyz (and,
around the broker's pause, ranks then posts a click on that new impression, `/v1/clicks`
with its own Idempotency-Key), while the broker (or Redis) is paused, then resumed: no
client timeout, every feedback and every click answered 200 or 503 within the deadline
(plus a margin for this noisy 2-core machine), the same `unavailable` error with
Retry-After for both during the pause, /readyz 503 during the pause, ranking served from
memory all along, feedback 200 again within 30 s of the resume, and every acknowledged
query's triplets on the topic exactly once; every click refused during the pause,
retried after the resume with its key, is acknowledged, and every acknowledged click's
row is on the clicks topic exactly once (whether the retry published it or found it
delivered late; with a pause past the producer's 60 s delivery timeout, `make
stall-test`, a refused click whose expired batch the broker still appended may be there
twice, docs/reference/guarantees.md's "Not guaranteed"); every ranking's impression (those the
clicks name too) either on the impressions topic or counted as dropped (never lost
silently). SIGTERM during a pause ends serve within 15 s. Two serve processes on one
Redis, given the same feedback under one key, publish one set of triplets.

The pause lasts `RANKSTREAM_STALL_SECONDS` (default 15 s, so `make test` checks the promise
on every run); `make stall-test` runs the issue's 75 s.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import threading
import time
from collections import Counter
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import httpx
import numpy as np
import pytest

from rankstream.harness.serve_process import ServeProcess
from rankstream.ranking.online import OnlineRanker
from rankstream.ranking.scaling import Standardizer
from rankstream.stream.click_schema import decode_clicks, decode_impressions
from rankstream.stream.connect import open_store, open_transport
from rankstream.stream.kafka_transport import PRODUCER_TUNING
from rankstream.stream.schema import decode_triplets
from rankstream.stream.settings import DEFAULT_PHI_DIM as PHI_DIM

PAUSE_S = float(os.environ.get("RANKSTREAM_STALL_SECONDS", "15"))
DEADLINE_S = 5.0
MARGIN_S = 2.0  # a loaded 2-core machine: scheduling, not waiting on the service
CLIENT_TIMEOUT_S = 15.0
RESUME_WITHIN_S = 30.0
K = 20
RNG = np.random.default_rng(24)
PHI = RNG.random((K, PHI_DIM)).round(6)
IDS = list(range(500, 500 + K))


def _seed_champion(settings) -> None:
    store = open_store(settings)
    scaler = Standardizer().fit(np.vstack([-np.ones(PHI_DIM), np.ones(PHI_DIM)]))
    meta, arrays = OnlineRanker("opar1", scaler=scaler, warm_start=np.ones(PHI_DIM)).to_state()
    store.save("uni_con", kind="online", meta=meta, arrays=arrays, offsets={}, expected_version=0)
    store.close()


def _feedback(query_id: int) -> dict:
    relevance = [None] * K
    relevance[0], relevance[3], relevance[7] = 2, 0, 1
    return {"query_id": query_id, "candidate_ids": IDS, "phi": PHI.tolist(),
            "relevance": relevance, "model": "uni_con", "version": 1}  # fmt: skip


def _serving(settings, tmp_path: Path, name: str = "serve") -> ServeProcess:
    """Serve with the test's deadline: ready inside `with`, stopped after."""
    return ServeProcess(settings, tmp_path / f"{name}.log",
                        RANKSTREAM_API_DEADLINE_SECONDS=str(DEADLINE_S))  # fmt: skip


@contextlib.contextmanager
def _paused(pid: int) -> Iterator[None]:
    os.kill(pid, signal.SIGSTOP)
    try:
        yield
    finally:
        os.kill(pid, signal.SIGCONT)


def _pid(services, name: str) -> int:
    pid = services.manager.status()[name]["pid"]
    assert pid, f"{name} is not running"
    return int(pid)


def _triplets_per_query(settings, expect: set[int], seconds: float = 60.0) -> Counter:
    """Triplets per query id on the triplets topic, read until every `expect` is seen."""
    transport = open_transport(settings)
    consumer = transport.consumer()
    topic = settings.triplets_topic
    consumer.assign([(topic, p) for p in transport.partitions_for(topic)])
    for _, partition in consumer.assignment():
        consumer.seek_to_beginning(topic, partition)
    counts: Counter = Counter()
    deadline = time.monotonic() + seconds
    idle = 0
    while time.monotonic() < deadline and idle < 5:
        messages = consumer.poll(timeout_ms=1000)
        for message in messages:
            counts.update(decode_triplets(message.value).query_id.tolist())
        idle = idle + 1 if not messages and expect <= set(counts) else 0
    consumer.close()
    transport.close()
    return counts


def _impressions_settled(server: ServeProcess, ranks: int, seconds: float = 60.0) -> dict:
    """The server's impression counters once each of `ranks` impressions was handed to
    the broker or dropped (a hang guard of `seconds`, never the thing tested)."""
    deadline = time.monotonic() + seconds
    while True:
        counts = server.impression_counts()
        reasons = counts["dropped_by_reason"]
        offered = counts["logged"] + counts["dropped"] - reasons.get("delivery_failed", 0)
        if offered >= ranks or time.monotonic() > deadline:
            assert offered == ranks, (ranks, counts)
            return counts
        time.sleep(0.2)


def _impression_ids(settings, seconds: float = 30.0) -> set[str]:
    """Every impression id on the impressions topic (read until 3 idle polls)."""
    records = _records(settings, settings.impressions_topic, decode_impressions, seconds)
    return {impression.impression_id for impression in records}


def _click_rows(settings, seconds: float = 30.0) -> Counter:
    """Click rows on the clicks topic per impression id (read until 3 idle polls)."""
    records = _records(settings, settings.clicks_topic, decode_clicks, seconds)
    return Counter(click.impression_id for click in records)


def _records(settings, topic: str, decode, seconds: float) -> list:
    """Every record of `topic` from its beginning (read until 3 idle polls)."""
    transport = open_transport(settings)
    consumer = transport.consumer()
    consumer.assign([(topic, p) for p in transport.partitions_for(topic)])
    for _, partition in consumer.assignment():
        consumer.seek_to_beginning(topic, partition)
    records: list = []
    deadline, idle = time.monotonic() + seconds, 0
    while time.monotonic() < deadline and idle < 3:
        messages = consumer.poll(timeout_ms=1000)
        for message in messages:
            records.extend(decode(message.value).records)
        idle = idle + 1 if not messages else 0
    consumer.close()
    transport.close()
    return records


@dataclass
class ClickPost:
    """One click on a fresh impression, posted with its own Idempotency-Key, and its
    answers: the first, then the retries after the resume."""

    key: str
    impression_id: str
    started: float
    took: float
    status: int | None  # None: a client timeout
    error: str | None  # the error code of a refusal
    retry_after: str | None
    acknowledged: dict | None = None  # the 200 answer, first or retried
    retries: int = 0


class Client:
    """Posts feedback every second (each on its own thread), ranks and asks /readyz, and
    with `clicks` ranks and posts a click on that impression."""

    def __init__(self, url: str, clicks: bool = False) -> None:
        self.url, self.with_clicks = url, clicks
        self.feedback_refusal: tuple[str, str | None] | None = None  # a 503's code, Retry-After
        self.feedback: list[tuple[int, float, float, int | None, dict | None]] = []
        self.ready: list[tuple[float, int]] = []
        self.ranks: list[int] = []
        self.impressions: list[str] = []  # the impression id of every ranking answered
        self.clicks: list[ClickPost] = []
        self._lock = threading.Lock()
        self._pool = ThreadPoolExecutor(max_workers=40)
        self._next_id = 1

    def post(self, query_id: int) -> None:
        started = time.monotonic()
        status, body = None, None
        try:
            with httpx.Client(timeout=CLIENT_TIMEOUT_S) as http:
                reply = http.post(self.url + "/v1/feedback", json=_feedback(query_id))
            status, body = reply.status_code, reply.json()
        except httpx.TimeoutException:
            status = None  # a client timeout
        with self._lock:
            self.feedback.append((query_id, started, time.monotonic() - started, status, body))
            if status == 503:
                self.feedback_refusal = (body["error"]["code"], reply.headers.get("retry-after"))

    def probe(self) -> None:
        with httpx.Client(timeout=CLIENT_TIMEOUT_S) as http:
            ready = http.get(self.url + "/readyz")
            ranked = http.post(self.url + "/v1/rank",
                               json={"candidate_ids": IDS, "phi": PHI.tolist()})  # fmt: skip
        with self._lock:
            self.ready.append((time.monotonic(), ready.status_code))
            self.ranks.append(ranked.status_code)
            if ranked.status_code == 200:
                self.impressions.append(ranked.json()["impression_id"])

    def click(self, n: int) -> None:
        """Rank, then post a click on the impression just answered (its own key)."""
        with httpx.Client(timeout=CLIENT_TIMEOUT_S) as http:
            ranked = http.post(self.url + "/v1/rank",
                               json={"candidate_ids": IDS, "phi": PHI.tolist()})  # fmt: skip
            with self._lock:
                self.ranks.append(ranked.status_code)
            if ranked.status_code != 200:
                return
            impression_id = ranked.json()["impression_id"]
            with self._lock:
                self.impressions.append(impression_id)
            post = ClickPost(f"stall-click-{n}", impression_id, time.monotonic(), 0.0, None,
                             None, None)  # fmt: skip
            try:
                reply = self._post_click(http, post)
                post.status = reply.status_code
                if reply.status_code == 200:
                    post.acknowledged = reply.json()
                else:
                    post.error = reply.json()["error"]["code"]
                    post.retry_after = reply.headers.get("retry-after")
            except httpx.TimeoutException:
                pass  # status None: a client timeout
            post.took = time.monotonic() - post.started
        with self._lock:
            self.clicks.append(post)

    def _post_click(self, http: httpx.Client, post: ClickPost) -> httpx.Response:
        body = {"impression_id": post.impression_id, "clicks": [{"candidate_id": IDS[3]}]}
        return http.post(self.url + "/v1/clicks", json=body,
                         headers={"Idempotency-Key": post.key})  # fmt: skip

    def retry_clicks(self, seconds: float) -> None:
        """Each click not acknowledged, posted again with its key until a 200 (a 409 or
        503: wait as told); `seconds` is a hang guard, the test checks the outcome."""
        until = time.monotonic() + seconds
        with httpx.Client(timeout=CLIENT_TIMEOUT_S) as http:
            for post in self.clicks:
                while post.acknowledged is None and time.monotonic() < until:
                    post.retries += 1
                    reply = self._post_click(http, post)
                    if reply.status_code == 200:
                        post.acknowledged = reply.json()
                    else:
                        assert reply.status_code in (409, 503), reply.text
                        time.sleep(float(reply.headers["retry-after"]))

    def run_for(self, seconds: float) -> None:
        until = time.monotonic() + seconds
        while time.monotonic() < until:
            tick = time.monotonic()
            self._pool.submit(self.post, self._next_id)
            self._pool.submit(self.probe)
            if self.with_clicks:
                self._pool.submit(self.click, self._next_id)
            self._next_id += 1
            time.sleep(max(0.0, 1.0 - (time.monotonic() - tick)))

    def until_accepted(self, seconds: float) -> float:
        """Seconds until a new feedback is answered 200 (posting once a second)."""
        started = time.monotonic()
        while time.monotonic() - started < seconds:
            query_id = self._next_id
            self._next_id += 1
            self.post(query_id)
            if self.feedback[-1][3] == 200:
                return time.monotonic() - started
            time.sleep(1.0)
        return float("inf")

    def drain(self) -> None:
        self._pool.shutdown(wait=True)


def _stall(services, service_settings, tmp_path: Path, paused: str) -> None:
    _seed_champion(service_settings)
    with _serving(service_settings, tmp_path) as server:
        client = Client(server.url, clicks=paused == "kafka")
        client.run_for(3)  # before: all answered
        with _paused(_pid(services, paused)):
            pause_started = time.monotonic()
            client.run_for(PAUSE_S)
        resumed = time.monotonic()
        back_within = client.until_accepted(RESUME_WITHIN_S)
        client.drain()
        client.retry_clicks(RESUME_WITHIN_S)
        impressions = _impressions_settled(server, len(client.impressions))
        log = (tmp_path / "serve.log").read_text()

    answers = client.feedback
    timeouts = [a for a in answers if a[3] is None]
    assert not timeouts, f"{len(timeouts)} client timeouts"
    assert {a[3] for a in answers} <= {200, 503}, Counter(a[3] for a in answers)
    slowest = max(a[2] for a in answers)
    assert slowest <= DEADLINE_S + MARGIN_S, f"an answer took {slowest:.1f}s"
    during = [a for a in answers if pause_started + 1 <= a[1] <= resumed - DEADLINE_S - MARGIN_S]
    summary = [(a[0], round(a[1] - pause_started, 1), round(a[2], 1), a[3]) for a in answers]
    assert during and all(a[3] == 503 for a in during), "\n".join(map(str, summary))

    if client.with_clicks:
        clicks_summary = _check_clicks(client, service_settings, pause_started, resumed)
    else:
        clicks_summary = "no clicks posted"
    ready_during = [s for t, s in client.ready if pause_started + 4 <= t <= resumed - 1]
    assert ready_during and all(s == 503 for s in ready_during), ready_during
    assert set(client.ranks) == {200}, Counter(client.ranks)
    assert back_within <= RESUME_WITHIN_S, "feedback not accepted within 30 s of the resume"
    assert "Traceback" not in log

    # every ranking's impression: handed to the broker or dropped and counted, and every
    # one handed over and not counted as failed is on the topic (serve has flushed)
    logged = _impression_ids(service_settings)
    found = len(set(client.impressions) & logged)
    failed = impressions["dropped_by_reason"].get("delivery_failed", 0)
    assert found + impressions["dropped"] >= len(client.impressions), (found, impressions)
    assert found >= impressions["logged"] - failed, (found, impressions)

    acknowledged = {a[0]: a[4]["triplets"] for a in answers if a[3] == 200}
    counts = _triplets_per_query(service_settings, set(acknowledged))
    wrong = {q: (counts.get(q, 0), n) for q, n in acknowledged.items() if counts.get(q, 0) != n}
    assert not wrong, f"acknowledged query -> (triplets consumed, acknowledged): {wrong}"
    print(
        f"\n{paused} paused {PAUSE_S:g}s: {len(answers)} feedback posts, "
        f"{Counter(a[3] for a in answers)}, slowest answer {slowest:.2f}s, readyz 503 "
        f"{len(ready_during)}/{len(ready_during)} during, {len(client.ranks)} ranks all 200, "
        f"feedback 200 again {back_within:.1f}s after the resume, {len(acknowledged)} "
        "acknowledged queries' triplets consumed exactly once; impressions: "
        f"{found} of {len(client.impressions)} on the topic, dropped "
        f"{impressions['dropped_by_reason'] or 0}; clicks: {clicks_summary}"
    )


def _check_clicks(client: Client, settings, pause_started: float, resumed: float) -> str:
    """The clicks posted around the pause (module docstring); their summary line."""
    # answered in time, refused during the pause as feedback is, never hung
    clicks = client.clicks
    assert clicks and all(c.status in (200, 503) for c in clicks), [c.status for c in clicks]
    slowest_click = max(c.took for c in clicks)
    assert slowest_click <= DEADLINE_S + MARGIN_S, f"a click answer took {slowest_click:.1f}s"
    clicks_during = [
        c for c in clicks if pause_started + 1 <= c.started <= resumed - DEADLINE_S - MARGIN_S
    ]
    assert clicks_during and all(c.status == 503 for c in clicks_during), [
        (round(c.started - pause_started, 1), round(c.took, 1), c.status) for c in clicks
    ]
    assert {(c.error, c.retry_after) for c in clicks if c.status == 503} == {
        client.feedback_refusal
    }
    assert client.feedback_refusal[0] == "unavailable" and client.feedback_refusal[1]
    # every click acknowledged in the end (the refused ones by their retry, under the same
    # key), each exactly once on the clicks topic
    unacknowledged = [c.key for c in clicks if c.acknowledged is None]
    assert not unacknowledged, f"clicks never acknowledged after the resume: {unacknowledged}"
    assert set(client.impressions) >= {c.impression_id for c in clicks}  # accounted above
    rows = _click_rows(settings)
    retried = [c for c in clicks if c.status != 200]
    twice = {c.key: rows.get(c.impression_id, 0) for c in retried
             if rows.get(c.impression_id, 0) == 2}  # fmt: skip
    if PRODUCER_TUNING["delivery_timeout_ms"] > PAUSE_S * 1000:
        twice = {}  # no batch can expire in the pause: exactly once, every click
    # a longer pause expires the batch already handed to the paused broker, which may
    # still append it on SIGCONT; the desk released that claim and the retry published it
    # again (docs/reference/guarantees.md, "Not guaranteed"): twice at most, and only those
    wrong_clicks = {c.key: rows.get(c.impression_id, 0) for c in clicks
                    if rows.get(c.impression_id, 0) != 1 and c.key not in twice}  # fmt: skip
    assert not wrong_clicks, f"click key -> rows on the clicks topic: {wrong_clicks}"
    late = sum(c.acknowledged["duplicate"] for c in retried)
    return (
        f"{len(clicks)} posts, {Counter(c.status for c in clicks)}, slowest answer "
        f"{slowest_click:.2f}s, {len(retried)} retried with their key ({late} found "
        f"delivered late, {len(retried) - late} published by the retry, "
        f"{sum(c.retries for c in retried)} retries), each acknowledged click once on the "
        f"clicks topic but {len(twice)} twice after an expired delivery {sorted(twice)}"
    )


def test_a_paused_broker_gets_503s_in_time_and_loses_nothing_acknowledged(
    services, service_settings, tmp_path
) -> None:
    _stall(services, service_settings, tmp_path, "kafka")


def test_a_paused_redis_gets_503s_in_time_and_loses_nothing_acknowledged(
    services, service_settings, tmp_path
) -> None:
    _stall(services, service_settings, tmp_path, "redis")


@pytest.mark.parametrize("paused", ["kafka", "redis"])
def test_sigterm_mid_stall_stops_serve_within_15_seconds(
    services, service_settings, tmp_path, paused
) -> None:
    _seed_champion(service_settings)
    with _serving(service_settings, tmp_path) as server:
        client = Client(server.url)
        with _paused(_pid(services, paused)):
            client.run_for(3)  # feedback in flight, stuck on the paused service
            server.process.send_signal(signal.SIGTERM)
            started = time.monotonic()
            try:
                server.process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                pytest.fail(f"serve did not exit within 15 s of SIGTERM with {paused} paused")
            took = time.monotonic() - started
        client.drain()
    assert took <= 15


def test_two_serve_processes_on_one_redis_publish_one_feedback_once(
    services, service_settings, tmp_path
) -> None:
    _seed_champion(service_settings)
    with (
        _serving(service_settings, tmp_path, "one") as one,
        _serving(service_settings, tmp_path, "two") as two,
    ):
        refused: list[int] = []

        def post(url: str) -> dict:
            deadline = time.monotonic() + RESUME_WITHIN_S  # only guards a hang
            with httpx.Client(timeout=CLIENT_TIMEOUT_S) as http:
                while True:
                    reply = http.post(url + "/v1/feedback", json=_feedback(4242),
                                      headers={"Idempotency-Key": "engine-7:4242"})  # fmt: skip
                    # a 409: the other is still delivering it; a 503: this serve's first
                    # producer took longer than the deadline to open (a loaded machine).
                    # Either way the engine retries with the same key, as told.
                    if reply.status_code not in (409, 503) or time.monotonic() > deadline:
                        assert reply.status_code == 200, reply.text
                        return reply.json()
                    if reply.status_code == 503:
                        refused.append(503)
                    time.sleep(float(reply.headers["retry-after"]))

        with ThreadPoolExecutor(2) as pool:
            answers = list(pool.map(post, [one.url, two.url]))
    duplicates = sorted(a["duplicate"] for a in answers)
    # an attempt answered 503 but delivered after its deadline leaves its answer to the
    # retries: both then read it as a duplicate; otherwise one of the two published it
    assert duplicates == [False, True] or (refused and duplicates == [True, True]), answers
    assert answers[0]["triplets"] == answers[1]["triplets"] == 3
    counts = _triplets_per_query(service_settings, {4242})
    assert counts == {4242: 3}
