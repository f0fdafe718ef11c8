"""An open-loop HTTP load generator: requests sent on a fixed schedule, latency from it.

Closed-loop tools (a fixed number of connections, each sending its next request when
the last answer came, as wrk does) slow down with the server and so under-report tail
latency ("coordinated omission"). Here a ticker schedules request i at t0 + i / rate
whatever happens; `connections` keep-alive connections take scheduled requests in order,
and a request's latency runs from its *scheduled* time to the end of its answer, so
time spent waiting for a free connection counts. Requests the server could not take in
time pile up and show as latency; `achieved_rate` says what was really answered.

Run as its own process (the benchmarks do), so the generator never shares the server's
interpreter or GIL:

    python -m rankstream.harness.http_load --port 8000 --path /v1/rank \
        --body body.arrow --content-type application/vnd.apache.arrow.stream \
        --rate 1000 --seconds 10 --connections 8

It prints one JSON object: requests, answered, errors (non-200), achieved_rate, and
latency p50/p90/p99/max in milliseconds. Loopback only: it refuses any other host.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time
from dataclasses import dataclass

import numpy as np

LOOPBACK = ("127.0.0.1", "localhost", "::1")


@dataclass(frozen=True)
class Load:
    host: str
    port: int
    request: bytes  # the whole HTTP/1.1 request, sent as is
    rate: float
    seconds: float
    connections: int


def http_request(host: str, port: int, path: str, body: bytes, headers: dict[str, str]) -> bytes:
    lines = [f"POST {path} HTTP/1.1", f"Host: {host}:{port}", f"Content-Length: {len(body)}"]
    lines += [f"{name}: {value}" for name, value in headers.items()]
    return ("\r\n".join(lines) + "\r\n\r\n").encode() + body


async def _answer(reader: asyncio.StreamReader) -> int:
    """Read one HTTP/1.1 answer with a Content-Length body; return its status."""
    status, _ = await _answer_body(reader)
    return status


async def _connection(load: Load, schedule: asyncio.Queue, latencies: list, errors: list) -> None:
    reader, writer = await asyncio.open_connection(load.host, load.port)
    try:
        while True:
            due = await schedule.get()
            if due is None:
                return
            writer.write(load.request)
            status = await _answer(reader)
            latencies.append(time.perf_counter() - due)
            if status != 200:
                errors.append(status)
    finally:
        writer.close()


async def run_load(load: Load) -> dict:
    schedule: asyncio.Queue = asyncio.Queue()
    latencies: list[float] = []
    errors: list[int] = []
    workers = [
        asyncio.create_task(_connection(load, schedule, latencies, errors))
        for _ in range(load.connections)
    ]
    total = int(load.rate * load.seconds)
    start = time.perf_counter()
    for i in range(total):
        due = start + i / load.rate
        delay = due - time.perf_counter()
        if delay > 0:
            await asyncio.sleep(delay)
        schedule.put_nowait(due)
    for _ in workers:
        schedule.put_nowait(None)
    await asyncio.gather(*workers)
    elapsed = time.perf_counter() - start
    ms = np.asarray(latencies) * 1000
    return {
        "rate": load.rate,
        "seconds": load.seconds,
        "connections": load.connections,
        "requests": total,
        "answered": len(latencies),
        "errors": len(errors),
        "achieved_rate": round(len(latencies) / elapsed, 1),
        "latency_ms": {
            "p50": round(float(np.percentile(ms, 50)), 3),
            "p90": round(float(np.percentile(ms, 90)), 3),
            "p99": round(float(np.percentile(ms, 99)), 3),
            "max": round(float(ms.max()), 3),
        },
    }


async def run_numbered(load: Load, count: int, count_field: str = "triplets") -> dict:
    """Closed loop over `count` requests whose bodies number them: the request's
    `__N__` placeholder becomes 0, 1, ... (distinct query ids for feedback). Sums the
    answers' `count_field` (the feedback receipts' "triplets", the clicks' "clicks")."""
    head, _, body = load.request.partition(b"\r\n\r\n")
    numbers = iter(range(count))
    counted: list[int] = []
    errors: list[int] = []

    async def connection() -> None:
        reader, writer = await asyncio.open_connection(load.host, load.port)
        try:
            for n in numbers:
                numbered = body.replace(b"__N__", str(n).encode())
                length = b"Content-Length: %d" % len(numbered)
                lines = [length if line.lower().startswith(b"content-length") else line
                         for line in head.split(b"\r\n")]  # fmt: skip
                writer.write(b"\r\n".join(lines) + b"\r\n\r\n" + numbered)
                status, answer = await _answer_body(reader)
                if status != 200:
                    errors.append(status)
                else:
                    counted.append(int(json.loads(answer)[count_field]))
        finally:
            writer.close()

    start = time.perf_counter()
    await asyncio.gather(*(connection() for _ in range(load.connections)))
    elapsed = time.perf_counter() - start
    return {"requests": count, "answered": len(counted), "errors": len(errors),
            "seconds": round(elapsed, 3), count_field: sum(counted),
            "connections": load.connections}  # fmt: skip


async def _answer_body(reader: asyncio.StreamReader) -> tuple[int, bytes]:
    head = await reader.readuntil(b"\r\n\r\n")
    length = 0
    for line in head.split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            length = int(value)
    return int(head[9:12]), await reader.readexactly(length)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--path", default="/v1/rank")
    parser.add_argument("--body", required=True, help="file holding the request body")
    parser.add_argument("--content-type", default="application/json")
    parser.add_argument("--header", action="append", default=[], help="NAME: VALUE")
    parser.add_argument("--rate", type=float, required=True, help="requests per second")
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--connections", type=int, default=8)
    parser.add_argument(
        "--numbered",
        type=int,
        default=None,
        metavar="N",
        help="closed loop over N requests, __N__ in the body numbering them (ignores --rate)",
    )
    parser.add_argument(
        "--count-field",
        default="triplets",
        help="--numbered: the answers' field to sum (default %(default)s)",
    )
    args = parser.parse_args()
    if args.host not in LOOPBACK:
        parser.error("load is only ever sent to this machine (127.0.0.1 / localhost / ::1)")
    if not (args.rate > 0 and 0 < args.seconds <= 600 and 1 <= args.connections <= 256):
        parser.error("need rate > 0, 0 < seconds <= 600, 1 <= connections <= 256")
    headers = {"Content-Type": args.content_type}
    for header in args.header:
        name, _, value = header.partition(":")
        headers[name.strip()] = value.strip()
    with open(args.body, "rb") as handle:
        body = handle.read()
    load = Load(args.host, args.port, http_request(args.host, args.port, args.path, body, headers),
                args.rate, args.seconds, args.connections)  # fmt: skip
    try:
        import uvloop

        uvloop.install()
    except ImportError:
        pass
    if args.numbered is not None:
        print(json.dumps(asyncio.run(run_numbered(load, args.numbered, args.count_field))))
    else:
        print(json.dumps(asyncio.run(run_load(load))))


if __name__ == "__main__":
    main()
