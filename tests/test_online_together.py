"""learn_many_together: one compiled pass for several models, bit-identical to one each."""

from __future__ import annotations

import numpy as np
import pytest

from rankstream.ranking.online import OnlineRanker, learn_many_together
from rankstream.ranking.scaling import Standardizer

LINEAR = ("opr", "opar1", "opar2", "ogdr")


def _phi(rng: np.random.Generator, n: int, d: int = 7) -> tuple[np.ndarray, np.ndarray]:
    scale = np.geomspace(0.01, 50.0, d).astype(np.float32)  # unequal scales, as real phi
    phi1 = (rng.standard_normal((n, d)) * scale).astype(np.float32)
    phi2 = (rng.standard_normal((n, d)) * scale).astype(np.float32)
    return phi1, phi2


def _rankers(scalers: list[Standardizer | None], **params: float) -> list[OnlineRanker]:
    return [OnlineRanker(algo, scaler=s, **params) for algo, s in zip(LINEAR, scalers, strict=True)]


@pytest.mark.parametrize("shared_scaler", [True, False])
def test_fused_pass_is_bit_identical_to_separate_learn_many(shared_scaler: bool) -> None:
    rng = np.random.default_rng(3)
    phi1, phi2 = _phi(rng, 900)
    y = np.where(rng.random(900) < 0.5, -1.0, 1.0)
    if shared_scaler:
        scalers = [Standardizer().fit(np.vstack([phi1[:100], phi2[:100]]))] * 4
    else:
        scalers = [Standardizer().fit(phi1[i * 50 : (i + 2) * 50]) for i in range(3)] + [None]
    together, alone = _rankers(scalers, C=0.3, eta=0.05), _rankers(scalers, C=0.3, eta=0.05)
    for a, b in ((0, 300), (300, 301), (301, 900)):  # state carries across calls
        errors = learn_many_together(together, phi1[a:b], phi2[a:b], y[a:b])
        assert errors == [None] * 4
        x = np.subtract(phi1[a:b], phi2[a:b], dtype=np.float64)
        for ranker in alone:
            ranker.learn_many(x, y[a:b])
    for t, s in zip(together, alone, strict=True):
        assert t.weights.tobytes() == s.weights.tobytes(), t.algo
        assert (t.n_updates, t.n_seen) == (s.n_updates, s.n_seen)
        assert t.n_updates > 0


def test_arow_alongside_linear_models_matches_its_own_learn_many() -> None:
    rng = np.random.default_rng(4)
    phi1, phi2 = _phi(rng, 200)
    y = np.where(rng.random(200) < 0.5, -1.0, 1.0)
    arow, opr = OnlineRanker("arow"), OnlineRanker("opr")
    assert learn_many_together([arow, opr], phi1, phi2, y) == [None, None]
    alone = OnlineRanker("arow").learn_many(np.subtract(phi1, phi2, dtype=np.float64), y)
    assert arow.weights.tobytes() == alone.weights.tobytes()
    assert arow.sigma.tobytes() == alone.sigma.tobytes()


def test_bad_rows_are_reported_per_model_and_leave_models_unchanged() -> None:
    rng = np.random.default_rng(5)
    phi1, phi2 = _phi(rng, 50)
    y = np.where(rng.random(50) < 0.5, -1.0, 1.0)
    rankers = _rankers([None] * 4)
    learn_many_together(rankers, phi1[:20], phi2[:20], y[:20])
    before = [r.weights.tobytes() for r in rankers]
    nan = phi1[20:].copy()
    nan[7, 2] = np.nan
    errors = learn_many_together(rankers, nan, phi2[20:], y[20:])
    assert all(isinstance(e, ValueError) and "row 7" in str(e) for e in errors)
    labels = y[20:].copy()
    labels[4] = 0.0
    errors = learn_many_together(rankers, phi1[20:], phi2[20:], labels)
    assert all(isinstance(e, ValueError) and "y[4]" in str(e) for e in errors)
    assert [r.weights.tobytes() for r in rankers] == before
    assert all(r.n_seen == 20 for r in rankers)


def test_a_model_whose_weights_would_overflow_refuses_alone() -> None:
    phi1 = np.array([[1e154, 0.0], [1e154, 0.0]])  # |x|^2 = 1e308 is still finite
    phi2 = np.zeros((2, 2))
    y = np.array([1.0, 1.0])
    big_step, small = OnlineRanker("ogdr", eta=1e160), OnlineRanker("opar1", C=0.1)
    errors = learn_many_together([big_step, small], phi1, phi2, y)
    assert isinstance(errors[0], ValueError) and "non-finite" in str(errors[0])
    assert errors[1] is None and small.n_seen == 2 and big_step.n_seen == 0


def test_shapes_and_duplicates_are_refused() -> None:
    r = OnlineRanker("opr", dim=3)
    with pytest.raises(ValueError, match="columns"):
        learn_many_together([r], np.zeros((2, 4)), np.zeros((2, 4)), np.ones(2))
    with pytest.raises(ValueError, match="same shape"):
        learn_many_together([r], np.zeros((2, 3)), np.zeros((3, 3)), np.ones(2))
    with pytest.raises(ValueError, match="only once"):
        learn_many_together([r, r], np.zeros((2, 3)), np.zeros((2, 3)), np.ones(2))
