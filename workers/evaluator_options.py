"""What `rankstream worker evaluator` can be told: `EvaluatorOptions`, its one list of options.

Kept apart from `workers.evaluator` (which imports pyarrow and the stream runtime) so the
command line is built from these fields without them (`workers.options`).
"""

from __future__ import annotations

from dataclasses import dataclass

from rankstream.selection.judged_race import ChampionPolicy
from rankstream.workers.options import option
from rankstream.workers.runtime_options import Cadence, RuntimeOptions

COMMAND = "worker evaluator"  # its options' variables: RANKSTREAM_EVALUATOR_*


@dataclass(frozen=True)
class EvaluatorOptions:
    """What `rankstream worker evaluator` can be told, beyond the environment's Settings."""

    window: int = option(
        200,
        "rolling means (a trend; the champion is chosen by the paired test of "
        "RANKSTREAM_CHAMPION_ALPHA/DELTA) over each model's last W judged queries",
        metavar="W",
    )
    exit_when_idle: float | None = option(
        None, "publish and exit when no query arrived for this long", metavar="SECONDS"
    )
    publish_every: int = option(20, cli=False)  # queries between publishes of the scores
    publish_seconds: float | None = option(2.0, cli=False)  # ... or this often if anything new
    history: int = option(10_000, cli=False)  # per-query results kept in memory for reports
    cache_size: int = option(64, cli=False)  # (model, version) scorers kept loaded
    poll_ms: int = option(200, cli=False)
    max_poll_records: int = option(100, cli=False)
    # None: the settings' (RANKSTREAM_CHAMPION_*)
    policy: ChampionPolicy | None = option(None, cli=False)

    def __post_init__(self) -> None:
        if self.window < 1 or self.publish_every < 1 or self.history < 0:
            raise ValueError("window and publish_every must be >= 1, history >= 0")
        if self.exit_when_idle is not None and not self.exit_when_idle > 0:
            raise ValueError(f"exit_when_idle must be > 0 seconds, got {self.exit_when_idle}")
        self.runtime()  # the publish cadence, idle exit and polling are checked there

    def runtime(self) -> RuntimeOptions:
        """The runtime's checkpoint is the publish of the scores record."""
        return RuntimeOptions.of(
            self, Cadence(records=self.publish_every, seconds=self.publish_seconds)
        )
