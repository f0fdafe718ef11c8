"""What a call can raise: the server's refusals with its error body, and the client's own
failures (deadline, connection). All derive from `RankstreamError`.

serve answers every refusal as `{"error": {"code", "message", "field"}}` (`field`: the
request field at fault, e.g. `phi` or `impressions[1].clicks[0].position`); `ApiError`
carries those three, the status and the request id, so an engine can log or act on
them without parsing anything.
"""

from __future__ import annotations

import json
from typing import Any


class RankstreamError(Exception):
    """Any failure of a rankstream client call."""


class ApiError(RankstreamError):
    """The server answered with an error status. `code`, `message`, `field` come from its
    error body (`field` None when no field is at fault); `request_id` is the X-Request-ID
    the server logged it under; `body` the decoded body (or its text when not JSON)."""

    def __init__(
        self,
        status: int,
        code: str,
        message: str,
        field: str | None = None,
        request_id: str | None = None,
        body: Any = None,
    ) -> None:
        where = f" (field {field!r})" if field else ""
        super().__init__(f"HTTP {status} {code}: {message}{where} [request {request_id}]")
        self.status, self.code, self.message, self.field = status, code, message, field
        self.request_id, self.body = request_id, body


class RequestError(ApiError):
    """A 4xx: the request itself is at fault (invalid field, unknown model, bad token,
    too large). Retrying it unchanged will not help (409 `in_progress` is retried before
    it is raised)."""


class UnauthorizedError(RequestError):
    """401: the bearer token is missing or wrong."""


class NotFoundError(RequestError):
    """404: no such route, model or version."""


class ServerError(ApiError):
    """A 5xx the retries did not get past (503: still unavailable when the deadline or the
    attempts ran out)."""


class UnavailableError(ServerError):
    """503: the broker or the store did not answer in time (retried with Retry-After)."""


class DeadlineExceededError(RankstreamError, TimeoutError):
    """The call's deadline passed before an answer came (`last`: the previous attempt's
    error, if any was retried)."""

    def __init__(self, message: str, last: BaseException | None = None) -> None:
        super().__init__(message if last is None else f"{message}; last attempt: {last}")
        self.last = last


class TransportError(RankstreamError, ConnectionError):
    """The connection failed and the call was not retried: the request could not be sent,
    or it was sent and is not safe to repeat (no Idempotency-Key), or the attempts ran
    out."""


_BY_STATUS: dict[int, type[ApiError]] = {
    401: UnauthorizedError,
    404: NotFoundError,
    503: UnavailableError,
}


def api_error(status: int, body: bytes, request_id: str | None) -> ApiError:
    """The exception for an error answer, from serve's `{"error": {...}}` body (or, from
    something else on the way, e.g. a proxy, its status and text)."""
    kind = _BY_STATUS.get(status, RequestError if status < 500 else ServerError)
    try:
        document = json.loads(body)
        error = document["error"]
        code, message, field = str(error["code"]), str(error["message"]), error.get("field")
    except (ValueError, KeyError, TypeError):
        text = body.decode("utf-8", errors="replace")[:200]
        return kind(status, "http_error", text or f"HTTP {status}", None, request_id, text)
    return kind(status, code, message, field, request_id, document)
