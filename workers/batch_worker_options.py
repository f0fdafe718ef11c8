"""What `rankstream worker batch` can be told: `BatchOptions`, the one list of its options.

Kept apart from `workers.batch_worker` (which imports pyarrow and the stream runtime) so
the command line is built from these fields without them (`workers.options`).
"""

from __future__ import annotations

from dataclasses import dataclass

from rankstream.ranking.batch_models import BATCH_KINDS, CMDSDMLParams, RankMKLParams
from rankstream.workers.options import option
from rankstream.workers.runtime_options import Cadence, RuntimeOptions


@dataclass(frozen=True)
class BatchOptions:
    """What `rankstream worker batch` can be told, beyond the environment's Settings."""

    reservoir: int = option(5000, "triplets kept in the uniform reservoir sample", metavar="N")
    refit_seconds: float | None = option(  # None: refit only when asked (the embedded demo)
        60.0, "refit at least this often when new triplets arrived", metavar="T"
    )
    refit_records: int | None = option(5000, "refit after this many new triplets", metavar="R")
    exit_when_idle: float | None = option(
        None, "persist the reservoir and exit when no record arrived for this long", metavar="S"
    )
    models: tuple[str, ...] = option(
        BATCH_KINDS, "comma-separated models to refit", choices=BATCH_KINDS
    )
    seed: int = option(0, "reservoir sampling seed (RankMKL's pair sampling too)")
    min_triplets: int = option(50, cli=False)  # no refit before the reservoir holds this many
    persist_seconds: float | None = option(5.0, cli=False)  # None: persist only when asked
    keep_reservoir_versions: int = option(2, cli=False)  # reservoirs are big: few snapshots
    cmds_dml: CMDSDMLParams = option(default_factory=CMDSDMLParams, cli=False)
    rankmkl: RankMKLParams = option(default_factory=RankMKLParams, nested="mkl-")
    poll_ms: int = option(200, cli=False)
    max_poll_records: int = option(500, cli=False)
    partitions: int = option(1, "partitions of the triplets topic if it must be created")

    def __post_init__(self) -> None:
        if self.reservoir < 1:
            raise ValueError(f"reservoir must be >= 1, got {self.reservoir}")
        if (
            not self.models
            or set(self.models) - set(BATCH_KINDS)
            or len(set(self.models)) != len(self.models)
        ):
            raise ValueError(f"models must be distinct names from {BATCH_KINDS}, got {self.models}")
        if self.min_triplets < 1:
            raise ValueError(f"min_triplets must be >= 1, got {self.min_triplets}")
        self.refit_cadence()  # checked there, and the runtime's options too
        self.runtime()

    def refit_cadence(self) -> Cadence:
        return Cadence(records=self.refit_records, seconds=self.refit_seconds)

    def runtime(self) -> RuntimeOptions:
        """The runtime's checkpoint is the reservoir's persist."""
        return RuntimeOptions.of(self, Cadence(seconds=self.persist_seconds))
