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

In the click join (`workers.click_join`), each closed session of an interleaved impression
(its `teams` and `team_models`, the champion first) gives every challenger in it one
outcome (`session_outcomes`); an impression served under a champion that is no longer the
race's incumbent is skipped (its teams were drafted against another champion). The race
state is saved in the join's checkpoint; its evidence (`summary`) is published as the
store record `interleaving` (kind "interleaving", meta {"interleaving": summary}), read by
`GET /v1/models` beside the judged race.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import numpy as np

from rankstream.ranking.interleaving import LOSS, TIE, WIN, credit, outcome
from rankstream.ranking.sequential import SWITCH, Evidence
from rankstream.workers import metrics
from rankstream.workers.champion import DECISION_VALUES, ChampionPolicy

OUTCOMES = {WIN: "wins", LOSS: "losses", TIE: "ties"}
OUTCOME_LABELS = {WIN: "win", LOSS: "loss", TIE: "tie"}
INTERLEAVING_RECORD = INTERLEAVING_KIND = "interleaving"  # the published evidence


def session_outcomes(
    team_models: tuple[str, ...], teams: np.ndarray, clicked: np.ndarray
) -> dict[str, int]:
    """Each challenger's outcome against the champion (`team_models[0]`) on one closed
    session: clicks credited to the team that placed the clicked result (team draft);
    positions of no team (-1) earn no one credit."""
    teams, clicked = np.asarray(teams), np.asarray(clicked, dtype=bool)
    shown = teams >= 0
    credits = credit(teams[shown], clicked[shown], len(team_models))
    return {m: outcome(credits, challenger=j) for j, m in enumerate(team_models) if j > 0}


class InterleavingRace:
    """The incumbent and one interleaving race per challenger (module docstring)."""

    def __init__(self, policy: ChampionPolicy, incumbent: str | None = None) -> None:
        self.policy = policy
        self.incumbent = incumbent or policy.default
        self.races: dict[str, Any] = {}  # the test's state per challenger
        self.counts: dict[str, dict[str, int]] = {}
        self.decided: dict[str, Any] = {}  # the last switch's evidence (for the record)

    def follow(self, champion: str) -> bool:
        """The champion changed (this race or the judged one switched): every race starts over."""
        if champion == self.incumbent:
            return False
        self.incumbent = champion
        self.races.clear()
        self.counts.clear()
        self.export()
        return True

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
            metrics.INTERLEAVING_IMPRESSIONS.labels(challenger=challenger).inc()
            metrics.INTERLEAVING_OUTCOMES.labels(challenger, OUTCOME_LABELS[value]).inc()
            state = test.add(state, float(value))
        self.races[challenger] = state
        if test.decision(state) != SWITCH:
            self.export()
            return None
        evidence = test.evidence(state)
        self.decided = {"challenger": challenger, "impressions": evidence.pairs, **counts,
                        **evidence.as_dict()}  # fmt: skip
        self.follow(challenger)
        return challenger

    def export(self) -> None:
        """The statistic and decision gauges, per challenger of the current races, and the
        threshold they share with the judged race (the same test: one gauge)."""
        metrics.CHAMPION_RACE_THRESHOLD.set(self.policy.test.threshold)
        for gauge in (metrics.INTERLEAVING_STATISTIC, metrics.INTERLEAVING_DECISION):
            gauge.clear()
        for model, seen in self.evidence().items():
            metrics.INTERLEAVING_STATISTIC.labels(challenger=model).set(seen.log_statistic)
            metrics.INTERLEAVING_DECISION.labels(challenger=model).set(
                DECISION_VALUES.get(seen.decision, 0.0)
            )

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
