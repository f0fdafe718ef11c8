"""Who serves, on click traffic: interleaving races, one per (champion, challenger) pair.

Beside the judged race (`workers.champion`): where no grades arrive, each interleaved
impression of the champion with a challenger (`ranking.interleaving`), once its clicks
are joined, gives one outcome for the challenger: +1 (its team got more clicks), -1
(fewer) or 0 (as many, no clicks included). Those outcomes are the race's paired
differences, decided by the *same* test as the judged race
(`ranking.sequential.PairedTest`, the deployment's `ChampionPolicy`): the same alpha,
and delta read on the outcome's own scale, the preference margin P(win) - P(loss): a
challenger whose margin is surely below delta is refused (a margin of 0.005 is one more
win than loss per 200 impressions). The outcomes lie in [-1, 1], so the test by betting
is exact for them as for NDCG differences. A challenger switches in once its wealth
against "margin <= 0" reaches 1/alpha (its lower confidence bound >= 0); every
race starts over when the champion changes. Ties count as 0, not dropped: a challenger
that only ties is no better, and dropping them would make the test's n the clicked
impressions only.

The state is counts and the test's state of the outcomes (`to_state`), so the click join
can checkpoint it with its offsets and restore it (`from_state`); a state saved by the
mSPRT before (counts and [n, mean, m2]) restores the counts' race from zero, as
`workers.champion` does, since a wealth cannot be rebuilt from moments.

>>> race = InterleavingRace(ChampionPolicy())
>>> race.observe("opar1", [1, 0, 1, -1, 1] * 4) is None  # 20 impressions, not yet sure
True
>>> race.counts["opar1"]
{'wins': 12, 'losses': 4, 'ties': 4}
>>> race.observe("opar1", [1, 0, 1, -1, 1] * 60)
'opar1'
>>> race.incumbent, race.races
('opar1', {})
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from rankstream.ranking.interleaving import LOSS, TIE, WIN
from rankstream.ranking.sequential import SWITCH, Evidence
from rankstream.workers.champion import ChampionPolicy

OUTCOMES = {WIN: "wins", LOSS: "losses", TIE: "ties"}


class InterleavingRace:
    """The incumbent and one interleaving race per challenger (module docstring)."""

    def __init__(self, policy: ChampionPolicy, incumbent: str | None = None) -> None:
        self.policy = policy
        self.incumbent = incumbent or policy.default
        self.races: dict[str, Any] = {}  # the test's state per challenger
        self.counts: dict[str, dict[str, int]] = {}

    def observe(self, challenger: str, outcomes: Iterable[int]) -> str | None:
        """Add a challenger's outcomes against the incumbent; the new champion, or None."""
        if challenger == self.incumbent:
            raise ValueError(f"{challenger!r} is the champion, not a challenger")
        test = self.policy.test
        state = self.races.get(challenger, test.start())
        counts = self.counts.setdefault(challenger, dict.fromkeys(OUTCOMES.values(), 0))
        for value in outcomes:
            if value not in OUTCOMES:
                raise ValueError(f"an interleaving outcome is -1, 0 or +1, got {value!r}")
            counts[OUTCOMES[value]] += 1
            state = test.add(state, float(value))
        self.races[challenger] = state
        if test.decision(state) != SWITCH:
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
                m: {"counts": self.counts[m], "stats": self.policy.test.to_json(s)}
                for m, s in sorted(self.races.items())
            },
        }

    @classmethod
    def from_state(cls, policy: ChampionPolicy, state: Mapping[str, Any]) -> InterleavingRace:
        race = cls(policy, str(state.get("incumbent") or policy.default))
        for model, saved in state.get("races", {}).items():
            n = saved["stats"][0]
            counts = {key: int(saved["counts"][key]) for key in OUTCOMES.values()}
            if sum(counts.values()) != int(n):
                raise ValueError(f"race {model!r}: counts {counts} do not add up to n = {n}")
            race.races[model] = policy.test.from_json(saved["stats"])
            if race.races[model] == policy.test.start():  # an older test's race starts over
                counts = dict.fromkeys(OUTCOMES.values(), 0)
            race.counts[model] = counts
        return race
