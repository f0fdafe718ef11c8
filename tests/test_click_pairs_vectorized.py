"""The whole-array skip pairs equal the per-click loop they replaced, on random lists."""

from __future__ import annotations

import numpy as np
import pytest

from rankstream.ranking.click_pairs import DEFAULT_MIN_PROPENSITY, click_pairs


def loop_pairs(clicked: np.ndarray) -> tuple[list[int], list[int]]:
    """Joachims' skip pairs, one click at a time (the former implementation)."""
    winners: list[int] = []
    losers: list[int] = []
    skipped = np.flatnonzero(~clicked)
    for i in np.flatnonzero(clicked).tolist():
        above = skipped[skipped < i]
        winners.extend([i] * len(above))
        losers.extend(above.tolist())
        below = skipped[skipped > i]
        if below.size and below[0] == i + 1:
            winners.append(i)
            losers.append(i + 1)
    return winners, losers


@pytest.mark.parametrize("seed", range(5))
def test_vectorized_skip_pairs_equal_the_loop(seed: int) -> None:
    rng = np.random.default_rng(seed)
    for _ in range(400):
        n = int(rng.integers(0, 60))
        clicked = rng.random(n) < rng.choice([0.0, 0.05, 0.3, 0.7, 1.0])
        propensities = rng.uniform(0.01, 1.0, max(n, 1))
        pairs = click_pairs(clicked, propensities, losers="skips")
        winners, losers = loop_pairs(clicked)
        assert pairs.winner.dtype == pairs.loser.dtype == np.int64
        assert pairs.winner.tolist() == winners
        assert pairs.loser.tolist() == losers
        clip = DEFAULT_MIN_PROPENSITY
        expected = 1.0 / np.maximum(propensities[np.array(winners, np.int64)], clip)
        np.testing.assert_array_equal(pairs.weight, expected)
