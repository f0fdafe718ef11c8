"""Importance-weighted updates: weight 1 is the unweighted rule bit for bit, and each
rule's weighted form is the one its docstring names (ranking/online.py)."""

from __future__ import annotations

import numpy as np
import pytest

from rankstream.ranking import learners
from rankstream.ranking.online import OnlineRanker, learn_many_together
from rankstream.ranking.scaling import Standardizer

PARAMS = {"C": 0.05, "eta": 0.01, "r": 2.0}


def _stream(n: int = 3000, d: int = 13, seed: int = 0):
    rng = np.random.default_rng(seed)
    phi = rng.standard_normal((60, d)).astype(np.float32)
    p1 = rng.integers(0, 60, n)
    p2 = (p1 + 1 + rng.integers(0, 59, n)) % 60
    y = rng.choice([-1.0, 1.0], n)
    return phi, p1, p2, y


def _state(ranker: OnlineRanker) -> bytes:
    sigma = ranker.sigma
    return ranker.weights.tobytes() + (b"" if sigma is None else sigma.tobytes())


@pytest.mark.parametrize("algo", learners.names())
@pytest.mark.parametrize("scaled", [False, True])
def test_weight_one_is_the_unweighted_rule_bit_for_bit(algo: str, scaled: bool) -> None:
    phi, p1, p2, y = _stream()
    scaler = Standardizer().fit(phi.astype(np.float64)) if scaled else None
    plain, ones, scalar = (OnlineRanker(algo=algo, scaler=scaler, **PARAMS) for _ in range(3))
    learn_many_together([plain], phi, p1, p2, y)
    learn_many_together([ones], phi, p1, p2, y, np.ones(len(y)))
    learn_many_together([scalar], phi, p1, p2, y, 1.0)
    assert plain.n_updates > 0
    assert _state(plain) == _state(ones) == _state(scalar)
    assert plain.n_updates == ones.n_updates


@pytest.mark.parametrize(("algo", "param"), [("opar1", "C"), ("opar2", "C"), ("ogdr", "eta")])
def test_a_weight_scales_the_step_parameter(algo: str, param: str) -> None:
    """OPAR-I/II: C becomes s C; OGDR: eta becomes s eta (bit for bit: s * param)."""
    phi, p1, p2, y = _stream(seed=1)
    s = 3.5
    weighted = OnlineRanker(algo=algo, **PARAMS)
    learn_many_together([weighted], phi, p1, p2, y, np.full(len(y), s))
    scaled = OnlineRanker(algo=algo, **{**PARAMS, param: s * PARAMS[param]})
    learn_many_together([scaled], phi, p1, p2, y)
    assert _state(weighted) == _state(scaled)


def test_opr_with_a_constant_weight_is_the_unweighted_perceptron_scaled() -> None:
    phi, p1, p2, y = _stream(seed=2)
    plain, weighted = OnlineRanker(algo="opr"), OnlineRanker(algo="opr")
    learn_many_together([plain], phi, p1, p2, y)
    learn_many_together([weighted], phi, p1, p2, y, 4.0)
    np.testing.assert_allclose(weighted.weights, 4.0 * plain.weights, rtol=1e-12)


@pytest.mark.parametrize("algo", ["opar1", "arow"])
def test_an_integer_weight_is_the_row_learned_that_many_times(algo: str) -> None:
    """OPAR-I: k steps capped at C sum to min(kC, l/|x|^2); AROW: k Kalman updates with
    noise r are one with r / k. Up to rounding."""
    phi, p1, p2, y = _stream(n=400, seed=3)
    k = np.random.default_rng(4).integers(1, 5, len(y))
    weighted, repeated = OnlineRanker(algo=algo, **PARAMS), OnlineRanker(algo=algo, **PARAMS)
    learn_many_together([weighted], phi, p1, p2, y, k.astype(np.float64))
    rows = np.repeat(np.arange(len(y)), k)
    learn_many_together([repeated], phi, p1[rows], p2[rows], y[rows])
    np.testing.assert_allclose(weighted.weights, repeated.weights, rtol=1e-8, atol=1e-12)
    if algo == "arow":
        np.testing.assert_allclose(weighted.sigma, repeated.sigma, rtol=1e-8, atol=1e-12)


@pytest.mark.parametrize("algo", learners.names())
def test_a_zero_weight_skips_the_row(algo: str) -> None:
    phi, p1, p2, y = _stream(n=500, seed=5)
    keep = np.random.default_rng(6).random(len(y)) < 0.5
    weighted, subset = OnlineRanker(algo=algo, **PARAMS), OnlineRanker(algo=algo, **PARAMS)
    learn_many_together([weighted], phi, p1, p2, y, keep.astype(np.float64))
    learn_many_together([subset], phi, p1[keep], p2[keep], y[keep])
    assert _state(weighted) == _state(subset)


def test_the_matrix_path_takes_weights_too_and_refuses_bad_ones() -> None:
    phi, p1, p2, y = _stream(n=200, seed=7)
    X = np.subtract(phi[p1], phi[p2], dtype=np.float64)
    w = np.random.default_rng(8).uniform(0.5, 3.0, len(y))
    a, b = OnlineRanker(algo="arow", **PARAMS), OnlineRanker(algo="arow", **PARAMS)
    a.learn_many(X, y, w)
    learn_many_together([b], phi, p1, p2, y, w)
    assert _state(a) == _state(b)
    before = _state(a)
    for bad, match in (([1.0, -1.0], r"w\[1\] = -1.0"), ([np.nan, 1.0], r"w\[0\]")):
        with pytest.raises(ValueError, match=match):
            a.learn_many(X[:2], y[:2], bad)
    with pytest.raises(ValueError, match="shape"):
        a.learn_many(X[:2], y[:2], [1.0, 1.0, 1.0])
    assert _state(a) == before
    one = OnlineRanker(algo="opar1", **PARAMS).learn_one(X[0], y[0], w=2.0)
    assert one.n_updates == 1


def test_a_kernel_without_weights_refuses_weighted_rows() -> None:
    def plain_kernel(w, state, X, y, params):  # type: ignore[no-untyped-def]
        w += (y[:, None] * X).sum(axis=0)
        return len(y)

    learners.register(
        learners.LearnerSpec("plainsum", "PlainSum", "tab:gray", "w += y x", kernel=plain_kernel)
    )
    try:
        ranker = OnlineRanker(algo="plainsum")
        ranker.learn_many(np.ones((2, 3)), [1, -1])
        with pytest.raises(ValueError, match="takes no importance weights"):
            ranker.learn_many(np.ones((2, 3)), [1, -1], [1.0, 2.0])
    finally:
        learners.unregister("plainsum")
