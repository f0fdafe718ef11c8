"""scikit-learn's estimator checks for the ordinal metric learners and the kNN regressor."""

from __future__ import annotations

from sklearn.utils.estimator_checks import parametrize_with_checks

from rankstream.ranking.dml import CMDSDML, LDMLR, OrdinalKNNRegressor

# No check is exempted.
EXPECTED_FAILED_CHECKS: dict[str, dict[str, str]] = {}


@parametrize_with_checks(
    [CMDSDML(max_iter=50), LDMLR(max_iter=10), OrdinalKNNRegressor()],
    expected_failed_checks=lambda est: EXPECTED_FAILED_CHECKS.get(type(est).__name__, {}),
)
def test_sklearn_compatible(estimator, check):
    check(estimator)
