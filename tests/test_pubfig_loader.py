"""The PubFig loader: shapes, label bases, orderings, image pairing and error paths."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest

from rankstream.simulators.pubfig import DEFAULT_ROOT, ROOT_ENV_VAR, load_pubfig, resolve_root

pytestmark = pytest.mark.skipif(
    not (DEFAULT_ROOT / "data.mat").is_file(), reason="PubFig data set not available"
)


@pytest.fixture(scope="module")
def pubfig():
    return load_pubfig(DEFAULT_ROOT)


def test_shapes_and_views(pubfig):
    n = pubfig.n_samples
    assert n == 772
    assert pubfig.features.shape == (n, 542)
    assert pubfig.gist.shape == (n, 512)
    assert pubfig.color.shape == (n, 30)
    np.testing.assert_array_equal(np.hstack([pubfig.gist, pubfig.color]), pubfig.features)
    assert len(pubfig.class_names) == 8
    assert len(pubfig.attribute_names) == 11
    assert pubfig.relative_ordering.shape == (11, 8)
    assert pubfig.used_for_training.dtype == bool
    assert 0 < pubfig.used_for_training.sum() < n


def test_labels_are_zero_based_and_match_image_names(pubfig):
    assert pubfig.class_labels.min() == 0
    assert pubfig.class_labels.max() == 7
    for label, path in zip(pubfig.class_labels, pubfig.image_paths, strict=True):
        assert path.is_file()
        assert path.name.startswith(pubfig.class_names[label] + "_")


def test_attribute_strength_follows_relative_ordering(pubfig):
    young = pubfig.attribute_index("young")
    assert pubfig.attribute_names[young] == "Young"
    strength = pubfig.attribute_strength("Young")
    miley = pubfig.class_names.index("MileyCyrus")
    viggo = pubfig.class_names.index("ViggoMortensen")
    # Higher = more: Miley Cyrus is the youngest-looking celebrity, Viggo Mortensen the least.
    assert strength[pubfig.class_labels == miley].min() == pubfig.relative_ordering[young].max()
    assert strength[pubfig.class_labels == viggo].max() == pubfig.relative_ordering[young].min()
    with pytest.raises(ValueError, match="unknown PubFig attribute"):
        pubfig.attribute_index("Tall")


def test_missing_folder_and_env_override(tmp_path, monkeypatch):
    with pytest.raises(FileNotFoundError, match=r"data\.mat"):
        load_pubfig(tmp_path)
    monkeypatch.setenv(ROOT_ENV_VAR, str(tmp_path))
    assert resolve_root() == tmp_path
    with pytest.raises(FileNotFoundError, match=ROOT_ENV_VAR):
        load_pubfig()


def test_missing_images_are_reported(tmp_path):
    shutil.copy(DEFAULT_ROOT / "data.mat", tmp_path / "data.mat")
    (tmp_path / "images").mkdir()
    with pytest.raises(FileNotFoundError, match="772 PubFig images missing"):
        load_pubfig(Path(tmp_path))
