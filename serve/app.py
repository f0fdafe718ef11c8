"""The HTTP API of `rankstream serve`: rank with what rankstream learned, feed it back.

Routes (the OpenAPI document at GET /openapi.json, `serve.openapi`):

    POST /v1/rank            candidates + phi -> ranked ids, scores, model, version,
                             impression_id (the ranking is logged as an impression)
    POST /v1/feedback        a judged query -> triplets + judged query on the stream
    POST /v1/clicks          clicks on impressions -> the clicks topic
    GET  /v1/models          every stored model: version, kind, triplets, rolling NDCG@50
    GET  /v1/models/{name}   one of them, with its kept versions
    GET  /healthz            live (always 200 while the process answers)
    GET  /readyz             200 while the broker and the store answer (a bounded probe,
                             cached a second) and the champion is loaded (or no Uni-Con
                             is stored yet: ranking requests publish it, its feature scaling
                             refitted on their candidates until it has seen
                             RANKSTREAM_UNICON_CALIBRATION of them, `selection.unicon_baseline`)

Starlette rather than FastAPI, by measurement (docs/reference/http-api.md): the same
300-candidate JSON ranking handler answered ~3x fewer requests/s with FastAPI's
pydantic body model than as a plain Starlette endpoint, and the checks that matter
here (width, NaN/Inf, duplicate ids, grades) are numpy checks on whole arrays anyway.

Ranking runs on the event loop from the registry's in-memory snapshot (a linear model
scores 300 candidates in microseconds), so a stalled store never holds it up; what may
block — producing feedback until the broker acknowledges it, loading an exact older
version, the idempotency keys — runs on worker threads, and a request waits for them
at most `Settings.api_deadline_s` (then 503 with Retry-After; Envoy-style deadlines).
Bodies are read within `Settings.api_body_deadline_s` (408) and up to
`Settings.api_max_body_bytes` (413). SIGTERM stops serve within `Settings.api_grace_s`
however stalled its services: requests drain, the producer gets what is left of the
grace to flush, and a watchdog ends the process if a thread is still stuck.

Every ranking is offered to the impression log (`producers.impression_producer`: a bounded queue a
thread drains onto the impressions topic; ranking never waits on it, drops are counted)
unless `Settings.impression_logging` is off; the answer carries its `impression_id`
either way. Clicks go through the same idempotent desk as feedback (`serve.delivery`).

Every answer carries `X-Request-ID` (the client's, or a new one), and every log line
about a request names it. Every refusal, 404 and 405 included, is one JSON shape:
`{"error": {"code", "message", "field"}}`, values cut to 200 characters (`ERROR_CODES`).
Security: bind 127.0.0.1 unless told (`Settings.api_host`); with `Settings.api_token`
every route but the health checks and the OpenAPI document needs `Authorization:
Bearer <token>` (compared in constant time); a refused request produces nothing.
"""

from __future__ import annotations

import asyncio
import functools
import gc
import hmac
import logging
import os
import socket
import sys
import threading
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import replace
from typing import Any

import anyio
import anyio.to_thread
import numpy as np
import orjson
import uvicorn
from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException
from starlette.requests import ClientDisconnect, Request
from starlette.responses import Response
from starlette.routing import Route

from rankstream.producers.candidate_checks import ENGINE_SCORES, FieldError
from rankstream.producers.click_producer import ClickProducer
from rankstream.producers.feedback_producer import check_feedback
from rankstream.producers.impression_producer import ImpressionLog
from rankstream.ranking.baselines import UNI_CON
from rankstream.ranking.pdgd import plackett_luce_intervention
from rankstream.selection.click_race import Interleaver, refused_challengers
from rankstream.selection.engine_ranking import ENGINE, adopt_engine
from rankstream.selection.scoring import logged_order, served_order
from rankstream.selection.unicon_baseline import publish_unicon
from rankstream.selection.what_serves import UnknownModelError
from rankstream.serve.arrow_answers import ranking_arrow
from rankstream.serve.bodies import (
    ARROW,
    JSON,
    REQUEST_ID,
    BadRequest,
    RankRequest,
    clicks_digest,
    clicks_from_arrow,
    clicks_from_json,
    feedback_from_json,
    media_type,
    rank_from_arrow,
    rank_from_json,
    ranking_json,
    warm_arrow,
)
from rankstream.serve.delivery import FeedbackDesk, InProgress, publish_clicks
from rankstream.serve.embedded_workers import EmbeddedWorkers
from rankstream.serve.models_listing import model_entry, models_listing
from rankstream.serve.openapi import docs_page, openapi_document
from rankstream.serve.registry import LoadedModel, ModelRegistry, Snapshot
from rankstream.stream.click_schema import Click, ServedImpression
from rankstream.stream.connect import open_store, probe_transport
from rankstream.stream.errors import TRANSIENT
from rankstream.stream.settings import Settings
from rankstream.stream.store import ModelStore
from rankstream.telemetry import prometheus_metrics as metrics
from rankstream.telemetry.structured_log import get_logger, log_event

