"""What `rankstream worker click-join` can be told: `JoinOptions`, the one list of its options.

Kept apart from `workers.click_join` (pyarrow) so the command line is built without it;
`workers.options` turns these fields into the CLI's options and back.
The window and the grace are deployment settings (`RANKSTREAM_CLICK_WINDOW_SECONDS`,
`RANKSTREAM_CLICK_GRACE_SECONDS`), not options: the server and the join share them.
"""

from __future__ import annotations

from dataclasses import dataclass

from rankstream.ranking import learners
from rankstream.ranking.click_pairs import DEFAULT_LOSERS, DEFAULT_MIN_PROPENSITY, LOSERS
from rankstream.ranking.propensity import (
    DEFAULT_DEPTH,
    DEFAULT_PRIOR_CLICKS,
    DEFAULT_PRIOR_ETA,
    PropensityEstimator,
)
from rankstream.workers.options import option
from rankstream.workers.runtime_options import Cadence, RuntimeOptions

NONE = "none"  # `--learn none`: the join teaches no impression learner
COMMAND = "worker click-join"  # its options' variables: RANKSTREAM_CLICK_JOIN_*


@dataclass(frozen=True)
class JoinOptions:
    """What `rankstream worker click-join` can be told, beyond the environment's Settings
    (the window and the grace are settings: serve and the join share them)."""

    name: str = option("click-join", "the join's stored state and its output keys' prefix")
    losers: str = option(
        DEFAULT_LOSERS,
        "pairs: shown (a click over every other shown result: unbiased with the inverse-"
        "propensity weights) or skips (over the skipped results above and the next below: "
        "biased against the shown order with those weights)",
        choices=LOSERS,
    )
    min_propensity: float = option(
        DEFAULT_MIN_PROPENSITY, "propensities are clipped to at least this (weights <= 1/this)"
    )
    depth: int = option(DEFAULT_DEPTH, "ranks whose propensity is measured")
    prior_eta: float = option(DEFAULT_PRIOR_ETA, "the prior's shape (1/rank)^eta")
    prior_clicks: float = option(DEFAULT_PRIOR_CLICKS, "the prior's weight in expected clicks")
    learn: tuple[str, ...] = option(
        learners.impression_learners(),
        "comma-separated learners the join teaches each session's impression and clicks "
        f"('none' for none), from {', '.join(learners.impression_learners())}",
    )
    checkpoint_records: int | None = option(
        10_000, "checkpoint after this many records", metavar="N"
    )
    checkpoint_seconds: float | None = option(
        1.0, "checkpoint (and emit) at least this often", metavar="SECONDS"
    )
    exit_when_idle: float | None = option(
        None, "checkpoint and exit when nothing arrived for this long", metavar="SECONDS"
    )
    poll_ms: int = option(200, "longest wait of one poll", metavar="MS")
    partitions: int = option(1, "partitions of the input topics if they must be created")

    def __post_init__(self) -> None:
        if self.losers not in LOSERS:
            raise ValueError(f"losers must be one of {LOSERS}, got {self.losers!r}")
        if not 0 < self.min_propensity <= 1:
            raise ValueError(f"min_propensity must lie in (0, 1], got {self.min_propensity}")
        PropensityEstimator(self.depth, self.prior_eta, self.prior_clicks)  # its checks
        named = tuple(n for n in self.learn if n and n != NONE)
        object.__setattr__(self, "learn", named or (NONE,))  # () reads (and prints) as none
        for name in self.taught:
            if learners.learner(name).learns_from != "impressions":
                raise ValueError(
                    f"learn: {name!r} learns from triplets (the online worker's); "
                    f"the join learns {', '.join(learners.impression_learners())}"
                )
        if len(set(self.taught)) != len(self.taught):
            raise ValueError(f"learn names a learner twice: {self.learn}")
        if self.partitions < 1:
            raise ValueError(f"partitions must be >= 1, got {self.partitions}")
        self.runtime()

    @property
    def taught(self) -> tuple[str, ...]:
        """The impression learners the join teaches (`learn` without "none")."""
        return tuple(n for n in self.learn if n != NONE)

    def runtime(self) -> RuntimeOptions:
        return RuntimeOptions(
            checkpoint=Cadence(records=self.checkpoint_records, seconds=self.checkpoint_seconds),
            exit_when_idle=self.exit_when_idle,
            poll_ms=self.poll_ms,
            report_lag=False,
        )
