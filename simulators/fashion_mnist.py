"""Loader for Fashion-MNIST as Debian's `dataset-fashion-mnist` installs it.

Zalando's Fashion-MNIST is 60,000 training and 10,000 test grey 28x28 product photos in
ten classes, shipped as the original gzipped idx files under
`/usr/share/datasets/fashion-mnist/`. rankstream treats the 70,000 as one collection:
image id i < 60,000 is training image i, id 60,000 + j is test image j.

Graded relevance comes from the natural grouping of the classes, the way the synthetic
collection's topic hierarchy gives it (`simulators.collection`): 2 for the same class, 1
for another class of the same group (tops: T-shirt/top, pullover, coat, shirt; footwear:
sandal, sneaker, ankle boot), 0 otherwise. Trouser, dress and bag are groups of one.

Example (the first five test images):
    >>> data = load_fashion_mnist(limit=5)
    >>> data.images.shape, data.images.dtype.name, [CLASS_NAMES[k] for k in data.labels[:2]]
    ((10, 28, 28), 'uint8', ['Ankle boot', 'T-shirt/top'])
"""

from __future__ import annotations

import gzip
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

import numpy as np

DEBIAN_PACKAGE = "dataset-fashion-mnist"
DEFAULT_DIR = Path("/usr/share/datasets/fashion-mnist")
SPLIT_FILES = {
    "train": ("train-images-idx3-ubyte.gz", "train-labels-idx1-ubyte.gz"),
    "test": ("t10k-images-idx3-ubyte.gz", "t10k-labels-idx1-ubyte.gz"),
}
SPLIT_SIZES = {"train": 60_000, "test": 10_000}
IMAGE_SHAPE = (28, 28)

CLASS_NAMES = (
    "T-shirt/top", "Trouser", "Pullover", "Dress", "Coat",
    "Sandal", "Shirt", "Sneaker", "Bag", "Ankle boot",
)  # fmt: skip
GROUPS: dict[str, tuple[str, ...]] = {
    "tops": ("T-shirt/top", "Pullover", "Coat", "Shirt"),
    "footwear": ("Sandal", "Sneaker", "Ankle boot"),
    "trouser": ("Trouser",),
    "dress": ("Dress",),
    "bag": ("Bag",),
}
"""The five groups of classes graded relevance is built on (every class in exactly one)."""

RELEVANCE_SAME_CLASS = 2
RELEVANCE_SAME_GROUP = 1

_IDX_UBYTE = 0x08


class FashionMNISTMissingError(FileNotFoundError):
    """The idx files are not where the Debian package puts them."""


def missing_message(directory: Path) -> str:
    return (
        f"Fashion-MNIST is not installed: {directory} lacks its idx files. It comes from the "
        f"Debian package {DEBIAN_PACKAGE}: `make demo` / `make test` install it, or run "
        f"`sudo apt-get install -y {DEBIAN_PACKAGE}`"
    )


def is_installed(directory: Path | str = DEFAULT_DIR) -> bool:
    """Whether the four idx files are in `directory`."""
    names = [name for files in SPLIT_FILES.values() for name in files]
    return all((Path(directory) / name).is_file() for name in names)


def group_of_class() -> np.ndarray:
    """(10,) int64: the index into `GROUPS` of each class."""
    group = np.full(len(CLASS_NAMES), -1, dtype=np.int64)
    for g, members in enumerate(GROUPS.values()):
        for name in members:
            group[CLASS_NAMES.index(name)] = g
    assert (group >= 0).all()  # GROUPS covers every class
    return group


def graded_relevance(query_label: int, candidate_labels: np.ndarray) -> np.ndarray:
    """int8 relevance of candidates (by class label) to a query of class `query_label`."""
    groups = group_of_class()
    labels = np.asarray(candidate_labels, dtype=np.int64)
    relevance = np.where(groups[labels] == groups[int(query_label)], RELEVANCE_SAME_GROUP, 0)
    relevance[labels == int(query_label)] = RELEVANCE_SAME_CLASS
    return relevance.astype(np.int8)


def _read_exactly(stream: BinaryIO, size: int, path: Path) -> bytes:
    data = stream.read(size)
    if len(data) != size:
        raise ValueError(f"{path}: truncated idx file (wanted {size} bytes, got {len(data)})")
    return data


def read_idx(path: Path | str, limit: int | None = None) -> np.ndarray:
    """The uint8 array of an idx file (gzipped or not); only the first `limit` items if given.

    idx: two zero bytes, a type byte (0x08 = unsigned byte), the number of dimensions,
    one big-endian uint32 per dimension, then the data in C order.
    """
    path = Path(path)
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rb") as stream:
        zeros, kind, ndim = struct.unpack(">HBB", _read_exactly(stream, 4, path))
        if zeros != 0 or kind != _IDX_UBYTE or ndim < 1:
            raise ValueError(f"{path}: not an unsigned-byte idx file (header {zeros}, {kind})")
        shape = struct.unpack(f">{ndim}I", _read_exactly(stream, 4 * ndim, path))
        count = shape[0] if limit is None else min(shape[0], int(limit))
        item = int(np.prod(shape[1:], dtype=np.int64))
        data = _read_exactly(stream, count * item, path)
    return np.frombuffer(data, dtype=np.uint8).reshape((count, *shape[1:])).copy()


@dataclass(frozen=True)
class FashionMNIST:
    """The photos (n, 28, 28) uint8, their class labels (n,) and the training-split size."""

    images: np.ndarray
    labels: np.ndarray
    n_train: int

    @property
    def n_images(self) -> int:
        return int(self.labels.shape[0])


def load_fashion_mnist(
    directory: Path | str = DEFAULT_DIR, limit: int | None = None
) -> FashionMNIST:
    """Training then test images and labels; `limit` keeps the first `limit` of each split.

    Raises `FashionMNISTMissingError` (naming the Debian package) when the files are absent.
    """
    root = Path(directory)
    if not is_installed(root):
        raise FashionMNISTMissingError(missing_message(root))
    images, labels = [], []
    for split, (image_file, label_file) in SPLIT_FILES.items():
        split_images = read_idx(root / image_file, limit)
        split_labels = read_idx(root / label_file, limit)
        expected = SPLIT_SIZES[split] if limit is None else min(SPLIT_SIZES[split], limit)
        if split_images.shape != (expected, *IMAGE_SHAPE) or split_labels.shape != (expected,):
            raise ValueError(
                f"{root}: {split} split has images {split_images.shape} and labels "
                f"{split_labels.shape}, expected {expected} of {IMAGE_SHAPE}"
            )
        if split_labels.max() >= len(CLASS_NAMES):
            raise ValueError(f"{root}: {split} labels outside 0..{len(CLASS_NAMES) - 1}")
        images.append(split_images)
        labels.append(split_labels)
    return FashionMNIST(
        images=np.concatenate(images), labels=np.concatenate(labels), n_train=len(labels[0])
    )
