"""Team-draft interleaving and multileaving, credit and outcomes (`ranking.interleaving`),
and the interleaving race (`selection.click_race`)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rankstream.ranking.interleaving import (
    credit,
    outcome,
    pairwise_outcomes,
    team_draft,
    team_draft_many,
)
from rankstream.ranking.sequential import PairedTest
from rankstream.selection.click_race import InterleavingRace
from rankstream.selection.judged_race import ChampionPolicy

rankings = st.lists(st.lists(st.integers(0, 30), max_size=20, unique=True), min_size=2, max_size=4)


@settings(max_examples=200, deadline=None)
@given(rankings, st.integers(0, 40), st.integers(0, 2**32 - 1))
def test_a_team_draft_is_a_fair_merge_of_its_rankings(lists, length, seed) -> None:
    arrays = [np.array(r, dtype=np.int64) for r in lists]
    shown = team_draft(arrays, length, np.random.default_rng(seed))
    union = set().union(*map(set, lists))
    items = shown.items.tolist()
    # a list without repeats, drawn from the union, as long as it can be
    assert len(items) == len(set(items)) == min(length, len(union))
    assert set(items) <= union
    for team, ranking in enumerate(lists):
        picked = [item for item, t in zip(items, shown.teams.tolist(), strict=True) if t == team]
        # each team's picks keep its ranker's order ...
        assert picked == sorted(picked, key=ranking.index)
        # ... and each pick is that ranker's best result not shown before it
        for position, (item, t) in enumerate(zip(items, shown.teams.tolist(), strict=True)):
            if t == team:
                assert item == next(r for r in ranking if r not in items[:position])


@settings(max_examples=200, deadline=None)
@given(st.integers(1, 25), st.integers(2, 4), st.integers(0, 40), st.integers(0, 2**32 - 1))
def test_teams_are_balanced_when_the_rankers_rank_the_same_items(
    n_items, n_rankers, length, seed
) -> None:
    rng = np.random.default_rng(seed)
    lists = [rng.permutation(n_items) for _ in range(n_rankers)]
    sizes = team_draft(lists, length, rng).team_sizes(n_rankers)
    assert sizes.sum() == min(length, n_items)
    assert sizes.max() - sizes.min() <= 1


@settings(max_examples=50, deadline=None)
@given(rankings, st.integers(1, 30), st.integers(0, 2**32 - 1))
def test_a_seed_gives_the_same_list(lists, length, seed) -> None:
    arrays = [np.array(r, dtype=np.int64) for r in lists]
    first = team_draft(arrays, length, np.random.default_rng(seed))
    again = team_draft(arrays, length, np.random.default_rng(seed))
    assert first.items.tolist() == again.items.tolist()
    assert first.teams.tolist() == again.teams.tolist()


@settings(max_examples=200, deadline=None)
@given(rankings, st.integers(0, 40), st.integers(0, 2**32 - 1))
def test_one_list_drafts_as_the_batch_does(lists, length, seed) -> None:
    """`team_draft` (plain Python, for serving) is `team_draft_many`'s draft of one list."""
    arrays = [np.array(r, dtype=np.int64) for r in lists]
    one = team_draft(arrays, length, np.random.default_rng(seed))
    depth = max(len(r) for r in lists)
    batch = np.full((len(lists), 1, depth), -1, dtype=np.int64)
    for i, r in enumerate(lists):
        batch[i, 0, : len(r)] = r
    many = team_draft_many(batch, 31, length, np.random.default_rng(seed))
    filled = many.teams[0] >= 0
    assert one.items.tolist() == many.items[0, filled].tolist()
    assert one.teams.tolist() == many.teams[0, filled].tolist()


def _round_by_round(rankings: list, length: int, rng: np.random.Generator) -> tuple:
    """The team draft as it was before serving's fast path (commit 3500cfb, verbatim but
    for the return): the oracle the fast path must match, draws included."""
    lists = [np.asarray(r, dtype=np.int64).reshape(-1) for r in rankings]
    k = len(lists)
    orders = [r.tolist() for r in lists]
    cursor, picks, active = [0] * k, [0] * k, [True] * k
    shown: set[int] = set()
    items: list[int] = []
    teams: list[int] = []
    ties = rng.random((min(length, sum(map(len, orders))) + k, k)).tolist()
    for tie in ties:
        if len(items) == length or not any(active):
            break
        team, best = -1, float("inf")
        for i in range(k):
            if active[i] and picks[i] + tie[i] < best:
                team, best = i, picks[i] + tie[i]
        order, at = orders[team], cursor[team]
        while at < len(order) and order[at] in shown:
            at += 1
        if at == len(order):
            active[team] = False
            continue
        items.append(order[at])
        teams.append(team)
        shown.add(order[at])
        cursor[team], picks[team] = at + 1, picks[team] + 1
    return items, teams


