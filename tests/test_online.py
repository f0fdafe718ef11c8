"""OnlineRanker: exactness against plain Python loops, river-style API, bad input, state."""

from __future__ import annotations

import json

import numpy as np
import pytest

from rankstream.ranking.learners import names
from rankstream.ranking.online import OnlineRanker
from rankstream.ranking.scaling import Standardizer

ALGOS = names()  # every registered learner

D = 36


def reference_loop(algo: str, X, y, C=0.1, eta=0.01, r=1.0, w0=None):
    """The update rules written as literally as possible, one row at a time."""
    w = np.zeros(X.shape[1]) if w0 is None else np.array(w0, dtype=float)
    sigma = np.eye(X.shape[1])
    n_updates = 0
    for x, yt in zip(X, y, strict=True):
        sq = float(x @ x)
        if sq == 0.0:
            continue
        m = yt * float(w @ x)
        loss = max(0.0, 1.0 - m)
        if algo == "opr":
            step = 1.0 if m <= 0 else 0.0
        elif algo == "opar1":
            step = min(C, loss / sq)
        elif algo == "opar2":
            step = loss / (sq + 1.0 / (2.0 * C))
        elif algo == "ogdr":
            step = eta if loss > 0 else 0.0
        else:  # AROW, Crammer, Kulesza & Dredze 2009
            if loss <= 0:
                continue
            sx = sigma @ x
            beta = 1.0 / (x @ sx + r)
            w = w + loss * beta * yt * sx
            sigma = sigma - beta * np.outer(sx, sx)
            n_updates += 1
            continue
        if step != 0.0:
            w = w + step * yt * x
            n_updates += 1
    return w, sigma, n_updates


def stream(n: int, d: int = D, seed: int = 0, zero_rows: int = 3):
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((n, d)) * rng.uniform(0.1, 3.0, d)
    X[rng.choice(n, zero_rows, replace=False)] = 0.0
    y = np.where(X @ rng.standard_normal(d) + 0.5 * rng.standard_normal(n) > 0, 1.0, -1.0)
    return X, y


@pytest.mark.parametrize("algo", ALGOS)
def test_learn_many_matches_reference_loop(algo):
    X, y = stream(400)
    ranker = OnlineRanker(algo=algo, C=0.3, eta=0.05, r=0.7).learn_many(X[:150], y[:150])
    ranker.learn_many(X[150:], y[150:])  # two calls continue one sequence
    w, sigma, n_updates = reference_loop(algo, X, y, C=0.3, eta=0.05, r=0.7)
    np.testing.assert_allclose(ranker.weights, w, rtol=0, atol=1e-9)
    assert ranker.n_updates == n_updates
    assert ranker.n_seen == 400
    if algo == "arow":
        np.testing.assert_allclose(ranker.sigma, sigma, rtol=0, atol=1e-9)
    assert 0 < n_updates < 400


@pytest.mark.parametrize("d", [1, 3, 4, 5, 8, 9, 17, 37])
def test_arow_matches_reference_loop_at_every_width(d):
    """The kernel pads Sigma's rows to a multiple of 8 and sums in 4 partial sums:
    widths around those multiples exercise every remainder path."""
    X, y = stream(300, d=d, seed=d)
    ranker = OnlineRanker("arow", r=0.5).learn_many(X[:100], y[:100]).learn_many(X[100:], y[100:])
    w, sigma, n_updates = reference_loop("arow", X, y, r=0.5)
    np.testing.assert_allclose(ranker.weights, w, rtol=0, atol=1e-9)
    np.testing.assert_allclose(ranker.sigma, sigma, rtol=0, atol=1e-9)
    assert ranker.sigma.shape == (d, d)
    assert ranker.n_updates == n_updates > 0


@pytest.mark.parametrize("algo", ALGOS)
def test_learn_one_equals_learn_many(algo):
    X, y = stream(60, d=5, seed=1)
    batch = OnlineRanker(algo=algo).learn_many(X, y)
    single = OnlineRanker(algo=algo)
    for i, (x, yt) in enumerate(zip(X, y, strict=True)):
        row = {j: v for j, v in enumerate(x) if v != 0.0} if i % 2 else x
        if i == 0:
            row = x  # fixes the width (a sparse dict would leave out trailing zeros)
        single.learn_one(row, yt)
    np.testing.assert_array_equal(single.weights, batch.weights)
    assert (single.n_updates, single.n_seen) == (batch.n_updates, batch.n_seen)


