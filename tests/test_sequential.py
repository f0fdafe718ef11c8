"""The champion test (`ranking.sequential`): its error rate and power by simulation, its
vectorized and incremental forms agreeing, and the race around it (`workers.champion`)."""

from __future__ import annotations

import numpy as np
import pytest

from rankstream.ranking.sequential import (
    REFUSE,
    SWITCH,
    UNDECIDED,
    PairedTest,
    RaceState,
    first_switch,
)
from rankstream.stream.settings import Settings, SettingsError
from rankstream.workers.champion import ChampionPolicy, ChampionRace
from rankstream.workers.metrics import sample_value

RUNS, HORIZON = 400, 2000


def _incremental_first_switch(test: PairedTest, d: np.ndarray) -> int | None:
    state = RaceState()
    for i, value in enumerate(d, start=1):
        state = state.add(float(value))
        if test.decision(state) == SWITCH:
            return i
    return None


def test_the_vectorized_test_says_what_the_incremental_one_says() -> None:
    rng = np.random.default_rng(0)
    test = PairedTest()
    for mean in (0.0, 0.01, 0.03, -0.02):
        for _ in range(10):
            d = np.clip(rng.normal(mean, 0.05, 600), -1, 1)
            assert first_switch(test, d) == _incremental_first_switch(test, d)


@pytest.mark.parametrize("spread", [0.02, 0.05, 0.13])
def test_aa_false_switches_stay_below_alpha(spread: float) -> None:
    """Identical rankers (mean difference 0), watched after every query for 2,000 queries:
    at most alpha = 1% of 400 runs switch (Gaussian differences, and the demo's skewed
    kind: most queries tie, a few differ a lot)."""
    rng = np.random.default_rng(1)
    test = PairedTest(alpha=0.01)
    gaussian = sum(
        first_switch(test, np.clip(rng.normal(0, spread, HORIZON), -1, 1)) is not None
        for _ in range(RUNS)
    )
    sparse = 0
    for _ in range(RUNS):  # 80% ties, the rest +-3 spread: same variance, heavy tails
        d = np.where(rng.random(HORIZON) < 0.8, 0.0, rng.normal(0, spread * 5**0.5, HORIZON))
        sparse += first_switch(test, np.clip(d, -1, 1)) is not None
    assert gaussian <= 0.01 * RUNS and sparse <= 0.01 * RUNS


def test_a_challenger_better_by_twice_delta_switches_within_500_pairs() -> None:
    """The issue's power target, a +0.01 challenger switching within 500 pairs in >= 80%
    of runs, holds at per-query spread 0.04 (90% of 200 runs). At 0.05 it held with the
    plain plug-in variance (84%) and no longer does (70%): the variance prior's price for
    the 1% on the real streams (`ranking.sequential`); both asserted, so a change of
    either shows. (The demo's streams spread wider, README "Choosing the champion".)"""
    rng = np.random.default_rng(2)
    test = PairedTest()

    def within_500(spread: float) -> float:
        queries = [
            first_switch(test, np.clip(rng.normal(0.01, spread, HORIZON), -1, 1))
            for _ in range(200)
        ]
        return float(np.mean([q is not None and q <= 500 for q in queries]))

    assert within_500(0.04) >= 0.8
    assert within_500(0.05) >= 0.6


def test_the_variance_prior_keeps_alpha_on_skewed_differences() -> None:
    """Identical rankers whose differences have the real streams' shape (module docstring):
    mostly a small gain, now and then a large loss (skew -2, spread 0.1). The plain
    plug-in variance switches falsely in more than alpha of 2,000 runs (29); with the
    prior, in at most alpha (13)."""
    rng = np.random.default_rng(3)
    loss, p, gain = 0.238, 0.15, 0.042  # p * loss = (1 - p) * gain: mean 0
    streams = [
        np.where(rng.random(HORIZON) < p, -loss, gain) + rng.normal(0.0, 0.02, HORIZON)
        for _ in range(2000)
    ]
    plain = sum(first_switch(PairedTest(variance_prior=0.0), d) is not None for d in streams)
    guarded = sum(first_switch(PairedTest(), d) is not None for d in streams)
    assert guarded <= 0.01 * len(streams) < plain


