"""A Python client of `rankstream serve`'s HTTP API, for engines written in Python.

Rank (JSON or Arrow), send feedback and clicks, read the models and readiness; each call
within one deadline, with request ids, idempotency keys and retries on 503 that honour
Retry-After (`api_client`, `retry`); refusals raise `ApiError`s that carry the server's
status, code, message and the field at fault (`call_errors`). It imports nothing else of
rankstream: numpy and the standard library (`http_transport` says why not httpx); pyarrow
only when Arrow bodies are asked for. Other languages: the same routes over plain HTTP
(`GET /openapi.json`).

An engine's loop (`url`: where serve listens; phi: one row of the deployment's width,
RANKSTREAM_PHI_DIM, per candidate):

>>> import numpy as np
>>> from rankstream.client import Client, RequestError
>>> client = Client(url, deadline=5.0)
>>> phi = np.random.default_rng(7).random((3, 36))
>>> ranking = client.rank([11, 12, 13], phi, query_id=901)
>>> sorted(ranking.candidate_ids.tolist()), len(ranking.impression_id) > 0
([11, 12, 13], True)

What the user clicked (the session is over: learn from it now), then a judged query
echoing the ranking that was judged; repeating a call with the same key publishes
nothing again:

>>> shown = ranking.candidate_ids.tolist()
>>> client.clicks(ranking.impression_id, [shown[1]], session_over=True).body["clicks"]
1
>>> first = client.feedback(901, [11, 12, 13], phi, [2, 0, None], ranking=ranking,
...                         idempotency_key="judged-901")
>>> again = client.feedback(901, [11, 12, 13], phi, [2, 0, None], ranking=ranking,
...                         idempotency_key="judged-901")
>>> first.body["triplets"], first.duplicate, again.duplicate
(1, False, True)

A refusal names the field at fault:

>>> try:
...     client.rank([11, 12, 13], phi[:, :5])
... except RequestError as refused:
...     print(refused.status, refused.field)
422 phi
>>> client.close()
"""

from rankstream.client.api_client import Client
from rankstream.client.call_errors import (
    ApiError,
    DeadlineExceededError,
    NotFoundError,
    RankstreamError,
    RequestError,
    ServerError,
    TransportError,
    UnauthorizedError,
    UnavailableError,
)
from rankstream.client.http_bodies import Click, ImpressionClicks, Ranking, Receipt
from rankstream.client.retry import RetryPolicy

__all__ = [
    "ApiError",
    "Click",
    "Client",
    "DeadlineExceededError",
    "ImpressionClicks",
    "NotFoundError",
    "Ranking",
    "RankstreamError",
    "Receipt",
    "RequestError",
    "RetryPolicy",
    "ServerError",
    "TransportError",
    "UnauthorizedError",
    "UnavailableError",
]
