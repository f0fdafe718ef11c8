"""What `rankstream worker online` can be told: `WorkerOptions`, the one list of its options.

Kept apart from `workers.online_worker` (which imports the compiled learners) so the command
line can be built without numba; `workers.options` turns these fields into the CLI's
options and `RANKSTREAM_ONLINE_*` variables, and back into arguments for harnesses that
start workers as subprocesses.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from rankstream.ranking import learners
from rankstream.workers.options import option
from rankstream.workers.runtime_options import Cadence, RuntimeOptions

LINEAR_ALGOS = learners.worker_defaults()  # what `rankstream worker online` learns by default
DEFAULT_SCALER_ROWS = 2000
COMMAND = "worker online"  # its options' variables: RANKSTREAM_ONLINE_*


@dataclass(frozen=True)
class WorkerOptions:
    """What `rankstream worker online` can be told, beyond the environment's Settings."""

    algos: tuple[str, ...] = option(
        LINEAR_ALGOS,
        f"comma-separated learners to update, from {', '.join(learners.names())}",
        name="algo",
    )
    hyper: Mapping[str, float] = option(default_factory=dict, help="the learners' hyper-parameters")
    checkpoint_records: int | None = option(
        100_000, "checkpoint after this many triplets", metavar="N"
    )
    checkpoint_seconds: float | None = option(
        5.0, "checkpoint at least this often", metavar="SECONDS"
    )
    exit_when_idle: float | None = option(
        None,
        "checkpoint and exit when no record arrived for this long (in a group: while "
        "owning partitions)",
        metavar="SECONDS",
    )
    group: str | None = option(None, "join this consumer group instead of reading every partition")
    scaler_rows: int = option(
        DEFAULT_SCALER_ROWS, "triplets whose phi fit each model's frozen scaler", metavar="N"
    )
    poll_ms: int = option(200, "longest wait of one poll", metavar="MS")
    max_poll_records: int = option(500, "messages per poll at most", metavar="N")
    partitions: int = option(1, "partitions of the triplets topic if it must be created")
    per_partition: bool = option(
        False,
        "scale-out (needs --group): models {algo}.p{k} per partition, mixed into {algo} "
        "by the owner of partition 0",
    )
    mix_seconds: float = option(
        10.0, "with --per-partition: publish the mix this often", metavar="SECONDS"
    )

    def __post_init__(self) -> None:
        learners.check_names(self.algos)
        object.__setattr__(self, "hyper", learners.hyperparameters(self.hyper))
        if self.per_partition and self.group is None:
            raise ValueError("per_partition models need a consumer group (group=...)")
        if not self.mix_seconds > 0:
            raise ValueError(f"mix_seconds must be > 0, got {self.mix_seconds}")
        if self.scaler_rows < 1:
            raise ValueError(f"scaler_rows must be >= 1, got {self.scaler_rows}")
        if self.partitions < 1:
            raise ValueError(f"partitions must be >= 1, got {self.partitions}")
        self.runtime()  # checkpoint cadence, idle exit and polling are checked there

    def runtime(self) -> RuntimeOptions:
        """How the stream runtime drives the online handler."""
        cadence = Cadence(records=self.checkpoint_records, seconds=self.checkpoint_seconds)
        return RuntimeOptions.of(self, cadence, group=self.group, report_lag=True)
