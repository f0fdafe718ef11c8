"""Reservoir: Algorithm R exactness, uniformity, batch invariance, restart."""

from __future__ import annotations

import json

import numpy as np
import pytest

from rankstream.ranking.reservoir import Reservoir, TripletReservoir
from rankstream.ranking.triplets import TRIPLET_COLUMNS


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


# --- the normalized triplet reservoir ---------------------------------------------------
PAIR_COLUMNS = ("query_id", "p1_id", "p2_id", "rel1", "rel2", "phi1", "phi2")


def _blocks(n: int = 40, seed: int = 0):
    from rankstream.harness.generator import TripletGenerator

    return [TripletGenerator(seed=seed).query_block() for _ in range(n)]


def _pair_reservoir(blocks, capacity: int, seed: int) -> Reservoir:
    reservoir = Reservoir(capacity, seed=seed)
    for b in blocks:
        reservoir.add_many(*(getattr(b, name) for name in PAIR_COLUMNS))
    return reservoir


def _assert_holds(triplets: TripletReservoir, rows: Reservoir) -> None:
    assert (triplets.n_seen, triplets.size) == (rows.n_seen, rows.size)
    sample = triplets.sample()
    for name, column in zip(PAIR_COLUMNS, rows.columns, strict=True):
        np.testing.assert_array_equal(getattr(sample, name), column)


def test_triplet_reservoir_samples_exactly_what_a_per_row_reservoir_does():
    blocks = _blocks()
    reservoir = TripletReservoir(500, seed=3)
    for b in blocks:
        reservoir.add_block(b)
    _assert_holds(reservoir, _pair_reservoir(blocks, 500, 3))
    sample = reservoir.sample()  # each (query, image, phi) point once
    keys = {
        (q, i) for q, i in zip(sample.query_id[sample.p1], sample.image_id[sample.p1], strict=True)
    }
    assert len(sample.image_id) == reservoir.points < 2 * reservoir.size
    assert len(keys) <= len(sample.image_id)


def test_triplet_reservoir_ignores_how_blocks_are_cut_and_restarts_exactly():
    from rankstream.ranking.triplets import TripletBlock

    blocks = _blocks(30, seed=1)
    whole = TripletReservoir(300, seed=5)
    whole.add_block(TripletBlock.concatenate(blocks))
    pieces = TripletReservoir(300, seed=5)
    for i, b in enumerate(blocks):
        pieces.add_block(b.select(slice(0, 7)))
        pieces.add_block(b.select(slice(7, None)))
        if i == 11:
            meta, arrays = pieces.to_state()
            pieces = TripletReservoir.from_state(json.loads(json.dumps(meta)), arrays)
    assert pieces.to_state()[0] == whole.to_state()[0]
    for name, array in whole.to_state()[1].items():
        np.testing.assert_array_equal(pieces.to_state()[1][name], array, err_msg=name)


def test_a_per_row_state_is_read_and_continued_identically():
    blocks = _blocks(30, seed=2)
    rows = _pair_reservoir(blocks[:10], 400, 7)
    converted = TripletReservoir.from_state(*rows.to_state())
    assert (converted.sample().seq == -1).all()  # seq was not kept per row
    for b in blocks[10:]:
        rows.add_many(*(getattr(b, name) for name in PAIR_COLUMNS))
        converted.add_block(b)
    _assert_holds(converted, rows)


def test_points_merge_only_when_bit_identical_and_bad_input_is_refused():
    from rankstream.ranking.triplets import TripletBlock

    phi = np.zeros((3, 4), np.float32)
    phi[2, 0] = 1.0  # image 7 twice under query 1: two phi rows, two points
    block = TripletBlock(
        np.arange(2), np.ones(2, np.int64), np.array([0, 2]), np.array([1, 1]),
        np.array([2, 2], np.int8), np.array([0, 0], np.int8), np.array([7, 8, 7]), phi,
    )  # fmt: skip
    reservoir = TripletReservoir(10, seed=0)
    reservoir.add_block(block)
    reservoir.add_block(block)  # the same rows again: no new points
    assert reservoir.points == 3 and reservoir.size == 4
    with pytest.raises(ValueError, match="width 5"):
        reservoir.add_block(
            TripletBlock(
                *(getattr(block, n) for n in TRIPLET_COLUMNS),
                block.image_id,
                np.zeros((3, 5), np.float32),
            )
        )
    bad = phi.copy()
    bad[1, 2] = np.nan
    with pytest.raises(ValueError, match="NaN"):
        TripletReservoir(10).add_block(
            TripletBlock(*(getattr(block, n) for n in TRIPLET_COLUMNS), block.image_id, bad)
        )
    with pytest.raises(ValueError, match="triplet_reservoir"):
        TripletReservoir.from_state({"kind": "scores"}, {})
