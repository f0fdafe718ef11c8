"""What `rankstream worker click-join` can be told: `JoinOptions`, the one list of its options.

Kept apart from `workers.click_join` (pyarrow) so the command line is built without it;
`workers.options` turns these fields into the CLI's options and back.
The window and the grace are deployment settings (`RANKSTREAM_CLICK_WINDOW_SECONDS`,
`RANKSTREAM_CLICK_GRACE_SECONDS`), not options: the server and the join share them.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from rankstream.ranking.click_pairs import LOSERS
from rankstream.ranking.propensity import (
    DEFAULT_DEPTH,
    DEFAULT_PRIOR_CLICKS,
    DEFAULT_PRIOR_ETA,
    SwapPropensityEstimator,
)
from rankstream.workers.runtime_options import Cadence, RuntimeOptions

DEFAULT_MIN_PROPENSITY = 0.1  # no pair weighs more than 10 (workers.click_join says why)


def _help(text: str, **extra: object) -> dict[str, object]:
    return {"help": text, **extra}


@dataclass(frozen=True)
class JoinOptions:
    """What `rankstream worker click-join` can be told, beyond the environment's Settings
    (the window and the grace are settings: serve and the join share them)."""

    name: str = field(
        default="click-join",
        metadata=_help("the join's stored state and its output keys' prefix"),
    )
    losers: str = field(
        default="skips",
        metadata=_help(
            "pairs: skips (a click over the skipped results above and the next below) or "
            "shown (over every other shown result)"
        ),
    )
    min_propensity: float = field(
        default=DEFAULT_MIN_PROPENSITY,
        metadata=_help("propensities are clipped to at least this (weights <= 1/this)"),
    )
    depth: int = field(default=DEFAULT_DEPTH, metadata=_help("ranks whose propensity is measured"))
    prior_eta: float = field(
        default=DEFAULT_PRIOR_ETA, metadata=_help("the prior's shape (1/rank)^eta")
    )
    prior_clicks: float = field(
        default=DEFAULT_PRIOR_CLICKS, metadata=_help("the prior's weight in expected clicks")
    )
    checkpoint_records: int | None = field(
        default=10_000, metadata=_help("checkpoint after this many records", metavar="N")
    )
    checkpoint_seconds: float | None = field(
        default=1.0,
        metadata=_help("checkpoint (and emit) at least this often", metavar="SECONDS"),
    )
    exit_when_idle: float | None = field(
        default=None,
        metadata=_help("checkpoint and exit when nothing arrived for this long", metavar="SECONDS"),
    )
    poll_ms: int = field(default=200, metadata=_help("longest wait of one poll", metavar="MS"))
    partitions: int = field(
        default=1, metadata=_help("partitions of the input topics if they must be created")
    )

    def __post_init__(self) -> None:
        if self.losers not in LOSERS:
            raise ValueError(f"losers must be one of {LOSERS}, got {self.losers!r}")
        if not 0 < self.min_propensity <= 1:
            raise ValueError(f"min_propensity must lie in (0, 1], got {self.min_propensity}")
        SwapPropensityEstimator(self.depth, self.prior_eta, self.prior_clicks)  # its checks
        if self.partitions < 1:
            raise ValueError(f"partitions must be >= 1, got {self.partitions}")
        self.runtime()

    def runtime(self) -> RuntimeOptions:
        return RuntimeOptions(
            checkpoint=Cadence(records=self.checkpoint_records, seconds=self.checkpoint_seconds),
            exit_when_idle=self.exit_when_idle,
            poll_ms=self.poll_ms,
            report_lag=False,
        )
