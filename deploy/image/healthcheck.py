#!/usr/bin/env python3
"""Container health check: healthy means making progress, not merely answering.

Installed in the image as `rankstream-healthcheck`; deploy/docker-compose.yml runs it
every 10 s in each container of ours. It reads the process's own /metrics
(http://127.0.0.1:$RANKSTREAM_METRICS_PORT/metrics) and is healthy (exit 0) when:

1. /metrics answers;
2. the consumer polled recently: `rankstream_worker_last_poll_timestamp_seconds` (the
   newest sample) is at most --max-poll-age seconds old. A worker that lost its broker,
   or hangs, stops polling;
3. it consumes, or is idle with nothing to consume: when `rankstream_consumer_lag_records`
   (summed over partitions) is above zero, a progress counter (--progress, default the
   triplets consumed and the judged queries evaluated) must have grown within
   --stall-seconds. With --require-progress, it must have grown whatever the lag (the
   simulator, a producer with no lag to report).

4. with --ready-url (the HTTP API: `rankstream serve`), that URL answers 200 (its /readyz:
   the model store answers and the champion is loaded).

A metric the process does not export is not checked (the line printed says so). Progress
between runs is remembered in a small state file (--state, in the container's /tmp).
Prints one line; exit 1 = unhealthy. Standard library only.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import re
import sys
import time
import urllib.request
from pathlib import Path

LAST_POLL = "rankstream_worker_last_poll_timestamp_seconds"
LAG = "rankstream_consumer_lag_records"
PROGRESS = ("rankstream_triplets_consumed_total", "rankstream_queries_evaluated_total")
SAMPLE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{.*\})?\s+(\S+)")


def parse_metrics(text: str) -> dict[str, list[float]]:
    """metric name -> the values of its samples (text exposition format)."""
    samples: dict[str, list[float]] = {}
    for line in text.splitlines():
        match = SAMPLE.match(line)
        if match and not line.startswith("#"):
            try:
                value = float(match.group(3))
            except ValueError:
                continue
            samples.setdefault(match.group(1), []).append(value)
    return samples


def check(
    samples: dict[str, list[float]],
    state: dict[str, float],
    now: float,
    *,
    max_poll_age: float,
    stall_seconds: float,
    progress: tuple[str, ...],
    require_progress: bool,
) -> tuple[bool, str, dict[str, float]]:
    """(healthy, reason, new state) for one look at the metrics."""
    notes = []
    polls = [v for v in samples.get(LAST_POLL, []) if math.isfinite(v) and v > 0]
    if polls:
        age = now - max(polls)
        if age > max_poll_age:
            return False, f"last poll {age:.0f} s ago (> {max_poll_age:.0f} s)", state
        notes.append(f"polled {age:.0f} s ago")
    else:
        notes.append(f"no {LAST_POLL}: poll age not checked")

    done = sum(sum(samples.get(name, [])) for name in progress)
    if "progress" not in state or done != state["progress"]:
        state = {"progress": done, "since": now}
    stalled = now - state["since"]
    lag = sum(samples[LAG]) if LAG in samples else None
    must_progress = require_progress or (lag is not None and lag > 0)
    if must_progress and stalled > stall_seconds:
        why = f"lag {lag:.0f} records and " if lag else ""
        return False, f"{why}no progress for {stalled:.0f} s (> {stall_seconds:.0f} s)", state
    if lag is None:
        notes.append(f"no {LAG}")
    else:
        notes.append(f"lag {lag:.0f}")
    notes.append(f"progress {done:.0f}")
    return True, ", ".join(notes), state


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="rankstream container health check")
    parser.add_argument("--max-poll-age", type=float, default=60.0, metavar="SECONDS")
    parser.add_argument("--stall-seconds", type=float, default=120.0, metavar="SECONDS")
    parser.add_argument(
        "--progress", action="append", metavar="METRIC",
        help=f"counter that shows progress (repeatable; default {', '.join(PROGRESS)})",
    )  # fmt: skip
    parser.add_argument("--require-progress", action="store_true")
    parser.add_argument("--state", type=Path, default=Path("/tmp/rankstream-health.json"))
    parser.add_argument("--url", default=None, help="default: own /metrics")
    parser.add_argument("--ready-url", default=None, help="must answer 200 too (an API's /readyz)")
    args = parser.parse_args(argv)
    if args.ready_url is not None:
        try:
            with urllib.request.urlopen(args.ready_url, timeout=3):
                pass  # urlopen raises on any status >= 400
        except OSError as exc:
            print(f"unhealthy: {args.ready_url}: {exc}")
            return 1
    url = args.url or f"http://127.0.0.1:{os.environ['RANKSTREAM_METRICS_PORT']}/metrics"
    try:
        with urllib.request.urlopen(url, timeout=3) as reply:
            samples = parse_metrics(reply.read().decode("utf-8", "replace"))
    except OSError as exc:
        print(f"unhealthy: {url} does not answer: {exc}")
        return 1
    try:
        state = json.loads(args.state.read_text())
    except (OSError, ValueError):
        state = {}
    healthy, reason, state = check(
        samples, state, time.time(),
        max_poll_age=args.max_poll_age, stall_seconds=args.stall_seconds,
        progress=tuple(args.progress or PROGRESS), require_progress=args.require_progress,
    )  # fmt: skip
    with contextlib.suppress(OSError):
        args.state.write_text(json.dumps(state))
    print(("healthy: " if healthy else "unhealthy: ") + reason)
    return 0 if healthy else 1


if __name__ == "__main__":
    sys.exit(main())
