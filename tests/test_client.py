"""rankstream.client against a real `rankstream serve` (the embedded default, a child
process on a free loopback port), plus two small local servers for what serve does not
do on demand: an answer lost after the request was delivered (a proxy that drops the
first answer), and 503 with Retry-After (a stub that answers it, then 200).

Time is asserted only as an upper bound: a call returns within its deadline plus slack.
"""

from __future__ import annotations

import ast
import doctest
import http.server
import json
import os
import signal
import threading
import time
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

import rankstream.client
from rankstream.client import (
    Client,
    DeadlineExceededError,
    ImpressionClicks,
    NotFoundError,
    RequestError,
    RetryPolicy,
    TransportError,
    UnauthorizedError,
    UnavailableError,
    api_client,
)
from rankstream.harness.serve_process import ServeProcess
from rankstream.stream.settings import Settings

CLIENT_DIR = Path(__file__).resolve().parents[1] / "client"
WIDTH = Settings().phi_dim
SLACK_S = 1.0  # what a deadline may be overrun by on a loaded 2-core machine


@pytest.fixture(scope="module")
def serve(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServeProcess]:
    directory = tmp_path_factory.mktemp("serve")
    settings = Settings(topic_prefix=f"t{uuid.uuid4().hex[:12]}", data_dir=str(directory))
    process = ServeProcess(settings, directory / "serve.log")
    try:
        process.wait_ready()
        yield process
    finally:
        os.kill(process.process.pid, signal.SIGCONT)  # never leave it stopped
        process.stop()


def candidates(count: int, seed: int) -> tuple[list[int], np.ndarray]:
    rng = np.random.default_rng(seed)
    return [int(i) for i in rng.choice(10**6, count, replace=False)], rng.random((count, WIDTH))


# --- the package ------------------------------------------------------------------------------
def test_the_client_imports_nothing_else_of_rankstream_and_pyarrow_only_lazily() -> None:
    modules = sorted(CLIENT_DIR.glob("*.py"))
    assert {p.name for p in modules} >= {
        "__init__.py",
        "call_errors.py",
        "retry.py",
        "http_bodies.py",
    }
    for path in modules:
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            names = (
                [a.name for a in node.names] if isinstance(node, ast.Import)
                else [node.module or ""] if isinstance(node, ast.ImportFrom) else []
            )  # fmt: skip
            for name in names:
                top = name.split(".")[0]
                assert not name.startswith("rankstream") or name.startswith("rankstream.client"), (
                    path.name, name,
                )  # fmt: skip
                assert top not in ("httpx", "requests", "orjson"), (path.name, name)
        top_level = [n for n in tree.body if isinstance(n, ast.Import | ast.ImportFrom)]
        for node in top_level:
            module = node.module if isinstance(node, ast.ImportFrom) else node.names[0].name
            assert (module or "").split(".")[0] != "pyarrow", f"{path.name}: pyarrow at import"


def test_the_package_example_runs(serve: ServeProcess) -> None:
    result = doctest.testmod(rankstream.client, extraglobs={"url": serve.url})
    assert result.attempted >= 10 and result.failed == 0


# --- rank, feedback, clicks -------------------------------------------------------------------
def test_rank_in_json_and_arrow_scores_alike(serve: ServeProcess) -> None:
    ids, phi = candidates(40, seed=1)
    with Client(serve.url, deadline=10.0) as client:
        first = client.rank(ids, phi, query_id=7, request_id="rank-json-1")
        pinned = {"model": first.model, "version": first.version}
        as_json = client.rank(ids, phi, query_id=7, request_id="rank-json-2", **pinned)
        as_arrow = client.rank(ids, phi, query_id=8, request_id="rank-arrow", arrow=True, **pinned)
    for ranking, request_id in ((as_json, "rank-json-2"), (as_arrow, "rank-arrow")):
        assert sorted(ranking.candidate_ids.tolist()) == sorted(ids)
        assert (ranking.model, ranking.version) == (first.model, first.version)
        assert ranking.request_id == request_id and ranking.impression_id
        assert np.all(np.diff(ranking.scores) <= 0), "best first"
    assert as_json.query_id == 7 and as_arrow.query_id == 8
    assert as_json.impression_id != as_arrow.impression_id
    assert as_json.model_versions is not None and as_json.extra["requested"] == first.model
    by_json = dict(zip(as_json.candidate_ids.tolist(), as_json.scores, strict=True))
    by_arrow = dict(zip(as_arrow.candidate_ids.tolist(), as_arrow.scores, strict=True))
    assert by_json.keys() == by_arrow.keys()
    assert np.allclose([by_json[i] for i in ids], [by_arrow[i] for i in ids], rtol=1e-6)


