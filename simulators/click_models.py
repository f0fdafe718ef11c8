"""Simulated users who click: the click models of online learning-to-rank evaluation.

An engine logs what it showed and what was clicked; nobody grades. These models turn a
displayed list of ground-truth relevance grades into clicks, so a learner that learns
from clicks can be scored against the grades it never sees.

* **Cascade models** (Hofmann, Whiteson & de Rijke, "Reusing historical interaction
  data", 2013; Oosterhuis & de Rijke, "Differentiable Unbiased Online Learning to
  Rank", CIKM 2018, Table 1): the user reads the list top-down; a result of grade g is
  clicked with P(click | g); after a click the user stops with P(stop | click, g) (no
  stop without a click: the papers' "P(stop | click = 1, R)"); results below the stop
  are never examined. Four settings, for five grades (0..4, as in the issue and the
  papers), three (0..2) and binary (0..1), as in the reference code of Oosterhuis
  (github.com/HarrieO/OnlineLearningToRank, utils/clicks.py):

  ================  =========================  =========================
  model             P(click | grade)           P(stop | click, grade)
  ================  =========================  =========================
  perfect           .0 .2 .4 .8 1.0            0 0 0 0 0
  navigational      .05 .3 .5 .7 .95           .2 .3 .5 .7 .9
  informational     .4 .6 .7 .8 .9             .1 .2 .3 .4 .5
  almost-random     .4 .45 .5 .55 .6           .5 .5 .5 .5 .5
  ================  =========================  =========================

  (0..2: perfect .0 .5 1 / stop 0; navigational .05 .5 .95 / .2 .5 .9; informational
  .4 .7 .9 / .1 .3 .5; almost-random .4 .5 .6 / .5. Binary: the first and last column.)
* **Position-based model** ("pbm:ETA"): the result at rank k (1-based) is examined
  with P(examined at k) = (1/k)^eta, independently of the others, and an examined
  result of grade g is clicked with the *perfect* model's P(click | g) (as the
  reference code's examination model does). Its examination probabilities are the
  true propensities a position-bias estimator should recover (`propensities`).

Clicks depend only on the grades shown and the generator passed in, so a seeded
generator gives the same clicks on every run.

>>> import numpy as np
>>> model = click_model("informational", n_grades=3)
>>> model.clicks(np.array([2, 0, 1, 2]), np.random.default_rng(0)).tolist()
[True, True, True, True]
>>> click_model("pbm:2", n_grades=3).propensities(4).round(4).tolist()
[1.0, 0.25, 0.1111, 0.0625]
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

# Five-grade tables (grades 0..4): (P(click | grade), P(stop | click, grade)).
_FIVE_GRADES: dict[str, tuple[tuple[float, ...], tuple[float, ...]]] = {
    "perfect": ((0.0, 0.2, 0.4, 0.8, 1.0), (0.0, 0.0, 0.0, 0.0, 0.0)),
    "navigational": ((0.05, 0.3, 0.5, 0.7, 0.95), (0.2, 0.3, 0.5, 0.7, 0.9)),
    "informational": ((0.4, 0.6, 0.7, 0.8, 0.9), (0.1, 0.2, 0.3, 0.4, 0.5)),
    "almost-random": ((0.4, 0.45, 0.5, 0.55, 0.6), (0.5, 0.5, 0.5, 0.5, 0.5)),
}
# Three-grade tables (0..2) of the same models, as in Hofmann et al. 2013 / the reference.
_THREE_GRADES: dict[str, tuple[tuple[float, ...], tuple[float, ...]]] = {
    "perfect": ((0.0, 0.5, 1.0), (0.0, 0.0, 0.0)),
    "navigational": ((0.05, 0.5, 0.95), (0.2, 0.5, 0.9)),
    "informational": ((0.4, 0.7, 0.9), (0.1, 0.3, 0.5)),
    "almost-random": ((0.4, 0.5, 0.6), (0.5, 0.5, 0.5)),
}
CASCADE_MODELS = tuple(_FIVE_GRADES)
"""The cascade models' names; the position-based model is named "pbm:ETA"."""


def _table(name: str, n_grades: int) -> tuple[tuple[float, ...], tuple[float, ...]]:
    """(click, stop) probabilities of a cascade model for grades 0..n_grades-1."""
    if name not in _FIVE_GRADES:
        raise ValueError(f"unknown click model {name!r}; choose from {', '.join(CLICK_MODELS)}")
    if n_grades == 5:
        return _FIVE_GRADES[name]
    if n_grades == 3:
        return _THREE_GRADES[name]
    if n_grades == 2:  # binary: the lowest and the highest grade of the five-grade table
        click, stop = _FIVE_GRADES[name]
        return (click[0], click[-1]), (stop[0], stop[-1])
    raise ValueError(f"click models have tables for 2, 3 or 5 grades, not {n_grades}")


def _grades(grades: np.ndarray, n_grades: int) -> np.ndarray:
    grades = np.asarray(grades)
    if grades.ndim != 1 or not np.issubdtype(grades.dtype, np.integer):
        raise ValueError(f"grades must be a 1-d integer array, got {grades.dtype} {grades.shape}")
    if grades.size and (grades.min() < 0 or grades.max() >= n_grades):
        low, high = grades.min(), grades.max()
        raise ValueError(f"grades must lie in 0..{n_grades - 1}, got {low}..{high}")
    return grades.astype(np.intp)


