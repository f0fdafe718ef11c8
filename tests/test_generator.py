"""The harness stream generator: simulator-shaped judged queries at any width, and random pairs."""

from __future__ import annotations

import numpy as np
import pytest

from rankstream.harness.generator import JUDGED, MEAN_QUERY_TRIPLETS, TripletGenerator


def test_query_blocks_are_shaped_like_the_demos_stream():
    """Every block references its 50 judged images; triplets a block average the demo's
    283 (2,000 draws: the mean's standard error is ~4, so 5% is ~3.5 of them)."""
    generator = TripletGenerator(seed=11)
    blocks = [generator.query_block() for _ in range(2000)]
    sizes = np.array([len(b) for b in blocks])
    assert all(len(b.image_id) == JUDGED and len(np.unique(b.image_id)) == JUDGED for b in blocks)
    assert abs(sizes.mean() - MEAN_QUERY_TRIPLETS) < 0.05 * MEAN_QUERY_TRIPLETS
    assert sizes.min() >= JUDGED - 1  # at least one image of another grade than the rest
    assert 0.05 < np.mean(sizes < 100) < 0.5 and sizes.max() > 500  # the demo's spread
    for b in blocks[:50]:  # learnable: y agrees with the hidden scorer
        assert (np.sign(b.x() @ generator.true_weights) == b.y()).all()
        assert len(set(b.query_id.tolist())) == 1


@pytest.mark.parametrize("width", [1, 8, 128])
def test_any_width_and_exact_totals_with_consecutive_seq(width):
    generator = TripletGenerator(seed=1, width=width)
    blocks = list(generator.query_blocks(5000))
    assert sum(len(b) for b in blocks) == 5000 and all(b.dim == width for b in blocks)
    assert np.array_equal(np.concatenate([b.seq for b in blocks]), np.arange(5000))
    packed = list(TripletGenerator(seed=1, width=width).messages(5000, queries_per_message=3))
    assert [len(p) for p in packed[:-1]] == [
        sum(len(b) for b in blocks[i : i + 3]) for i in range(0, 3 * (len(packed) - 1), 3)
    ]
    ids, phi, relevance = generator.candidates(40)
    assert phi.shape == (40, width) and relevance.dtype == np.int8 and len(set(ids)) == 40


def test_bad_arguments_are_refused():
    with pytest.raises(ValueError, match="width"):
        TripletGenerator(width=0)
    with pytest.raises(ValueError, match="n_images"):
        TripletGenerator(n_images=10)
    with pytest.raises(ValueError, match="queries_per_message"):
        list(TripletGenerator().messages(10, 0))