@pytest.mark.parametrize("arrow", [False, True], ids=["json", "arrow"])
def test_clicks_one_and_a_batch_with_session_over(serve: ServeProcess, arrow: bool) -> None:
    ids, phi = candidates(10, seed=2)
    with Client(serve.url, arrow=arrow) as client:
        shown = [client.rank(ids, phi).impression_id for _ in range(3)]
        open_ = client.clicks(shown[0], [ids[3], ids[5]])
        over = client.clicks(shown[1], [ids[1]], session_over=True)
        batch = client.post_clicks([
            ImpressionClicks(shown[2], [ids[0]]),
            ImpressionClicks(shown[0], [ids[4]], session_over=True),
            ImpressionClicks(shown[1] + "-never-clicked", []),
        ])  # fmt: skip
    assert (open_.body["clicks"], open_.body["rows"], open_.duplicate) == (2, 2, False)
    assert (over.body["clicks"], over.body["rows"]) == (1, 2)  # + its session-over row
    assert (batch.body["impressions"], batch.body["clicks"], batch.body["rows"]) == (3, 2, 4)


def test_feedback_echoes_the_ranking_and_a_key_makes_a_repeat_a_duplicate(
    serve: ServeProcess,
) -> None:
    ids, phi = candidates(6, seed=3)
    grades = [3, 0, None, 1, 0, None]
    with Client(serve.url) as client:
        ranking = client.rank(ids, phi, query_id=31)
        receipt = client.feedback(31, ids, phi, grades, ranking=ranking, idempotency_key="fb-31")
        repeat = client.feedback(31, ids, phi, grades, ranking=ranking, idempotency_key="fb-31")
        by_query_id = client.feedback(32, ids, phi, np.array([1, 0, 0, 0, 0, 0]))
    assert receipt.duplicate is False and repeat.duplicate is True
    # judged 3, 0, 1, 0: every pair of different grades is a triplet (3-0 twice, 3-1, 1-0 twice)
    assert repeat.body["triplets"] == receipt.body["triplets"] == 5
    assert by_query_id.body["triplets"] == 5 and by_query_id.duplicate is False


# --- refusals ---------------------------------------------------------------------------------
def test_refusals_carry_the_status_code_message_and_field(serve: ServeProcess) -> None:
    ids, phi = candidates(4, seed=4)
    with Client(serve.url) as client:
        with pytest.raises(RequestError) as width:
            client.rank(ids, phi[:, :3], request_id="too-narrow")
        with pytest.raises(RequestError) as position:
            client.post_clicks(
                [
                    ImpressionClicks("a", [ids[0]]),
                    ImpressionClicks("b", [rankstream.client.Click(ids[1], 0)]),
                ]
            )
        with pytest.raises(RequestError) as model:
            client.feedback(41, ids, phi, [1, 0, 0, 0], model="no-such-model")
        with pytest.raises(NotFoundError) as missing:
            client.model("no-such-model")
    assert (width.value.status, width.value.code, width.value.field) == (
        422,
        "invalid_field",
        "phi",
    )
    assert width.value.request_id == "too-narrow" and "too-narrow" in str(width.value)
    assert position.value.field == "impressions[1].clicks[0].position"
    assert model.value.field == "model" and "no-such-model" in model.value.message
    assert missing.value.status == 404 and missing.value.field == "name"


