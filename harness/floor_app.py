"""The floor `bench serve` measures serve against: what answering the same bodies costs the
server stack itself, with no ranking, checks, logging or metrics.

Two endpoints, each run like serve (uvicorn with uvloop and httptools when installed, the
same uvicorn settings: no access log, no server header) in a process of its own:

* `starlette`: a Starlette route, as serve's routes are, that reads the body, parses it
  into arrays (JSON: orjson, then numpy; Arrow IPC: pyarrow, then numpy views) and
  answers a fixed ranking: the one it built for the first body of that kind and size
  (the same bytes as serve's answer would take: ids and zero scores), so writing it
  costs what writing a real one does;
* `asgi`: the same as a bare ASGI callable on uvicorn (no framework at all).

`GET /floor/answers` tells how many rankings it answered (what serve's /metrics counter
tells `bench serve`, for the CPU per answer).

    python -m rankstream.harness.floor_app --port 8000 --kind starlette
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import numpy as np
import orjson
import pyarrow as pa

from rankstream.harness.serve_process import stop_child
from rankstream.serve.bodies import ARROW, JSON  # the media types serve answers in

KINDS = ("starlette", "asgi")
ANSWERS_PATH = "/floor/answers"


class Floor:
    """Parse a ranking body into arrays; answer the fixed ranking for its kind and size."""

    def __init__(self) -> None:
        self.answered = 0
        self._answers: dict[tuple[bool, int], bytes] = {}

    def answer(self, body: bytes, arrow_in: bool, arrow_out: bool) -> tuple[bytes, str]:
        ids, phi = self._arrow_arrays(body) if arrow_in else self._json_arrays(body)
        if ids.shape[0] != phi.shape[0]:
            raise ValueError("one row of phi per candidate")
        key = (arrow_out, ids.shape[0])
        if key not in self._answers:
            self._answers[key] = _ranking(ids, arrow_out)
        self.answered += 1
        return self._answers[key], ARROW if arrow_out else JSON

    @staticmethod
    def _json_arrays(body: bytes) -> tuple[np.ndarray, np.ndarray]:
        document = orjson.loads(body)
        ids = np.asarray(document["candidate_ids"], dtype=np.int64)
        return ids, np.asarray(document["phi"], dtype=np.float32)

    @staticmethod
    def _arrow_arrays(body: bytes) -> tuple[np.ndarray, np.ndarray]:
        table = pa.ipc.open_stream(pa.py_buffer(body)).read_all()
        ids = table.column("candidate_ids").combine_chunks().to_numpy()
        rows = table.column("phi").combine_chunks()
        phi = rows.values.to_numpy(zero_copy_only=False).reshape(len(rows), -1)
        return ids, phi


def _ranking(ids: np.ndarray, arrow: bool) -> bytes:
    """A ranking of `ids` as given, every score 0, in serve's shape."""
    scores = np.zeros(len(ids))
    if not arrow:
        document = {"model": "floor", "version": 1, "candidate_ids": ids.tolist(),
                    "scores": scores.tolist(), "impression_id": "0" * 32}  # fmt: skip
        return orjson.dumps(document)
    schema = pa.schema([("candidate_ids", pa.int64()), ("scores", pa.float64())])
    schema = schema.with_metadata({"model": "floor", "version": "1", "impression_id": "0" * 32})
    batch = pa.RecordBatch.from_arrays([pa.array(ids), pa.array(scores)], schema=schema)
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, schema) as writer:
        writer.write_batch(batch)
    return sink.getvalue().to_pybytes()


def starlette_app(floor: Floor) -> Any:
    from starlette.applications import Starlette
    from starlette.requests import Request
    from starlette.responses import Response
    from starlette.routing import Route

    async def rank(request: Request) -> Response:
        body = await request.body()
        arrow_in = request.headers.get("content-type", "").startswith(ARROW)
        arrow_out = ARROW in request.headers.get("accept", "")
        content, media_type = floor.answer(body, arrow_in, arrow_out)
        return Response(content, media_type=media_type)

    async def answers(request: Request) -> Response:
        return Response(orjson.dumps({"answered": floor.answered}), media_type=JSON)

    routes = [Route("/v1/rank", rank, methods=["POST"]),
              Route(ANSWERS_PATH, answers, methods=["GET"])]  # fmt: skip
    return Starlette(routes=routes)


def asgi_app(floor: Floor) -> Callable[..., Awaitable[None]]:
    async def app(scope: dict, receive: Callable, send: Callable) -> None:
        if scope["type"] != "http":
            return
        chunks = []
        while True:
            message = await receive()
            chunks.append(message.get("body", b""))
            if not message.get("more_body"):
                break
        if scope["path"] == ANSWERS_PATH:
            content, media_type = orjson.dumps({"answered": floor.answered}), JSON
        else:
            headers = dict(scope["headers"])
            arrow_in = headers.get(b"content-type", b"").startswith(ARROW.encode())
            arrow_out = ARROW.encode() in headers.get(b"accept", b"")
            content, media_type = floor.answer(b"".join(chunks), arrow_in, arrow_out)
        await send({"type": "http.response.start", "status": 200, "headers": [
            (b"content-type", media_type.encode()),
            (b"content-length", str(len(content)).encode()),
        ]})  # fmt: skip
        await send({"type": "http.response.body", "body": content})

    return app


def run(port: int, kind: str) -> None:
    """Serve the floor of `kind` on 127.0.0.1:`port` until SIGTERM, as serve runs."""
    import uvicorn

    floor = Floor()
    app = starlette_app(floor) if kind == "starlette" else asgi_app(floor)
    uvicorn.run(app, host="127.0.0.1", port=port, lifespan="off", access_log=False,
                log_level="warning", server_header=False)  # fmt: skip


class FloorProcess:
    """A floor endpoint of `kind` as a child process on `port` (what `bench serve` needs
    of a `harness.serve_process.ServeProcess`: `port`, `process`, `ranking_counts()`)."""

    def __init__(self, kind: str, port: int, log: Path) -> None:
        self.port = port
        self.url = f"http://127.0.0.1:{port}"
        self._log = log.open("w")
        command = [sys.executable, "-m", "rankstream.harness.floor_app", "--port", str(port),
                   "--kind", kind]  # fmt: skip
        self.process = subprocess.Popen(command, stdout=self._log, stderr=subprocess.STDOUT)

    def wait_ready(self, seconds: float = 60.0) -> None:
        deadline = time.monotonic() + seconds
        while True:
            if self.process.poll() is not None:
                raise RuntimeError(f"the floor endpoint exited with {self.process.returncode}")
            try:
                self.ranking_counts()
                return
            except (urllib.error.URLError, ConnectionError):
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.1)

    def ranking_counts(self) -> dict[str, float]:
        with urllib.request.urlopen(self.url + ANSWERS_PATH, timeout=10) as reply:
            return {"ranked": float(json.load(reply)["answered"]), "interleaved": 0.0}

    def stop(self) -> None:
        stop_child(self.process)
        self._log.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--kind", choices=KINDS, default="starlette")
    args = parser.parse_args()
    run(args.port, args.kind)


if __name__ == "__main__":
    main()
