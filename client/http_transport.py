"""HTTP/1.1 exchanges bounded by a deadline, over a small pool of kept-alive connections.

The standard library's `http.client`, not httpx: the client then needs nothing beyond
numpy at run time (an engine installs rankstream's client without adding an HTTP stack),
and every wait on the socket can be cut to what is left of the call's deadline. A
socket timeout bounds one wait, not a whole exchange: a server that answers a byte at a
time could stretch a fixed per-read timeout without end, and httpx's timeouts are per
phase too. Here the connection reads and writes through `_DeadlineSocket`, which sets
the socket's timeout to the time left before every single send and receive, so an
exchange ends by its deadline whatever the server does (stopped, slow, trickling).
"""

from __future__ import annotations

import http.client
import io
import socket
import ssl
import threading
import time
from dataclasses import dataclass
from urllib.parse import urlsplit

from rankstream.client.call_errors import DeadlineExceededError

IDLE_S = 2.0  # an idle connection older than this is closed, not reused (uvicorn: 5 s)
MAX_IDLE = 8  # idle connections kept per Client


@dataclass(frozen=True)
class Answer:
    """What the server answered: status, headers (names lower-cased), body bytes."""

    status: int
    headers: dict[str, str]
    body: bytes


class SentRequestError(ConnectionError):
    """The connection failed after (part of) the request was sent: the server may have
    acted on it. `reused_and_silent`: on a kept-alive connection, with no byte of the
    answer read (the usual sign of a server that closed an idle connection)."""

    def __init__(self, cause: BaseException, reused_and_silent: bool) -> None:
        super().__init__(f"{type(cause).__name__}: {cause}")
        self.reused_and_silent = reused_and_silent


class _DeadlineReader(io.RawIOBase):
    def __init__(self, owner: _DeadlineSocket) -> None:
        self._owner = owner
        owner.readers += 1

    def close(self) -> None:
        if not self.closed:
            super().close()
            self._owner.reader_closed()

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: memoryview) -> int:  # type: ignore[override]
        self._owner.arm()
        count = self._owner.sock.recv_into(buffer)
        self._owner.received += count
        return count


class _DeadlineSocket:
    """The few socket calls http.client makes, each bounded by `until` (monotonic)."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.until = 0.0
        self.received = 0
        self.readers = 0  # open answer readers: the socket closes after the last one, as
        self._closed = False  # socket.makefile's do (http.client closes it mid-answer)

    def arm(self) -> None:
        left = self.until - time.monotonic()
        if left <= 0:
            raise TimeoutError("the deadline passed")
        self.sock.settimeout(left)

    def sendall(self, data: bytes) -> None:
        view = memoryview(data)
        while view:
            self.arm()
            view = view[self.sock.send(view) :]

    def makefile(self, mode: str = "rb", *args: object, **kwargs: object) -> io.BufferedReader:
        return io.BufferedReader(_DeadlineReader(self))

    def setsockopt(self, *args: object) -> None:
        self.sock.setsockopt(*args)  # type: ignore[arg-type]

    def reader_closed(self) -> None:
        self.readers -= 1
        if self._closed and self.readers == 0:
            self.sock.close()

    def close(self) -> None:
        self._closed = True
        if self.readers == 0:
            self.sock.close()


class _Connection(http.client.HTTPConnection):
    """An HTTP(S) connection whose socket is a `_DeadlineSocket`; `last_used` is when
    its previous exchange ended (0.0: never used)."""

    def __init__(self, scheme: str, host: str, port: int) -> None:
        super().__init__(host, port)
        self.scheme = scheme
        self.last_used = 0.0
        self.connect_timeout = 1.0

    def connect(self) -> None:
        sock = socket.create_connection((self.host, self.port), timeout=self.connect_timeout)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        if self.scheme == "https":
            sock = ssl.create_default_context().wrap_socket(sock, server_hostname=self.host)
        self.sock = _DeadlineSocket(sock)  # type: ignore[assignment]


def _discard(connection: _Connection, response: http.client.HTTPResponse | None) -> None:
    """Close a failed exchange's connection and its answer (which may own the socket)."""
    connection.close()
    if response is not None:
        response.close()


class ConnectionPool:
    """Kept-alive connections to one server, each used by one call at a time."""

    def __init__(self, base_url: str) -> None:
        parts = urlsplit(base_url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"base_url: an http:// or https:// URL, got {base_url!r}")
        self.scheme, self.host = parts.scheme, parts.hostname
        self.port = parts.port or (443 if parts.scheme == "https" else 80)
        self.prefix = parts.path.rstrip("/")  # serve behind a proxy's path
        self._idle: list[_Connection] = []
        self._lock = threading.Lock()

    def exchange(
        self, method: str, path: str, body: bytes | None, headers: dict[str, str],
        until: float, connect_timeout: float, fresh: bool = False,
    ) -> Answer:  # fmt: skip
        """One request and its answer, all by `until` (time.monotonic()). Raises
        DeadlineExceededError when the deadline passes, ConnectionError when the connection
        could not be made (nothing was sent), SentRequestError when it failed after.
        `fresh`: on a new connection, not a kept-alive one."""
        connection = _Connection(self.scheme, self.host, self.port) if fresh else self._take()
        reused = connection.last_used > 0
        if connection.sock is None:
            left = until - time.monotonic()
            if left <= 0:
                raise DeadlineExceededError("the deadline passed before connecting")
            connection.connect_timeout = min(connect_timeout, left)
            try:
                connection.connect()
            except TimeoutError:
                connection.close()
                if time.monotonic() >= until:
                    raise DeadlineExceededError("no connection within the deadline") from None
                raise ConnectionError(  # the connect timeout: a retry may still connect
                    f"no connection to {self.host}:{self.port} within "
                    f"{connection.connect_timeout:.3g}s"
                ) from None
            except OSError as exc:
                connection.close()
                raise ConnectionError(f"cannot connect to {self.host}:{self.port}: {exc}") from exc
        wrapped: _DeadlineSocket = connection.sock  # type: ignore[assignment]
        wrapped.until, wrapped.received = until, 0
        response = None
        try:
            connection.request(method, self.prefix + path, body=body, headers=headers)
            response = connection.getresponse()
            content = response.read()
        except TimeoutError:
            _discard(connection, response)
            raise DeadlineExceededError("no complete answer within the deadline") from None
        except (OSError, http.client.HTTPException) as exc:
            _discard(connection, response)
            raise SentRequestError(exc, reused and wrapped.received == 0) from exc
        except ValueError:  # a header value http.client will not send (CR, LF, non-Latin-1)
            _discard(connection, response)
            raise
        answer = Answer(response.status, {k.lower(): v for k, v in response.getheaders()}, content)
        if response.will_close:
            connection.close()
        else:
            self._give_back(connection)
        return answer

    def _take(self) -> _Connection:
        now = time.monotonic()
        with self._lock:
            while self._idle:
                connection = self._idle.pop()
                if now - connection.last_used < IDLE_S:
                    return connection
                connection.close()
        return _Connection(self.scheme, self.host, self.port)

    def _give_back(self, connection: _Connection) -> None:
        connection.last_used = time.monotonic()
        with self._lock:
            if len(self._idle) < MAX_IDLE:
                self._idle.append(connection)
                return
        connection.close()

    def close(self) -> None:
        with self._lock:
            idle, self._idle = self._idle, []
        for connection in idle:
            connection.close()