def _same_as_round_by_round(lists: list, length: int, seed: int) -> None:
    fast_rng, old_rng = np.random.default_rng(seed), np.random.default_rng(seed)
    shown = team_draft(lists, length, fast_rng)
    items, teams = _round_by_round(lists, length, old_rng)
    assert shown.items.tolist() == items and shown.teams.tolist() == teams
    assert shown.items.dtype == np.int64 and shown.teams.dtype == np.intp
    assert fast_rng.bit_generator.state == old_rng.bit_generator.state  # the same draws


@settings(max_examples=300, deadline=None)
@given(st.integers(0, 40), st.integers(2, 4), st.integers(0, 45), st.integers(0, 2**32 - 1))
def test_the_draft_of_rankings_of_the_same_items_is_the_round_by_round_draft(
    n_items, n_rankers, length, seed
) -> None:
    """Serving's case (every ranker ranks the request's candidates) takes the fast path:
    the same lists, teams and generator state as the round-by-round draft."""
    rng = np.random.default_rng(seed)
    ids = rng.choice(10**9, size=n_items, replace=False)  # any ids, not only 0..n-1
    _same_as_round_by_round([rng.permutation(ids) for _ in range(n_rankers)], length, seed)


@settings(max_examples=200, deadline=None)
@given(rankings, st.integers(0, 40), st.integers(0, 2**32 - 1))
def test_the_draft_of_any_rankings_is_the_round_by_round_draft(lists, length, seed) -> None:
    _same_as_round_by_round([np.array(r, dtype=np.int64) for r in lists], length, seed)


def test_serving_sized_drafts_are_the_round_by_round_draft() -> None:
    """300 requests like serving's: 300 candidates, the champion's and a challenger's
    argsort of their scores (some tied), one generator across requests."""
    rng = np.random.default_rng(27)
    fast_rng, old_rng = np.random.default_rng(1), np.random.default_rng(1)
    for _ in range(300):
        scores = np.round(rng.standard_normal((2, 300)), 1)  # ties: argsort keeps them stable
        lists = [np.argsort(-s, kind="stable") for s in scores]
        shown = team_draft(lists, 300, fast_rng)
        assert (shown.items.tolist(), shown.teams.tolist()) == _round_by_round(lists, 300, old_rng)
    assert fast_rng.bit_generator.state == old_rng.bit_generator.state


class _Draws:
    """A generator stand-in that hands out fixed draws (`team_draft` only calls random)."""

    def __init__(self, draws: np.ndarray) -> None:
        self.draws = draws

    def random(self, shape: tuple[int, int]) -> np.ndarray:
        return self.draws[: shape[0], : shape[1]]


def test_a_draw_that_rounds_its_key_up_takes_the_round_by_round_draft() -> None:
    """1 + (1 - 2**-53) is 2.0 in float64: in round 1 below the ranker that went first
    (picks 2, draw 0.0: key 2.0) ties the one still to go (picks 1: key 2.0) and, first
    on a tie, goes again. The fast path's rounds would not have it: it must leave that
    draft to the round-by-round one, whose result stands."""
    draws = np.full((12, 2), 0.5)
    draws[2:4] = [[0.1, 0.2], [0.0, 1 - 2**-53]]
    lists = [np.array([5, 6, 7, 8]), np.array([8, 7, 6, 5])]
    shown = team_draft(lists, 4, _Draws(draws))
    items, teams = _round_by_round(lists, 4, _Draws(draws))  # type: ignore[arg-type]
    assert teams[2:4] == [0, 0]  # the case is what it says
    assert (shown.items.tolist(), shown.teams.tolist()) == (items, teams)


def test_two_identical_rankings_show_that_ranking_and_split_the_picks() -> None:
    ranking = np.arange(10)
    shown = team_draft([ranking, ranking], 10, np.random.default_rng(3))
    assert shown.items.tolist() == list(range(10))
    assert shown.team_sizes(2).tolist() == [5, 5]


def test_each_ranker_goes_first_in_about_half_of_the_rounds() -> None:
    a, b = np.arange(0, 40, 2), np.arange(1, 40, 2)  # disjoint: the order shows who went first
    batch = np.stack([np.tile(a, (4000, 1)), np.tile(b, (4000, 1))])
    merged = team_draft_many(batch, 40, 20, np.random.default_rng(0))
    first_of_round = merged.teams[:, ::2]
    share = (first_of_round == 1).mean()
    assert 0.48 < share < 0.52  # 40,000 fair coins: sd 0.0025


