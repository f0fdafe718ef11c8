"""The champion test (`ranking.sequential`): its error rate and power by simulation, its
vectorized and incremental forms agreeing, and the race around it (`selection.judged_race`)."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from rankstream.ranking.sequential import (
    REFUSE,
    SWITCH,
    UNDECIDED,
    MixtureSPRT,
    PairedTest,
    first_refusal,
    first_switch,
    switch_times,
)
from rankstream.selection.judged_race import ChampionPolicy, ChampionRace
from rankstream.stream.settings import Settings, SettingsError
from rankstream.telemetry.prometheus_metrics import sample_value

ALPHA, RUNS, HORIZON = 0.01, 2000, 2000
# The most false switches of RUNS a test at level ALPHA may show: ALPHA plus three binomial
# standard errors (a correct test exceeds it with probability ~0.1%; the seeds are fixed).
MOST_FALSE = ALPHA * RUNS + 3 * (ALPHA * (1 - ALPHA) * RUNS) ** 0.5  # 33.4


def _incremental(test, d: np.ndarray) -> tuple[int | None, int | None]:
    state, switch, refusal = test.start(), None, None
    for i, value in enumerate(d, start=1):
        state = test.add(state, float(value))
        verdict = test.decision(state)
        if verdict == SWITCH and switch is None:
            switch = i
        if verdict == REFUSE and refusal is None:
            refusal = i
    return switch, refusal


@pytest.mark.parametrize("test", [PairedTest(), MixtureSPRT()], ids=["betting", "msprt"])
def test_the_vectorized_test_says_what_the_incremental_one_says(test) -> None:
    rng = np.random.default_rng(0)
    for mean in (0.0, 0.01, 0.03, -0.02):
        for _ in range(6):
            d = np.clip(rng.normal(mean, 0.05, 1500), -1, 1)
            assert (first_switch(test, d), first_refusal(test, d)) == _incremental(test, d)


def _null_streams(kind: str, rng: np.random.Generator) -> np.ndarray:
    """RUNS streams of HORIZON differences of mean exactly 0, of the given shape."""
    shape = (RUNS, HORIZON)
    if kind.startswith("gaussian"):
        return np.clip(rng.normal(0.0, float(kind.split()[1]), shape), -1, 1)
    if kind == "skewed":  # the demo's shape: mostly a small gain, now and then a large loss
        loss, p, gain = 0.238, 0.15, 0.042  # p * loss = (1 - p) * gain
        return np.where(rng.random(shape) < p, -loss, gain) + rng.normal(0.0, 0.02, shape)
    if kind == "interleaving":  # +1 / 0 / -1: navigational users' A/A outcomes, 9% ties
        return rng.choice([-1.0, 0.0, 1.0], size=shape, p=[0.4535, 0.093, 0.4535])
    q = 0.005  # "rare loss": a total loss once in 200 queries, a tiny gain otherwise
    return np.where(rng.random(shape) < q, -1.0, q / (1 - q))


def _false_switches(test, streams: np.ndarray) -> int:
    return int(sum(np.isfinite(switch_times(test, chunk)).sum() for chunk in np.split(streams, 4)))


KINDS = ["gaussian 0.05", "gaussian 0.13", "skewed", "rare loss", "interleaving"]


@pytest.mark.parametrize("kind", KINDS)
def test_aa_false_switches_stay_within_alpha_for_any_bounded_differences(kind: str) -> None:
    """Identical rankers watched after every pair for 2,000 pairs, 2,000 runs: the test by
    betting switches in at most alpha of them (within three standard errors) whatever
    the differences' shape, as Ville's inequality promises for any d in [-1, 1].
    Measured: 5, 12, 7, 18 and 8 of 2,000. The interleaving stream is the shape of
    `eval interleaving`'s A/A (P(-1, 0, +1) measured there, 200,000 impressions): its
    false switches come early, after a run of straight wins (median 14 pairs)."""
    streams = _null_streams(kind, np.random.default_rng(KINDS.index(kind)))
    assert _false_switches(PairedTest(alpha=ALPHA), streams) <= MOST_FALSE


def test_the_msprt_it_replaced_breaks_alpha_where_betting_holds() -> None:
    """The mSPRT's plug-in variance is only asymptotically valid: on the "rare loss"
    stream (mean 0; the first pairs show no loss, so the variance looks tiny) it switched
    falsely in 292 of 2,000 runs (1,232 without its variance prior), the betting test in
    18. Asserted both ways, so the test can fail."""
    streams = _null_streams("rare loss", np.random.default_rng(3))
    assert _false_switches(PairedTest(alpha=ALPHA), streams) <= MOST_FALSE
    assert _false_switches(MixtureSPRT(alpha=ALPHA), streams) > 4 * MOST_FALSE


def test_power_beside_the_msprt_on_the_same_streams() -> None:
    """A +0.02 challenger at spread 0.05 switches within 500 pairs (100% of 400 runs); at
    the demo's spread (0.117) a +0.01 one switches sooner than with the mSPRT (median
    ~1,300 against ~1,440 pairs): betting's bets are capped by the range, not the
    spread, so it is slower only where the differences vary little (docs/results/champion.md)."""
    rng = np.random.default_rng(2)
    fast = np.clip(rng.normal(0.02, 0.05, (400, HORIZON)), -1, 1)
    assert (switch_times(PairedTest(), fast) <= 500).mean() >= 0.95
    real = np.clip(rng.normal(0.01, 0.117, (400, HORIZON)), -1, 1)
    betting = np.median(switch_times(PairedTest(), real))
    assert betting < 0.95 * np.median(switch_times(MixtureSPRT(), real))


def test_the_bounds_cover_the_true_mean_at_every_pair_and_agree_with_the_verdicts() -> None:
    """Each bound is a one-sided (1 - alpha) confidence sequence: over 200 runs of 600
    pairs (mean 0.03, spread 0.1) the lower bound ever passes the mean in at most alpha
    of them, the upper one likewise (seen: 0 and 0 runs), and at every pair "switch" is
    "ci_low >= 0", "refuse" is "ci_high <= delta"."""
    rng = np.random.default_rng(4)
    test = PairedTest(alpha=ALPHA)
    above = below = 0
    for _ in range(200):
        state, low_missed, high_missed = test.start(), False, False
        for value in np.clip(rng.normal(0.03, 0.1, 600), -1, 1):
            state = test.add(state, float(value))
            seen = test.evidence(state)
            low_missed |= seen.ci_low > 0.03
            high_missed |= seen.ci_high < 0.03
            assert (seen.decision == REFUSE) == (seen.ci_high <= test.delta)
            if seen.decision != REFUSE:
                assert (seen.decision == SWITCH) == (seen.ci_low >= 0.0)
        above += low_missed
        below += high_missed
    assert above <= 2 and below <= 2  # alpha of 200 runs


def test_verdicts_and_interval() -> None:
    test = PairedTest(alpha=0.01, delta=0.005, min_pairs=20)
    assert test.decision(test.update(test.start(), [0.3] * 19)) == UNDECIDED  # min_pairs
    evidence = test.evidence(test.update(test.start(), [0.1, 0.3] * 20))
    assert evidence.decision == SWITCH and 0 < evidence.ci_low < 0.2 <= evidence.ci_high
    assert evidence.log_statistic >= evidence.threshold == pytest.approx(np.log(100))
    assert test.decision(test.update(test.start(), [0.0] * 1500)) == REFUSE
    # both wealths past the threshold (better than 0, not delta better): the refusal wins
    crossed = dataclasses.replace(
        test.update(test.start(), [0.0] * 20), log_wealth=9.0, log_wealth_refuse=9.0
    )
    assert test.decision(crossed) == REFUSE
    # identical rankers are not refused on 200 pairs: a wealth of ties grows slowly
    assert test.decision(test.update(test.start(), [0.0] * 200)) == UNDECIDED
    with pytest.raises(ValueError, match=r"\[-1, 1\]"):
        test.add(test.start(), float("nan"))
    with pytest.raises(ValueError, match=r"\[-1, 1\]"):
        first_switch(test, [0.5, 1.5])
    for bad in ({"alpha": 1.0}, {"max_bet": 1.0}, {"bet_variance_prior": float("nan")}):
        with pytest.raises(ValueError):
            PairedTest(**bad)
    with pytest.raises(ValueError):
        MixtureSPRT(variance_prior=-0.1)


def test_the_race_switches_logs_restarts_and_restores() -> None:
    policy = ChampionPolicy(test=PairedTest(min_pairs=5))
    race = ChampionRace(policy)
    switches = sample_value("rankstream_champion_switches_total")
    assert race.observe({"opr": 0.9}) is None  # the incumbent was not scored: no pair
    assert race.races == {}
    winner = None
    for q in range(60):
        winner = race.observe({"uni_con": 0.4, "opr": 0.4 + 0.2 * (q % 3), "ogdr": 0.4}, q)
        if winner:
            break
    assert winner == "opr" and race.incumbent == "opr" and race.races == {}
    assert sample_value("rankstream_champion_switches_total") == switches + 1
    for _ in range(30):
        race.observe({"uni_con": 0.4, "opr": 0.8, "ogdr": 0.5})  # both far worse: refused
    restored = ChampionRace.from_state(policy, race.to_state())
    assert restored.summary() == race.summary()
    assert restored.summary()["challengers"]["uni_con"]["paired_queries"] == 30
    assert sample_value("rankstream_champion_race_paired_queries", {"model": "ogdr"}) == 30
    assert sample_value("rankstream_champion_race_decision", {"model": "ogdr"}) == -1


def test_a_race_saved_by_the_msprt_restores_and_starts_over(caplog) -> None:
    """A scores record from before the test by betting holds [n, mean, m2] per race: the
    incumbent stays, each race starts over at wealth 1 (a wealth cannot be rebuilt from
    moments), its refusal is forgotten with it, and the restart is logged."""
    old = {"incumbent": "opr", "races": {"ogdr": [250, -0.02, 3.1]}, "refused": ["ogdr"]}
    race = ChampionRace.from_state(ChampionPolicy(), old)
    assert race.incumbent == "opr" and race.refused == set()
    assert race.summary()["challengers"]["ogdr"]["paired_queries"] == 0
    assert "champion races restarted" in caplog.text
    race.observe({"opr": 0.5, "ogdr": 0.6})
    assert ChampionRace.from_state(ChampionPolicy(), race.to_state()).summary() == race.summary()
    with pytest.raises(ValueError, match="11 numbers"):
        ChampionRace.from_state(ChampionPolicy(), {"races": {"ogdr": [1, 0.0, 0.0, 0.0]}})


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
    betting test's A/A far below the old rule's, and the plot written."""
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
    assert all(set(case) == {"betting", "msprt", "rolling_mean"} for case in result.values())
    aa = result["aa"]
    assert (
        aa["betting"]["false_switch_rate"] <= 0.05 < 0.5 <= aa["rolling_mean"]["false_switch_rate"]
    )
    assert result["0.02"]["msprt"]["median_queries_to_switch"] >= 100  # its burn-in
    assert report["targets"]["betting"]["spread=0.05"]["aa_false_switches_within_alpha"]
    assert (tmp_path / "champion.png").stat().st_size > 0
