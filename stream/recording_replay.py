"""Feeding a recording back into a transport (`rankstream replay DIR`): `replay_log`.

Kinds are merged by recorded timestamp, each keeps its recorded order, keys and
partitions; the pace is the recorded one, a multiple of it, or as fast as possible.
"""

from __future__ import annotations

import heapq
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from rankstream.stream.recording_files import RecordingError, log_paths, read_log_file
from rankstream.stream.recording_reader import ReadCounts, RecordedMessage, iter_messages
from rankstream.stream.settings import DEFAULT_PHI_DIM
from rankstream.stream.transport import Transport


@dataclass
class ReplayCounts:
    messages: dict[str, int] = field(default_factory=dict)  # kind -> messages sent
    rows: int = 0
    seconds: float = 0.0
    read: ReadCounts = field(default_factory=ReadCounts)


def replay_log(
    transport: Transport,
    directory: Path | str,
    topics: dict[str, str],
    *,
    speed: float | None = 1.0,
    width: int = DEFAULT_PHI_DIM,
    skip_bad: bool = False,
    on_message: Callable[[RecordedMessage], None] | None = None,
    sleep: Callable[[float], None] = time.sleep,
    clock: Callable[[], float] = time.monotonic,
) -> ReplayCounts:
    """Send every recorded message of the kinds in `topics` (kind -> target topic).

    Kinds are merged by recorded timestamp, and each kind keeps its recorded order
    and keys. A message goes to its recorded partition when the target topic has it
    (created with as many partitions as the recording used), else by key. `speed`:
    1.0 keeps the recorded pace, 2.0 twice as fast, None as fast as possible.
    `sleep` and `clock` are the pacing's time (a test passes a fake pair).
    """
    if speed is not None and not (speed > 0 and np.isfinite(speed)):
        raise ValueError(f"speed must be a finite number > 0 (or None), got {speed}")
    counts = ReplayCounts(messages={kind: 0 for kind in topics})
    partitions = {kind: _recorded_partitions(directory, kind) for kind in topics}
    transport.ensure_topics(
        {topics[k]: max(max(ps, default=0) + 1, 1) for k, ps in partitions.items()}
    )
    available = {k: set(transport.partitions_for(topics[k])) for k in topics}
    streams = [
        iter_messages(directory, kind, width=width, skip_bad=skip_bad, counts=counts.read)
        for kind in topics
    ]
    producer = transport.producer()
    started = clock()
    first_ts: int | None = None
    try:
        for message in heapq.merge(*streams, key=lambda m: m.timestamp_ms):
            if speed is not None:
                first_ts = message.timestamp_ms if first_ts is None else first_ts
                due = started + (message.timestamp_ms - first_ts) / 1000 / speed
                wait = due - clock()
                if wait > 0:
                    sleep(wait)
            partition = message.partition if message.partition in available[message.kind] else None
            producer.send(topics[message.kind], message.value, key=message.key, partition=partition)
            counts.messages[message.kind] += 1
            counts.rows += message.rows
            if on_message is not None:
                on_message(message)
        producer.flush()
    finally:
        producer.close()
    counts.seconds = clock() - started
    return counts


def _recorded_partitions(directory: Path | str, kind: str) -> set[int]:
    parts: set[int] = set()
    for path in log_paths(directory, kind):
        try:
            parts |= set(read_log_file(path, kind).next_offsets)
        except RecordingError:
            continue  # reported (or skipped) when the file is read
    return parts