def test_float32_input_is_accepted_and_converted_once():
    X, y = stream(100, d=6)
    a = OnlineRanker("opar2").learn_many(X.astype(np.float32), y.astype(np.int8))
    b = OnlineRanker("opar2").learn_many(X.astype(np.float32).astype(np.float64), y)
    np.testing.assert_array_equal(a.weights, b.weights)
    assert a.weights.dtype == np.float64


def test_warm_start_and_scaler_travel_with_the_model():
    rng = np.random.default_rng(3)
    Phi = rng.uniform(0, 10, (50, 4)) * np.array([1.0, 100.0, 0.01, 1.0])
    scaler = Standardizer().fit(Phi)
    uni_con = OnlineRanker("opar1", C=0.1, scaler=scaler, warm_start=np.ones(4))
    np.testing.assert_allclose(uni_con.score(Phi), scaler.transform(Phi).sum(axis=1))
    X = Phi[:25] - Phi[25:]
    y = np.where(X[:, 1] > 0, 1.0, -1.0)
    uni_con.learn_many(X, y)
    w, _, _ = reference_loop("opar1", X / scaler.std_, y, w0=np.ones(4))
    np.testing.assert_allclose(uni_con.weights, w, atol=1e-12)
    assert uni_con.margin_one(X[0]) == pytest.approx((X[0] / scaler.std_) @ w)
    assert uni_con.predict_one(X[0]) is bool(uni_con.margin_one(X[0]) > 0)


def test_score_margin_and_predictions():
    ranker = OnlineRanker("opr", warm_start=[1.0, -2.0])
    np.testing.assert_array_equal(ranker.score([[1.0, 1.0], [0.0, -1.0]]), [-1.0, 2.0])
    assert ranker.margin_one({1: 1.0}) == -2.0
    assert ranker.predict_one({1: 1.0}) is False
    assert ranker.predict_one({0: 1.0}) is True
    p = 1.0 / (1.0 + np.exp(2.0))
    assert ranker.predict_proba_one({1: 1.0}) == pytest.approx({False: 1.0 - p, True: p})
    np.testing.assert_allclose(ranker.margin_many([[0.0, 1.0], [3.0, 0.0]]), [-2.0, 3.0])
    assert ranker.predict_many(np.array([[0.0, 1.0], [3.0, 0.0]])).tolist() == [False, True]
    np.testing.assert_allclose(ranker.predict_proba_many([[0.0, 1.0]]), [[1.0 - p, p]])
    assert OnlineRanker().score(np.ones((3, 2))).tolist() == [0.0, 0.0, 0.0]
    assert OnlineRanker().predict_proba_one({"a": 1.0}) == {False: 0.5, True: 0.5}


def test_probabilities_do_not_overflow():
    ranker = OnlineRanker("opr", warm_start=[1.0])
    assert ranker.predict_proba_one([1e6]) == {False: 0.0, True: 1.0}
    assert ranker.predict_proba_one([-1e6]) == {False: 1.0, True: 0.0}


@pytest.mark.parametrize(
    ("X", "y", "message"),
    [
        (np.array([[1.0, 2.0], [np.nan, 0.0]]), [1, -1], "row 1"),
        (np.array([[1.0, 2.0], [0.0, np.inf]]), [1, -1], "row 1"),
        (np.array([[1.0, 2.0], [0.0, 1.0]]), [1, 0], r"y\[1\]"),
        (np.array([[1.0, 2.0], [0.0, 1.0]]), [1, 2], r"y\[1\]"),
        (np.array([[1.0, 2.0, 3.0]]), [1], "3 columns, expected 2"),
        (np.array([1.0, 2.0]), [1], "2-d"),
        (np.array([[1.0, 2.0]]), [[1]], "shape"),
        (np.array([[1.0, 2.0]]), [1, 1], "shape"),
        (np.array([[1.0, 2.0]]), ["a"], "True/False or"),
    ],
)
@pytest.mark.parametrize("algo", ["opr", "arow"])
def test_bad_input_raises_and_leaves_model_untouched(algo, X, y, message):
    ranker = OnlineRanker(algo).learn_many([[1.0, -1.0], [0.5, 2.0]], [1, -1])
    before = ranker.to_state()
    with pytest.raises(ValueError, match=message):
        ranker.learn_many(X, y)
    after = ranker.to_state()
    assert before[0] == after[0]
    for name, array in before[1].items():
        np.testing.assert_array_equal(after[1][name], array)