def test_models_and_readiness(serve: ServeProcess) -> None:
    with Client(serve.url) as client:
        client.rank(*candidates(5, seed=5))  # a first ranking stores Uni-Con
        listing = client.models()
        assert client.ready()["ready"] is True
        assert client.model(listing["champion"])["name"] == listing["champion"]
    assert listing["champion"] in {m["name"] for m in listing["models"]}


def test_the_token_is_sent_as_a_bearer_token(tmp_path: Path) -> None:
    settings = Settings(topic_prefix=f"t{uuid.uuid4().hex[:12]}", data_dir=str(tmp_path))
    guarded = ServeProcess(settings, tmp_path / "serve.log", RANKSTREAM_API_TOKEN="s3cret")
    try:
        guarded.wait_ready()
        ids, phi = candidates(5, seed=9)
        with Client(guarded.url, token="s3cret") as client:
            assert sorted(client.rank(ids, phi).candidate_ids.tolist()) == sorted(ids)
        for token in (None, "wrong"):
            with Client(guarded.url, token=token) as client:
                with pytest.raises(UnauthorizedError) as refused:
                    client.rank(ids, phi)
                assert refused.value.status == 401 and refused.value.code == "unauthorized"
                assert client.ready()["ready"] is True  # a public route
    finally:
        guarded.stop()


# --- a server that does not answer -------------------------------------------------------------
def test_the_deadline_holds_against_a_stopped_server(serve: ServeProcess) -> None:
    ids, phi = candidates(8, seed=6)
    client = Client(serve.url, deadline=10.0)
    client.rank(ids, phi)  # leaves a kept-alive connection to reuse
    pid = serve.process.pid
    os.kill(pid, signal.SIGSTOP)
    try:
        for call in (
            lambda: client.rank(ids, phi, deadline=1.0),  # on the kept-alive connection
            lambda: Client(serve.url).rank(ids, phi, deadline=1.0),  # a new connection
            lambda: client.clicks("stopped", [ids[0]], idempotency_key="k", deadline=1.0),
            lambda: client.models(deadline=1.0),
        ):
            started = time.monotonic()
            with pytest.raises(DeadlineExceededError):
                call()
            assert time.monotonic() - started < 1.0 + SLACK_S
    finally:
        os.kill(pid, signal.SIGCONT)
    assert sorted(client.rank(ids, phi, deadline=10.0).candidate_ids.tolist()) == sorted(ids)
    client.close()


def test_the_deadline_holds_against_an_answer_trickled_a_byte_at_a_time() -> None:
    """Each byte comes well within any per-read timeout; the call's deadline still ends it."""

    def handle(server: Scripted, handler: _Handler, body: bytes) -> None:
        stop = time.monotonic() + 10.0
        try:
            handler.wfile.write(b"HTTP/1.1 200 OK\r\nX-Slow: ")
            while time.monotonic() < stop:
                handler.wfile.write(b"a")
                time.sleep(0.1)
        except OSError:
            pass

    with Scripted(handle) as stub, Client(stub.url) as client:
        started = time.monotonic()
        with pytest.raises(DeadlineExceededError):
            client.rank([1], np.zeros((1, WIDTH)), deadline=1.0)
        assert time.monotonic() - started < 1.0 + SLACK_S


# --- lost answers and 503: local servers -------------------------------------------------------
class Scripted(http.server.ThreadingHTTPServer):
    """Answers POSTs as `handle(server, handler, body)` says; records what came in."""

    daemon_threads = True

    def __init__(self, handle) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.handle, self.seen = handle, []
        self.url = f"http://127.0.0.1:{self.server_address[1]}"
        threading.Thread(target=self.serve_forever, daemon=True).start()

    def __enter__(self) -> Scripted:
        return self

    def __exit__(self, *exc: object) -> None:
        self.shutdown()
        self.server_close()


class _Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers["Content-Length"]))
        self.server.seen.append((dict(self.headers), body))  # type: ignore[attr-defined]
        self.server.handle(self.server, self, body)  # type: ignore[attr-defined]

    def answer(self, status: int, body: bytes, **headers: str) -> None:
        self.send_response(status)
        for name, value in {"Content-Type": "application/json", **headers}.items():
            self.send_header(name.replace("_", "-"), value)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


