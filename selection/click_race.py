"""Who serves, on click traffic: the interleaving race (one per champion, challenger
pair) and the serve-time drafting that makes its impressions (`Interleaver`).

The race. Beside the judged race (`selection.judged_race`): where no grades arrive, each interleaved
impression of the champion with a challenger (`ranking.interleaving`), once its clicks
are joined, gives one outcome for the challenger: +1 (its team got more clicks), -1
(fewer) or 0 (as many, no clicks included). Those outcomes are the race's paired
differences, decided by the *same* test as the judged race
(`ranking.sequential.PairedTest`, the deployment's `ChampionPolicy`): the same alpha,
held by the whole family of challengers ("The family", below), and delta read on the
outcome's own scale, the preference margin P(win) - P(loss): a
challenger whose margin is surely below delta is refused (a margin of 0.005 is one more
win than loss per 200 impressions). The outcomes lie in [-1, 1], so the test by betting
is exact for them as for NDCG differences. A challenger switches in once its wealth
against "margin <= 0" reaches k/alpha, k the challengers raced (its lower confidence
bound at level alpha/k >= 0); every
race starts over when the champion changes. Ties count as 0, not dropped: a challenger
that only ties is no better, and dropping them would make the test's n the clicked
impressions only.

The family. Several challengers race the same incumbent at once, and any one of them
switching moves the champion, so the error to bound is the family's: the champion leaves
an incumbent no challenger beats in at most alpha of races, not alpha per challenger
(with k challengers each at alpha that is up to k alpha: six challengers behind an engine
better than all of them left it in 4 of 480 simulated runs, each switch on an early
streak of wins, docs/results/adoption.md). So each challenger's switch is tested at alpha
/ k (Bonferroni: its wealth must reach k / alpha, `ranking.sequential.family_test`), k
the challengers raced against this incumbent (`family`: every one with an outcome in
this race, refused ones included, since their wealth was at risk while drafted). By the union bound
over the k wealths, each a supermartingale reaching k / alpha with probability at most
alpha / k (Ville), some no-better challenger switches with probability at most alpha,
whatever the outcomes' dependence between challengers. k is read at each outcome; with
serve's team draft every challenger gets its first outcome within the first k interleaved
impressions (in turn; multileave: all at the first), long before any wealth can reach
1/alpha (the first bet is 0 and a win multiplies the wealth by at most 1 + MAX_BET, so it
takes at least 9 outcomes at alpha 0.01), so the bound holds for the challengers present
at the race's start. A challenger first stored while a race is under way raises k for
every race from its first outcome on; a switch decided before it arrived was held to the
family raced then. Only the switch is split: a refusal only delays a challenger
(REFUSE_ALPHA below), and the refusal, the bounds' bets and the state are the same
whatever k (the bets do not read alpha), so a race's state is valid for any k. `ci_low`
is at the same level, so a switch is still exactly `ci_low >= 0`.

Refused challengers are not drafted again until they changed. A challenger whose race says
refuse (not delta better, with error `REFUSE_ALPHA` = 0.1 rather than the switch's alpha:
a refusal here stops showing the challenger until it changed, so its error costs a delay,
while every outcome spent proving it costs the users; at 0.1 a refusal needs log(10) of
evidence instead of log(100), about half the impressions) is recorded in `refusals` with
the version it was refused at (the newest version stamped on the impressions of its race: what the
click join saw served) and, once the join has read it from the store, what that version
had learned (`learned_count`: its triplets seen, a PDGD's sessions, else its version
number). Serve and the simulated engine skip every refused challenger of the current
incumbent (`refused_challengers`), so the users stop paying for it within a checkpoint
and a snapshot reload. The join re-opens the race (`reopen`) once a newer stored version
has learned at least `REOPEN_FACTOR` (2) times what the refused one had: a doubling, so a
challenger that keeps learning but stays worse is re-tested O(log(data)) times in all
(each re-test costs about what its first refusal did), while one that became better
after learning L is re-tested by 2L at the latest. A new version alone would not do: the
online workers store one every second they learn, and a version one second older has not
had a chance to differ. The re-opened race's evidence for a switch continues under the
same alpha (`ranking.sequential.PairedTest.reopen`: the switch wealth is kept, the bets'
moments, the counts and the refusal start again). Every refusal is forgotten when the
champion changes, with every race.

A collapse is a refusal far below the incumbent: refused (with error REFUSE_ALPHA, not delta
better), and its mean preference margin over the refused race at or below
-`COLLAPSE_MARGIN` (0.2: it lost at least 20 more of every 100 interleaved impressions
than it won; the issue's upside-down learners lost 319 and won 59, about -0.6). The
refusal carries the guarantee; the margin says how far below, by the race's estimate: a
confidence bound that far down would need the users to keep seeing the challenger after
its refusal, which is what refusing stops (at a refusal the upper bound has just crossed
delta). A refusal comes early only for a large margin (a challenger 0.05 below needs
hundreds of impressions, by which the estimate's sd is ~0.05). It is shown as `collapsed`
in the race's summary (and `GET /v1/models`), logged as a warning, and not drafted (it is
refused). The race is the collapse check rather than a held-out check in the join: it
compares what the users were shown, on their own clicks, and needs no labels the join
does not have.

The state is counts and the test's state of the outcomes (`to_state`), so the click join
can checkpoint it with its offsets and restore it (`from_state`); a state saved by the
mSPRT before (counts and [n, mean, m2]) restores the counts' race from zero, as
`selection.judged_race` does, since a wealth cannot be rebuilt from moments.

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

From the former module `interleaver` of `workers/`, merged here:

Interleaved serving: a share of the champion's traffic merged with challengers' rankings.

With `RANKSTREAM_INTERLEAVING_SHARE` > 0, that share of the rankings served with the
champion is one merged list (`ranking.interleaving.team_draft`), and its impression
records the teams: per displayed position the index into `team_models`, the champion
first. The click join credits each click to its team and decides the champion on clicks
(`selection.click_race`). Two servers use this one `Interleaver`: `rankstream serve`
for the `/v1/rank` requests that ask for the champion (no model or version named), and
the simulated engine (`workers.simulator`, `rankstream simulate --feedback clicks:MODEL`
and the click demo) when it serves the champion.

Each challenger's ranking is the one it would be served with
(`selection.scoring.served_order`: a PDGD challenger's is a Plackett-Luce sample of its
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
default share (0.1, `stream.settings`) such an engine sees none. Serving processes that
share a port share the news (`heard_flag`, a file in their group's directory): an engine
whose clicks reach one process and rankings another is interleaved all the same. The
simulated engine makes its own clicks and does not wait.

Refused challengers are skipped: `challengers(..., refused=...)` takes the names the click
race refused against this champion (`selection.click_race.refused_challengers`, read from
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
import contextlib
import dataclasses
import itertools
import logging
import os
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar

import numpy as np

from rankstream.ranking.interleaving import LOSS, TIE, WIN, credit, outcome, team_draft
from rankstream.ranking.sequential import (
    REFUSE,
    SWITCH,
    Evidence,
    PairedTest,
)
from rankstream.selection.judged_race import DECISION_VALUES, ChampionPolicy, FamilyOfRaces
from rankstream.selection.scoring import Scorer, served_order
from rankstream.stream.settings import MULTILEAVE, Settings
from rankstream.telemetry import prometheus_metrics as metrics
from rankstream.telemetry.structured_log import get_logger, log_event

REFUSE_ALPHA = 0.1  # the click race's refusal error rate (`ranking.sequential`: refuse_alpha)
REOPEN_FACTOR = 2.0  # a refused challenger is raced again once it learned this many times more
COLLAPSE_MARGIN = 0.2  # a refusal whose mean margin is <= -this is a collapse (docstring)
OUTCOMES = {WIN: "wins", LOSS: "losses", TIE: "ties"}
OUTCOME_LABELS = {WIN: "win", LOSS: "loss", TIE: "tie"}
INTERLEAVING_RECORD = INTERLEAVING_KIND = "interleaving"  # the published evidence

log = get_logger("rankstream.interleaving")


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


def learned_count(meta: Mapping[str, Any], version: int) -> int:
    """How much a stored model version has learned: its triplets seen (online workers), its
    sessions (a PDGD's `n_updates`), else its version number (a batch model: one a refit)."""
    for key in ("triplets_seen", "n_updates"):
        value = meta.get(key)
        if isinstance(value, int | float) and not isinstance(value, bool):
            return int(value)
    return int(version)


def refused_challengers(summary: Mapping[str, Any], champion: str) -> frozenset[str]:
    """The challengers not to draft against `champion`: those the published race
    (`InterleavingRace.summary`, the store record `interleaving`) refused while racing
    that champion (a race against another champion refuses no one here)."""
    if summary.get("incumbent") != champion:
        return frozenset()
    return frozenset(
        name for name, race in summary.get("challengers", {}).items()
        if race.get("refused") is not None
    )  # fmt: skip


class InterleavingRace(FamilyOfRaces):
    """The incumbent and one interleaving race per challenger (module docstring); each
    challenger's switch is tested at alpha / k, k the challengers raced against this
    incumbent (`family`), so that the champion leaves a better incumbent in at most alpha
    of runs, not alpha per challenger (module docstring, "The family")."""

    def __init__(self, policy: ChampionPolicy, incumbent: str | None = None) -> None:
        if isinstance(policy.test, PairedTest) and policy.test.refuse_alpha is None:
            policy = dataclasses.replace(
                policy, test=dataclasses.replace(policy.test, refuse_alpha=REFUSE_ALPHA)
            )
        self.policy = policy
        self.incumbent = incumbent or policy.default
        self.races: dict[str, Any] = {}  # the test's state per challenger
        self.counts: dict[str, dict[str, int]] = {}
        self.decided: dict[str, Any] = {}  # the last switch's evidence (for the record)
        self.refusals: dict[str, dict[str, Any]] = {}  # refused, not re-opened (docstring)
        self.reopened: dict[str, int] = {}  # times each race was re-opened
        self.versions: dict[str, int] = {}  # the newest version seen raced, per challenger

    def follow(self, champion: str) -> bool:
        """The champion changed (this race or the judged one switched): every race starts over."""
        if champion == self.incumbent:
            return False
        self.incumbent = champion
        for held in (self.races, self.counts, self.refusals, self.reopened, self.versions):
            held.clear()
        self.export()
        return True

    def observe(
        self, challenger: str, outcomes: Iterable[int], version: int | None = None
    ) -> str | None:
        """Add a challenger's outcomes against the incumbent (`version`: the challenger's
        version stamped on their impression); the new champion, or None."""
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
        self.races[challenger] = state  # a new challenger joins the family first
        if version is not None:
            self.versions[challenger] = max(int(version), self.versions.get(challenger, 0))
        evidence = self.test.evidence(state)
        if evidence.decision == REFUSE and challenger not in self.refusals:
            self._refuse(challenger, evidence)
        if evidence.decision != SWITCH:
            self.export()
            return None
        self.decided = {"challenger": challenger, "impressions": evidence.pairs, **counts,
                        **evidence.as_dict()}  # fmt: skip
        self.follow(challenger)
        return challenger

    def _refuse(self, challenger: str, evidence: Evidence) -> None:
        """Record the refusal with the version it was measured on (module docstring)."""
        collapsed = evidence.mean_difference <= -COLLAPSE_MARGIN
        self.refusals[challenger] = {
            "version": self.versions.get(challenger),
            "learned": None,  # filled in by the click join from the store (`learned_count`)
            "impressions": evidence.pairs,
            **self.counts[challenger],
            "mean_difference": evidence.mean_difference,
            "ci_high": evidence.ci_high,
            "collapsed": collapsed,
        }
        log_event(log, "interleaving challenger refused", level=logging.WARNING if collapsed
                  else logging.INFO, incumbent=self.incumbent, challenger=challenger,
                  **self.refusals[challenger])  # fmt: skip

    def reopen(self, challenger: str, version: int, learned: int) -> None:
        """Race a refused challenger again: its stored `version` learned `learned`, at
        least `REOPEN_FACTOR` times its refused version's (the click join decides). The
        switch evidence continues (`PairedTest.reopen`), the counts start again."""
        refusal = self.refusals.pop(challenger)
        self.races[challenger] = self.policy.test.reopen(self.races[challenger])
        self.counts[challenger] = dict.fromkeys(OUTCOMES.values(), 0)
        self.reopened[challenger] = self.reopened.get(challenger, 0) + 1
        log_event(log, "interleaving challenger re-opened", incumbent=self.incumbent,
                  challenger=challenger, version=version, learned=learned,
                  refused_version=refusal["version"],
                  refused_learned=refusal["learned"])  # fmt: skip
        self.export()

    def collapsed(self, challenger: str) -> bool:
        """Far below the incumbent: refused, its margin <= -COLLAPSE_MARGIN at the refusal
        or now (the impressions drafted before serve heard of the refusal count too)."""
        refusal = self.refusals.get(challenger)
        if refusal is None:
            return False
        margin = self.test.evidence(self.races[challenger]).mean_difference
        return bool(refusal["collapsed"]) or margin <= -COLLAPSE_MARGIN

    def export(self) -> None:
        """The statistic and decision gauges, per challenger of the current races, the
        threshold they need here, log(k/alpha), and the test's log(1/alpha), the gauge
        shared with the judged race."""
        metrics.CHAMPION_RACE_THRESHOLD.set(self.policy.test.threshold)
        metrics.INTERLEAVING_THRESHOLD.set(self.test.threshold)
        for gauge in (metrics.INTERLEAVING_STATISTIC, metrics.INTERLEAVING_DECISION):
            gauge.clear()
        for model, seen in self.evidence().items():
            metrics.INTERLEAVING_STATISTIC.labels(challenger=model).set(seen.log_statistic)
            metrics.INTERLEAVING_DECISION.labels(challenger=model).set(
                DECISION_VALUES.get(seen.decision, 0.0)
            )

    def evidence(self) -> dict[str, Evidence]:
        test = self.test
        return {m: test.evidence(s) for m, s in sorted(self.races.items())}

    def summary(self) -> dict[str, Any]:
        """Per challenger: impressions, wins/losses/ties, the statistic, the threshold it
        needs (log(k / alpha)) and the verdict, its refusal (None while drafted),
        re-openings and whether it collapsed; the family's size and each challenger's alpha."""
        return {
            "incumbent": self.incumbent,
            **self.policy.describe(),
            "family": self.family,
            "challenger_alpha": self.test.alpha,
            "threshold": self.test.threshold,  # log(k / alpha): what a switch needs here
            "reopen_factor": REOPEN_FACTOR,
            "collapse_margin": COLLAPSE_MARGIN,
            "challengers": {
                m: {
                    "impressions": e.pairs,
                    **self.counts[m],
                    **e.as_dict(),
                    "refused": self.refusals.get(m),
                    "reopened": self.reopened.get(m, 0),
                    "collapsed": self.collapsed(m),
                }
                for m, e in self.evidence().items()
            },
        }

    def to_state(self) -> dict[str, Any]:
        """JSON-able: the incumbent, each race's counts and sufficient statistics, the
        refusals, re-openings and versions seen."""
        return {
            "incumbent": self.incumbent,
            "races": {
                m: {"counts": self.counts[m], "stats": self.policy.test.to_json(s)}
                for m, s in sorted(self.races.items())
            },
            "refusals": dict(sorted(self.refusals.items())),
            "reopened": dict(sorted(self.reopened.items())),
            "versions": dict(sorted(self.versions.items())),
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
        # a state saved before refusals were kept has none: a refused race refuses again
        # at its next outcome (`observe`), against the version it is then stamped with
        race.refusals = {m: dict(r) for m, r in state.get("refusals", {}).items()
                         if m in race.races}  # fmt: skip
        race.reopened = {m: int(k) for m, k in state.get("reopened", {}).items()}
        race.versions = {m: int(v) for m, v in state.get("versions", {}).items()}
        return race


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
        heard_flag: str | None = None,
    ) -> None:
        self.share = settings.interleaving_share
        self.multileave = settings.interleaving_method == MULTILEAVE
        self.rng = rng if rng is not None else np.random.default_rng()
        self._turn = itertools.count()
        self.shares = ChallengerShare()
        self.clicks_heard = not wait_for_clicks
        self.heard_flag = heard_flag  # a file shared by the serving processes of one port

    def heard_clicks(self) -> None:
        """Clicks arrived (serve: a POST /v1/clicks accepted): interleaving may begin, in
        every serving process of the port: the first to hear them creates `heard_flag`."""
        if not self.clicks_heard and self.heard_flag is not None:
            with contextlib.suppress(OSError):  # the group's directory is gone: stopping
                open(self.heard_flag, "a").close()
        self.clicks_heard = True

    @property
    def enabled(self) -> bool:
        """The share is > 0 and, where the server waits for them, clicks were posted (to
        this process, or to another serving the same port: `heard_flag` exists): an
        engine that sends only judged feedback gives interleaved lists no outcome, so it
        is never shown one (module docstring)."""
        if not self.clicks_heard and self.heard_flag is not None and self.share > 0:
            self.clicks_heard = os.path.exists(self.heard_flag)  # one stat until then
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
        team_models = (champion.name, *(c.name for c in challengers))
        return self.draft(team_models, rankings, len(champion_order), champion_ranked)

    def draft(
        self,
        team_models: tuple[str, ...],
        rankings: list[np.ndarray],
        length: int,
        scores: np.ndarray | None = None,
        rng: np.random.Generator | None = None,
    ) -> InterleavedList:
        """The team draft of rankings already made (the champion's first), `length` long;
        `rng` the draw's generator (this interleaver's by default)."""
        drafted = team_draft(rankings, length, self.rng if rng is None else rng)
        return InterleavedList(
            order=drafted.items,
            teams=drafted.teams.astype(np.int8),
            team_models=team_models,
            scores=np.empty(0) if scores is None else scores,
        )
