"""Who serves: the champion race, a paired sequential test per challenger.

Uni-Con is the first incumbent. On every judged query the evaluator scored, each other
model scored on the same query (each at the version it was stamped with) adds one
paired difference d = NDCG@50(challenger) - NDCG@50(incumbent) to its race; a query the
incumbent was not scored on adds nothing. Each race is the always-valid one-sided test
of `ranking.sequential.PairedTest` (a test by betting, exactly valid for differences in
[-1, 1]; error rate `alpha`, refusal bar `delta`): a challenger replaces the
incumbent only once its test says "switch" (with several at once, the one with the
highest lower confidence bound). Every race starts
over when the champion changes, since its pairs were against the old incumbent. A
switch, and each race's first refusal, is logged with the statistics that decided it.

Alpha is the family's, as in the click race: every challenger races the same incumbent
and any one switching moves it, so each switch is tested at alpha / k
(`ranking.sequential.family_test`), k the challengers raced against this incumbent (every
model with a pair in this race). The champion then leaves an incumbent no challenger beats
in at most alpha of races, not up to k alpha. Every scored model adds its pair on every
query, so k is known from the first query on; a model first scored later raises k from
then on. Only the switch is split: the refusal keeps the undivided alpha.

An incumbent that leaves the store (deleted, or its kind no longer scorable) is served
by no one: serving falls back to Uni-Con (`selection.what_serves.ServingModel`), so the race
falls back too (`fall_back`, called by the evaluator when the incumbent was not scored
on a query and is no longer in the store): Uni-Con becomes the incumbent, every race
starts over against it, and the fall-back is logged and counted as a switch. Without
it the races would wait forever for pairs against a model no query is scored with.

A race needs only a few running numbers (`ranking.sequential.BettingState`: count, mean,
sum of squared deviations, its two log-wealths and their bets' sums), so its memory is
bounded whatever its length; the state travels in the evaluator's scores record and is
restored on restart. A record of the mSPRT before it ([n, mean, m2] per race) restores
the incumbent and the refusals, and each race starts over at wealth 1: a wealth is the
product of bets placed pair by pair and cannot be rebuilt from the three moments, and a
race started afresh at a time that does not depend on its data is as valid as any.

The rolling means (`workers.evaluator.RollingScores`) no longer decide anything: they
were means over different queries (Uni-Con's from the stream's start, a learned model's
only from its first checkpoint), which is not evidence that one ranker beats another.

Two races, one champion. The judged race (the evaluator) and the interleaving race (the
click join, `selection.click_race`) each decide on their own evidence; the champion is
the store record `champion` (kind "champion", meta {"champion", "previous",
"decided_by": "judged" | "clicks" | "fallback", "evidence", "time"}), written only by
`publish_champion`, a compare-and-set on the champion it replaces. The rule: whichever
race decides first switches; the other race sees the record change (`stored_champion`)
and starts over against the new champion (`ChampionRace.follow`). A race that decides
against a champion already replaced loses the compare-and-set and follows the stored one.
Without the record (a store from before it) the evaluator record's `champion` is read.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from rankstream.ranking.baselines import UNI_CON
from rankstream.ranking.sequential import (
    REFUSE,
    SWITCH,
    ChampionTest,
    Evidence,
    PairedTest,
    family_test,
)
from rankstream.selection.scoring import EVALUATOR_RECORD
from rankstream.stream.settings import Settings
from rankstream.stream.store import FencingError, ModelStore
from rankstream.telemetry import prometheus_metrics as metrics
from rankstream.telemetry.structured_log import get_logger, log_event

DECISION_VALUES = {SWITCH: 1.0, REFUSE: -1.0}  # the decision gauge; undecided is 0
CHAMPION_RECORD = CHAMPION_KIND = "champion"  # the store record naming who serves
JUDGED, CLICKS, FALLBACK = "judged", "clicks", "fallback"  # what decided a switch

log = get_logger("rankstream.champion")


@dataclass(frozen=True)
class ChampionPolicy:
    """The first incumbent and the test every challenger must pass."""

    default: str = UNI_CON
    test: ChampionTest = field(default_factory=PairedTest)

    @classmethod
    def from_settings(cls, settings: Settings) -> ChampionPolicy:
        """The deployment's alpha and delta (`RANKSTREAM_CHAMPION_ALPHA`, `..._DELTA`)."""
        return cls(test=PairedTest(alpha=settings.champion_alpha, delta=settings.champion_delta))

    def describe(self) -> dict[str, Any]:
        """The test and its settings, as every race's summary shows them."""
        return self.test.describe()


