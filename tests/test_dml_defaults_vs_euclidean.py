"""CMDSDMLCV at its defaults must not lose to Euclidean kNN on the project's ordinal sets.

Issue 16 found plain `CMDSDML()` at its defaults worse than Euclidean kNN on an ordinal
image set the project had never seen (MAE 1.19 vs 1.08). Here: digits' ink quintiles and
PubFig's Young ranks (the sets of `rankstream eval dml`), and a set no code here was tuned
on, digits rotated by -40..40 degrees in five steps with the step as the ordinal label,
where `CMDSDML()` loses to Euclidean kNN the same way. Protocol: `eval dml`'s, 10 training
images per label, K = 5, mean MAE over a few random splits; CMDSDMLCV validates on inner
splits of each training set only.
"""

from __future__ import annotations

import numpy as np
import pytest

from rankstream.ranking.dml import CMDSDML, CMDSDMLCV, OrdinalKNNRegressor
from rankstream.ranking.metrics import mae
from rankstream.simulators.ordinal import load_ordinal, per_label_split

# The whole eval protocol, minutes long: `make long-test`, not `make test`.
pytestmark = [pytest.mark.slow, pytest.mark.long]

ROTATION_STEP_DEGREES = 20.0


def rotated_digits(seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Every digit rotated by (level - 2) x 20 degrees, level 0..4 drawn at random."""
    from scipy.ndimage import rotate
    from sklearn.datasets import load_digits

    images = load_digits().images
    level = np.random.default_rng(seed).integers(0, 5, len(images))
    rotated = [
        rotate(image, (step - 2) * ROTATION_STEP_DEGREES, reshape=False, order=1)
        for image, step in zip(images, level, strict=True)
    ]
    return np.array(rotated).reshape(len(images), -1), level.astype(np.float64)


def mean_maes(X: np.ndarray, r: np.ndarray, splits: int, seed: int) -> dict[str, float]:
    rng = np.random.default_rng(seed)
    transformers = {"euclidean": None, "cmds_dml_defaults": CMDSDML(), "cmds_dml_cv": CMDSDMLCV()}
    maes: dict[str, list[float]] = {name: [] for name in transformers}
    for _ in range(splits):
        train, test = per_label_split(r, 10, rng)
        for name, transformer in transformers.items():
            knn = OrdinalKNNRegressor(5, transformer=transformer).fit(X[train], r[train])
            maes[name].append(mae(r[test], knn.predict(X[test])))
    return {name: float(np.mean(values)) for name, values in maes.items()}


def test_on_rotated_digits_a_set_nothing_was_tuned_on():
    X, r = rotated_digits()
    result = mean_maes(X, r, splits=3, seed=1)
    assert result["cmds_dml_defaults"] > result["euclidean"]  # the failure, reproduced
    assert result["cmds_dml_cv"] < result["euclidean"]


def test_on_digits_ink_quintiles():
    data = load_ordinal("digits")
    result = mean_maes(data.X, data.r, splits=3, seed=2)
    assert result["cmds_dml_cv"] < result["euclidean"]


def test_on_pubfig_young_ranks():
    from rankstream.simulators.pubfig import resolve_root

    if not (resolve_root() / "data.mat").is_file():
        pytest.skip("PubFig data not available")
    data = load_ordinal("pubfig")
    result = mean_maes(data.X, data.r, splits=2, seed=3)
    assert result["cmds_dml_cv"] < result["euclidean"]
