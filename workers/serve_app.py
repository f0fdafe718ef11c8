"""The HTTP API of `rankstream serve`: rank with what rankstream learned, feed it back.

Routes (the OpenAPI document at GET /openapi.json, `workers.serve_openapi`):

    POST /v1/rank            candidates + phi -> ranked ids, scores, model, version
    POST /v1/feedback        a judged query -> triplets + judged query on the stream
    GET  /v1/models          every stored model: version, kind, triplets, rolling NDCG@50
    GET  /v1/models/{name}   one of them, with its kept versions
    GET  /healthz            live (always 200 while the process answers)
    GET  /readyz             200 while the store answers and the champion is loaded (or the
                             store is empty: ranking requests publish Uni-Con, its feature
                             scaling refitted on their candidates until it has seen
                             RANKSTREAM_UNICON_CALIBRATION of them, `workers.baseline`)

Starlette rather than FastAPI, by measurement (README "Serving API"): the same
300-candidate JSON ranking handler answered ~3x fewer requests/s with FastAPI's
pydantic body model than as a plain Starlette endpoint, and the checks that matter
here (width, NaN/Inf, duplicate ids, grades) are numpy checks on whole arrays anyway.

Ranking runs on the event loop (a linear model scores 300 candidates in microseconds);
what may block — producing feedback until the broker acknowledges it, loading an exact
older version from the store, publishing a first Uni-Con — runs in the thread pool.
Security: bind 127.0.0.1 unless told (`Settings.api_host`); with `Settings.api_token`
every route but the two health checks needs `Authorization: Bearer <token>` (compared
in constant time); bodies above `Settings.api_max_body_bytes` get 413 before they are
read; a refused request gets a 4xx JSON `{"error", "field"}` and nothing is produced.
"""

from __future__ import annotations

import gc
import hmac
import socket
import sys
import threading
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import replace
from typing import Any

import numpy as np
import orjson
from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from rankstream.stream.connect import open_store
from rankstream.stream.errors import TRANSIENT
from rankstream.stream.settings import Settings
from rankstream.stream.store import ModelStore
from rankstream.workers import metrics
from rankstream.workers.baseline import publish_unicon
from rankstream.workers.candidates import FieldError
from rankstream.workers.ingest import Feedback, FeedbackProducer, Receipt
from rankstream.workers.logging import get_logger, log_event
from rankstream.workers.serve_bodies import (
    ARROW,
    JSON,
    BadRequest,
    RankRequest,
    feedback_from_json,
    media_type,
    rank_from_arrow,
    rank_from_json,
    ranking_arrow,
    ranking_json,
)
from rankstream.workers.serve_models import model_entry, models_listing
from rankstream.workers.serve_openapi import openapi_document
from rankstream.workers.serve_registry import (
    LoadedModel,
    ModelRegistry,
    Snapshot,
    UnknownModelError,
)
from rankstream.workers.serving import UNI_CON

log = get_logger("rankstream.serve")
Handler = Callable[[Request, "ServeState"], Awaitable[tuple[Response, str]]]


class ServeState:
    """What the routes share: settings, the model registry and the feedback producer."""

    def __init__(self, settings: Settings, store: ModelStore, poll_seconds: float = 1.0) -> None:
        self.settings = settings
        self.store = store
        self.registry = ModelRegistry(store, poll_seconds=poll_seconds, width=settings.phi_dim)
        self._producer: FeedbackProducer | None = None
        self._producer_lock = threading.Lock()
        self._token = settings.api_token.encode() if settings.api_token else None

    def authorize(self, request: Request) -> None:
        if self._token is None:
            return
        scheme, _, given = request.headers.get("authorization", "").partition(" ")
        if scheme.lower() != "bearer" or not hmac.compare_digest(given.encode(), self._token):
            raise BadRequest(401, "missing or wrong bearer token (Authorization: Bearer ...)")

    def deliver(self, feedback: Feedback) -> Receipt:
        """Produce the feedback and wait for the broker's acknowledgement (thread pool)."""
        with self._producer_lock:
            if self._producer is None:
                self._producer = FeedbackProducer.open(self.settings)
            producer = self._producer
        return producer.deliver(feedback)

    def publish_baseline(self, phi: np.ndarray) -> None:
        """Add these candidates to the empty store's Uni-Con (`workers.baseline`: stamped
        with the width, refitted until it has seen its calibration sample); then reload."""
        publish_unicon(
            self.store, phi, self.settings.phi_dim, self.settings.unicon_calibration,
            "the API's ranking requests' candidates",
        )  # fmt: skip
        self.registry.refresh()

    def calibrating(self, snapshot: Snapshot) -> bool:
        """True while the Uni-Con this serve published wants more candidates."""
        loaded = snapshot.models.get(UNI_CON)
        return not snapshot.models or (loaded is not None and loaded.calibrating)

    def close(self) -> None:
        self.registry.stop()
        if self._producer is not None:
            self._producer.close()