log = get_logger("rankstream.serve")
Handler = Callable[[Request, "ServeState"], Awaitable[tuple[Response, str]]]
MAX_ECHO = 200  # characters of any value an error answer or a log line repeats
_READY_CACHE_S = 1.0  # /readyz probes the services at most this often


class ServeState:
    """What the routes share: settings, the model registry and the feedback desk."""

    def __init__(
        self,
        settings: Settings,
        store: ModelStore,
        poll_seconds: float = 1.0,
        heard_flag: str | None = None,
    ) -> None:
        self.settings = settings
        self.store = store
        self.registry = ModelRegistry(store, poll_seconds=poll_seconds, width=settings.phi_dim)
        self.feedback = FeedbackDesk(settings, store)
        self.clicks = FeedbackDesk(settings, store, ClickProducer.open, publish_clicks)
        self.impressions = ImpressionLog(settings) if settings.impression_logging else None
        self.interventions = np.random.default_rng()  # the propensity interventions' coin
        self.interleaver = Interleaver(settings, wait_for_clicks=True, heard_flag=heard_flag)
        self.engine_adopted = False  # the engine's record is known stored (`adopt_engine`)
        self._token = settings.api_token.encode() if settings.api_token else None
        self._probed: tuple[float, list[str]] = (-1e9, [])
        self._probe_lock = asyncio.Lock()

    def authorize(self, request: Request) -> None:
        if self._token is None:
            return
        scheme, _, given = request.headers.get("authorization", "").partition(" ")
        if scheme.lower() != "bearer" or not hmac.compare_digest(given.encode(), self._token):
            raise BadRequest(401, "missing or wrong bearer token (Authorization: Bearer ...)")

    async def bounded(self, call: Callable[..., Any], *args: Any) -> Any:
        """`call(*args)` on a worker thread, waited for at most the API's deadline: a 503
        with Retry-After when it does not answer in time or its service is unavailable.
        The thread is abandoned, not killed: every call made this way has its own
        timeout at the client (Redis socket timeouts, producer flush timeouts)."""
        deadline = self.settings.api_deadline_s
        try:
            with anyio.fail_after(deadline):
                return await anyio.to_thread.run_sync(lambda: call(*args), abandon_on_cancel=True)
        except TimeoutError:
            message = f"no answer from the broker or the store within {deadline:g}s"
            raise unavailable(message) from None
        except TRANSIENT as exc:
            raise unavailable(f"a backing service is unavailable: {exc}") from None

    async def problems(self) -> list[str]:
        """Why the services are not usable now (empty: they are), probed at most once a
        second, each probe bounded."""
        async with self._probe_lock:
            checked, problems = self._probed
            if time.monotonic() - checked < _READY_CACHE_S:
                return problems
            timeout = min(self.settings.api_deadline_s, 2.0)
            problems = []
            for what, probe in (("broker", lambda: probe_transport(self.settings, timeout)),
                                ("store", self.store.ping)):  # fmt: skip
                try:
                    with anyio.fail_after(timeout + 0.5):
                        await anyio.to_thread.run_sync(probe, abandon_on_cancel=True)
                except TimeoutError:
                    problems.append(f"the {what} did not answer within {timeout:g}s")
                except TRANSIENT as exc:
                    problems.append(f"the {what} is unavailable: {str(exc)[:MAX_ECHO]}")
            self._probed = (time.monotonic(), problems)
            return problems

    def publish_baseline(self, phi: np.ndarray) -> None:
        """Add these candidates to the empty store's Uni-Con (`selection.unicon_baseline`: stamped
        with the width, refitted until it has seen its calibration sample); then reload."""
        publish_unicon(
            self.store, phi, self.settings.phi_dim, self.settings.unicon_calibration,
            "the API's ranking requests' candidates",
        )  # fmt: skip
        self.registry.refresh()

    def adopt_engine(self) -> None:
        """The engine's first ranking request with engine_scores (`selection.engine_ranking`):
        its record and, on its arrival, the champion; then reload. Once per process."""
        if self.registry.snapshot.stored.get(ENGINE) is None:
            adopt_engine(self.store, "the API's ranking requests")
            self.registry.refresh()
        self.engine_adopted = True

    def calibrating(self, snapshot: Snapshot) -> bool:
        """True while the Uni-Con this serve published wants more candidates."""
        loaded = snapshot.models.get(UNI_CON)
        return snapshot.needs_unicon or (loaded is not None and loaded.calibrating)

    def close(self, timeout: float) -> None:
        """Stop reloading; flush feedback, clicks and impressions, within `timeout` s."""
        until = time.monotonic() + timeout
        self.registry.stop(timeout=min(1.0, timeout))
        for closing in (self.feedback, self.clicks, self.impressions):
            if closing is not None:
                closing.close(max(until - time.monotonic(), 0.0))


