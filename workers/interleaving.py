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
`workers.champion` does, since a wealth cannot be rebuilt from moments. `summary`
is what `GET /v1/models` and `model list --json` show per challenger (docs/CONTRACTS.md
"Champion"), and the `rankstream_interleaving_*` gauges say the same to Prometheus.

Where judgments arrive too, `workers.champion.deciding_evidence` says which race may
switch a challenger: `observe` takes the challenger's judged pairs against the same
incumbent (`ChampionRace.judged_pairs`); with any, its interleaving race goes on and is
shown but does not switch. A switch made by the other race is followed with `restart`.

>>> race = InterleavingRace(ChampionPolicy())
>>> race.observe("opar1", [1, 0, 1, -1, 1] * 4) is None  # 20 impressions, not yet sure
True
>>> race.counts["opar1"]
{'wins': 12, 'losses': 4, 'ties': 4}
>>> race.observe("opar1", [1, 0, 1, -1, 1] * 60)
'opar1'
>>> race.incumbent, race.races
('opar1', {})
>>> race.observe("ogdr", [1, 1, 0] * 200, judged_pairs=3) is None  # judgments decide it
True
>>> race.summary()["challengers"]["ogdr"]["decision"], race.decided_by["ogdr"]
('switch', 'judgments')
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from typing import Any

from rankstream.ranking.interleaving import LOSS, TIE, WIN
from rankstream.ranking.sequential import SWITCH, Evidence
from rankstream.workers import metrics
from rankstream.workers.champion import (
    CLICKS,
    DECISION_VALUES,
    JUDGMENTS,
    ChampionPolicy,
    deciding_evidence,
)
from rankstream.workers.structured_log import get_logger, log_event

OUTCOMES = {WIN: "wins", LOSS: "losses", TIE: "ties"}
GAUGE_OUTCOMES = {"wins": "win", "losses": "loss", "ties": "tie"}  # the outcome label

log = get_logger("rankstream.interleaving")


class InterleavingRace:
    """The incumbent and one interleaving race per challenger (module docstring)."""

    def __init__(self, policy: ChampionPolicy, incumbent: str | None = None) -> None:
        self.policy = policy
        self.incumbent = incumbent or policy.default
        self.races: dict[str, Any] = {}  # the test's state per challenger
        self.counts: dict[str, dict[str, int]] = {}
        self.decided_by: dict[str, str] = {}  # per challenger: CLICKS or JUDGMENTS

    def observe(
        self, challenger: str, outcomes: Iterable[int], judged_pairs: int = 0
    ) -> str | None:
        """Add a challenger's outcomes against the incumbent; the new champion, or None.

        `judged_pairs`: the challenger's judged queries paired with the same incumbent
        (`ChampionRace.judged_pairs`); with any, judgments decide it, not these clicks.
        """
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
        self.decided_by[challenger] = deciding_evidence(judged_pairs)
        seen = test.evidence(state)
        if seen.decision != SWITCH or self.decided_by[challenger] != CLICKS:
            self._export()
            return None
        log_event(
            log,
            "champion switched on clicks",
            level=logging.INFO,
            incumbent=self.incumbent,
            challenger=challenger,
            alpha=test.alpha,
            delta=test.delta,
            **counts,
            **seen.as_dict(),
        )
        metrics.CHAMPION_SWITCHES.inc()
        self.restart(challenger)
        return challenger

    def restart(self, incumbent: str) -> None:
        """`incumbent` is the champion now (this race's winner or the judged race's):
        every race starts over against it."""
        self.incumbent = incumbent
        self.races.clear()
        self.counts.clear()
        self.decided_by.clear()
        self._export()

    def evidence(self) -> dict[str, Evidence]:
        return {m: self.policy.test.evidence(s) for m, s in sorted(self.races.items())}

    def summary(self) -> dict[str, Any]:
        """Per challenger: impressions, wins/losses/ties, the statistic, the verdict and
        which evidence decides it (docs/CONTRACTS.md "Champion")."""
        return {
            "incumbent": self.incumbent,
            **self.policy.describe(),
            "challengers": {
                m: {
                    "impressions": e.pairs,
                    **self.counts[m],
                    **e.as_dict(),
                    "decided_by": self.decided_by.get(m, CLICKS),
                }
                for m, e in self.evidence().items()
            },
        }

    def to_state(self) -> dict[str, Any]:
        """JSON-able: the incumbent, each race's counts and sufficient statistics."""
        return {
            "incumbent": self.incumbent,
            "races": {
                m: {
                    "counts": self.counts[m],
                    "stats": self.policy.test.to_json(s),
                    "decided_by": self.decided_by.get(m, CLICKS),
                }
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
            decided_by = saved.get("decided_by", CLICKS)
            if decided_by not in (CLICKS, JUDGMENTS):
                raise ValueError(f"race {model!r}: decided_by {decided_by!r} is not evidence")
            race.decided_by[model] = decided_by
        race._export()
        return race

    def _export(self) -> None:
        """The races as `rankstream_interleaving_*` gauges (the Prometheus view of
        `summary`): only this race's challengers have series."""
        for gauge in metrics.INTERLEAVING_GAUGES:
            gauge.clear()
        metrics.INTERLEAVING_THRESHOLD.set(self.policy.test.threshold)
        for model, seen in self.evidence().items():
            metrics.INTERLEAVING_IMPRESSIONS.labels(model=model).set(seen.pairs)
            for key, label in GAUGE_OUTCOMES.items():
                metrics.INTERLEAVING_OUTCOMES.labels(model=model, outcome=label).set(
                    self.counts[model][key]
                )
            metrics.INTERLEAVING_STATISTIC.labels(model=model).set(seen.log_statistic)
            metrics.INTERLEAVING_DECISION.labels(model=model).set(
                DECISION_VALUES.get(seen.decision, 0.0)
            )