def error_response(exc: BadRequest) -> Response:
    body = {"error": exc.message, "field": exc.field}
    headers = {"WWW-Authenticate": "Bearer"} if exc.status == 401 else None
    return Response(orjson.dumps(body), exc.status, headers=headers, media_type=JSON)


def json_response(document: Any, status: int = 200) -> Response:
    return Response(orjson.dumps(document), status, media_type=JSON)


def endpoint(route: str, handler: Handler, *, public: bool = False) -> Callable:
    """Wrap a handler: token check, error answers, latency and status metrics."""

    async def run(request: Request) -> Response:
        started = time.perf_counter()
        state: ServeState = request.app.state.serve
        model = "-"
        try:
            if not public:
                state.authorize(request)
            response, model = await handler(request, state)
        except BadRequest as exc:
            response = error_response(exc)
        except FieldError as exc:
            response = error_response(BadRequest.of(exc))
        except UnknownModelError as exc:
            response = error_response(BadRequest(404, str(exc), exc.field))
        except TRANSIENT as exc:
            log_event(log, "service unavailable", route=route, error=repr(exc))
            response = error_response(BadRequest(503, f"a backing service is unavailable: {exc}"))
        metrics.HTTP_REQUEST_SECONDS.labels(route=route, model=model).observe(
            time.perf_counter() - started
        )
        metrics.HTTP_REQUESTS.labels(route=route, status=str(response.status_code)).inc()
        return response

    return run


async def read_body(request: Request, limit: int) -> bytes:
    """The body, or 413 as soon as it is known to exceed `limit` bytes."""
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > limit:
        raise BadRequest(413, f"body of {declared} bytes exceeds the {limit}-byte limit")
    chunks, size = [], 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise BadRequest(413, f"body exceeds the {limit}-byte limit")
        chunks.append(chunk)
    return b"".join(chunks)


# --- routes ---------------------------------------------------------------------------------
async def rank(request: Request, state: ServeState) -> tuple[Response, str]:
    body = await read_body(request, state.settings.api_max_body_bytes)
    kind = media_type(request.headers.get("content-type"))
    if kind == JSON:
        query = rank_from_json(body, state.settings.phi_dim)
    elif kind == ARROW:
        params = request.query_params
        query = rank_from_arrow(
            body, params.get("model"), params.get("version"), state.settings.phi_dim
        )
    else:
        raise BadRequest(415, f"content type {kind!r}: send {JSON} or {ARROW}")
    loaded = await _serving_model(state, query)
    scores = loaded.scorer.score(query.phi)
    order = np.argsort(-scores, kind="stable")  # ties keep the request's order
    ids, ranked = query.candidate_ids[order], scores[order]
    if ARROW in request.headers.get("accept", ""):
        content = ranking_arrow(ids, ranked, loaded.name, loaded.version)
        return Response(content, media_type=ARROW), loaded.name
    extra = {
        "requested": query.model or "champion",
        "pinned": loaded.pinned,
        "model_versions": dict(state.registry.snapshot.latest),
    }
    content = ranking_json(ids, ranked, loaded.name, loaded.version, extra)
    return Response(content, media_type=JSON), loaded.name


async def _serving_model(state: ServeState, query: RankRequest) -> LoadedModel:
    snapshot = state.registry.snapshot
    if query.version is not None:
        name = str(query.model)
        loaded = snapshot.models.get(name)
        if loaded is not None and loaded.version == query.version:
            return loaded
        return await run_in_threadpool(state.registry.version, snapshot, name, query.version)
    if query.model in (None, "champion") and state.calibrating(snapshot):
        await run_in_threadpool(state.publish_baseline, query.phi)
        snapshot = state.registry.snapshot
    return snapshot.resolve(query.model)


