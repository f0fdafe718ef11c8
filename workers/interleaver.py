"""Interleaved serving: a share of the champion's traffic merged with challengers' rankings.

With `RANKSTREAM_INTERLEAVING_SHARE` > 0, that share of the rankings served with the
champion is one merged list (`ranking.interleaving.team_draft`), and its impression
records the teams: per displayed position the index into `team_models`, the champion
first. The click join credits each click to its team and decides the champion on clicks
(`workers.interleaving`). Two servers use this one `Interleaver`: `rankstream serve`
for the `/v1/rank` requests that ask for the champion (no model or version named), and
the simulated engine (`workers.simulator`, `rankstream simulate --feedback clicks:MODEL`
and the click demo) when it serves the champion.

Each challenger's ranking is the one it would be served with
(`workers.scoring.served_order`: a PDGD challenger's is a Plackett-Luce sample of its
scores), so the race compares what each model would show. Which challengers: every other
servable model (serve: its registry snapshot's; the simulator: every scorable model of
the store). `team-draft` (the default,
`RANKSTREAM_INTERLEAVING_METHOD`) pairs the champion with one challenger per impression,
taking them in turn (round-robin over the sorted names), so every race gets an equal
share; `multileave` drafts the champion with all of them at once (team-draft multileave:
every race gains an outcome per impression, each list is shared by more teams). Only the
challengers drafted are read from `models` (a mapping that loads on access pays for one).

What serve's caller sees: the merged list as `candidate_ids` and, as `scores`, the
champion's scores sorted from high to low laid on it, position by position. So the scores
descend as always (a caller that re-sorts by score keeps the shown order) and stay on the
champion's scale; they are not any model's score of the result beside them.

Serve interleaves only once it has accepted a POST /v1/clicks (`wait_for_clicks`,
`heard_clicks`): the race lives on clicks, so an engine that posts only judged feedback
(or nothing yet) would pay for interleaved lists that can never be credited; with the
default share (0.1, `stream.settings`) such an engine sees none. The simulated engine
makes its own clicks and does not wait.

Refused challengers are skipped: `challengers(..., refused=...)` takes the names the click
race refused against this champion (`workers.interleaving.refused_challengers`, read from
the published race), so a refused challenger costs the users nothing until the join
re-opens its race (a new version that learned enough to differ). The share of the
champion's rankings drafted with each challenger over the last `SHARE_WINDOW` (1,000) is
the gauge `rankstream_challenger_impression_share{challenger}`, and their running count
`rankstream_challenger_impressions_total{challenger}`: what each challenger costs.

Cost: only an interleaved request scores a second model and drafts (with the champion's
ranking and sorted scores as served, not sorted again); every other request takes the
same path as without it. docs/results/serving-cost.md has the measured figures.
"""

from __future__ import annotations

import collections
import itertools
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from typing import Protocol, TypeVar

import numpy as np

from rankstream.ranking.interleaving import team_draft
from rankstream.stream.settings import MULTILEAVE, Settings
from rankstream.workers import metrics
from rankstream.workers.scoring import Scorer, served_order


class Ranker(Protocol):
    """A servable model as the interleaver needs it: its name and its scorer."""

    @property
    def name(self) -> str: ...

    @property
    def scorer(self) -> Scorer: ...


R = TypeVar("R", bound=Ranker)


@dataclass(frozen=True)
class InterleavedList:
    """A merged ranking: `order` indexes the request's candidates (displayed order),
    `teams` (int8) the ranker per position, `team_models` the champion first."""

    order: np.ndarray
    teams: np.ndarray
    team_models: tuple[str, ...]
    scores: np.ndarray  # what the answer shows (module docstring)


SHARE_WINDOW = 1000  # the champion's rankings the share gauge is measured over


class ChallengerShare:
    """The share of the last `window` champion rankings drafted with each challenger
    (module docstring): a gauge per challenger, updated only for the names that moved."""

    def __init__(self, window: int = SHARE_WINDOW) -> None:
        self.window = window
        self.recent: collections.deque[tuple[str, ...]] = collections.deque()
        self.counts: collections.Counter[str] = collections.Counter()

    def add(self, drafted: tuple[str, ...]) -> None:
        self.recent.append(drafted)
        moved = set(drafted)
        self.counts.update(drafted)
        if len(self.recent) > self.window:
            gone = self.recent.popleft()
            self.counts.subtract(gone)
            moved.update(gone)
        else:  # the window still grows: every share's denominator moved
            moved.update(self.counts)
        for name in drafted:
            metrics.CHALLENGER_IMPRESSIONS.labels(challenger=name).inc()
        for name in moved:
            share = self.counts[name] / len(self.recent)
            metrics.CHALLENGER_SHARE.labels(challenger=name).set(share)


class Interleaver:
    """Decides which requests are interleaved, with whom, and drafts their lists."""

    def __init__(
        self,
        settings: Settings,
        rng: np.random.Generator | None = None,
        wait_for_clicks: bool = False,
    ) -> None:
        self.share = settings.interleaving_share
        self.multileave = settings.interleaving_method == MULTILEAVE
        self.rng = rng if rng is not None else np.random.default_rng()
        self._turn = itertools.count()
        self.shares = ChallengerShare()
        self.clicks_heard = not wait_for_clicks

    def heard_clicks(self) -> None:
        """Clicks arrived (serve: a POST /v1/clicks accepted): interleaving may begin."""
        self.clicks_heard = True

    @property
    def enabled(self) -> bool:
        """The share is > 0 and, where the server waits for them, clicks were posted: an
        engine that sends only judged feedback gives interleaved lists no outcome, so it
        is never shown one (module docstring)."""
        return self.share > 0 and self.clicks_heard

    def challengers(
        self, models: Mapping[str, R], champion: str, refused: Collection[str] = ()
    ) -> list[R]:
        """This ranking's challengers among `models` (name -> servable model, the
        champion's entry and the `refused` ignored): none (not interleaved), one in
        turn, or all. Every call is one ranking of the champion's (the share gauge)."""
        drafted = self._draft(models, champion, refused)
        self.shares.add(tuple(drafted))
        return [models[name] for name in drafted]

    def _draft(self, models: Mapping[str, R], champion: str, refused: Collection[str]) -> list[str]:
        if self.share < 1.0 and self.rng.random() >= self.share:
            return []
        others = sorted(name for name in models if name != champion and name not in refused)
        if others and not self.multileave:
            others = [others[next(self._turn) % len(others)]]
        return others

    def interleave(
        self,
        champion: Ranker,
        champion_order: np.ndarray,
        champion_ranked: np.ndarray,
        challengers: list[R],
        phi: np.ndarray,
    ) -> InterleavedList:
        """The team draft of the champion's ranking (`champion_order`, its scores sorted
        `champion_ranked`: what serving computed already) with the challengers' on `phi`."""
        rankings = [champion_order, *(served_order(c.scorer, c.scorer.score(phi), self.rng)
                                      for c in challengers)]  # fmt: skip
        drafted = team_draft(rankings, len(champion_order), self.rng)
        return InterleavedList(
            order=drafted.items,
            teams=drafted.teams.astype(np.int8),
            team_models=(champion.name, *(c.name for c in challengers)),
            scores=champion_ranked,
        )
