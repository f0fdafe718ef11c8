"""Reservoir: Algorithm R exactness, uniformity, batch invariance, restart."""

from __future__ import annotations

import json

import numpy as np
import pytest

from rankstream.ranking.reservoir import Reservoir


def algorithm_r(values: np.ndarray, capacity: int, seed: int) -> np.ndarray:
    """Vitter's Algorithm R written literally, drawing like Reservoir does."""
    rng = np.random.Generator(np.random.PCG64(seed))
    sample: list = []
    for t, v in enumerate(values):
        if t < capacity:
            sample.append(v)
            continue
        j = int(np.floor(rng.random() * (t + 1)))
        if j < capacity:
            sample[j] = v
    return np.array(sample)


def test_matches_the_literal_sequential_algorithm():
    values = np.arange(500)
    res = Reservoir(capacity=17, seed=3)
    for chunk in np.array_split(values, 7):
        res.add_many(chunk)
    np.testing.assert_array_equal(res.columns[0], algorithm_r(values, 17, 3))
    assert (res.n_seen, res.size) == (500, 17)


def test_batch_boundaries_do_not_matter():
    rng = np.random.default_rng(0)
    X = rng.standard_normal((300, 4)).astype(np.float32)
    ids = np.arange(300)
    whole = Reservoir(25, seed=9)
    whole.add_many(ids, X)
    pieces = Reservoir(25, seed=9)
    for start in range(0, 300, 7):
        pieces.add_many(ids[start : start + 7], X[start : start + 7])
    for a, b in zip(whole.columns, pieces.columns, strict=True):
        np.testing.assert_array_equal(a, b)
    assert pieces.columns[1].dtype == np.float32


def test_inclusion_is_uniform():
    """Every position of a 20-row stream lands in a 5-slot sample with p = 1/4.

    With 4000 seeded runs the standard error is ~0.007; a biased scheme (always
    replacing, an off-by-one in the draw range, or never replacing) moves some
    position by far more than the 0.035 tolerance (5 standard errors).
    """
    counts = np.zeros(20)
    for seed in range(4000):
        res = Reservoir(5, seed=seed)
        res.add_many(np.arange(20))
        counts[res.columns[0]] += 1
    freq = counts / 4000
    np.testing.assert_allclose(freq, 0.25, atol=0.035)
    chi2 = float(np.sum((counts - 1000) ** 2 / 1000))
    assert chi2 < 45.0  # chi-square, 19 dof: p < 0.001 beyond ~43.8


def test_restart_continues_identically():
    stream = np.arange(1000).reshape(500, 2)
    uninterrupted = Reservoir(30, seed=11)
    uninterrupted.add_many(stream)
    first = Reservoir(30, seed=11)
    first.add_many(stream[:200])
    meta, arrays = first.to_state()
    restored = Reservoir.from_state(json.loads(json.dumps(meta)), arrays)
    restored.add_many(stream[200:])
    np.testing.assert_array_equal(restored.columns[0], uninterrupted.columns[0])
    assert restored.to_state()[0] == uninterrupted.to_state()[0]


def test_restart_before_the_reservoir_is_full():
    res = Reservoir(10, seed=1)
    res.add_many(np.arange(4.0))
    restored = Reservoir.from_state(*res.to_state())
    restored.add_many(np.arange(4.0, 50.0))
    np.testing.assert_array_equal(restored.columns[0], algorithm_r(np.arange(50.0), 10, 1))
    empty = Reservoir.from_state(*Reservoir(3).to_state())
    assert empty.columns == () and empty.n_seen == 0


@pytest.mark.parametrize(
    ("columns", "message"),
    [
        ((), "at least one column"),
        ((np.arange(3), np.arange(4)), "column 1 has 4 rows"),
        ((np.array([1.0, np.nan]),), "row 1"),
        ((np.float64(1.0),), "scalar"),
    ],
)
def test_bad_rows(columns, message):
    with pytest.raises(ValueError, match=message):
        Reservoir(3).add_many(*columns)


def test_column_layout_is_fixed_by_the_first_batch():
    res = Reservoir(3)
    res.add_many(np.zeros((2, 4)))
    with pytest.raises(ValueError, match="shape"):
        res.add_many(np.zeros((2, 5)))
    with pytest.raises(ValueError, match="expected 1 columns"):
        res.add_many(np.zeros((2, 4)), np.zeros(2))
    with pytest.raises(ValueError, match="capacity"):
        Reservoir(0)