RETRY_AFTER_S = 2  # what a 503 or 409 tells the client to wait before retrying


def unavailable(message: str) -> BadRequest:
    return BadRequest(503, message, headers={"Retry-After": str(RETRY_AFTER_S)})


def _cut(value: str | None) -> str | None:
    return None if value is None else value[:MAX_ECHO]


def error_response(exc: BadRequest, request_id: str = "") -> Response:
    body = {"error": {"code": exc.code, "message": _cut(exc.message), "field": _cut(exc.field)}}
    headers = dict(exc.headers)
    if exc.status == 401:
        headers["WWW-Authenticate"] = "Bearer"
    if request_id:
        headers["X-Request-ID"] = request_id
    return Response(orjson.dumps(body), exc.status, headers=headers, media_type=JSON)


def json_response(document: Any, status: int = 200) -> Response:
    return Response(orjson.dumps(document), status, media_type=JSON)


def request_id_of(request: Request) -> str:
    """The client's X-Request-ID when it is 1-200 visible ASCII characters, else a new one."""
    given = request.headers.get("x-request-id", "")
    return given if REQUEST_ID.fullmatch(given) else uuid.uuid4().hex


def endpoint(route: str, handler: Handler, *, public: bool = False) -> Callable:
    """Wrap a handler: request id, token check, error answers, latency and status metrics."""

    async def run(request: Request) -> Response:
        started = time.perf_counter()
        state: ServeState = request.app.state.serve
        request_id = request_id_of(request)
        model = "-"
        try:
            if not public:
                state.authorize(request)
            response, model = await handler(request, state)
        except BadRequest as exc:
            response = error_response(exc, request_id)
            if exc.status >= 500:
                log_event(log, "service unavailable", level=logging.WARNING, route=route,
                          request_id=request_id, error=exc.message[:MAX_ECHO])  # fmt: skip
        except FieldError as exc:
            response = error_response(BadRequest.of(exc), request_id)
        except UnknownModelError as exc:
            response = error_response(BadRequest(404, str(exc), exc.field), request_id)
        except InProgress as exc:
            retry = {"Retry-After": str(RETRY_AFTER_S)}
            response = error_response(BadRequest(409, str(exc), headers=retry), request_id)
        except ClientDisconnect:
            log_event(log, "client hung up", route=route, request_id=request_id)
            response = Response(status_code=499)  # never sent: counted, not logged as error
        response.headers["X-Request-ID"] = request_id
        _latency(route, model).observe(time.perf_counter() - started)
        _answered(route, response.status_code).inc()
        return response

    return run


@functools.cache  # a labelled child per route and model, looked up once (prometheus keeps
def _latency(route: str, model: str) -> Any:  # every label set it has seen anyway)
    return metrics.HTTP_REQUEST_SECONDS.labels(route=route, model=model)


