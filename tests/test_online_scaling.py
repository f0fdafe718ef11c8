"""Standardizer: fitted on training phi only, differences scale without the mean."""

from __future__ import annotations

import json

import numpy as np
import pytest

from rankstream.ranking.online import OnlineRanker
from rankstream.ranking.scaling import Standardizer, linear_scores


def test_standardizer_fits_mean_and_std_with_unit_std_for_constant_dims():
    Phi = np.array([[1.0, 4.0, 7.0], [3.0, 4.0, 9.0]])
    s = Standardizer().fit(Phi)
    np.testing.assert_array_equal(s.mean_, [2.0, 4.0, 8.0])
    np.testing.assert_array_equal(s.std_, [1.0, 1.0, 1.0])  # dim 1 is constant
    np.testing.assert_array_equal(s.transform(Phi), [[-1.0, 0.0, -1.0], [1.0, 0.0, 1.0]])


def test_differences_scale_like_differences_of_transformed_phi():
    rng = np.random.default_rng(0)
    Phi = rng.uniform(0, 100, (40, 5)) * np.array([1, 10, 0.1, 5, 2])
    s = Standardizer().fit(Phi[:20])  # fitted on training rows only
    diff = s.transform_differences(Phi[20:30] - Phi[30:])
    np.testing.assert_allclose(diff, s.transform(Phi[20:30]) - s.transform(Phi[30:]), atol=1e-12)


def test_state_round_trip_and_checks():
    s = Standardizer().fit(np.random.default_rng(1).standard_normal((10, 3)))
    meta, arrays = s.to_state()
    back = Standardizer.from_state(json.loads(json.dumps(meta)), arrays)
    np.testing.assert_array_equal(back.mean_, s.mean_)
    np.testing.assert_array_equal(back.std_, s.std_)
    with pytest.raises(ValueError, match="non-positive std"):
        Standardizer.from_state(meta, {"mean": arrays["mean"], "std": -arrays["std"]})
    with pytest.raises(ValueError, match="not fitted"):
        Standardizer().transform(np.ones((2, 3)))
    with pytest.raises(ValueError, match="no rows"):
        Standardizer().fit(np.ones((0, 3)))
    with pytest.raises(ValueError, match="row 1"):
        Standardizer().fit([[1.0, 2.0], [np.nan, 1.0]])
    with pytest.raises(ValueError, match="2 columns, expected 3"):
        s.transform(np.ones((1, 2)))


def test_linear_scores_is_the_shared_scoring_path():
    s = Standardizer().fit([[0.0, 0.0], [2.0, 4.0]])
    w = np.array([1.0, -1.0])
    np.testing.assert_array_equal(linear_scores([[2.0, 0.0]], w, s), [2.0])
    np.testing.assert_array_equal(linear_scores([[2.0, 0.0]], w), [2.0])
    ranker = OnlineRanker(scaler=s, warm_start=w)
    np.testing.assert_array_equal(ranker.score([[2.0, 0.0]]), [2.0])


def test_warm_start_must_be_a_vector():
    with pytest.raises(ValueError, match="warm_start must be 1-d"):
        OnlineRanker(warm_start=1.0)
    with pytest.raises(ValueError, match="warm_start must be 1-d"):
        OnlineRanker(warm_start=np.ones((2, 2)))
