"""What `rankstream eval champion` can be told: `ChampionEvalOptions`, declared once.

Kept apart from `evals.champion_eval` (scipy, the demo) so the command line is built from these
fields without them (`workers.options`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from rankstream.workers.options import option

if TYPE_CHECKING:
    from rankstream.ranking.sequential import ChampionTest


@dataclass(frozen=True)
class ChampionEvalOptions:
    """Simulated streams per effect and spread, and the demo's real ones (`real`)."""

    runs: int = option(1000, "streams per case")
    horizon: int = option(2000, "paired queries per stream")
    effects: tuple[float, ...] = option((0.005, 0.01, 0.02), "challengers' true NDCG@50 gains")
    spreads: tuple[float, ...] = option(
        (0.03, 0.05, 0.1), "simulated per-query spreads of the difference"
    )
    alpha: float = option(0.01, cli=False)  # the command passes RANKSTREAM_CHAMPION_ALPHA
    delta: float = option(0.005, cli=False)  # ... and RANKSTREAM_CHAMPION_DELTA
    variance_prior: float | None = option(
        None, "the mSPRT's variance prior (none: ranking.sequential.VARIANCE_PRIOR; 0: plain)"
    )
    confirm_runs: int = option(5000, "fresh runs of each policy's worst real pair")
    demo_queries: int = option(1000, "queries of the demo run")
    demo_images: int = option(20_000, cli=False)
    seed: int = option(0, "seed")
    real: bool = option(True, "the demo's real score streams besides the simulated ones")

    def __post_init__(self) -> None:
        if min(self.runs, self.horizon, self.confirm_runs) < 1 or self.demo_queries < 100:
            raise ValueError("runs, horizon and confirm_runs must be >= 1, demo_queries >= 100")
        self.tests()  # checks alpha, delta and the prior

    def tests(self) -> dict[str, ChampionTest]:
        """The sequential policies compared, by report key; the race's own test first."""
        from rankstream.ranking.sequential import VARIANCE_PRIOR, MixtureSPRT, PairedTest

        prior = VARIANCE_PRIOR if self.variance_prior is None else self.variance_prior
        return {
            "betting": PairedTest(alpha=self.alpha, delta=self.delta),
            "msprt": MixtureSPRT(alpha=self.alpha, delta=self.delta, variance_prior=prior),
        }
