"""A simulated search engine's own production ranker: the incumbent rankstream must beat.

A real engine that adopts rankstream already serves a ranking of its own and sends it
with every ranking request and feedback (`engine_scores`: one number per candidate,
higher first). The simulator plays such an engine with one of these rankers
(`rankstream simulate --engine-ranker`, `rankstream demo --engine-ranker`), named by a
spec string:

* ``none`` (the default): no engine ranking; nothing is sent, as before.
* ``single-descriptor[:J]``: the engine ranks by one phi column, the similarity of one
  descriptor under one measure (0-based column J of the 36, descriptor-major; default 0,
  the synthetic collection's colour-histogram euclidean similarity). A weak incumbent:
  on the synthetic collection every single column ranks below Uni-Con's equal weights
  on all 36 (tests/test_engine_rankers.py measures it on the same queries).
* ``grades-noise[:SIGMA]``: the true grades plus Gaussian noise of standard deviation
  SIGMA (default 0.5): an engine that knows more than phi can tell (its editors, its
  click history). A strong incumbent: at 0.5 it ranks above a linear model fitted by
  least squares to the very queries' grades, so above every learner that learns from
  feedback on phi (the same test measures it). Larger SIGMA makes it weaker.

Scores cover every candidate of the query (aligned with its candidate ids); the noise
comes from the generator the caller passes (the simulator's own child stream), so a
seeded run sends the same scores every time. Grades never leave the simulator except
through such an engine's scores, as a real engine's knowledge reaches rankstream.

>>> import numpy as np
>>> ranker = engine_ranker("single-descriptor:1")
>>> ranker.scores(np.array([[0.1, 0.9], [0.5, 0.2]]), np.array([0, 2]), None).tolist()
[0.9, 0.2]
>>> engine_ranker("none").scores(np.zeros((2, 2)), np.zeros(2), None) is None
True
>>> engine_ranker("grades-noise").spec
'grades-noise:0.5'
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

NO_ENGINE = "none"
SINGLE_DESCRIPTOR = "single-descriptor"
GRADES_NOISE = "grades-noise"
ENGINE_RANKERS = (NO_ENGINE, SINGLE_DESCRIPTOR, GRADES_NOISE)
DEFAULT_COLUMN = 0
DEFAULT_NOISE = 0.5
ENGINE_RANKER_METAVAR = "none|single-descriptor[:J]|grades-noise[:SIGMA]"


@dataclass(frozen=True)
class EngineRanker:
    """One production ranker (module docstring): its kind and its one parameter."""

    kind: str = NO_ENGINE
    column: int = DEFAULT_COLUMN  # single-descriptor: the phi column
    noise: float = DEFAULT_NOISE  # grades-noise: the noise's standard deviation

    def __post_init__(self) -> None:
        if self.kind not in ENGINE_RANKERS:
            raise ValueError(f"engine ranker must be one of {ENGINE_RANKERS}, got {self.kind!r}")
        if self.column < 0:
            raise ValueError(f"a phi column is >= 0, got {self.column}")
        if not (math.isfinite(self.noise) and self.noise >= 0):
            raise ValueError(f"the noise is a finite standard deviation >= 0, got {self.noise}")

    @property
    def enabled(self) -> bool:
        return self.kind != NO_ENGINE

    @property
    def spec(self) -> str:
        """The spec string that names this ranker (`engine_ranker` reads it back)."""
        if self.kind == SINGLE_DESCRIPTOR:
            return f"{SINGLE_DESCRIPTOR}:{self.column}"
        if self.kind == GRADES_NOISE:
            return f"{GRADES_NOISE}:{self.noise:g}"
        return NO_ENGINE

    def check_width(self, width: int) -> None:
        """ValueError when the column is not one of `width` phi columns."""
        if self.kind == SINGLE_DESCRIPTOR and self.column >= width:
            raise ValueError(
                f"engine ranker {self.spec!r}: phi has {width} columns (0..{width - 1})"
            )

    def scores(
        self, phi: np.ndarray, relevance: np.ndarray, rng: np.random.Generator | None
    ) -> np.ndarray | None:
        """The engine's score of each candidate (float64, higher first), None for `none`.
        `relevance` is read by grades-noise only, `rng` draws its noise."""
        if self.kind == NO_ENGINE:
            return None
        if self.kind == SINGLE_DESCRIPTOR:
            phi = np.asarray(phi)
            self.check_width(phi.shape[1])
            return phi[:, self.column].astype(np.float64)
        if rng is None:
            raise ValueError("grades-noise draws its noise from a generator; none given")
        grades = np.asarray(relevance, dtype=np.float64)
        return grades + rng.normal(0.0, self.noise, grades.shape[0])


def engine_ranker(spec: str) -> EngineRanker:
    """The ranker a spec names (module docstring); ValueError saying what is accepted."""
    kind, sep, parameter = spec.partition(":")
    if kind not in ENGINE_RANKERS or (sep and kind == NO_ENGINE):
        raise ValueError(f"engine ranker must be {ENGINE_RANKER_METAVAR}, got {spec!r}")
    if not sep:
        return EngineRanker(kind)
    try:
        if kind == SINGLE_DESCRIPTOR:
            return EngineRanker(kind, column=int(parameter))
        return EngineRanker(kind, noise=float(parameter))
    except ValueError as exc:
        raise ValueError(f"engine ranker {spec!r}: {exc}") from exc