class FamilyOfRaces:
    """One incumbent's races, a challenger each (`races`), every switch tested at alpha / k
    (`ranking.sequential.family_test`): what both races share."""

    policy: ChampionPolicy
    races: dict[str, Any]

    @property
    def family(self) -> int:
        """k: the challengers raced against this incumbent (each with a race under way)."""
        return len(self.races)

    @property
    def test(self) -> ChampionTest:
        """The policy's test at this family's alpha / k (`family_test`): what decides."""
        return family_test(self.policy.test, max(1, self.family))


class ChampionRace(FamilyOfRaces):
    """The incumbent and one paired test per challenger (module docstring)."""

    def __init__(self, policy: ChampionPolicy, incumbent: str | None = None) -> None:
        self.policy = policy
        self.incumbent = incumbent or policy.default
        self.races: dict[str, Any] = {}  # the test's state per challenger
        self.refused: set[str] = set()  # races whose refusal was logged
        self.decided: dict[str, Any] = {}  # the last switch's evidence (for the record)

    def observe(self, ndcg: Mapping[str, float], query: int = 0) -> str | None:
        """Add one query's paired differences; the new champion if one won, else None."""
        if self.incumbent not in ndcg:
            return None
        base, test = ndcg[self.incumbent], self.policy.test  # the state does not read alpha
        for model, value in sorted(ndcg.items()):
            if model != self.incumbent:
                self.races[model] = test.add(self.races.get(model, test.start()), value - base)
        evidence = self.evidence()
        self._export(evidence)
        for model, seen in evidence.items():
            if seen.decision == REFUSE and model not in self.refused:
                self.refused.add(model)
                self._log("champion challenge refused", model, seen, query)
        winners = [m for m in sorted(evidence) if evidence[m].decision == SWITCH]
        if not winners:
            return None
        winner = max(winners, key=lambda m: evidence[m].ci_low)
        self._log("champion switched", winner, evidence[winner], query)
        self.decided = {"challenger": winner, **evidence[winner].as_dict()}
        metrics.CHAMPION_SWITCHES.inc()
        self.incumbent = winner
        self.races.clear()
        self.refused.clear()
        self._export({})
        return winner

    def fall_back(self, query: int = 0, reason: str = "not in the store") -> str | None:
        """The incumbent is gone: the default serves and every race starts over.

        The default itself has nothing to fall back to (None); else it is returned as the
        new champion, as `observe` returns a winner.
        """
        if self.incumbent == self.policy.default:
            return None
        log_event(
            log,
            "champion fell back",
            level=logging.WARNING,
            incumbent=self.incumbent,
            champion=self.policy.default,
            reason=reason,
            queries_evaluated=query,
        )
        metrics.CHAMPION_SWITCHES.inc()
        self.incumbent = self.policy.default
        self.races.clear()
        self.refused.clear()
        self._export({})
        return self.incumbent

    def follow(self, champion: str) -> bool:
        """Another race switched the champion: every race starts over against it."""
        if champion == self.incumbent:
            return False
        log_event(log, "champion races restarted", incumbent=self.incumbent,
                  champion=champion, reason="the champion changed")  # fmt: skip
        self.incumbent = champion
        self.races.clear()
        self.refused.clear()
        self._export({})
        return True

    def evidence(self) -> dict[str, Evidence]:
        test = self.test
        return {m: test.evidence(s) for m, s in sorted(self.races.items())}

    def summary(self) -> dict[str, Any]:
        """The race for reports, the scores record and GET /v1/models: the deployment's
        test, the family's size, each challenger's alpha and the threshold it needs."""
        return {
            "incumbent": self.incumbent,
            **self.policy.describe(),
            "family": self.family,
            "challenger_alpha": self.test.alpha,
            "threshold": self.test.threshold,  # log(k / alpha): what a switch needs here
            "challengers": {m: e.as_dict() for m, e in self.evidence().items()},
        }

    def to_state(self) -> dict[str, Any]:
        """JSON-able: the incumbent and each race's state (`test.to_json`)."""
        return {
            "incumbent": self.incumbent,
            "races": {m: self.policy.test.to_json(s) for m, s in sorted(self.races.items())},
            "refused": sorted(self.refused),
        }

    @classmethod
    def from_state(cls, policy: ChampionPolicy, state: Mapping[str, Any]) -> ChampionRace:
        """The race saved by `to_state`; an older test's races start over (module docstring)."""
        race = cls(policy, str(state.get("incumbent") or policy.default))
        race.refused = set(state.get("refused", []))
        restarted = []
        for model, saved in state.get("races", {}).items():
            race.races[model] = policy.test.from_json(saved)
            if saved and saved[0] > 0 and race.races[model] == policy.test.start():
                restarted.append(model)  # an older test's race: it starts over
                race.refused.discard(model)
        if restarted:
            log_event(
                log,
                "champion races restarted",
                level=logging.WARNING,
                reason=f"saved by an older test than {policy.test.name}",
                challengers=sorted(restarted),
            )
        race._export(race.evidence())
        return race

    def _export(self, evidence: Mapping[str, Evidence]) -> None:
        for gauge in metrics.CHAMPION_RACE_GAUGES:
            gauge.clear()
        metrics.CHAMPION_RACE_THRESHOLD.set(self.test.threshold)
        for model, seen in evidence.items():
            metrics.CHAMPION_RACE_PAIRS.labels(model=model).set(seen.pairs)
            metrics.CHAMPION_RACE_MEAN.labels(model=model).set(seen.mean_difference)
            metrics.CHAMPION_RACE_CI.labels(model=model, bound="low").set(seen.ci_low)
            metrics.CHAMPION_RACE_CI.labels(model=model, bound="high").set(seen.ci_high)
            metrics.CHAMPION_RACE_STATISTIC.labels(model=model).set(seen.log_statistic)
            metrics.CHAMPION_RACE_DECISION.labels(model=model).set(
                DECISION_VALUES.get(seen.decision, 0.0)
            )

    def _log(self, message: str, model: str, seen: Evidence, query: int) -> None:
        log_event(
            log,
            message,
            level=logging.INFO,
            incumbent=self.incumbent,
            challenger=model,
            queries_evaluated=query,
            alpha=self.policy.test.alpha,
            challenger_alpha=self.test.alpha,
            family=self.family,
            delta=self.policy.test.delta,
            **seen.as_dict(),
        )