@functools.cache
def _answered(route: str, status: int) -> Any:
    return metrics.HTTP_REQUESTS.labels(route=route, status=str(status))


async def read_body(request: Request, settings: Settings) -> bytes:
    """The body within the body deadline (else 408), or 413 as soon as it is known to
    exceed the size limit."""
    limit = settings.api_max_body_bytes
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > limit:
        raise BadRequest(413, f"body of {declared[:30]} bytes exceeds the {limit}-byte limit")
    chunks, size = [], 0
    try:  # asyncio's own timeout: anyio's cancel scope costs several times more per request
        async with asyncio.timeout(settings.api_body_deadline_s):
            async for chunk in request.stream():
                size += len(chunk)
                if size > limit:
                    raise BadRequest(413, f"body exceeds the {limit}-byte limit")
                chunks.append(chunk)
    except TimeoutError:
        message = f"body not received within {settings.api_body_deadline_s:g}s"
        raise BadRequest(408, message, headers={"Connection": "close"}) from None
    return b"".join(chunks)


def _deprecated(response: Response, names: tuple[str, ...]) -> Response:
    """Mark an answer to a request that used names of the previous release
    (docs/reference/http-api.md, "Old names")."""
    if names:
        response.headers["Deprecation"] = "true"
        response.headers["X-Deprecated-Names"] = ", ".join(names)
    return response


# --- routes ---------------------------------------------------------------------------------
async def rank(request: Request, state: ServeState) -> tuple[Response, str]:
    body = await read_body(request, state.settings)
    kind = media_type(request.headers.get("content-type"))
    if kind == JSON:
        if request.query_params:
            raise BadRequest(422, "model/version go in the JSON body, not the query",
                             next(iter(request.query_params)))  # fmt: skip
        query = rank_from_json(body, state.settings.phi_dim)
    elif kind == ARROW:
        query = rank_from_arrow(body, request.query_params, state.settings.phi_dim)
    else:
        raise BadRequest(415, f"content type {kind!r}: send {JSON} or {ARROW}")
    champion_request = query.model in (None, "champion") and query.version is None
    if query.engine_scores is None and (
        query.model == ENGINE or (state.settings.shadow and champion_request)
    ):
        why = (
            "shadow mode answers with the engine's order"
            if champion_request
            else ("model 'engine' ranks by the request's engine_scores")
        )
        raise BadRequest(422, f"{ENGINE_SCORES}: required ({why}): one number per "
                         "candidate, higher first", ENGINE_SCORES)  # fmt: skip
    if query.engine_scores is not None and not state.engine_adopted:
        await state.bounded(state.adopt_engine)
    snapshot = state.registry.snapshot
    engine = None if query.engine_scores is None else snapshot.engine_model(query.engine_scores)
    engine_first = state.settings.shadow or snapshot.engine_pinned
    loaded = await _serving_model(state, query, engine, engine_first)
    scores = loaded.scorer.score(query.phi)
    order = served_order(loaded.scorer, scores, state.interventions)
    intervention = shown_probability = None  # a share of the logged rankings: randomized
    sampled = getattr(loaded.scorer, "plackett_luce", False)
    if sampled:  # PDGD served a sample of its policy: log its probability
        intervention, shown_probability = plackett_luce_intervention(scores, order)
    ranked = scores[order]
    teams: dict[str, Any] = {}  # an interleaved list's teams (selection.click_race)
    challengers = (
        state.interleaver.challengers(
            snapshot.models if engine is None else snapshot.with_engine(engine), loaded.name,
            refused_challengers(snapshot.scores.get("interleaving", {}), loaded.name),
        )
        if state.impressions is not None and state.interleaver.enabled and champion_request
        and not (engine_first and loaded.name == ENGINE) and loaded.name == snapshot.champion
        else []
    )  # fmt: skip
    if challengers:
        merged = state.interleaver.interleave(loaded, order, ranked, challengers, query.phi)
        order, ranked = merged.order, merged.scores
        teams = {"teams": merged.teams, "team_models": merged.team_models}
        metrics.RANKINGS_INTERLEAVED.inc()
    elif state.impressions is not None and state.settings.intervention_share > 0 and not sampled:
        order, intervention, shown_probability = logged_order(  # the simulated engine's too
            loaded.scorer, scores, order, state.interventions, state.settings.intervention,
            state.settings.intervention_share,
        )  # fmt: skip
        ranked = scores[order]
    ids = query.candidate_ids[order]
    latest = state.registry.snapshot.latest
    given = request.headers.get("x-request-id")
    caller = {
        "query_id": query.query_id,
        "request_id": query.request_id
        or (given if given and REQUEST_ID.fullmatch(given) else None),
    }
    impression_id = uuid.uuid4().hex
    if state.impressions is not None:
        state.impressions.offer(
            functools.partial(
                ServedImpression, impression_id, time.time(), loaded.name, loaded.version,
                latest, query.candidate_ids, query.phi, order, intervention=intervention,
                shown_probability=shown_probability, **teams,
                request_engine_scores=query.engine_scores, **caller,
            )
        )  # fmt: skip
    echo = {"impression_id": impression_id, **{k: v for k, v in caller.items() if v is not None}}
    if ARROW in request.headers.get("accept", ""):
        content = ranking_arrow(ids, ranked, loaded.name, loaded.version, echo)
        return _deprecated(Response(content, media_type=ARROW), query.deprecated), loaded.name
    extra = {
        "requested": query.model or "champion",
        "pinned": loaded.pinned,
        "model_versions": dict(latest),
        **echo,
    }
    content = ranking_json(ids, ranked, loaded.name, loaded.version, extra)
    return _deprecated(Response(content, media_type=JSON), query.deprecated), loaded.name


