"""The four similarity measures and PhiMap against naive per-pair loops."""

from __future__ import annotations

import numpy as np
import pytest

from rankstream.simulators.similarity import (
    SIMILARITIES,
    PhiMap,
    cosine,
    negative_chi_square,
    negative_euclidean,
    negative_l1,
)


def _naive(measure: str, q: np.ndarray, p: np.ndarray, shift: float = 0.0) -> float:
    if measure == "euclidean":
        return -float(np.sqrt(sum((a - b) ** 2 for a, b in zip(q, p, strict=True))))
    if measure == "l1":
        return -float(sum(abs(a - b) for a, b in zip(q, p, strict=True)))
    if measure == "cosine":
        nq, np_ = np.sqrt(sum(a * a for a in q)), np.sqrt(sum(b * b for b in p))
        return 0.0 if nq == 0 or np_ == 0 else float(sum(q * p) / (nq * np_))
    total = 0.0
    for a, b in zip(q + shift, p + shift, strict=True):
        if a + b > 0:
            total += (a - b) ** 2 / (a + b)
    return -0.5 * total


@pytest.mark.parametrize("measure", list(SIMILARITIES))
def test_measures_match_naive_loops(measure: str) -> None:
    rng = np.random.default_rng(1)
    query = rng.random(7)
    candidates = rng.random((5, 7))
    candidates[0] = 0.0  # a zero vector: cosine 0, chi-square skips empty bins
    candidates[1] = query  # the query itself is the most similar
    got = SIMILARITIES[measure](query, candidates)
    expected = [_naive(measure, query, row) for row in candidates]
    np.testing.assert_allclose(got, expected, rtol=1e-12, atol=1e-12)
    assert int(np.argmax(got)) == 1


def test_chi_square_shift_and_negative_input() -> None:
    query, candidates = np.array([-1.0, 2.0]), np.array([[0.5, -0.5], [-1.0, 2.0]])
    with pytest.raises(ValueError, match="non-negative"):
        negative_chi_square(query, candidates)
    got = negative_chi_square(query, candidates, shift=1.0)
    np.testing.assert_allclose(got, [_naive("chi", query, row, 1.0) for row in candidates])


@pytest.mark.parametrize("function", [negative_euclidean, negative_l1, cosine, negative_chi_square])
def test_bad_shapes_and_nan_raise(function) -> None:
    with pytest.raises(ValueError, match="candidates"):
        function(np.zeros(3), np.zeros((4, 2)))
    with pytest.raises(ValueError, match="NaN"):
        function(np.array([np.nan, 0.0]), np.zeros((4, 2)))


def test_phi_map_columns_are_descriptor_major() -> None:
    rng = np.random.default_rng(2)
    descriptors = {"a": rng.random((6, 4)), "b": rng.standard_normal((6, 3))}
    phi_map = PhiMap().fit(descriptors)
    assert phi_map.feature_names[:5] == [
        "a:euclidean",
        "a:l1",
        "a:cosine",
        "a:chi_square",
        "b:euclidean",
    ]
    assert phi_map.chi_square_shift_["a"] == 0.0
    assert phi_map.chi_square_shift_["b"] == pytest.approx(-descriptors["b"].min())
    phi = phi_map.phi(2, np.array([0, 5, 2]))
    assert phi.shape == (3, 8)
    for row, candidate in enumerate([0, 5, 2]):
        for column, name in enumerate(phi_map.feature_names):
            descriptor, measure = name.split(":")
            shift = phi_map.chi_square_shift_[descriptor]
            q, p = descriptors[descriptor][2], descriptors[descriptor][candidate]
            assert phi[row, column] == pytest.approx(_naive(measure, q, p, shift))


def test_phi_map_rejects_mismatched_descriptors() -> None:
    with pytest.raises(ValueError, match="number of images"):
        PhiMap().fit({"a": np.zeros((3, 2)), "b": np.zeros((4, 2))})