async def feedback(request: Request, state: ServeState) -> tuple[Response, str]:
    body = await read_body(request, state.settings.api_max_body_bytes)
    kind = media_type(request.headers.get("content-type"))
    if kind != JSON:
        raise BadRequest(415, f"content type {kind!r}: feedback is {JSON}")
    judged = feedback_from_json(body)
    if not judged.model_versions:  # no model has learned from this feedback yet
        judged = replace(judged, model_versions=dict(state.registry.snapshot.latest))
    receipt = await run_in_threadpool(state.deliver, judged)
    document = {
        "query_id": receipt.query_id,
        "seq": receipt.seq,
        "triplets": receipt.triplets,
        "judged": receipt.judged,
        "distinct_grades": receipt.distinct_grades,
    }
    return json_response(document), "-"


async def models(request: Request, state: ServeState) -> tuple[Response, str]:
    return json_response(models_listing(state.registry.snapshot)), "-"


async def model(request: Request, state: ServeState) -> tuple[Response, str]:
    name = request.path_params["name"]
    snapshot = state.registry.snapshot
    if name not in snapshot.stored:
        raise UnknownModelError("name", f"no stored model {name!r}")
    kept = await run_in_threadpool(state.store.versions, name)
    return json_response({**model_entry(snapshot, name), "kept_versions": kept}), "-"


async def healthz(request: Request, state: ServeState) -> tuple[Response, str]:
    return json_response({"status": "ok"}), "-"


async def readyz(request: Request, state: ServeState) -> tuple[Response, str]:
    snapshot = state.registry.snapshot
    problems = []
    if not state.registry.store_ok:
        problems.append("the model store did not answer")
    if not snapshot.ready and snapshot.stored:  # an empty store: the first request calibrates
        problems.append(f"champion {snapshot.champion!r} is not loaded")
    document = {"ready": not problems, "champion": snapshot.champion, "problems": problems}
    return json_response(document, 503 if problems else 200), "-"


async def openapi(request: Request, state: ServeState) -> tuple[Response, str]:
    return json_response(openapi_document(state.settings.phi_dim)), "-"


ROUTES = {
    "/v1/rank": (rank, ["POST"], False),
    "/v1/feedback": (feedback, ["POST"], False),
    "/v1/models": (models, ["GET"], False),
    "/v1/models/{name}": (model, ["GET"], False),
    "/healthz": (healthz, ["GET"], True),
    "/readyz": (readyz, ["GET"], True),
    "/openapi.json": (openapi, ["GET"], False),
}


def create_app(
    settings: Settings,
    store: ModelStore | None = None,
    poll_seconds: float = 1.0,
    workers: bool = False,
) -> Starlette:
    """The ASGI app; its lifespan starts the model registry (and, with `workers`, the
    embedded online worker and evaluator: `workers.serve_workers`) and closes them."""
    owned = store is None
    state = ServeState(settings, store if store is not None else open_store(settings), poll_seconds)

    @asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        learning = None
        if workers:
            from rankstream.workers.serve_workers import EmbeddedWorkers

            learning = EmbeddedWorkers(settings)
            learning.start()
        await run_in_threadpool(state.registry.start)
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
            if learning is not None:
                await run_in_threadpool(learning.stop)
            state.close()
            if owned:
                state.store.close()

    routes = [
        Route(path, endpoint(path, handler, public=public), methods=methods)
        for path, (handler, methods, public) in ROUTES.items()
    ]
    app = Starlette(routes=routes, lifespan=lifespan)
    app.state.serve = state
    return app


def serve(
    settings: Settings,
    poll_seconds: float = 1.0,
    workers: bool = False,
    on_listening: Callable[[str, int], None] | None = None,
) -> int:
    """Run the API on uvicorn (uvloop and httptools when installed) until SIGTERM/SIGINT.

    `on_listening(host, port)` is called once the socket is bound and the app started
    (the port is the real one when settings.api_port is 0).
    """
    import uvicorn

    class Server(uvicorn.Server):
        async def startup(self, sockets: list[socket.socket] | None = None) -> None:
            await super().startup(sockets)
            if on_listening is not None:
                host, port = self.servers[0].sockets[0].getsockname()[:2]
                on_listening(str(host), int(port))

    config = uvicorn.Config(
        create_app(settings, poll_seconds=poll_seconds, workers=workers),
        host=settings.api_host,
        port=settings.api_port,
        lifespan="on",
        access_log=False,  # every request is in the Prometheus counters instead
        log_level="warning",
        server_header=False,
        timeout_graceful_shutdown=10,
    )
    server = Server(config)
    server.run()
    return 0 if server.started else 1
