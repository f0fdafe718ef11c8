"""The click race holds alpha for the whole family of challengers: each challenger's switch
is tested at alpha / k, k the challengers raced against the incumbent (Bonferroni), so the
champion leaves an incumbent no challenger beats in at most alpha of races."""

from __future__ import annotations

import math

import pytest

from rankstream.ranking.sequential import MixtureSPRT, PairedTest, family_test
from rankstream.selection.click_race import REFUSE_ALPHA, InterleavingRace
from rankstream.selection.judged_race import ChampionPolicy

WINS = [1, 1, 0, 1, 1, -1, 1, 1, 0, 1] * 8  # a challenger that clearly wins


def _first_log_wealth_at_least(level: float, outcomes: list[int]) -> int:
    """1-based index of the first outcome after which the test's switch wealth reaches
    exp(level), by the test alone (`PairedTest.add`, alpha plays no part in it)."""
    test = PairedTest()
    state = test.start()
    for i, d in enumerate(outcomes, start=1):
        state = test.add(state, d)
        if state.log_wealth >= level:
            return i
    raise AssertionError("the outcomes never reach that wealth")


@pytest.mark.parametrize("k", [1, 2, 3, 6, 8])
def test_each_challenger_is_tested_at_alpha_over_k(k: int) -> None:
    test = family_test(PairedTest(alpha=0.01, refuse_alpha=REFUSE_ALPHA), k)
    assert test.alpha == pytest.approx(0.01 / k)
    assert test.threshold == pytest.approx(math.log(k / 0.01))
    assert test.refuse_alpha == REFUSE_ALPHA  # only the switch is split
    assert test.refuse_threshold == pytest.approx(math.log(1 / REFUSE_ALPHA))


def test_a_test_without_its_own_refusal_rate_keeps_refusing_at_alpha() -> None:
    test = family_test(PairedTest(alpha=0.05), 5)
    assert test.alpha == pytest.approx(0.01) and test.refuse_alpha == 0.05
    assert family_test(PairedTest(alpha=0.05), 1) == PairedTest(alpha=0.05)
    sprt = family_test(MixtureSPRT(alpha=0.01), 4)  # one alpha for both verdicts
    assert isinstance(sprt, MixtureSPRT) and sprt.alpha == pytest.approx(0.0025)
    with pytest.raises(ValueError, match="at least one challenger"):
        family_test(PairedTest(), 0)


def test_the_race_switches_when_the_wealth_reaches_k_over_alpha() -> None:
    """Alone, the winner switches once its wealth reaches 1/alpha; beside two other
    challengers (one outcome each, a tie) only once it reaches 3/alpha: exactly there."""
    alone_at = _first_log_wealth_at_least(math.log(1 / 0.01), WINS)
    family_at = _first_log_wealth_at_least(math.log(3 / 0.01), WINS)
    assert alone_at < family_at  # the premise: the two thresholds differ on these outcomes

    def switch_at(others: tuple[str, ...]) -> int:
        race = InterleavingRace(ChampionPolicy())
        for name in others:
            assert race.observe(name, [0]) is None
        for i, d in enumerate(WINS, start=1):
            if race.observe("arow", [d]) == "arow":
                return i
        raise AssertionError("never switched")

    assert switch_at(()) == alone_at
    assert switch_at(("opr", "ogdr")) == family_at


def test_a_refused_challenger_stays_in_the_family_until_the_champion_changes() -> None:
    race = InterleavingRace(ChampionPolicy())
    race.observe("arow", [0])
    for _ in range(300):
        race.observe("opr", [-1])
    assert "opr" in race.refusals and race.family == 2  # its wealth was at risk
    race.follow("arow")
    assert race.family == 0 and race.test == race.policy.test
