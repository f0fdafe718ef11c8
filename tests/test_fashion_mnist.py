"""The Fashion-MNIST loader on the real idx files: header parsing, slices, errors, grading.

The files come from the Debian package `make test` installs; without it the tests that
read them are skipped with the loader's message, which names the package (failed under
CI=true: tests/conftest.py).
"""

from __future__ import annotations

import doctest
import gzip
import shutil

import numpy as np
import pytest

from rankstream.simulators import fashion_mnist
from rankstream.simulators.fashion_mnist import (
    CLASS_NAMES,
    DEBIAN_PACKAGE,
    DEFAULT_DIR,
    GROUPS,
    SPLIT_FILES,
    FashionMNISTMissingError,
    graded_relevance,
    group_of_class,
    load_fashion_mnist,
    read_idx,
)


@pytest.fixture(scope="module")
def sliced():
    return load_fashion_mnist(limit=200)


def test_a_slice_holds_the_first_photos_of_each_split(sliced) -> None:
    assert sliced.images.shape == (400, 28, 28) and sliced.images.dtype == np.uint8
    assert sliced.labels.shape == (400,) and sliced.n_train == 200
    # the published first labels of each split (Zalando's README: 9 0 0 3 0 / 9 2 1 1 6)
    np.testing.assert_array_equal(sliced.labels[:5], [9, 0, 0, 3, 0])
    np.testing.assert_array_equal(sliced.labels[200:205], [9, 2, 1, 1, 6])
    # photos, not noise: mostly black background around a brighter object
    assert (sliced.images == 0).mean() > 0.3
    assert sliced.images[:, 10:18, 10:18].mean() > 2 * sliced.images.mean()


def test_read_idx_reads_headers_and_limits() -> None:
    images = read_idx(DEFAULT_DIR / SPLIT_FILES["test"][0], limit=3)
    labels = read_idx(DEFAULT_DIR / SPLIT_FILES["test"][1])
    assert images.shape == (3, 28, 28)
    assert labels.shape == (10_000,) and np.bincount(labels).tolist() == [1000] * 10


def test_read_idx_reads_uncompressed_files_alike(tmp_path) -> None:
    plain = tmp_path / "labels-idx1-ubyte"
    with gzip.open(DEFAULT_DIR / SPLIT_FILES["test"][1]) as source:
        plain.write_bytes(source.read())
    np.testing.assert_array_equal(
        read_idx(plain, limit=50), read_idx(DEFAULT_DIR / SPLIT_FILES["test"][1], limit=50)
    )


def test_bad_files_raise_clear_errors(tmp_path) -> None:
    not_idx = tmp_path / "x-idx"
    not_idx.write_bytes(b"\x01\x02\x03\x04rest")
    with pytest.raises(ValueError, match="not an unsigned-byte idx"):
        read_idx(not_idx)
    truncated = tmp_path / "t-idx"
    truncated.write_bytes(b"\x00\x00\x08\x01\x00\x00\x00\x0a" + bytes(4))
    with pytest.raises(ValueError, match="truncated"):
        read_idx(truncated)


def test_missing_files_name_the_debian_package(tmp_path) -> None:
    shutil.copy(DEFAULT_DIR / SPLIT_FILES["train"][0], tmp_path)  # one of four files
    with pytest.raises(FashionMNISTMissingError, match=DEBIAN_PACKAGE) as error:
        load_fashion_mnist(tmp_path)
    assert isinstance(error.value, FileNotFoundError)
    assert f"apt-get install -y {DEBIAN_PACKAGE}" in str(error.value)


def test_groups_partition_the_classes() -> None:
    members = [name for names in GROUPS.values() for name in names]
    assert sorted(members) == sorted(CLASS_NAMES)
    groups = group_of_class()
    assert groups[CLASS_NAMES.index("Coat")] == groups[CLASS_NAMES.index("Shirt")]
    assert groups[CLASS_NAMES.index("Coat")] != groups[CLASS_NAMES.index("Dress")]


def test_graded_relevance_follows_the_class_grouping() -> None:
    shirt, coat, sneaker = (CLASS_NAMES.index(n) for n in ("Shirt", "Coat", "Sneaker"))
    sandal, boot, bag = (CLASS_NAMES.index(n) for n in ("Sandal", "Ankle boot", "Bag"))
    got = graded_relevance(shirt, np.array([shirt, coat, sneaker, bag]))
    np.testing.assert_array_equal(got, [2, 1, 0, 0])
    assert got.dtype == np.int8
    np.testing.assert_array_equal(graded_relevance(sandal, np.array([boot, sneaker])), [1, 1])
    np.testing.assert_array_equal(graded_relevance(bag, np.array([bag, coat, boot])), [2, 0, 0])


def test_docstring_example_runs_on_the_real_files() -> None:
    load_fashion_mnist(limit=1)  # the files are there (doctest would swallow the error)
    result = doctest.testmod(fashion_mnist, optionflags=doctest.ELLIPSIS)
    assert result.attempted > 0 and result.failed == 0