def test_the_batch_draft_stops_when_every_ranker_is_out() -> None:
    batch = np.array([[[0, 1, -1]], [[1, -1, -1]]])
    merged = team_draft_many(batch, 2, 5, np.random.default_rng(0))
    assert sorted(merged.items[0, :2].tolist()) == [0, 1]
    assert merged.items[0, 2:].tolist() == [-1, -1, -1]
    assert merged.teams[0, 2:].tolist() == [-1, -1, -1]


@pytest.mark.parametrize(
    ("bad", "message"),
    [
        ([np.array([1, 1, 2]), np.array([2])], "each item once"),
        ([np.array([1, 2])], "at least 2"),
    ],
)
def test_bad_rankings_are_refused(bad, message) -> None:
    with pytest.raises(ValueError, match=message):
        team_draft(bad, 3, np.random.default_rng(0))


def test_clicks_are_credited_to_the_team_that_placed_the_result() -> None:
    teams = np.array([[0, 1, 1, 0], [1, 0, 0, 1], [0, 1, 0, 1]])
    clicks = np.array([[True, True, True, False], [False] * 4, [True, False, False, False]])
    credits = credit(teams, clicks, 2)
    assert credits.tolist() == [[1, 2], [0, 0], [1, 0]]
    assert outcome(credits).tolist() == [1, 0, -1]  # win, tie (no clicks), loss
    assert outcome(credits, challenger=0, champion=1).tolist() == [-1, 0, 1]


def test_multileave_outcomes_are_antisymmetric_and_pairwise() -> None:
    credits = np.array([[3, 1, 1], [0, 2, 5]])
    outcomes = pairwise_outcomes(credits)
    assert (outcomes == -outcomes.transpose(0, 2, 1)).all()
    assert outcomes[0].tolist() == [[0, 1, 1], [-1, 0, 0], [-1, 0, 0]]
    assert outcomes[1, 2, 0] == 1


def test_credit_refuses_teams_outside_the_rankers_and_shape_mismatches() -> None:
    with pytest.raises(ValueError, match=r"0\.\.1"):
        credit(np.array([0, 2]), np.array([True, True]), 2)
    with pytest.raises(ValueError, match="shape"):
        credit(np.array([0, 1]), np.array([True]), 2)


def test_the_race_switches_on_a_preferred_challenger_and_restores_its_state() -> None:
    policy = ChampionPolicy(test=PairedTest(alpha=0.01, delta=0.005))
    race = InterleavingRace(policy)
    rng = np.random.default_rng(0)
    outcomes = rng.choice([-1, 0, 1], size=300, p=[0.3, 0.3, 0.4]).tolist()
    assert race.observe("opar1", outcomes[:150]) is None
    restored = InterleavingRace.from_state(policy, race.to_state())
    assert restored.counts == race.counts
    assert restored.summary() == race.summary()
    summary = race.summary()["challengers"]["opar1"]
    assert summary["impressions"] == 150
    assert summary["wins"] + summary["losses"] + summary["ties"] == 150
    winner = None
    for value in rng.choice([-1, 0, 1], size=20_000, p=[0.3, 0.3, 0.4]).tolist():
        winner = restored.observe("opar1", [value])
        if winner:
            break
    assert winner == "opar1" and restored.incumbent == "opar1" and not restored.races


def test_the_race_refuses_bad_outcomes_and_the_champion_as_challenger() -> None:
    race = InterleavingRace(ChampionPolicy())
    with pytest.raises(ValueError, match="-1, 0 or"):
        race.observe("opar1", [2])
    with pytest.raises(ValueError, match="champion"):
        race.observe(race.incumbent, [1])
    with pytest.raises(ValueError, match="add up"):
        InterleavingRace.from_state(
            ChampionPolicy(),
            {
                "races": {
                    "opar1": {"counts": {"wins": 1, "losses": 0, "ties": 0}, "stats": [2, 0, 0]}
                }
            },
        )


def test_ties_count_as_zero_differences() -> None:
    race = InterleavingRace(ChampionPolicy())
    race.observe("arow", [1, 0, 0, -1])
    assert race.races["arow"].n == 4 and race.races["arow"].mean == 0.0


def test_a_race_saved_by_the_msprt_starts_over() -> None:
    """An interleaving state from before the test by betting (counts and [n, mean, m2])
    keeps its incumbent; the race and its counts start over (no wealth to restore)."""
    old = {
        "incumbent": "opar1",
        "races": {"arow": {"counts": {"wins": 5, "losses": 2, "ties": 3}, "stats": [10, 0.3, 6.1]}},
    }
    race = InterleavingRace.from_state(ChampionPolicy(), old)
    assert race.incumbent == "opar1" and race.races["arow"].n == 0
    assert race.counts["arow"] == {"wins": 0, "losses": 0, "ties": 0}
    race.observe("arow", [1, -1, 0])
    assert (
        InterleavingRace.from_state(ChampionPolicy(), race.to_state()).summary() == race.summary()
    )
