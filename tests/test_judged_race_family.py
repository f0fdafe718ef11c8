"""The judged race holds alpha for the whole family of challengers, as the click race
does: each challenger's switch is tested at alpha / k, k the challengers raced against
the incumbent (`ranking.sequential.family_test`); both races' summaries show it."""

from __future__ import annotations

import math

import numpy as np
import pytest
from prometheus_client import REGISTRY

from rankstream.ranking.sequential import PairedTest
from rankstream.selection.click_race import InterleavingRace
from rankstream.selection.judged_race import ChampionPolicy, ChampionRace

GAINS = [0.12, 0.05, -0.03, 0.09, 0.02, 0.07, -0.01, 0.11] * 40  # a clearly better model


def _first_log_wealth_at_least(level: float, differences: list[float]) -> int:
    """1-based index of the first pair after which the test's switch wealth reaches
    exp(level), by the test alone (`PairedTest.add`: alpha plays no part in it)."""
    test, state = PairedTest(), PairedTest().start()
    for i, d in enumerate(differences, start=1):
        state = test.add(state, d)
        if state.log_wealth >= level:
            return i
    raise AssertionError("the differences never reach that wealth")


def _switch_at(others: tuple[str, ...]) -> int:
    """The query at which `arow` (GAINS better than uni_con) switches in, `others` racing
    beside it, each exactly as good as uni_con."""
    race = ChampionRace(ChampionPolicy())
    for i, gain in enumerate(GAINS, start=1):
        ndcg = {"uni_con": 0.5, "arow": 0.5 + gain, **dict.fromkeys(others, 0.5)}
        if race.observe(ndcg, query=i) == "arow":
            return i
    raise AssertionError("never switched")


def test_the_judged_race_switches_when_the_wealth_reaches_k_over_alpha() -> None:
    """Alone, the winner switches once its wealth reaches 1/alpha; beside two other
    challengers only once it reaches 3/alpha: exactly there."""
    alone_at = _first_log_wealth_at_least(math.log(1 / 0.01), GAINS)
    family_at = _first_log_wealth_at_least(math.log(3 / 0.01), GAINS)
    assert alone_at < family_at  # the premise: the two thresholds differ on these pairs
    assert _switch_at(()) == alone_at
    assert _switch_at(("opr", "ogdr")) == family_at


def _judged_race() -> ChampionRace:
    race = ChampionRace(ChampionPolicy())
    race.observe({"uni_con": 0.5, "opr": 0.6, "arow": 0.4, "ogdr": 0.5})
    return race


def _click_race() -> InterleavingRace:
    race = InterleavingRace(ChampionPolicy())
    race.observe("opr", [1, 0, -1])
    race.observe("arow", [1, 1, 0])
    race.observe("ogdr", [0])
    return race


@pytest.mark.parametrize(
    ("make", "gauge"),
    [
        (_judged_race, "rankstream_champion_race_threshold"),
        (_click_race, "rankstream_interleaving_threshold"),  # the gauge Grafana draws it with
    ],
    ids=["judged", "clicks"],
)
def test_each_race_s_summary_shows_the_family_and_its_threshold(make, gauge: str) -> None:  # type: ignore[no-untyped-def]
    """Three challengers raced, alpha 0.01: both races show and export log(3 / 0.01)."""
    race = make()
    summary = race.summary()
    assert summary["alpha"] == 0.01 and summary["family"] == 3
    assert summary["challenger_alpha"] == pytest.approx(0.01 / 3)
    assert summary["threshold"] == pytest.approx(math.log(300))
    for seen in summary["challengers"].values():
        assert seen["threshold"] == pytest.approx(math.log(300))
    assert REGISTRY.get_sample_value(gauge) == pytest.approx(math.log(300))
    restored = type(race).from_state(ChampionPolicy(), race.to_state())
    assert restored.family == 3 and restored.summary() == summary


def test_only_the_switch_is_split_the_refusal_keeps_alpha() -> None:
    """A worse challenger is refused at the same pair with or without others beside it."""

    def refused_at(others: tuple[str, ...]) -> int:
        race = ChampionRace(ChampionPolicy())
        for i in range(1, 2000):
            race.observe({"uni_con": 0.5, "opr": 0.45, **dict.fromkeys(others, 0.5)})
            if race.evidence()["opr"].decision == "refuse":
                return i
        raise AssertionError("never refused")

    assert refused_at(()) == refused_at(("arow", "ogdr", "opar1"))


def test_no_better_challengers_rarely_move_the_champion_as_a_family() -> None:
    """Six challengers no better than the incumbent (differences centred on 0, each its
    own noise), alpha 0.2: testing each challenger at alpha moves the champion in more
    than alpha of these races (80 of 200), the family's test in at most alpha (none).
    Seeded: the same 200 races every run."""
    rng = np.random.default_rng(7)
    runs, queries, k = 200, 400, 6
    switched_family = switched_each = 0
    for _ in range(runs):
        d = np.clip(rng.normal(0.0, 0.15, (queries, k)), -1, 1)
        family, each = ChampionRace(ChampionPolicy(PairedTest(alpha=0.2))), PairedTest(alpha=0.2)
        states = [each.start() for _ in range(k)]
        hit_each = False
        for row in d:
            ndcg = {"uni_con": 0.5, **{f"m{j}": 0.5 + row[j] for j in range(k)}}
            if family.observe(ndcg) is not None:
                switched_family += 1
                break
        for row in d:
            states = [each.add(s, float(x)) for s, x in zip(states, row, strict=True)]
            if any(each.evidence(s).decision == "switch" for s in states):
                hit_each = True
                break
        switched_each += hit_each
    assert switched_each / runs > 0.2  # the premise: alpha per challenger is not the family's
    assert switched_family / runs <= 0.2
