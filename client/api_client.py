"""`Client`: the calls an engine makes to `rankstream serve`, each within one deadline.

A call has a total deadline (`deadline` seconds, the Client's default unless the call
gives its own): connecting gets at most `connect_timeout` of it (default a third, so a
retry still has time), and every read and write waits at most what is left
(`transport`). Retries and their waits follow `retry` and never run past the deadline.
Every attempt of a call carries the same X-Request-ID (yours, or a new one per call) and
the same Idempotency-Key, so the server's logs show one call and its desk publishes
feedback and clicks once.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from rankstream.client.call_errors import (
    ApiError,
    DeadlineExceededError,
    RankstreamError,
    TransportError,
    UnavailableError,
    api_error,
)
from rankstream.client.http_bodies import (
    ARROW,
    JSON,
    Click,
    ImpressionClicks,
    Ranking,
    Receipt,
    candidates,
    clicks_arrow,
    clicks_json,
    engine_scores_of,
    feedback_json,
    rank_arrow,
    rank_json,
    ranking_from_arrow,
    ranking_from_json,
)
from rankstream.client.http_transport import Answer, ConnectionPool, SentRequestError
from rankstream.client.retry import RetryPolicy, retry_after_s

USER_AGENT = "rankstream-client"


class Client:
    """A thread-safe client of one `rankstream serve` (or a proxy in front of several).

    `base_url`: where serve listens; `token`: its RANKSTREAM_API_TOKEN (sent as
    `Authorization: Bearer`); `deadline`: seconds per call, retries included;
    `connect_timeout`: seconds to connect (default: a third of the call's deadline);
    `arrow`: send rankings and clicks as Arrow IPC streams and ask for Arrow rankings
    (pyarrow needed), per call too; `retry`: attempts and backoff (`retry.RetryPolicy`).
    """

    def __init__(
        self,
        base_url: str = "http://127.0.0.1:8000",
        *,
        token: str | None = None,
        deadline: float = 10.0,
        connect_timeout: float | None = None,
        arrow: bool = False,
        retry: RetryPolicy | None = None,
    ) -> None:
        _positive("deadline", deadline)
        if connect_timeout is not None:
            _positive("connect_timeout", connect_timeout)
        self._pool = ConnectionPool(base_url)
        self.base_url, self.deadline, self.arrow = base_url, deadline, arrow
        self.connect_timeout = connect_timeout
        self.retry = retry or RetryPolicy()
        self._auth = {"Authorization": f"Bearer {token}"} if token else {}

    # --- the routes ------------------------------------------------------------------------
    def rank(
        self,
        candidate_ids: Sequence[int] | np.ndarray,
        phi: Any,
        *,
        model: str | None = None,
        version: int | None = None,
        query_id: int | None = None,
        engine_scores: Sequence[float] | np.ndarray | None = None,
        request_id: str | None = None,
        arrow: bool | None = None,
        deadline: float | None = None,
    ) -> Ranking:
        """POST /v1/rank: the candidates (one phi row each) ranked by the champion, or by
        `model` (at `version`; "engine" is `engine_scores`' own order). `engine_scores`:
        your production ranking's score per candidate, higher first, logged with the
        impression so learned models are raced against it. Retried on a broken connection
        too: a ranking publishes nothing but its impression log line."""
        ids, matrix = candidates(candidate_ids, phi)
        engine = engine_scores_of(engine_scores, ids.shape[0])
        as_arrow = self.arrow if arrow is None else arrow
        encode = rank_arrow if as_arrow else rank_json
        answer, sent_id = self._call(
            "POST", "/v1/rank", encode(ids, matrix, model, version, query_id, engine),
            ARROW if as_arrow else JSON, request_id=request_id, idempotent=True,
            deadline=deadline, accept=ARROW if as_arrow else JSON,
        )  # fmt: skip
        answered_id = answer.headers.get("x-request-id", sent_id)
        if answer.headers.get("content-type", "").startswith(ARROW):
            return ranking_from_arrow(answer.body, answered_id)
        return ranking_from_json(answer.body, answered_id)

    def feedback(
        self,
        query_id: int,
        candidate_ids: Sequence[int] | np.ndarray,
        phi: Any,
        relevance: Sequence[int | None] | np.ndarray,
        *,
        ranking: Ranking | None = None,
        model: str | None = None,
        version: int | None = None,
        model_versions: Mapping[str, int] | None = None,
        engine_scores: Sequence[float] | np.ndarray | None = None,
        idempotency_key: str | None = None,
        request_id: str | None = None,
        deadline: float | None = None,
    ) -> Receipt:
        """POST /v1/feedback: a judged query (`relevance`: a grade 0..127 or None per
        candidate). `ranking`: the Ranking that was judged (its model, version and
        model_versions are echoed unless given); `engine_scores` as for `rank`, so the
        judged race scores your production ranking on this query too. Without
        `idempotency_key` the server's key is the query_id; with one, a broken connection
        is retried too."""
        ids, matrix = candidates(candidate_ids, phi)
        engine = engine_scores_of(engine_scores, ids.shape[0])
        if ranking is not None:
            model = ranking.model if model is None else model
            version = ranking.version if version is None else version
            model_versions = ranking.model_versions if model_versions is None else model_versions
        body = feedback_json(
            query_id, ids, matrix, relevance, model, version, model_versions, engine
        )
        answer, sent_id = self._call(
            "POST", "/v1/feedback", body, JSON, request_id=request_id,
            idempotency_key=idempotency_key, deadline=deadline,
        )  # fmt: skip
        return _receipt(answer, sent_id)

    def clicks(
        self,
        impression_id: str,
        clicks: Sequence[Click | int] = (),
        *,
        session_over: bool | None = None,
        idempotency_key: str | None = None,
        request_id: str | None = None,
        arrow: bool | None = None,
        deadline: float | None = None,
    ) -> Receipt:
        """POST /v1/clicks for one impression (`ImpressionClicks` says what `clicks` and
        `session_over` mean: no clicks = shown, nothing clicked, session over)."""
        return self.post_clicks(
            [ImpressionClicks(impression_id, clicks, session_over)],
            idempotency_key=idempotency_key, request_id=request_id, arrow=arrow,
            deadline=deadline,
        )  # fmt: skip

    def post_clicks(
        self,
        impressions: Sequence[ImpressionClicks],
        *,
        idempotency_key: str | None = None,
        request_id: str | None = None,
        arrow: bool | None = None,
        deadline: float | None = None,
    ) -> Receipt:
        """POST /v1/clicks for a batch of impressions, in one request. Without
        `idempotency_key` the server's key is the first impression and the clicks'
        content; with one, a broken connection is retried too."""
        if not impressions:
            raise ValueError("impressions: at least one")
        as_arrow = self.arrow if arrow is None else arrow
        body = clicks_arrow(impressions) if as_arrow else clicks_json(impressions)
        answer, sent_id = self._call(
            "POST", "/v1/clicks", body, ARROW if as_arrow else JSON, request_id=request_id,
            idempotency_key=idempotency_key, deadline=deadline,
        )  # fmt: skip
        return _receipt(answer, sent_id)

    def models(self, *, deadline: float | None = None) -> dict[str, Any]:
        """GET /v1/models: the champion, every stored model, the races."""
        answer, _ = self._call("GET", "/v1/models", deadline=deadline, idempotent=True)
        return _document(answer)

    def model(self, name: str, *, deadline: float | None = None) -> dict[str, Any]:
        """GET /v1/models/{name}: one stored model and its kept versions (NotFoundError: none)."""
        from urllib.parse import quote

        path = "/v1/models/" + quote(name, safe="")
        answer, _ = self._call("GET", path, deadline=deadline, idempotent=True)
        return _document(answer)

    def ready(self, *, deadline: float | None = None) -> dict[str, Any]:
        """GET /readyz once, not retried: `{"ready", "champion", "problems"}`; a 503 that
        carries that document is an answer here (ready false), not an error."""
        try:
            answer, _ = self._call("GET", "/readyz", deadline=deadline, idempotent=True,
                                   retried=False)  # fmt: skip
        except UnavailableError as exc:
            if isinstance(exc.body, dict) and "ready" in exc.body:
                return exc.body
            raise
        return _document(answer)

    # --- the machinery ---------------------------------------------------------------------
    def _call(
        self,
        method: str,
        path: str,
        body: bytes | None = None,
        content_type: str | None = None,
        *,
        request_id: str | None = None,
        idempotency_key: str | None = None,
        idempotent: bool = False,
        deadline: float | None = None,
        accept: str = JSON,
        retried: bool = True,
    ) -> tuple[Answer, str]:
        """The answer (status < 400) and the request id sent; retried per `retry`."""
        seconds = self.deadline if deadline is None else _positive("deadline", deadline)
        until = time.monotonic() + seconds
        connect = self.connect_timeout or seconds / 3
        request_id = request_id or uuid.uuid4().hex
        headers = {"X-Request-ID": request_id, "Accept": accept, "User-Agent": USER_AGENT,
                   **self._auth}  # fmt: skip
        if content_type is not None:
            headers["Content-Type"] = content_type
        if idempotency_key is not None:
            headers["Idempotency-Key"] = idempotency_key
        safe = idempotent or idempotency_key is not None
        attempt, fresh = 0, False
        last: RankstreamError | None = None
        where = f"{method} {path} [request {request_id}]"
        while True:
            attempt += 1
            retry_after = None
            try:
                answer = self._pool.exchange(method, path, body, headers, until, connect, fresh)
            except DeadlineExceededError as exc:
                raise DeadlineExceededError(f"{where}: {exc} ({seconds:g}s, attempt {attempt})",
                                       last) from None  # fmt: skip
            except SentRequestError as exc:
                if exc.reused_and_silent and not fresh:
                    fresh, attempt = True, attempt - 1  # a kept-alive connection gone: again,
                    continue  # on a new one (the pool's others may be as old)
                last = TransportError(f"{where}: the connection failed after the request "
                                      f"was sent: {exc}")  # fmt: skip
                if not safe:
                    raise last from exc
            except ConnectionError as exc:
                last = TransportError(f"{where}: {exc}")
            else:
                if answer.status < 400:
                    return answer, request_id
                last = api_error(answer.status, answer.body,
                                 answer.headers.get("x-request-id", request_id))  # fmt: skip
                if not _retryable(last):
                    raise last
                retry_after = retry_after_s(answer.headers.get("retry-after"))
            assert last is not None
            wait = self.retry.wait(attempt, retry_after)
            if not retried or attempt >= self.retry.max_attempts:
                raise last
            if time.monotonic() + wait >= until:
                raise last  # waiting would end past the deadline: the last error now
            time.sleep(wait)

    def close(self) -> None:
        """Close the kept-alive connections (a later call opens new ones)."""
        self._pool.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _retryable(error: ApiError) -> bool:
    """503 (unavailable now), 409 in_progress (the same key is still being delivered)."""
    return error.status == 503 or (error.status == 409 and error.code == "in_progress")


def _positive(name: str, seconds: float) -> float:
    if not seconds > 0:
        raise ValueError(f"{name}: seconds > 0, got {seconds!r}")
    return seconds


def _document(answer: Answer) -> dict[str, Any]:
    return json.loads(answer.body)


def _receipt(answer: Answer, sent_id: str) -> Receipt:
    document = _document(answer)
    return Receipt(bool(document.get("duplicate", False)), document,
                   answer.headers.get("x-request-id", sent_id))  # fmt: skip