def test_verdicts_and_interval() -> None:
    test = PairedTest(alpha=0.01, delta=0.005, min_pairs=20)
    assert test.decision(test.update(RaceState(), [0.1] * 19)) == UNDECIDED  # burn-in
    evidence = test.evidence(test.update(RaceState(), [0.1, 0.3] * 20))
    assert evidence.decision == SWITCH and 0 < evidence.ci_low < 0.2 < evidence.ci_high
    assert evidence.log_statistic >= evidence.threshold == pytest.approx(np.log(100))
    assert test.decision(test.update(RaceState(), [0.0] * 600)) == REFUSE
    # the variance prior: identical rankers are not refused on 50 pairs, a tie is no proof
    assert test.decision(test.update(RaceState(), [0.0] * 50)) == UNDECIDED
    plain = PairedTest(alpha=0.01, delta=0.005, min_pairs=20, variance_prior=0.0)
    assert plain.decision(plain.update(RaceState(), [0.0] * 50)) == REFUSE
    with pytest.raises(ValueError, match=r"\[-1, 1\]"):
        RaceState().add(float("nan"))
    for bad in ({"alpha": 1.0}, {"variance_prior": -0.1}, {"variance_prior": float("nan")}):
        with pytest.raises(ValueError):
            PairedTest(**bad)


def test_the_race_switches_logs_restarts_and_restores() -> None:
    policy = ChampionPolicy(test=PairedTest(min_pairs=5, variance_prior=0.0))  # short races
    race = ChampionRace(policy)
    switches = sample_value("rankstream_champion_switches_total")
    assert race.observe({"opr": 0.9}) is None  # the incumbent was not scored: no pair
    assert race.races == {}
    winner = None
    for q in range(40):
        winner = race.observe({"uni_con": 0.5, "opr": 0.5 + 0.05 * (q % 3), "ogdr": 0.5}, q)
        if winner:
            break
    assert winner == "opr" and race.incumbent == "opr" and race.races == {}
    assert sample_value("rankstream_champion_switches_total") == switches + 1
    for _ in range(7):
        race.observe({"uni_con": 0.4, "opr": 0.6, "ogdr": 0.6})  # a tie: refused
    restored = ChampionRace.from_state(policy, race.to_state())
    assert restored.summary() == race.summary()
    assert restored.summary()["challengers"]["uni_con"]["paired_queries"] == 7
    assert sample_value("rankstream_champion_race_paired_queries", {"model": "ogdr"}) == 7
    assert sample_value("rankstream_champion_race_decision", {"model": "ogdr"}) == -1


def test_settings_name_alpha_and_delta(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RANKSTREAM_CHAMPION_ALPHA", "0.05")
    monkeypatch.setenv("RANKSTREAM_CHAMPION_DELTA", "0.01")
    policy = ChampionPolicy.from_settings(Settings.from_env())
    assert (policy.test.alpha, policy.test.delta) == (0.05, 0.01)
    for value in ("0", "1", "nan", "x"):
        monkeypatch.setenv("RANKSTREAM_CHAMPION_ALPHA", value)
        with pytest.raises(SettingsError, match="RANKSTREAM_CHAMPION_ALPHA"):
            Settings.from_env()


def test_eval_champion_reports_both_policies_on_the_same_streams(tmp_path) -> None:
    """The command's JSON (simulated streams only, few runs): both policies per case, the
    new test's A/A far below the old rule's, and the plot written."""
    import json
    import subprocess
    import sys

    done = subprocess.run(
        [sys.executable, "-m", "rankstream", "eval", "champion", "--json", "--no-real",
         "--runs", "40", "--horizon", "600", "--spreads", "0.05", "--out", str(tmp_path)],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    report = json.loads(done.stdout)
    result = report["simulated"]["spread=0.05"]
    assert set(result) == {"aa", "0.005", "0.01", "0.02"}
    aa = result["aa"]
    assert aa["new"]["false_switch_rate"] <= 0.05 < 0.5 <= aa["old"]["false_switch_rate"]
    assert result["0.02"]["new"]["median_queries_to_switch"] >= 100  # no verdict before
    assert (tmp_path / "champion.png").stat().st_size > 0