async def _serving_model(
    state: ServeState, query: RankRequest, engine: LoadedModel | None, engine_first: bool
) -> LoadedModel:
    snapshot = state.registry.snapshot
    if query.version is not None:
        name = str(query.model)
        loaded = snapshot.models.get(name)
        if loaded is not None and loaded.version == query.version:
            return loaded
        return await state.bounded(state.registry.version, snapshot, name, query.version)
    if query.model in (None, "champion") and state.calibrating(snapshot):
        await state.bounded(state.publish_baseline, query.phi)
        snapshot = state.registry.snapshot
    return snapshot.resolve(query.model, engine, engine_first)


async def feedback(request: Request, state: ServeState) -> tuple[Response, str]:
    body = await read_body(request, state.settings)
    kind = media_type(request.headers.get("content-type"))
    if kind != JSON:
        raise BadRequest(415, f"content type {kind!r}: feedback is {JSON}")
    snapshot = state.registry.snapshot
    judged, deprecated = feedback_from_json(body, snapshot.latest)
    if not judged.model_versions:  # no model has learned from this feedback yet
        judged = replace(judged, model_versions=dict(snapshot.latest))
    check_feedback(judged, state.settings.phi_dim)  # refused before any key is claimed
    key = idempotency_key(request, judged.query_id)
    answer = await state.bounded(state.feedback.accept, key, judged)
    log_event(log, "feedback", request_id=request_id_of(request), query_id=judged.query_id,
              key=key[:MAX_ECHO], duplicate=answer["duplicate"],
              triplets=answer["triplets"])  # fmt: skip
    return _deprecated(json_response(answer), deprecated), "-"


def idempotency_key(request: Request, query_id: int) -> str:
    """The store key of this feedback: its `Idempotency-Key` header, else its query id."""
    given = _idempotency_header(request)
    return f"query_id:{query_id}" if given is None else f"key:{given}"


def _idempotency_header(request: Request) -> str | None:
    given = request.headers.get("idempotency-key")
    if given is not None and not REQUEST_ID.fullmatch(given):
        raise BadRequest(422, "Idempotency-Key: must be 1-200 visible ASCII characters",
                         "Idempotency-Key")  # fmt: skip
    return given


