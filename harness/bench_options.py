"""What `bench pipeline`, `bench scaleout`, `bench serve`, `bench ingest` and `bench clicks`
can be told: their options, declared once.

Kept apart from the benches (which import pyarrow and the clients) so the command line is
built from these fields without them (`workers.options`).
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from rankstream.producers.feedback_batching import QUERIES_PER_MESSAGE
from rankstream.workers.options import option


@dataclass(frozen=True)
class ServeBenchOptions:
    """/v1/rank under open-loop load while the champion reloads (`harness.serve_bench`)."""

    arrow_rate: float = option(1000.0, "open-loop requests/s of Arrow bodies", metavar="R")
    json_rate: float = option(200.0, "open-loop requests/s of JSON bodies", metavar="R")
    seconds: float = option(10.0, "per run")
    repeats: int = option(3, "runs; medians")
    reload_seconds: float = option(1.0, "a new champion checkpoint every S seconds", metavar="S")
    interleaving_share: tuple[float, ...] = option(
        (0.2, 1.0),
        "a server per share S of interleaved /v1/rank requests, each against share 0 in "
        "the same rounds (0.2: the share planned for compose and the click demo; 1: all)",
        metavar="S",
    )
    compare_processes: int = option(
        0,
        "also a logging server on N serving processes (RANKSTREAM_API_PROCESSES) at the "
        "first interleaving share, against the one-process server of that share in the "
        "same rounds (0: none; every other server, the floors included, runs one process)",
        metavar="N",
    )
    baseline_python: str | None = option(
        None,
        "also a server named baseline, started with this python (whose `-m rankstream "
        "serve` is another install, e.g. an older commit's), in the same rounds: impression "
        "logging on, interleaving at the first share, one process; the reference and the "
        "several-process server are reported against it",
        metavar="PATH",
    )
    connections: int = option(8, cli=False)

    def __post_init__(self) -> None:
        if self.baseline_python is not None and not (
            os.path.isfile(self.baseline_python) and os.access(self.baseline_python, os.X_OK)
        ):
            raise ValueError(f"baseline_python: {self.baseline_python!r} is not an executable file")
        if min(self.arrow_rate, self.json_rate, self.seconds, self.reload_seconds) <= 0:
            raise ValueError("arrow_rate, json_rate, seconds and reload_seconds must be > 0")
        if self.compare_processes == 1 or not 0 <= self.compare_processes <= 1024:
            raise ValueError("compare_processes: 0 (none) or 2-1024")
        if min(self.repeats, self.connections) < 1:
            raise ValueError("repeats and connections must be >= 1")
        if not all(0 < share <= 1 for share in self.interleaving_share):
            raise ValueError("interleaving_share: each share must be in (0, 1]")
        if len(set(self.interleaving_share)) != len(self.interleaving_share):
            raise ValueError("interleaving_share: each share once")


@dataclass(frozen=True)
class IngestBenchOptions:
    """Judged queries through /v1/feedback into Kafka (`harness.ingest_bench`)."""

    queries: int = option(2000, "judged queries per run", metavar="Q")
    connections: int = option(8, "concurrent HTTP connections")
    repeats: int = option(3, "runs; medians")

    def __post_init__(self) -> None:
        if min(self.queries, self.connections, self.repeats) < 1:
            raise ValueError("queries, connections and repeats must be >= 1")


@dataclass(frozen=True)
class ClicksBenchOptions:
    """Click events through /v1/clicks to the click join's output (`harness.clicks_bench`)."""

    impressions: int = option(10_000, "impressions per run (2 click events each)", metavar="N")
    batch: int = option(50, "impressions' clicks per request (an engine's batch)", metavar="B")
    candidates: int = option(20, "results shown per impression", metavar="K")
    connections: int = option(8, "concurrent HTTP connections")
    repeats: int = option(3, "runs of each kind (HTTP, the producer reference); medians")

    def __post_init__(self) -> None:
        if min(self.impressions, self.batch, self.connections, self.repeats) < 1:
            raise ValueError("impressions, batch, connections and repeats must be >= 1")
        if self.candidates < 13:
            raise ValueError("candidates must be >= 13 (clicks go to ranks 1-12)")


@dataclass(frozen=True)
class PipelineBenchOptions:
    """What `rankstream bench pipeline` can be told."""

    triplets: int = option(3_000_000, "triplets per run", metavar="N")
    queries_per_message: int = option(
        QUERIES_PER_MESSAGE,
        "judged queries per Kafka message (as the simulator sends them: ~2,260 triplets; at "
        "1 both wire versions are bound by the Python Kafka client's cost per message, not "
        "by bytes)",
        metavar="Q",
    )
    repeats: int = option(
        3, "timed runs of each wire version; the medians are reported", metavar="R"
    )
    checkpoint_records: int = option(100_000, "worker checkpoint interval in triplets", metavar="N")
    producers: int = option(2, "producer processes sharing the messages", metavar="P")
    compare_kafka: str | None = option(
        None,
        "instead of wire v1 vs v2: v2 on the configured Kafka vs on this one (host:port "
        "list; e.g. `services up --kafka-brokers 3` under another --root), alternating, "
        "same seeds and Redis",
        metavar="BOOTSTRAP",
    )

    def __post_init__(self) -> None:
        if min(self.triplets, self.queries_per_message, self.repeats, self.producers) < 1:
            raise ValueError("triplets, queries_per_message, repeats and producers must be >= 1")


@dataclass(frozen=True)
class ScaleoutBenchOptions:
    """What `rankstream bench scaleout` can be told."""

    triplets: int = option(2_000_000, "triplets pre-produced per run", metavar="N")
    workers: tuple[int, ...] = option((1, 2, 4), "worker process counts to time", metavar="K")
    partitions: int = option(4, "partitions of the run's triplets topic", metavar="P")
    repeats: int = option(3, "timed runs per worker count; the median is reported", metavar="R")

    def __post_init__(self) -> None:
        if min(self.triplets, self.partitions, self.repeats, *self.workers) < 1:
            raise ValueError("triplets, partitions, repeats and the workers must be >= 1")
