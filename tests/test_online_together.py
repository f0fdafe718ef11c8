"""learn_many_together: the compiled loops read the normalized form (an image table and
row indices), one pass for several models, bit-identical to one `learn_many` each."""

from __future__ import annotations

import numpy as np
import pytest
from test_online import reference_loop  # the rules written out, one row at a time

from rankstream.ranking.online import OnlineRanker, learn_many_together
from rankstream.ranking.scaling import Standardizer

LINEAR = ("opr", "opar1", "opar2", "ogdr")


def _table(
    rng: np.random.Generator, n: int, m: int = 60, d: int = 7
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """m images' phi (float32, unequal scales as real phi) and n triplets over them."""
    scale = np.geomspace(0.01, 50.0, d).astype(np.float32)
    phi = (rng.standard_normal((m, d)) * scale).astype(np.float32)
    p1 = rng.integers(0, m, n).astype(np.int32)
    p2 = ((p1 + 1 + rng.integers(0, m - 1, n)) % m).astype(np.int32)
    y = np.where(rng.random(n) < 0.5, -1.0, 1.0)
    return phi, p1, p2, y


def _gathered(phi: np.ndarray, p1: np.ndarray, p2: np.ndarray) -> np.ndarray:
    return np.subtract(phi[p1], phi[p2], dtype=np.float64)


def _rankers(scalers: list[Standardizer | None], **params: float) -> list[OnlineRanker]:
    return [OnlineRanker(algo, scaler=s, **params) for algo, s in zip(LINEAR, scalers, strict=True)]


@pytest.mark.parametrize("shared_scaler", [True, False])
def test_fused_pass_is_bit_identical_to_separate_learn_many(shared_scaler: bool) -> None:
    rng = np.random.default_rng(3)
    phi, p1, p2, y = _table(rng, 900)
    if shared_scaler:
        scalers = [Standardizer().fit(np.vstack([phi[p1[:100]], phi[p2[:100]]]))] * 4
    else:
        scalers = [Standardizer().fit(phi[i * 10 : (i + 2) * 10]) for i in range(3)] + [None]
    together, alone = _rankers(scalers, C=0.3, eta=0.05), _rankers(scalers, C=0.3, eta=0.05)
    for a, b in ((0, 300), (300, 301), (301, 900)):  # state carries across calls
        errors = learn_many_together(together, phi, p1[a:b], p2[a:b], y[a:b])
        assert errors == [None] * 4
        for ranker in alone:
            ranker.learn_many(_gathered(phi, p1[a:b], p2[a:b]), y[a:b])
    for t, s in zip(together, alone, strict=True):
        assert t.weights.tobytes() == s.weights.tobytes(), t.algo
        assert (t.n_updates, t.n_seen) == (s.n_updates, s.n_seen)
        assert t.n_updates > 0


@pytest.mark.parametrize("d", [1, 3, 7, 8, 9, 16, 17, 36])
@pytest.mark.parametrize("algo", [*LINEAR, "arow"])
def test_normalized_form_matches_the_reference_loop_at_every_width(algo: str, d: int) -> None:
    """Rows are padded to a multiple of 8 lanes inside the kernels: widths around the
    multiples exercise the masked tail of the gather and the padded sums."""
    rng = np.random.default_rng(d)
    phi, p1, p2, y = _table(rng, 400, m=40, d=d)
    ranker = OnlineRanker(algo, C=0.3, eta=0.05, r=0.7)
    assert learn_many_together([ranker], phi, p1[:150], p2[:150], y[:150]) == [None]
    assert learn_many_together([ranker], phi, p1[150:], p2[150:], y[150:]) == [None]
    w, sigma, n_updates = reference_loop(algo, _gathered(phi, p1, p2), y, C=0.3, eta=0.05, r=0.7)
    np.testing.assert_allclose(ranker.weights, w, rtol=0, atol=1e-9)
    if algo == "arow":
        np.testing.assert_allclose(ranker.sigma, sigma, rtol=0, atol=1e-9)
    # 400 triplets over 40 images repeat pairs: after an OPAR step a repeated pair sits
    # on a margin of exactly 1 up to rounding, so its next step is 0 or ~1e-16 depending
    # on the summation order; such a vanishing step may be counted on one side only
    assert n_updates > 0 and abs(ranker.n_updates - n_updates) <= 2


def test_float32_and_float64_tables_learn_the_same_weights() -> None:
    """Each float32 entry is widened before the subtraction: no rounding is added."""
    phi, p1, p2, y = _table(np.random.default_rng(8), 300)
    narrow, wide = OnlineRanker("opar2"), OnlineRanker("opar2")
    learn_many_together([narrow], phi, p1, p2, y)
    learn_many_together([wide], phi.astype(np.float64), p1.astype(np.int64), p2, y)
    assert narrow.weights.tobytes() == wide.weights.tobytes()


def test_arow_alongside_linear_models_matches_its_own_learn_many() -> None:
    rng = np.random.default_rng(4)
    phi, p1, p2, y = _table(rng, 200)
    scaler = Standardizer().fit(phi)
    arow, opr = OnlineRanker("arow", scaler=scaler), OnlineRanker("opr")
    assert learn_many_together([arow, opr], phi, p1, p2, y) == [None, None]
    alone = OnlineRanker("arow", scaler=scaler).learn_many(_gathered(phi, p1, p2), y)
    assert arow.weights.tobytes() == alone.weights.tobytes()
    assert arow.sigma.tobytes() == alone.sigma.tobytes()


def test_bad_rows_are_reported_per_model_and_leave_models_unchanged() -> None:
    rng = np.random.default_rng(5)
    phi, p1, p2, y = _table(rng, 50)
    rankers = [*_rankers([None] * 4), OnlineRanker("arow")]
    learn_many_together(rankers, phi, p1[:20], p2[:20], y[:20])
    before = [r.weights.tobytes() for r in rankers]
    nan = np.vstack([phi, np.full((1, phi.shape[1]), np.nan, np.float32)])
    rows2 = p2.copy()
    rows2[27] = len(phi)  # triplet 7 of the batch below reads the NaN image
    errors = learn_many_together(rankers, nan, p1[20:], rows2[20:], y[20:])
    assert all(isinstance(e, ValueError) and "row 7" in str(e) for e in errors), errors
    labels = y[20:].copy()
    labels[4] = 0.0
    errors = learn_many_together(rankers, phi, p1[20:], p2[20:], labels)
    assert all(isinstance(e, ValueError) and "y[4]" in str(e) for e in errors), errors
    assert [r.weights.tobytes() for r in rankers] == before
    assert all(r.n_seen == 20 for r in rankers)


def test_a_model_whose_weights_would_overflow_refuses_alone() -> None:
    phi = np.array([[1e154, 0.0], [0.0, 0.0]])  # |x|^2 = 1e308 is still finite
    p1, p2 = np.zeros(2, np.int32), np.ones(2, np.int32)
    y = np.array([1.0, 1.0])
    big_step, small = OnlineRanker("ogdr", eta=1e160), OnlineRanker("opar1", C=0.1)
    errors = learn_many_together([big_step, small], phi, p1, p2, y)
    assert isinstance(errors[0], ValueError) and "non-finite" in str(errors[0])
    assert errors[1] is None and small.n_seen == 2 and big_step.n_seen == 0


def test_shapes_indices_and_duplicates_are_refused() -> None:
    r = OnlineRanker("opr", dim=3)
    rows = np.array([0, 1])
    with pytest.raises(ValueError, match="columns"):
        learn_many_together([r], np.zeros((2, 4)), rows, rows, np.ones(2))
    with pytest.raises(ValueError, match="same shape"):
        learn_many_together([r], np.zeros((2, 3)), rows, np.array([0, 1, 1]), np.ones(2))
    with pytest.raises(ValueError, match=r"p2\[1\] = 2 is not a row of phi"):
        learn_many_together([r], np.zeros((2, 3)), rows, np.array([0, 2]), np.ones(2))
    with pytest.raises(ValueError, match=r"p1\[0\] = -1"):
        learn_many_together([r], np.zeros((2, 3)), np.array([-1, 0]), rows, np.ones(2))
    with pytest.raises(ValueError, match="integer rows"):
        learn_many_together([r], np.zeros((2, 3)), rows.astype(float), rows, np.ones(2))
    with pytest.raises(ValueError, match="only once"):
        learn_many_together([r, r], np.zeros((2, 3)), rows, rows, np.ones(2))
