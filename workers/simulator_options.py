"""What `rankstream simulate` can be told: `SimulateOptions`, the one list of its options.

Kept apart from `workers.simulator` (which imports pyarrow and the stream runtime) so the
command line is built from these fields without them (`workers.options`).
"""

from __future__ import annotations

from dataclasses import dataclass

from rankstream.producers.feedback_batching import (
    DEFAULT_LINGER_S,
    QUERIES_PER_MESSAGE,
    check_batching,
)
from rankstream.selection.what_serves import CHAMPION
from rankstream.simulators import catalog
from rankstream.simulators.click_models import FEEDBACK_JUDGED, feedback_click_model
from rankstream.simulators.engine_rankers import ENGINE_RANKER_METAVAR, NO_ENGINE, engine_ranker
from rankstream.simulators.images import SERVED_CANDIDATES
from rankstream.workers.options import option


@dataclass(frozen=True)
class SimulateOptions:
    """What `rankstream simulate` can be told, beyond the environment's Settings."""

    triplets: int | None = option(
        100_000, "judged feedback: stop after at least N triplets", metavar="N"
    )
    queries: int | None = option(
        None, "stop after Q queries (impressions; needed with clicks feedback)", metavar="Q"
    )
    feedback: str = option(
        FEEDBACK_JUDGED,
        "judged: grade the served top 50, send triplets; clicks:MODEL: users of click model "
        "MODEL (perfect, navigational, informational, almost-random, pbm:ETA) click on it, "
        "sent as impressions and clicks for the click join",
        metavar="judged|clicks:MODEL",
    )
    seed: int = option(0, "query stream seed (order, orientation coins, calibration)")
    collection: str = option(
        "synthetic",
        "the image collection served (fashion-mnist needs Debian's dataset-fashion-mnist: "
        "`make datasets`)",
        choices=tuple(catalog.COLLECTIONS),
    )
    images: int | None = option(
        None, "synthetic only: collection size (none: the paper's 1,007,157)", metavar="M"
    )
    collection_seed: int | None = option(
        None, "synthetic only: its seed (cached per size and seed; none: 0)", metavar="S"
    )
    rate: float | None = option(
        None,
        "limit to R triplets/s, with clicks R clicks/s (token bucket; none: unlimited)",
        metavar="R",
    )
    serving: str = option(
        CHAMPION,
        "rank with the evaluator's champion or a named model",
        metavar="champion|NAME",
    )
    engine_ranker: str = option(
        NO_ENGINE,
        "the simulated engine's own production ranker, sent as its engine_scores: none, "
        "single-descriptor[:J] (phi column J alone, weaker than Uni-Con) or "
        "grades-noise[:SIGMA] (the true grades plus noise, stronger than every learner); "
        "rankstream.simulators.engine_rankers",
        metavar=ENGINE_RANKER_METAVAR,
    )
    candidates: int = option(SERVED_CANDIDATES, "candidates retrieved per query", metavar="K")
    judged: int = option(50, cli=False)
    calibration_queries: int = option(50, cli=False)
    partitions: int = option(1, "partitions of the topics if they must be created")
    queries_per_message: int = option(
        QUERIES_PER_MESSAGE,
        f"judged queries packed into one triplets message (a query waits at most "
        f"{DEFAULT_LINGER_S} s for the others)",
        metavar="Q",
    )
    linger_s: float = option(DEFAULT_LINGER_S, cli=False)  # the longest a query waits

    def __post_init__(self) -> None:
        if self.triplets is not None and self.triplets < 1:
            raise ValueError(f"triplets must be >= 1, got {self.triplets}")
        if self.queries is not None and self.queries < 1:
            raise ValueError(f"queries must be >= 1, got {self.queries}")
        if feedback_click_model(self.feedback) is not None and self.queries is None:
            raise ValueError(
                f"feedback {self.feedback!r} produces no triplets (the click join makes "
                "them): give a number of queries to stop after"
            )
        if self.rate is not None and not self.rate > 0:
            raise ValueError(f"rate must be > 0 triplets/s, got {self.rate}")
        if self.calibration_queries < 1 or self.partitions < 1:
            raise ValueError("calibration_queries and partitions must be >= 1")
        check_batching(self.queries_per_message, self.linger_s)
        if self.images is not None and self.images < 1:
            raise ValueError(f"images must be >= 1, got {self.images}")
        catalog.check_options(self.collection, self.collection_options())
        engine_ranker(self.engine_ranker)

    def collection_options(self) -> dict[str, int]:
        """The options given for the collection's loader (`simulators.catalog`)."""
        given = {"n_images": self.images, "collection_seed": self.collection_seed}
        return {name: value for name, value in given.items() if value is not None}