async def clicks(request: Request, state: ServeState) -> tuple[Response, str]:
    body = await read_body(request, state.settings)
    kind = media_type(request.headers.get("content-type"))
    if kind == JSON:
        posted = clicks_from_json(body)
    elif kind == ARROW:
        posted = clicks_from_arrow(body)
    else:
        raise BadRequest(415, f"content type {kind!r}: send {JSON} or {ARROW}")
    key = clicks_key(request, posted)
    answer = await state.bounded(state.clicks.accept, key, posted)
    state.interleaver.heard_clicks()  # interleaving may begin (selection.click_race)
    log_event(log, "clicks", request_id=request_id_of(request), key=key[:MAX_ECHO],
              duplicate=answer["duplicate"], rows=answer["rows"])  # fmt: skip
    return json_response(answer), "-"


def clicks_key(request: Request, posted: list[Click]) -> str:
    """The store key of these clicks: `Idempotency-Key`, else the first impression's id
    and a hash of the clicks' content (a retry of the same clicks is a repeat; later
    clicks on the same impression are not). Apart from feedback's keys."""
    given = _idempotency_header(request)
    if given is not None:
        return f"clicks-key:{given}"
    return f"clicks:{posted[0].impression_id}:{clicks_digest(posted)}"


async def models(request: Request, state: ServeState) -> tuple[Response, str]:
    return json_response(models_listing(state.registry.snapshot)), "-"


async def model(request: Request, state: ServeState) -> tuple[Response, str]:
    name = request.path_params["name"]
    snapshot = state.registry.snapshot
    if name not in snapshot.stored:
        raise UnknownModelError("name", f"no stored model {name!r}")
    kept = await state.bounded(state.store.versions, name)
    return json_response({**model_entry(snapshot, name), "kept_versions": kept}), "-"


async def healthz(request: Request, state: ServeState) -> tuple[Response, str]:
    return json_response({"status": "ok"}), "-"


async def readyz(request: Request, state: ServeState) -> tuple[Response, str]:
    snapshot = state.registry.snapshot
    problems = await state.problems()
    if not snapshot.ready:  # no Uni-Con stored yet is ready: the first request calibrates
        problems = [*problems, f"champion {snapshot.champion!r} is not loaded"]
    document = {"ready": not problems, "champion": snapshot.champion, "problems": problems}
    return json_response(document, 503 if problems else 200), "-"


def _document(settings: Settings) -> dict[str, Any]:
    """The OpenAPI document of this deployment: its width, shadow mode and token."""
    return openapi_document(settings.phi_dim, settings.shadow, bool(settings.api_token))


async def openapi(request: Request, state: ServeState) -> tuple[Response, str]:
    return json_response(_document(state.settings)), "-"


async def docs(request: Request, state: ServeState) -> tuple[Response, str]:
    page = docs_page(_document(state.settings))
    return Response(page, media_type="text/html; charset=utf-8"), "-"


ROUTES = {
    "/v1/rank": (rank, ["POST"], False),
    "/v1/feedback": (feedback, ["POST"], False),
    "/v1/clicks": (clicks, ["POST"], False),
    "/v1/models": (models, ["GET"], False),
    "/v1/models/{name}": (model, ["GET"], False),
    "/healthz": (healthz, ["GET"], True),
    "/readyz": (readyz, ["GET"], True),
    "/openapi.json": (openapi, ["GET"], True),
    "/docs": (docs, ["GET"], True),
}


async def _http_error(request: Request, exc: Exception) -> Response:
    """Starlette's own refusals (404 no such route, 405 wrong method) in our error shape."""
    assert isinstance(exc, HTTPException)
    error = BadRequest(exc.status_code, f"{exc.detail}: {request.method} {request.url.path}",
                       headers=dict(exc.headers or {}))  # fmt: skip
    return error_response(error, request_id_of(request))


async def _server_error(request: Request, exc: Exception) -> Response:
    request_id = request_id_of(request)
    log_event(log, "internal error", level=logging.ERROR, request_id=request_id,
              path=request.url.path[:MAX_ECHO], error=repr(exc)[:MAX_ECHO])  # fmt: skip
    return error_response(BadRequest(500, "internal error (logged)"), request_id)


