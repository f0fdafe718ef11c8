"""Face features: fixed lengths from the parameters, finite and non-negative, npz cache."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from skimage import io

from rankstream.simulators.pubfig_features import FEATURE_NAMES, FaceFeatureParams, face_features

SMALL = FaceFeatureParams(
    size=32, lbp_grid=(2, 2), hog_cells=(4, 4), gabor_frequencies=(0.2, 0.4), gabor_grid=(2, 2)
)


def write_faces(folder: Path, count: int) -> list[Path]:
    rng = np.random.default_rng(0)
    paths = []
    for k in range(count):
        image = (rng.random((40 + k, 36, 3)) * 255).astype(np.uint8)
        path = folder / f"face_{k}.png"
        io.imsave(path, image, check_contrast=False)
        paths.append(path)
    return paths


def test_features_have_parameter_fixed_lengths_and_are_cached(tmp_path):
    paths = write_faces(tmp_path, 3)
    calls = []
    first = face_features(paths, tmp_path / "cache", SMALL, lambda d, t: calls.append((d, t)))
    assert calls[-1] == (3, 3)
    expected = {"lbp": 2 * 2 * 10, "hog": 3 * 3 * 2 * 2 * 9, "gabor": 2 * 6 * 2 * 2}
    assert {name: first[name].shape for name in FEATURE_NAMES} == {
        name: (3, length) for name, length in expected.items()
    }
    for matrix in first.values():
        assert np.isfinite(matrix).all() and matrix.min() >= 0.0
    assert not np.allclose(first["hog"][0], first["hog"][1])  # different images differ
    cached = list((tmp_path / "cache").glob("*.npz"))
    assert len(cached) == 1
    again = face_features(paths, tmp_path / "cache", SMALL, lambda d, t: calls.append("recomputed"))
    assert "recomputed" not in calls
    for name in FEATURE_NAMES:
        np.testing.assert_array_equal(again[name], first[name])
    face_features(paths[:2], tmp_path / "cache", SMALL)  # another image list, another key
    assert len(list((tmp_path / "cache").glob("*.npz"))) == 2


def test_no_images_is_an_error():
    with pytest.raises(ValueError, match="empty"):
        face_features([], None, SMALL)
