"""Property tests of the update invariants the papers' rules promise."""

from __future__ import annotations

import numpy as np
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from rankstream.ranking.learners import names
from rankstream.ranking.online import OnlineRanker

ALGOS = names()  # every registered learner

values = st.floats(-100.0, 100.0, allow_nan=False, allow_infinity=False)
labels = st.sampled_from([1.0, -1.0])
params = st.floats(1e-3, 10.0)


@st.composite
def weights_and_row(draw):
    d = draw(st.integers(1, 8))
    w = draw(arrays(np.float64, d, elements=values))
    x = draw(arrays(np.float64, d, elements=values))
    return w, x


def one_update(algo, w, x, y, **kwargs):
    ranker = OnlineRanker(algo, warm_start=w, **kwargs)
    ranker.learn_one(x, y)
    return ranker


@settings(max_examples=150, deadline=None)
@given(weights_and_row(), labels, params)
def test_opar1_step_never_exceeds_c(wx, y, C):
    w, x = wx
    assume(x @ x > 1e-6)
    new = one_update("opar1", w, x, y, C=C).weights
    rounding = 1e-14 * (np.linalg.norm(w) + C * np.linalg.norm(x))  # of new - w itself
    assert np.linalg.norm(new - w) <= C * np.linalg.norm(x) * (1 + 1e-12) + rounding


@settings(max_examples=150, deadline=None)
@given(weights_and_row(), labels, params, st.sampled_from(["opar1", "opar2"]))
def test_opar_margin_on_the_row_does_not_decrease(wx, y, C, algo):
    w, x = wx
    before = y * (w @ x)
    after = y * (one_update(algo, w, x, y, C=C).weights @ x)
    assert after >= before - 1e-9 * max(1.0, abs(before))
    if before < 1.0 and x @ x > 1e-6:
        assert after > before  # a positive hinge loss always moves towards the margin


# Most random (w, x) already satisfy the margin (loss 0), so many draws are assumed away.
@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.filter_too_much])
@given(weights_and_row(), labels)
def test_opar1_reaches_the_margin_when_c_allows(wx, y):
    w, x = wx
    sq = x @ x
    loss = max(0.0, 1.0 - y * (w @ x))
    assume(sq > 1e-3 and 0 < loss < 1e3)
    new = one_update("opar1", w, x, y, C=loss / sq * 2).weights  # C not binding
    assert abs(y * (new @ x) - 1.0) < 1e-6 * max(1.0, loss)


@settings(max_examples=100, deadline=None)
@given(arrays(np.float64, st.integers(1, 8), elements=values), labels)
def test_opr_moves_on_a_zero_margin_row(x, y):
    assume(x @ x > 0)  # |x|^2 as computed: entries below ~1e-154 underflow to a zero row
    ranker = one_update("opr", np.zeros(x.shape[0]), x, y)
    np.testing.assert_array_equal(ranker.weights, y * x)
    assert ranker.n_updates == 1


@settings(max_examples=100, deadline=None)
@given(weights_and_row(), labels, st.sampled_from(ALGOS))
def test_a_zero_row_changes_nothing(wx, y, algo):
    w, _ = wx
    ranker = one_update(algo, w, np.zeros(w.shape[0]), y)
    np.testing.assert_array_equal(ranker.weights, w)
    assert (ranker.n_updates, ranker.n_seen) == (0, 1)


@settings(max_examples=100, deadline=None)
@given(weights_and_row(), labels, params)
def test_ogdr_step_is_exactly_eta_while_the_loss_is_positive(wx, y, eta):
    w, x = wx
    new = one_update("ogdr", w, x, y, eta=eta).weights
    if y * (w @ x) < 1.0 and x @ x > 0:
        np.testing.assert_allclose(new, w + eta * y * x, rtol=1e-12, atol=1e-12)
    else:
        np.testing.assert_array_equal(new, w)


@settings(max_examples=50, deadline=None)
@given(
    arrays(np.float64, (20, 4), elements=st.floats(-10, 10)),
    arrays(np.float64, 20, elements=labels),
    st.floats(0.1, 10.0),
)
def test_arow_covariance_stays_symmetric_positive_definite_and_shrinks(X, y, r):
    ranker = OnlineRanker("arow", r=r).learn_many(X, y)
    sigma = ranker.sigma
    np.testing.assert_array_equal(sigma, sigma.T)
    eigenvalues = np.linalg.eigvalsh(sigma)
    assert eigenvalues.min() > 0
    assert eigenvalues.max() <= 1.0 + 1e-9  # updates only remove variance from I