def forward_but_lose_the_first_answer(target: str):
    """A proxy to `target` that delivers every request, and answers all but the first
    (it hangs up instead: the client cannot know the request arrived)."""

    def handle(server: Scripted, handler: _Handler, body: bytes) -> None:
        headers = {k: v for k, v in handler.headers.items() if k.lower() != "host"}
        request = urllib.request.Request(target + handler.path, body, headers, method="POST")
        with urllib.request.urlopen(request, timeout=10) as reply:
            status, answer = reply.status, reply.read()
        if len(server.seen) == 1:
            handler.close_connection = True
            return
        handler.answer(status, answer)

    return handle


def test_a_lost_answer_is_retried_with_its_key_and_the_server_says_duplicate(
    serve: ServeProcess,
) -> None:
    ids, phi = candidates(5, seed=7)
    with Client(serve.url) as direct:
        impression = direct.rank(ids, phi).impression_id
    with Scripted(forward_but_lose_the_first_answer(serve.url)) as proxy:
        with Client(proxy.url, deadline=10.0) as client:
            receipt = client.clicks(impression, [ids[2]], idempotency_key=f"lost-{impression}")
        assert len(proxy.seen) == 2  # the first was delivered, its answer lost: retried
        assert receipt.duplicate is True and receipt.body["clicks"] == 1
        sent = [headers for headers, _ in proxy.seen]
        assert sent[0]["X-Request-ID"] == sent[1]["X-Request-ID"] == receipt.request_id


def test_a_lost_answer_without_a_key_is_not_retried(serve: ServeProcess) -> None:
    ids, phi = candidates(5, seed=8)
    with Client(serve.url) as direct:
        impression = direct.rank(ids, phi).impression_id
    with Scripted(forward_but_lose_the_first_answer(serve.url)) as proxy:
        with Client(proxy.url) as client, pytest.raises(TransportError, match="after the request"):
            client.clicks(impression, [ids[2]])
        assert len(proxy.seen) == 1


def _unavailable() -> bytes:
    error = {"code": "unavailable", "message": "no answer from the broker", "field": None}
    return json.dumps({"error": error}).encode()


def _ranking() -> bytes:
    return json.dumps({"model": "uni_con", "version": 1, "candidate_ids": [2, 1],
                       "scores": [0.5, 0.25], "impression_id": "i-1"}).encode()  # fmt: skip


def test_503_is_retried_after_its_retry_after(monkeypatch: pytest.MonkeyPatch) -> None:
    waits: list[float] = []
    real_sleep = time.sleep

    def sleep(seconds: float) -> None:
        waits.append(seconds)
        real_sleep(seconds)

    monkeypatch.setattr(api_client.time, "sleep", sleep)

    def handle(server: Scripted, handler: _Handler, body: bytes) -> None:
        if len(server.seen) == 1:
            handler.answer(503, _unavailable(), Retry_After="1")
        else:
            handler.answer(200, _ranking())

    with Scripted(handle) as stub, Client(stub.url, deadline=5.0) as client:
        ranking = client.rank([1, 2], np.zeros((2, WIDTH)), request_id="r-503")
        assert len(stub.seen) == 2 and waits == [1.0]
        assert [h["X-Request-ID"] for h, _ in stub.seen] == ["r-503", "r-503"]
    assert ranking.candidate_ids.tolist() == [2, 1] and ranking.impression_id == "i-1"


def test_a_retry_after_past_the_deadline_is_not_waited_for() -> None:
    def handle(server: Scripted, handler: _Handler, body: bytes) -> None:
        handler.answer(503, _unavailable(), Retry_After="30")

    with Scripted(handle) as stub, Client(stub.url, deadline=2.0) as client:
        started = time.monotonic()
        with pytest.raises(UnavailableError) as raised:
            client.rank([1, 2], np.zeros((2, WIDTH)))
        assert time.monotonic() - started < 2.0 + SLACK_S
        assert len(stub.seen) == 1 and raised.value.code == "unavailable"


