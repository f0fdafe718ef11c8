"""Interleaved comparison of rankers: team-draft interleaving, multileaving and credit.

Two rankers can be compared on click traffic without judgments by showing one user one
merged list and seeing whose results get clicked (Radlinski, Kurup & Joachims, "How
does clickthrough data reflect retrieval quality?", CIKM 2008, team-draft
interleaving; Chapelle et al., TOIS 2012, show it needs far fewer impressions than
comparing two A/B arms).

* **Team draft** (`team_draft`): like captains picking teams, each round the rankers
  with the fewest picks so far take turns in a random order; each adds its highest
  ranked result not already in the list, recorded as its team's pick. With two rankers
  this is exactly Radlinski et al.'s algorithm (the one behind gets the next pick, a
  fair coin breaks a tie); with more it is team-draft *multileaving* (Schuth et al.,
  "Multileaved comparisons for fast online evaluation", CIKM 2014, TDM): the option
  chosen here over probabilistic multileaving because its credit is exact (every shown
  result has one team) and it needs no sampling of rankings. A ranker whose results
  are all in the list already drops out; the list ends at `length` or when every
  ranker is out.
* **Credit** (`credit`): each click counts for the team that contributed the clicked
  result.
* **Outcome** (`outcome`, `pairwise_outcomes`): per impression, the challenger wins
  (+1) when its team got more clicks than the champion's, loses (-1) when fewer, ties
  (0) when as many (no clicks included). For a multileave, the same for every pair.
  These per-impression outcomes in {-1, 0, +1} are the paired differences of the
  champion's sequential test (`ranking.sequential`): their mean, P(win) - P(loss), is
  0 when neither ranker is preferred.

Everything is deterministic given the generator: the same seed gives the same lists.

>>> import numpy as np
>>> shown = team_draft([np.array([1, 2, 3, 4]), np.array([2, 5, 1, 6])], 4,
...                    np.random.default_rng(0))
>>> shown.items.tolist(), shown.teams.tolist()
([2, 1, 3, 5], [1, 0, 0, 1])
>>> credit(shown.teams, np.array([False, True, True, False]), 2).tolist()
[2, 0]
>>> outcome(credit(shown.teams, np.array([True, False, False, False]), 2))
1
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

WIN, TIE, LOSS = 1, 0, -1


@dataclass(frozen=True)
class Interleaving:
    """One merged list: `items` in displayed order, `teams[i]` the ranker that placed
    items[i] (its index in the rankings passed to `team_draft`)."""

    items: np.ndarray  # (L,) int64; (n, L) from `team_draft_many`
    teams: np.ndarray  # (L,) intp; (n, L), -1 where nothing was left to show

    def team_sizes(self, n_rankers: int) -> np.ndarray:
        """Picks per ranker of a single list."""
        return np.bincount(self.teams, minlength=n_rankers)


def team_draft(rankings: Any, length: int, rng: np.random.Generator) -> Interleaving:
    """Team-draft interleave (2 rankings) or multileave (more) into `length` results.

    `rankings`: a sequence of 1-d arrays of item ids, each best first and without
    repeats (the rankers may rank different items, and different numbers of them).
    See the module docstring: the draft of `team_draft_many` for one list, each round
    with the same draws from a fresh `rng`, so the same result.

    Serving drafts one list per interleaved request, with every ranker ranking the same
    candidates; then the turns are worked out up front (`_same_items_turns`) and only
    the picks run in plain Python, with the same draws and the same result as the
    round-by-round draft (`_draft_by_rounds`, which any other input takes).

    >>> a, b, c = np.array([0, 1, 2]), np.array([2, 1, 0]), np.array([1, 0, 2])
    >>> shown = team_draft([a, b, c], 3, np.random.default_rng(1))
    >>> sorted(shown.items.tolist()), shown.team_sizes(3).tolist()
    ([0, 1, 2], [1, 1, 1])
    """
    lists = [np.asarray(r, dtype=np.int64).reshape(-1) for r in rankings]
    common = _common_items(lists)  # (the items sorted, the rankings stacked) or None
    if common is None:
        for r in lists:
            if len(np.unique(r)) != len(r):
                raise ValueError("a ranking lists each item once")
    k = len(lists)
    if k < 2:
        raise ValueError(f"interleaving needs at least 2 rankings, got {k}")
    if length < 0:
        raise ValueError(f"length must be >= 0, got {length}")
    # Round r breaks ties with the r-th k draws, as `team_draft_many` does; all are drawn
    # at once (at most `length` picks and k drop-outs), whichever way the draft runs.
    ties = rng.random((min(length, sum(map(len, lists))) + k, k))
    if common is not None:
        turns = _same_items_turns(k, min(length, len(common[0])), ties)
        if turns is not None:
            return _picks(*common, turns)
    return _draft_by_rounds(lists, length, ties.tolist())


def _common_items(lists: list[np.ndarray]) -> tuple[np.ndarray, np.ndarray] | None:
    """When every ranking lists the same items once each: those items sorted, and the
    rankings stacked (k, n); else None."""
    if any(len(r) != len(lists[0]) for r in lists):
        return None
    stacked = np.stack(lists)
    ordered = np.sort(stacked, axis=1)
    first = ordered[0]
    if (ordered != first).any() or (first[1:] == first[:-1]).any():
        return None
    return first, stacked


def _same_items_turns(k: int, steps: int, ties: np.ndarray) -> np.ndarray | None:
    """Whose pick each of the first `steps` is, when no ranker can drop out before them
    (all rank the same items): as in `_draft_by_rounds`, round r = step // k is taken by
    the rankers in increasing order of r + tie among those without a pick in it yet
    (their picks are r, the others' r + 1), ties to the lower index. None in the rare
    case where a key r + tie rounds up to r + 1, so that the rounds' order is not sure."""
    rounds = -(-steps // k)
    r = np.arange(rounds, dtype=np.float64)[:, None, None]
    keys = r + ties[: rounds * k].reshape(rounds, k, k)  # [round, turn in it, ranker]
    if not (keys < r + 1).all():
        return None
    if k == 2:  # the first of a round is the lower key (the first on a tie), then the other
        first = (keys[:, 0, 1] < keys[:, 0, 0]).astype(np.intp)
        return np.stack([first, 1 - first], axis=1).reshape(-1)[:steps]
    turns = np.empty((rounds, k), dtype=np.intp)
    picked = np.zeros((rounds, k), dtype=bool)
    every = np.arange(rounds)
    for turn in range(k):
        team = np.where(picked, np.inf, keys[:, turn]).argmin(axis=1)
        turns[:, turn] = team
        picked[every, team] = True
    return turns.reshape(-1)[:steps]


def _picks(common: np.ndarray, stacked: np.ndarray, turns: np.ndarray) -> Interleaving:
    """Each turn's ranker adds its best item not shown yet (items as indices into
    `common`, so `shown` is a bytearray; serving's rankings are such indices already)."""
    n = len(common)
    indices = n == 0 or (common[0] == 0 and common[-1] == n - 1)  # sorted, unique: 0..n-1
    orders = (stacked if indices else np.searchsorted(common, stacked)).tolist()
    rest = [iter(order) for order in orders]  # each ranker's results after its cursor
    shown = bytearray(n)
    picked = []
    for team in turns.tolist():
        for item in rest[team]:  # one is left: every ranker has every item
            if not shown[item]:
                break
        shown[item] = 1
        picked.append(item)
    return Interleaving(common[np.array(picked, dtype=np.intp)], turns.astype(np.intp))


def _draft_by_rounds(lists: list[np.ndarray], length: int, ties: list[list[float]]) -> Interleaving:
    """The draft round by round, for any rankings: each step the active ranker with the
    fewest picks goes (the lowest picks + tie), adds its best item not shown yet or
    drops out when it has none left."""
    k = len(lists)
    orders = [r.tolist() for r in lists]
    cursor, picks, active = [0] * k, [0] * k, [True] * k
    shown: set[int] = set()
    items: list[int] = []
    teams: list[int] = []
    for tie in ties:
        if len(items) == length or not any(active):
            break
        team, best = -1, float("inf")  # the active ranker with the fewest picks, then random
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
    return Interleaving(np.array(items, dtype=np.int64), np.array(teams, dtype=np.intp))


def team_draft_many(
    rankings: np.ndarray, n_items: int, length: int, rng: np.random.Generator
) -> Interleaving:
    """Team drafts of n impressions at once: `rankings` (k, n, D) holds, per ranker and
    impression, item indices in 0..n_items-1 best first (-1 after a ranking's end).

    Returns `items` and `teams` of shape (n, length), -1 where every ranker ran out
    before `length`. Each round, per impression, the active ranker with the fewest
    picks goes (uniformly at random among ties); it adds its best item not yet shown,
    or drops out if it has none left.
    """
    rankings = np.asarray(rankings)
    if rankings.ndim != 3 or not np.issubdtype(rankings.dtype, np.integer):
        raise ValueError(f"rankings must be an integer (k, n, D) array, got {rankings.shape}")
    k, n, _ = rankings.shape
    if k < 2:
        raise ValueError(f"interleaving needs at least 2 rankings, got {k}")
    if length < 0:
        raise ValueError(f"length must be >= 0, got {length}")
    if rankings.size and (rankings.min() < -1 or rankings.max() >= n_items):
        raise ValueError(f"ranked items must lie in 0..{n_items - 1} (-1: the ranking ended)")
    padded = np.concatenate([rankings, np.full((k, n, 1), -1, rankings.dtype)], axis=2)
    shown = np.zeros((n, n_items + 1), dtype=bool)  # column n_items: the -1 padding
    cursor = np.zeros((k, n), dtype=np.intp)
    picks = np.zeros((k, n), dtype=np.int64)
    active = np.ones((k, n), dtype=bool)
    items = np.full((n, length), -1, dtype=np.int64)
    teams = np.full((n, length), -1, dtype=np.intp)
    filled = np.zeros(n, dtype=np.intp)
    rows = np.arange(n)
    while True:
        live = (filled < length) & active.any(axis=0)
        if not live.any():
            break
        key = np.where(active, picks + rng.random((k, n)), np.inf)  # fewest picks, then random
        team = key.argmin(axis=0)[live]
        row = rows[live]
        while True:  # skip what is shown already
            item = padded[team, row, cursor[team, row]]
            skip = (item >= 0) & shown[row, item]
            if not skip.any():
                break
            cursor[team[skip], row[skip]] += 1
        out = item < 0
        active[team[out], row[out]] = False
        team, row, item = team[~out], row[~out], item[~out]
        items[row, filled[row]] = item
        teams[row, filled[row]] = team
        shown[row, item] = True
        cursor[team, row] += 1
        picks[team, row] += 1
        filled[row] += 1
    return Interleaving(items, teams)


def credit(teams: np.ndarray, clicks: np.ndarray, n_rankers: int) -> np.ndarray:
    """Clicks per team: (n_rankers,) for one impression, (n, n_rankers) for a batch.

    `teams` and `clicks` (bool) have one entry per displayed result, row-wise for a batch.
    """
    teams, clicks = np.asarray(teams), np.asarray(clicks, dtype=bool)
    if teams.shape != clicks.shape:
        raise ValueError(f"teams {teams.shape} and clicks {clicks.shape} differ in shape")
    if teams.size and (teams.min() < 0 or teams.max() >= n_rankers):
        raise ValueError(f"teams must lie in 0..{n_rankers - 1}")
    one_hot = teams[..., None] == np.arange(n_rankers)
    return (one_hot & clicks[..., None]).sum(axis=-2)


def outcome(credits: np.ndarray, challenger: int = 1, champion: int = 0) -> Any:
    """The challenger's result per impression: WIN (+1), TIE (0) or LOSS (-1).

    An int for one impression's credits (n_rankers,), an int array for a batch.
    """
    credits = np.asarray(credits)
    result = np.sign(credits[..., challenger] - credits[..., champion]).astype(np.int64)
    return int(result) if result.ndim == 0 else result


def pairwise_outcomes(credits: np.ndarray) -> np.ndarray:
    """A multileave's outcomes for every pair: [..., i, j] = +1 when ranker i beat j.

    >>> pairwise_outcomes(np.array([2, 0, 1])).tolist()
    [[0, 1, 1], [-1, 0, -1], [-1, 1, 0]]
    """
    credits = np.asarray(credits)
    return np.sign(credits[..., :, None] - credits[..., None, :]).astype(np.int64)
