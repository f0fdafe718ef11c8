"""scikit-learn's estimator checks for every scikit-learn estimator in `ranking`.

No check is exempted, and none may skip: a check that raises SkipTest (scikit-learn does
when pandas is missing, or when SciPy's array API support is off) fails here, so a check
cannot quietly stop running. pandas is a dev extra for the pandas checks; conftest.py
sets SCIPY_ARRAY_API=1 for the array API ones.
"""

from __future__ import annotations

import os
import unittest

import pytest
from sklearn.utils.estimator_checks import parametrize_with_checks

from rankstream.ranking.dml import CMDSDML, CMDSDMLCV, LDMLR, OrdinalKNNRegressor
from rankstream.ranking.mkl import RankMKL

ESTIMATORS = [
    CMDSDML(max_iter=50),
    # a small grid keeps the many check fits quick; the validation loop is the same
    CMDSDMLCV(mus=(1e-3,), betas=(0.0, 1.0), tols=(1e-3, 1e-5), cv=3, max_iter=50),
    LDMLR(max_iter=10),
    OrdinalKNNRegressor(),
    RankMKL(),  # chi2 kernels: the positive_only tag makes the checks feed X >= 0
    RankMKL(kernels="linear"),
]
# No check is exempted.
EXPECTED_FAILED_CHECKS: dict[str, dict[str, str]] = {}


@parametrize_with_checks(
    ESTIMATORS,
    expected_failed_checks=lambda est: EXPECTED_FAILED_CHECKS.get(type(est).__name__, {}),
)
def test_sklearn_compatible(estimator, check):
    try:
        check(estimator)
    except unittest.SkipTest as skipped:
        pytest.fail(f"the check did not run: {skipped}", pytrace=False)


def test_scipy_saw_the_array_api_setting():
    """The array API checks need SciPy to have read SCIPY_ARRAY_API=1 at its import."""
    from scipy._lib._array_api import SCIPY_ARRAY_API

    assert os.environ.get("SCIPY_ARRAY_API") == "1" and SCIPY_ARRAY_API