def stored_champion(store: ModelStore, latest: Mapping[str, int] | None = None) -> str | None:
    """The champion in the store: the `champion` record's, else the evaluator record's
    (a store from before the record); None when neither names one."""
    latest = store.latest_versions() if latest is None else latest
    for name in (CHAMPION_RECORD, EVALUATOR_RECORD):
        if name in latest:
            record = store.load(name)
            champion = None if record is None else record.meta.get("champion")
            if isinstance(champion, str) and champion:
                return champion
    return None


def publish_champion(
    store: ModelStore,
    champion: str,
    *,
    previous: str,
    decided_by: str,
    evidence: Mapping[str, Any],
) -> tuple[str, bool]:
    """Make `champion` the stored champion if `previous` still is (compare-and-set).

    Returns the champion now in the store and whether this call put it there (the
    other race's, or this one already written by an earlier attempt, is not)."""
    for _ in range(5):
        record = store.load(CHAMPION_RECORD)
        current = record.meta.get("champion") if record is not None else None
        if current is None:
            current = stored_champion(store) or previous
        if current != previous:
            return str(current), False
        meta = {"champion": champion, "previous": previous, "decided_by": decided_by,
                "evidence": dict(evidence), "time": time.time()}  # fmt: skip
        try:
            store.save(
                CHAMPION_RECORD, kind=CHAMPION_KIND, meta=meta, arrays={}, offsets={},
                expected_version=0 if record is None else record.version,
                expected_write_id=None if record is None else (record.write_id or None),
            )  # fmt: skip
        except FencingError:
            continue  # a concurrent write: read again
        log_event(log, "champion published", champion=champion, previous=previous,
                  decided_by=decided_by)  # fmt: skip
        return champion, True
    raise FencingError(CHAMPION_RECORD, 0, 0)
