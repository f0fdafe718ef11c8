"""Who serves, on click traffic: interleaving races, one per (champion, challenger) pair.

Beside the judged race (`workers.champion`): where no grades arrive, each interleaved
impression of the champion with a challenger (`ranking.interleaving`), once its clicks
are joined, gives one outcome for the challenger: +1 (its team got more clicks), -1
(fewer) or 0 (as many, no clicks included). Those outcomes are the race's paired
differences, decided by the *same* test as the judged race
(`ranking.sequential.PairedTest`, the deployment's `ChampionPolicy`): the same alpha,
and delta read on the outcome's own scale, the preference margin P(win) - P(loss): a
challenger whose margin is surely below delta is refused, and tau = 2 delta scales the
alternatives (a margin of 0.005 is one more win than loss per 200 impressions). A
challenger switches in once the lower confidence bound of its margin is above 0; every
race starts over when the champion changes. Ties count as 0, not dropped: a challenger
that only ties is no better, and dropping them would make the test's n the clicked
impressions only.

The state is counts and the Welford statistics of the outcomes (`to_state`), so the
click join can checkpoint it with its offsets and restore it (`from_state`).

>>> race = InterleavingRace(ChampionPolicy())
>>> race.observe("opar1", [1, 0, 1, -1, 1] * 60) is None  # 300 impressions, not yet sure
True
>>> race.counts["opar1"]
{'wins': 180, 'losses': 60, 'ties': 60}
>>> race.observe("opar1", [1, 0, 1, -1, 1] * 60)
'opar1'
>>> race.incumbent, race.races
('opar1', {})
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from rankstream.ranking.interleaving import LOSS, TIE, WIN
from rankstream.ranking.sequential import SWITCH, Evidence, RaceState
from rankstream.workers.champion import ChampionPolicy

OUTCOMES = {WIN: "wins", LOSS: "losses", TIE: "ties"}


class InterleavingRace:
    """The incumbent and one interleaving race per challenger (module docstring)."""

    def __init__(self, policy: ChampionPolicy, incumbent: str | None = None) -> None:
        self.policy = policy
        self.incumbent = incumbent or policy.default
        self.races: dict[str, RaceState] = {}
        self.counts: dict[str, dict[str, int]] = {}

    def observe(self, challenger: str, outcomes: Iterable[int]) -> str | None:
        """Add a challenger's outcomes against the incumbent; the new champion, or None."""
        if challenger == self.incumbent:
            raise ValueError(f"{challenger!r} is the champion, not a challenger")
        state = self.races.get(challenger, RaceState())
        counts = self.counts.setdefault(challenger, dict.fromkeys(OUTCOMES.values(), 0))
        for value in outcomes:
            if value not in OUTCOMES:
                raise ValueError(f"an interleaving outcome is -1, 0 or +1, got {value!r}")
            counts[OUTCOMES[value]] += 1
            state = state.add(float(value))
        self.races[challenger] = state
        if self.policy.test.decision(state) != SWITCH:
            return None
        self.incumbent = challenger
        self.races.clear()
        self.counts.clear()
        return challenger

    def evidence(self) -> dict[str, Evidence]:
        return {m: self.policy.test.evidence(s) for m, s in sorted(self.races.items())}

    def summary(self) -> dict[str, Any]:
        """Per challenger: impressions, wins/losses/ties, the statistic and the verdict."""
        return {
            "incumbent": self.incumbent,
            **self.policy.describe(),
            "challengers": {
                m: {"impressions": e.pairs, **self.counts[m], **e.as_dict()}
                for m, e in self.evidence().items()
            },
        }

    def to_state(self) -> dict[str, Any]:
        """JSON-able: the incumbent, each race's counts and sufficient statistics."""
        return {
            "incumbent": self.incumbent,
            "races": {
                m: {"counts": self.counts[m], "stats": [s.n, s.mean, s.m2]}
                for m, s in sorted(self.races.items())
            },
        }

    @classmethod
    def from_state(cls, policy: ChampionPolicy, state: Mapping[str, Any]) -> InterleavingRace:
        race = cls(policy, str(state.get("incumbent") or policy.default))
        for model, saved in state.get("races", {}).items():
            n, mean, m2 = saved["stats"]
            counts = {key: int(saved["counts"][key]) for key in OUTCOMES.values()}
            if sum(counts.values()) != int(n):
                raise ValueError(f"race {model!r}: counts {counts} do not add up to n = {n}")
            race.races[model] = RaceState(int(n), float(mean), float(m2))
            race.counts[model] = counts
        return race