def test_retries_stop_at_max_attempts_and_409_in_progress_is_retried() -> None:
    def handle(server: Scripted, handler: _Handler, body: bytes) -> None:
        error = {"code": "in_progress", "message": "still being delivered", "field": None}
        handler.answer(409, json.dumps({"error": error}).encode(), Retry_After="0")

    policy = RetryPolicy(max_attempts=3)
    with Scripted(handle) as stub, Client(stub.url, deadline=5.0, retry=policy) as client:
        with pytest.raises(RequestError) as raised:
            client.clicks("i-1", [1], idempotency_key="busy")
        assert len(stub.seen) == 3 and raised.value.status == 409


def test_a_kept_alive_connection_the_server_closed_is_reopened_once() -> None:
    """The stub hangs up after each answer without saying so (as a server closing an idle
    connection does): the next call finds its kept-alive connection dead before a byte
    of the answer and sends again on a new one, even without a key."""

    def handle(server: Scripted, handler: _Handler, body: bytes) -> None:
        answer = {"impressions": 1, "clicks": 1, "rows": 1, "duplicate": False}
        handler.answer(200, json.dumps(answer).encode())
        handler.close_connection = True

    with Scripted(handle) as stub, Client(stub.url) as client:
        receipts = [client.clicks(f"i-{n}", [1]) for n in range(3)]
        assert len(stub.seen) == 3 and not any(r.duplicate for r in receipts)


def test_a_refused_connection_is_retried_within_the_deadline_then_raised() -> None:
    with Scripted(lambda *a: None) as closed:
        url = closed.url  # a port nothing listens on once it is closed
    started = time.monotonic()
    policy = RetryPolicy(max_attempts=100)
    with (
        Client(url, deadline=1.0, retry=policy) as client,
        pytest.raises(TransportError, match="cannot connect"),
    ):
        client.feedback(1, [1], np.zeros((1, WIDTH)), [0])
    assert time.monotonic() - started < 1.0 + SLACK_S


def test_arguments_that_cannot_be_sent_are_refused_before_sending() -> None:
    with Client("http://127.0.0.1:9") as client:
        with pytest.raises(ValueError, match="phi: one row per candidate"):
            client.rank([1, 2, 3], np.zeros((2, WIDTH)))
        with pytest.raises(ValueError, match="phi: NaN"):
            client.rank([1], np.full((1, WIDTH), np.nan))
        with pytest.raises(ValueError, match="session_over=False"):
            client.clicks("i-1", [], session_over=False)
        with pytest.raises(ValueError, match="relevance"):
            client.feedback(1, [1], np.zeros((1, WIDTH)), [0.5])
    with pytest.raises(ValueError, match="base_url"):
        Client("127.0.0.1:8000")


# --- the engine's own ranking (last: the engine's first scores make it the champion) --------
@pytest.mark.parametrize("arrow", [False, True], ids=["json", "arrow"])
def test_the_engines_scores_are_sent_and_rank_as_the_model_engine(
    serve: ServeProcess, arrow: bool
) -> None:
    ids, phi = candidates(30, seed=11)
    scores = np.random.default_rng(12).permutation(30).astype(float)
    with Client(serve.url, deadline=10.0, arrow=arrow) as client:
        ranking = client.rank(ids, phi, model="engine", engine_scores=scores)
        receipt = client.feedback(
            900 + int(arrow), ids, phi, [1] + [None] * 29, ranking=ranking, engine_scores=scores
        )
        listed = client.models()
    assert ranking.model == "engine"
    expected = [ids[i] for i in np.argsort(-scores, kind="stable")]
    assert ranking.candidate_ids.tolist() == expected
    assert not receipt.duplicate and receipt.body
    assert "engine" in json.dumps(listed)
    with pytest.raises(ValueError, match="engine_scores"):
        Client(serve.url).rank(ids, phi, engine_scores=scores[:-1])
    with pytest.raises(ValueError, match="engine_scores"):
        Client(serve.url).rank(ids, phi, engine_scores=[np.nan] * 30)