def test_overflowing_update_is_refused():
    ranker = OnlineRanker("ogdr", eta=1e300, warm_start=[0.0, 0.0])
    with pytest.raises(ValueError, match="non-finite"):
        ranker.learn_many([[1e10, 0.0]], [1])
    assert ranker.weights.tolist() == [0.0, 0.0]


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"algo": "svm"}, "algo"),
        ({"C": 0.0}, "C"),
        ({"eta": np.nan}, "eta"),
        ({"r": -1}, "r"),
        ({"warm_start": [1.0, np.nan]}, "warm_start"),
        ({"warm_start": [1.0, 2.0], "dim": 3}, "inconsistent"),
        ({"scaler": Standardizer()}, "fitted"),
        ({"dim": 0}, "dim must be an integer"),
        ({"dim": 2.5}, "dim must be an integer"),
    ],
)
def test_bad_parameters(kwargs, message):
    with pytest.raises(ValueError, match=message):
        OnlineRanker(**kwargs)


def test_bad_dict_rows():
    ranker = OnlineRanker(dim=3)
    with pytest.raises(ValueError, match="outside"):
        ranker.learn_one({5: 1.0}, 1)
    with pytest.raises(ValueError, match="outside"):
        ranker.predict_one({5: 1.0})
    for key in ("colour", "1", 1.5, True):
        with pytest.raises(ValueError, match="integer position"):
            ranker.learn_one({key: 1.0}, 1)
    with pytest.raises(ValueError, match="negative"):
        ranker.learn_one({-1: 1.0}, 1)
    with pytest.raises(ValueError, match="real numbers"):
        ranker.learn_one({0: "high"}, 1)
    with pytest.raises(ValueError, match="feature 2 is NaN"):
        ranker.learn_one({0: 1.0, 2: np.nan}, 1)
    with pytest.raises(ValueError, match="empty row"):
        OnlineRanker().learn_one({}, 1)
    assert ranker.n_seen == 0 and ranker.weights.tolist() == [0.0, 0.0, 0.0]


@pytest.mark.parametrize("algo", ALGOS)
@pytest.mark.parametrize("with_scaler", [False, True])
def test_state_round_trip_is_exact_and_json_able(algo, with_scaler):
    X, y = stream(120, d=7, seed=5)
    scaler = (
        Standardizer().fit(np.random.default_rng(6).standard_normal((30, 7)))
        if (with_scaler)
        else None
    )
    original = OnlineRanker(algo, C=0.2, eta=0.03, r=2.0, scaler=scaler).learn_many(X, y)
    meta, arrays = original.to_state()
    meta = json.loads(json.dumps(meta))
    restored = OnlineRanker.from_state(meta, {k: v.copy() for k, v in arrays.items()})
    assert restored.to_state()[0] == meta
    np.testing.assert_array_equal(restored.weights, original.weights)
    assert all(v.dtype == np.float64 for v in arrays.values())
    # the restored model continues exactly like the original
    X2, y2 = stream(50, d=7, seed=7)
    original.learn_many(X2, y2)
    restored.learn_many(X2, y2)
    np.testing.assert_array_equal(restored.weights, original.weights)
    Phi = np.random.default_rng(8).standard_normal((5, 7))
    np.testing.assert_array_equal(restored.score(Phi), original.score(Phi))


def test_from_state_rejects_foreign_state():
    with pytest.raises(ValueError, match="kind"):
        OnlineRanker.from_state({"kind": "rankmkl"}, {})
