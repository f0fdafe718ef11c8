"""What the stream runtime can be told: cadences and `RuntimeOptions` (no heavy imports).

Kept apart from `workers.runtime` so that options classes, and the command line built
from them, need neither pyarrow nor the clients.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any


# --- cadence -----------------------------------------------------------------------------
@dataclass(frozen=True)
class Cadence:
    """When periodic work is due: every `records`, every `seconds`, or (neither) on demand."""

    records: int | None = None
    seconds: float | None = None

    def __post_init__(self) -> None:
        if self.records is not None and self.records < 1:
            raise ValueError(f"a cadence's records must be >= 1, got {self.records}")
        if self.seconds is not None and not self.seconds > 0:
            raise ValueError(f"a cadence's seconds must be > 0, got {self.seconds}")

    @classmethod
    def on_demand(cls) -> Cadence:
        """Never due by itself: the caller decides (the embedded demo, tests)."""
        return cls()


class CadenceTimer:
    """Counts records and time since the work was last done, against a `Cadence`."""

    def __init__(self, cadence: Cadence, clock: Callable[[], float] = time.monotonic) -> None:
        self.cadence = cadence
        self._clock = clock
        self.records = 0
        self._since = clock()
        self._forced = False

    def add(self, records: int) -> None:
        self.records += records

    def force(self) -> None:
        """Due at the next check, whatever the cadence."""
        self._forced = True

    def due(self) -> bool:
        c = self.cadence
        return (
            self._forced
            or (c.records is not None and self.records >= c.records)
            or (c.seconds is not None and self._clock() - self._since >= c.seconds)
        )

    def reset(self) -> None:
        self.records, self._since, self._forced = 0, self._clock(), False


@dataclass(frozen=True)
class RuntimeOptions:
    """How the runtime drives its handler (the handler's own options are its own)."""

    checkpoint: Cadence = field(default_factory=lambda: Cadence(records=100_000, seconds=5.0))
    exit_when_idle: float | None = None  # seconds without messages (in a group: while owning)
    poll_ms: int = 200
    max_poll_records: int = 500
    group: str | None = None  # consumer group: the broker assigns partitions (subscribe)
    report_lag: bool = False  # export rankstream_consumer_lag_records for the topics read

    def __post_init__(self) -> None:
        if self.exit_when_idle is not None and not self.exit_when_idle > 0:
            raise ValueError(f"exit_when_idle must be > 0 seconds, got {self.exit_when_idle}")
        if self.poll_ms < 0 or self.max_poll_records < 1:
            raise ValueError("poll_ms must be >= 0 and max_poll_records >= 1")

    @classmethod
    def of(cls, options: Any, checkpoint: Cadence, **more: Any) -> RuntimeOptions:
        """A worker's runtime: its checkpoint cadence, and from its `options` their
        exit_when_idle, poll_ms and max_poll_records (every worker's options have them)."""
        return cls(
            checkpoint=checkpoint,
            exit_when_idle=options.exit_when_idle,
            poll_ms=options.poll_ms,
            max_poll_records=options.max_poll_records,
            **more,
        )
