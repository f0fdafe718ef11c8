"""The click demo's record: who was champion when, and on what evidence.

`rankstream demo --feedback clicks:MODEL` (`rankstream.demo_pipeline`, `DemoOptions.feedback`)
sends no judgment: the click join's interleaving race (`selection.click_race`) is the
only thing that can move the champion. `ClickHistory` follows the run one impression at
a time, after the join has joined that impression's clicks and checkpointed:

* the champion (the race's incumbent, which follows the store's champion record), and
  for each switch the impression that decided it, the record's evidence (`decided_by`,
  `previous`, the winner's wins/losses/ties, statistic and threshold) and every
  challenger's race as it stood then (the race restarts against the new champion);
* per impression: the model that served it, whether it was interleaved, its clicks, and
  the true NDCG@50 of what was shown (`StepResult.shown_ndcg`: the simulator's
  measurement from the collection's ground truth, never sent to the system);
* each challenger's log statistic after every interleaved impression (the plot).

The click demo's run and report are `rankstream.click_demo`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from rankstream.ranking.baselines import UNI_CON
from rankstream.selection.click_race import InterleavingRace
from rankstream.selection.engine_ranking import ENGINE_ARRIVED
from rankstream.selection.judged_race import CHAMPION_RECORD
from rankstream.stream.store import ModelStore
from rankstream.workers.simulator import StepResult


@dataclass
class ChampionSpell:
    """One champion's time in office: from the impression after the one that decided it."""

    champion: str
    first_impression: int  # 1-based: the first impression it served
    decided_at: int | None = None  # the impression whose clicks decided the switch
    decision: dict[str, Any] = field(default_factory=dict)  # the champion record's meta
    race: dict[str, Any] = field(default_factory=dict)  # every challenger's race then


class ClickHistory:
    """The click demo's running record (module docstring)."""

    def __init__(self, store: ModelStore) -> None:
        self.store = store
        self.spells = [ChampionSpell(UNI_CON, 1)]
        self.served_by: list[str] = []
        self.interleaved: list[bool] = []
        self.clicks: list[int] = []
        self.shown_ndcg: list[float] = []
        self.statistics: dict[str, list[tuple[int, float]]] = {}  # challenger -> (imp., log)
        self.threshold: float | None = None
        self._race: dict[str, Any] = {}  # the race's summary after the last impression

    @property
    def champion(self) -> str:
        return self.spells[-1].champion

    @property
    def impressions(self) -> int:
        return len(self.served_by)

    def step(self, result: StepResult, race: InterleavingRace) -> None:
        """Record one impression, once its clicks are joined and the join checkpointed."""
        if result.shown_ndcg is None:
            raise ValueError("the click demo's simulator measures every list it shows")
        self.served_by.append(result.served.name)
        self.interleaved.append(bool(result.team_models))
        self.clicks.append(result.clicks)
        self.shown_ndcg.append(result.shown_ndcg)
        n = self.impressions
        if race.incumbent != self.champion:
            record = self.store.load(CHAMPION_RECORD)
            decision = {} if record is None else dict(record.meta)
            if decision.get("decided_by") == ENGINE_ARRIVED:
                self._engine_arrived(race.incumbent, n, decision)
            else:
                evidence = decision.get("evidence", {})
                before = dict(self._race.get("challengers", {}))
                winner = evidence.get("challenger", race.incumbent)
                before[winner] = {k: v for k, v in evidence.items() if k != "challenger"}
                self.spells.append(ChampionSpell(race.incumbent, n + 1, n, decision, before))
                self._statistics(n, before)
        if result.team_models or race.incumbent != self._race.get("incumbent"):
            self._race = race.summary()
            self._statistics(n, self._race.get("challengers", {}))

    def _engine_arrived(self, engine: str, impression: int, decision: dict[str, Any]) -> None:
        """The engine's first query made it the champion (`selection.engine_ranking`): no
        race decided it, and it served that very impression (adopted before serving), so
        its spell begins there; a champion before it that served nothing is replaced."""
        spell = ChampionSpell(engine, impression, None, decision, {})
        if self.spells[-1].first_impression == impression:
            self.spells[-1] = spell
        else:
            self.spells.append(spell)

    def _statistics(self, impression: int, challengers: dict[str, Any]) -> None:
        for model, seen in challengers.items():
            self.statistics.setdefault(model, []).append((impression, seen["log_statistic"]))
            self.threshold = seen["threshold"]

    def race(self) -> dict[str, Any]:
        """The current race (against the champion now), as the join publishes it."""
        return self._race

    def spell_report(self) -> list[dict[str, Any]]:
        """Each champion's spell: when and why it began, and the true NDCG@50 shown in it."""
        shown = np.asarray(self.shown_ndcg)
        mixed = np.asarray(self.interleaved, dtype=bool)
        ends = [s.first_impression - 1 for s in self.spells[1:]] + [self.impressions]
        spells = []
        for spell, end in zip(self.spells, ends, strict=True):
            part = slice(spell.first_impression - 1, end)
            own = shown[part][~mixed[part]]
            entry: dict[str, Any] = {
                "champion": spell.champion,
                "first_impression": spell.first_impression,
                "last_impression": end,
                "impressions": end - spell.first_impression + 1,
                "true_ndcg_at_50_shown": rounded_mean(shown[part]),
                "true_ndcg_at_50_champion_lists": rounded_mean(own),
            }
            if spell.decided_at is not None:
                entry |= {
                    "decided_at_impression": spell.decided_at,
                    "decided_by": spell.decision.get("decided_by"),
                    "previous": spell.decision.get("previous"),
                    "evidence": spell.decision.get("evidence", {}),
                    "race": spell.race,
                }
            spells.append(entry)
        return spells


def rounded_mean(values: np.ndarray) -> float | None:
    """The mean to 4 places (None for no values), as the demos' reports give it."""
    return round(float(np.mean(values)), 4) if len(values) else None
