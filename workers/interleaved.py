"""Interleaved serving: a share of the champion's traffic merged with challengers' rankings.

With `RANKSTREAM_INTERLEAVING_SHARE` > 0, that share of the rankings served by the
champion is one merged list (`ranking.interleaving.team_draft`), and its impression
records the teams: per displayed position the index into `team_models`, the champion
first. The click join credits each click to its team and decides the champion on clicks
(`workers.interleaving`). Two places serve the champion and draft with this one
`Interleaver`: `rankstream serve` (the `/v1/rank` requests that ask for the champion, no
model or version named) and the simulator's clicking users (`simulate --feedback
clicks:MODEL`, `workers.simulator`), so a stack fed by simulated clicks alone races its
challengers the way a real engine's traffic through serve would.

Which challengers: every other scorable model the caller has (serve: its registry
snapshot; the simulator: the store's newest versions). `team-draft` (the default,
`RANKSTREAM_INTERLEAVING_METHOD`) pairs the champion with one challenger per impression,
taking them in turn (round-robin over the sorted names), so every race gets an equal
share; `multileave` drafts the champion with all of them at once (team-draft multileave:
every race gains an outcome per impression, each list is shared by more teams).

What serve's caller sees: the merged list as `candidate_ids` and, as `scores`, the
champion's scores sorted from high to low laid on it, position by position. So the scores
descend as always (a caller that re-sorts by score keeps the shown order) and stay on the
champion's scale; they are not any model's score of the result beside them.

Cost: only an interleaved ranking scores a second model (a linear scorer on 300 x 36 is
microseconds) and drafts; every other one takes the same path as without it.

>>> import numpy as np
>>> from rankstream.stream.settings import Settings
>>> class Weights:
...     def __init__(self, w): self.w = np.asarray(w, dtype=float)
...     def score(self, phi): return phi @ self.w
>>> interleaver = Interleaver(Settings(interleaving_share=1.0), np.random.default_rng(0))
>>> interleaver.challengers(["uni_con", "opr", "arow"], "uni_con")
['arow']
>>> interleaver.challengers(["uni_con", "opr", "arow"], "uni_con")  # in turn
['opr']
>>> phi = np.eye(4)
>>> merged = interleaver.interleave(
...     "uni_con", phi @ [4, 3, 2, 1], [("opr", Weights([1, 2, 3, 4]))], phi)
>>> merged.team_models, sorted(merged.order.tolist()), np.bincount(merged.teams).tolist()
(('uni_con', 'opr'), [0, 1, 2, 3], [2, 2])
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np

from rankstream.ranking.interleaving import team_draft
from rankstream.stream.settings import MULTILEAVE, Settings
from rankstream.workers.scoring import Scorer


@dataclass(frozen=True)
class InterleavedList:
    """A merged ranking: `order` indexes the request's candidates (displayed order),
    `teams` (int8) the ranker per position, `team_models` the champion first."""

    order: np.ndarray
    teams: np.ndarray
    team_models: tuple[str, ...]
    scores: np.ndarray  # what serve's answer shows (module docstring)


class Interleaver:
    """Decides which rankings are interleaved, with whom, and drafts their lists."""

    def __init__(self, settings: Settings, rng: np.random.Generator | None = None) -> None:
        self.share = settings.interleaving_share
        self.multileave = settings.interleaving_method == MULTILEAVE
        self.rng = rng if rng is not None else np.random.default_rng()
        self._turn = itertools.count()

    @property
    def enabled(self) -> bool:
        return self.share > 0

    def challengers(self, models: Iterable[str], champion: str) -> list[str]:
        """This ranking's challengers among `models`: none (not interleaved), one in
        turn, or all."""
        if self.share < 1.0 and self.rng.random() >= self.share:
            return []
        others = sorted(name for name in models if name != champion)
        if not others or self.multileave:
            return others
        return [others[next(self._turn) % len(others)]]

    def interleave(
        self,
        champion: str,
        champion_scores: np.ndarray,
        challengers: Sequence[tuple[str, Scorer]],
        phi: np.ndarray,
    ) -> InterleavedList:
        """The team draft of the champion's ranking with the challengers' (name, scorer)
        on `phi`."""
        scores = [champion_scores, *(scorer.score(phi) for _, scorer in challengers)]
        rankings = [np.argsort(-s, kind="stable") for s in scores]
        drafted = team_draft(rankings, len(champion_scores), self.rng)
        return InterleavedList(
            order=drafted.items,
            teams=drafted.teams.astype(np.int8),
            team_models=(champion, *(name for name, _ in challengers)),
            scores=np.sort(champion_scores)[::-1],
        )