def create_app(
    settings: Settings,
    store: ModelStore | None = None,
    poll_seconds: float = 1.0,
    workers: bool = False,
    heard_flag: str | None = None,
) -> Starlette:
    """The ASGI app; its lifespan starts the model registry (and, with `workers`, the
    embedded online worker and evaluator: `serve.embedded_workers`) and closes them, within
    `app.state.stop_by` (a `time.monotonic()` the SIGTERM handler sets) or the grace.
    `heard_flag`: the file the serving processes of one port share the news of clicks by
    (`selection.click_race.Interleaver`; `serve.processes`)."""
    owned = store is None
    store = store if store is not None else open_store(settings)
    state = ServeState(settings, store, poll_seconds, heard_flag)

    @asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        learning = None
        if workers:
            learning = EmbeddedWorkers(settings)
            learning.start()
        await run_in_threadpool(state.registry.start)
        await run_in_threadpool(warm_arrow)
        # The reload thread rebuilds snapshots beside the event loop; with CPython's default
        # 5 ms switch interval a rebuild could hold requests back that long each time.
        sys.setswitchinterval(0.0005)
        gc.freeze()  # start-up's long-lived objects: never walked again by the collector
        log_event(log, "serving", host=settings.api_host, port=settings.api_port,
                  champion=state.registry.snapshot.champion,
                  token=settings.api_token is not None)  # fmt: skip
        try:
            yield
        finally:
            stop_by = getattr(app.state, "stop_by", None) or time.monotonic() + settings.api_grace_s

            def left() -> float:
                return max(stop_by - time.monotonic() - 1.0, 0.0)  # a second to exit

            if learning is not None:
                await run_in_threadpool(learning.stop, left())
            await run_in_threadpool(state.close, left())
            if owned:
                state.store.close()

    routes = [
        Route(path, endpoint(path, handler, public=public), methods=methods)
        for path, (handler, methods, public) in ROUTES.items()
    ]
    handlers = {HTTPException: _http_error, Exception: _server_error}
    app = Starlette(routes=routes, lifespan=lifespan, exception_handlers=handlers)
    app.state.serve = state
    return app


def serve(
    settings: Settings,
    poll_seconds: float = 1.0,
    workers: bool = False,
    on_listening: Callable[[str, int], None] | None = None,
    sockets: list[socket.socket] | None = None,
    heard_flag: str | None = None,
) -> int:
    """Run the API on uvicorn (uvloop and httptools when installed) until SIGTERM/SIGINT,
    then stop within `settings.api_grace_s`: half of it to drain requests, the rest to
    close (flush feedback), and a watchdog that ends the process at the grace if a thread
    is still waiting on a stalled service.

    `on_listening(host, port)` is called once the socket is bound and the app started
    (the port is the real one when settings.api_port is 0). `sockets`: listen on these,
    bound already, instead (one of several serving processes, `serve.processes`), and
    `heard_flag` the group's file for the news of clicks (`create_app`).
    """
    app = create_app(settings, poll_seconds=poll_seconds, workers=workers, heard_flag=heard_flag)
    grace = settings.api_grace_s

    class Server(uvicorn.Server):
        async def startup(self, sockets: list[socket.socket] | None = None) -> None:
            await super().startup(sockets)
            if on_listening is not None:
                host, port = self.servers[0].sockets[0].getsockname()[:2]
                on_listening(str(host), int(port))

        def handle_exit(self, sig: int, frame: Any) -> None:
            if getattr(app.state, "stop_by", None) is None:
                app.state.stop_by = time.monotonic() + grace
                watchdog = threading.Timer(grace, _exit_now, args=(grace,))
                watchdog.daemon = True
                watchdog.start()
            super().handle_exit(sig, frame)

    config = uvicorn.Config(
        app,
        host=settings.api_host,
        port=settings.api_port,
        lifespan="on",
        access_log=False,  # every request is in the Prometheus counters instead
        log_level="warning",
        server_header=False,
        timeout_graceful_shutdown=max(grace / 2, 0.1),
    )
    server = Server(config)
    server.run(sockets=sockets)
    return 0 if server.started else 1


def _exit_now(grace: float) -> None:
    """The grace is over and something still waits on a stalled service: exit anyway.
    (Feedback that was acknowledged is on the broker; what was not, its senders were
    answered 503, so nothing acknowledged is lost.)"""
    log_event(log, "grace period over; exiting", level=logging.WARNING, grace_s=grace,
              threads=[t.name for t in threading.enumerate() if t.is_alive()][:20])  # fmt: skip
    logging.shutdown()
    os._exit(0)