@dataclass(frozen=True)
class CascadeClickModel:
    """A cascade user (module docstring): top-down, may stop after each click."""

    name: str
    click_probability: tuple[float, ...]  # per grade
    stop_probability: tuple[float, ...]  # per grade, after a click

    @property
    def n_grades(self) -> int:
        return len(self.click_probability)

    def clicks(self, grades: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        """Clicks (bool, one per displayed result) on a list of grades in displayed order."""
        grades = _grades(grades, self.n_grades)
        clicked = rng.random(grades.size) < np.asarray(self.click_probability)[grades]
        stops = clicked & (rng.random(grades.size) < np.asarray(self.stop_probability)[grades])
        if stops.any():
            clicked[int(np.argmax(stops)) + 1 :] = False
        return clicked

    def clicks_many(self, grades: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        """Clicks (bool, n x L) on n lists of L grades at once (rows: impressions)."""
        grades = _grades(grades.reshape(-1), self.n_grades).reshape(grades.shape)
        clicked = rng.random(grades.shape) < np.asarray(self.click_probability)[grades]
        stops = clicked & (rng.random(grades.shape) < np.asarray(self.stop_probability)[grades])
        stopped_before = np.cumsum(stops, axis=1) - stops > 0  # a stop above this rank
        return clicked & ~stopped_before

    def click_count_distribution(self, grades: np.ndarray) -> np.ndarray:
        """P(k clicks) for k = 0..L on each of n lists of L grades: (n, L + 1), exactly.

        The distribution `clicks_many` samples from, by dynamic programming down the
        list (still reading, or stopped, with k clicks so far), for simulations that need
        only how many results were clicked (an A/B test of click-through rate).
        """
        grades = _grades(grades.reshape(-1), self.n_grades).reshape(grades.shape)
        click = np.asarray(self.click_probability)[grades]
        stop = np.asarray(self.stop_probability)[grades]
        return _count_distribution(click, stop)


@dataclass(frozen=True)
class PositionBasedClickModel:
    """A position-based user: rank k examined with (1/k)^eta, then clicked by grade."""

    eta: float
    click_probability: tuple[float, ...]  # per grade, once examined

    @property
    def name(self) -> str:
        return f"pbm:{self.eta:g}"

    @property
    def n_grades(self) -> int:
        return len(self.click_probability)

    def propensities(self, n: int) -> np.ndarray:
        """P(examined at rank k) for k = 1..n: the true propensities (rank 1: 1)."""
        return (1.0 / np.arange(1, n + 1)) ** self.eta

    def clicks(self, grades: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        """Clicks (bool, one per displayed result) on a list of grades in displayed order."""
        grades = _grades(grades, self.n_grades)
        examined = rng.random(grades.size) < self.propensities(grades.size)
        return examined & (rng.random(grades.size) < np.asarray(self.click_probability)[grades])

    def clicks_many(self, grades: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        """Clicks (bool, n x L) on n lists of L grades at once (rows: impressions)."""
        grades = _grades(grades.reshape(-1), self.n_grades).reshape(grades.shape)
        examined = rng.random(grades.shape) < self.propensities(grades.shape[1])
        return examined & (rng.random(grades.shape) < np.asarray(self.click_probability)[grades])

    def click_count_distribution(self, grades: np.ndarray) -> np.ndarray:
        """P(k clicks) for k = 0..L on each of n lists of L grades: (n, L + 1), exactly
        (`CascadeClickModel.click_count_distribution`; here no one stops)."""
        grades = _grades(grades.reshape(-1), self.n_grades).reshape(grades.shape)
        click = self.propensities(grades.shape[1]) * np.asarray(self.click_probability)[grades]
        return _count_distribution(click, np.zeros_like(click))


def _count_distribution(click: np.ndarray, stop: np.ndarray) -> np.ndarray:
    """(n, L + 1) P(k clicks) of users who click rank i with click[:, i] if still
    reading and then stop reading with stop[:, i]."""
    n, length = click.shape
    reading = np.zeros((n, length + 1))
    reading[:, 0] = 1.0
    stopped = np.zeros_like(reading)
    for i in range(length):
        clicked = reading[:, :-1] * click[:, i : i + 1]  # k clicks so far, clicks here
        stopped[:, 1:] += clicked * stop[:, i : i + 1]
        reading[:, :-1] -= clicked
        reading[:, 1:] += clicked * (1.0 - stop[:, i : i + 1])
    return reading + stopped


ClickModel = CascadeClickModel | PositionBasedClickModel
CLICK_MODELS = (*CASCADE_MODELS, "pbm:ETA")


def click_model(name: str, n_grades: int) -> ClickModel:
    """The named model for grades 0..n_grades-1: a cascade name, or "pbm:ETA" (eta > 0)."""
    if name.startswith("pbm:"):
        try:
            eta = float(name[len("pbm:") :])
        except ValueError:
            eta = math.nan
        if not (math.isfinite(eta) and eta > 0):
            raise ValueError(f"pbm:ETA needs a finite eta > 0, got {name!r}")
        return PositionBasedClickModel(eta, _table("perfect", n_grades)[0])
    click, stop = _table(name, n_grades)
    return CascadeClickModel(name, click, stop)


def check_name(name: str) -> str:
    """`name` if it names a click model (for any grade scale); ValueError otherwise."""
    click_model(name, 5)
    return name


FEEDBACK_JUDGED = "judged"
CLICKS_FEEDBACK = "clicks:"


def feedback_click_model(feedback: str) -> str | None:
    """The click model a `--feedback` value names: None for "judged" (graded feedback),
    the checked model name for "clicks:<model>"; ValueError otherwise."""
    if feedback == FEEDBACK_JUDGED:
        return None
    if not feedback.startswith(CLICKS_FEEDBACK):
        raise ValueError(
            f"feedback must be {FEEDBACK_JUDGED!r} or '{CLICKS_FEEDBACK}<model>', got {feedback!r}"
        )
    return check_name(feedback[len(CLICKS_FEEDBACK) :])
