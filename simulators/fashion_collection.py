"""Fashion-MNIST as an image collection: nine real descriptors, the 36-d phi, graded relevance.

The online-LTR paper describes every image with nine descriptors compared under four
similarity measures (§5.1). For 28x28 grey product photos on a black background these
nine, all from `simulators.batch_descriptors` (numpy and scikit-image, a chunk of
photos at a time), cover intensity, edges, texture and shape:

=====================  ====  =============================================================
intensity_histogram      16  grey-level distribution (dark knits vs bright prints)
gradient_histogram       20  global edge orientations and strengths
hog                     324  scikit-image HOG, 4x4 cells of 7x7 pixels, 2x2-cell blocks
lbp                      40  riu2 LBP codes of the 3x3 neighbourhood, per image quadrant
gabor                    32  Gabor energies, 2 frequencies x 4 orientations x quadrants
glcm                     12  co-occurrence texture (contrast ... entropy) at distances 1, 2
moments                  14  Hu invariants and normalised central moments of the silhouette
dct                      36  6x6 lowest-frequency DCT coefficients (coarse layout)
thumbnail                49  7x7 block means (the silhouette at low resolution)
=====================  ====  =============================================================

They are computed once for the 70,000 photos (about 0.7 ms of CPU a photo, in two
processes: ~40 s on a busy 2-core machine, progress shown) and cached as npy files
(150 MB) under the caller's cache directory, named by a hash of the descriptor settings
and of the idx files' bytes; phi(q, p) is then `simulators.similarity.PhiMap` over the
cached matrices, on demand.

Relevance is `simulators.fashion_mnist.graded_relevance` (2 same class, 1 same group of
classes, 0 otherwise). Every photo is "ground truth": queries are drawn from all of them.
The first-stage retrieval (`simulators.retrieval.CandidateIndex`) codes each photo from
its descriptors, each standardised over the collection and the nine blocks equally
weighted, so no descriptor dominates the code by its length or scale.
"""

from __future__ import annotations

import hashlib
import json
import multiprocessing
import os
from collections.abc import Callable, Iterator
from concurrent.futures import ProcessPoolExecutor
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import ClassVar

import numpy as np

from rankstream.simulators import batch_descriptors as batch
from rankstream.simulators.cache_files import atomic_directory
from rankstream.simulators.cbir_testbed import (
    DATABASE_SAMPLE,
    DEFAULT_TRAIN_ROWS,
    CBIRTestBed,
    sampled_testbed,
    served_testbed,
)
from rankstream.simulators.fashion_mnist import (
    DEFAULT_DIR,
    SPLIT_FILES,
    FashionMNISTMissingError,
    graded_relevance,
    is_installed,
    load_fashion_mnist,
    missing_message,
)
from rankstream.simulators.images import ServedCollection, check_image_id, check_image_ids
from rankstream.simulators.judged_feedback import SERVED_CANDIDATES
from rankstream.simulators.progress_bar import progress_bar
from rankstream.simulators.retrieval import CandidateIndex
from rankstream.simulators.similarity import PhiMap

DESCRIPTOR_VERSION = 1  # bump when a descriptor's code changes: old caches then miss
PHOTOS_PER_CALL = 256  # photos per batch call: large enough to vectorise, small enough for cache
PARALLEL_MIN_PHOTOS = 8_192  # fewer photos than this are described in-process by default

PHOTO_DESCRIPTORS: dict[str, partial] = {
    "intensity_histogram": partial(batch.intensity_histograms, bins=16),
    "gradient_histogram": partial(batch.gradient_histograms, orientations=12, magnitude_bins=8),
    "hog": partial(batch.hog, orientations=9, cells=(4, 4), cells_per_block=(2, 2)),
    "lbp": partial(batch.lbp_histograms, grid=(2, 2)),
    "gabor": partial(batch.gabor_energies, frequencies=(0.15, 0.3), orientations=4, grid=(2, 2)),
    "glcm": partial(batch.glcm_texture, distances=(1, 2), levels=16),
    "moments": partial(batch.moment_features),
    "dct": partial(batch.dct_lowfreq, size=6),
    "thumbnail": partial(batch.zoning, grid=(7, 7)),
}
"""The nine descriptors in phi's order, each a batch function with its settings."""

Progress = bool | Callable[[str], None]
"""True: a progress bar on stderr; False: silence; a callable: called with messages."""


def descriptor_settings() -> list[dict[str, object]]:
    """The descriptors' names, functions and settings as JSON-ready data (for cache keys)."""
    return [
        {"name": name, "function": f.func.__name__, **{k: repr(v) for k, v in f.keywords.items()}}
        for name, f in PHOTO_DESCRIPTORS.items()
    ]


def _describe_chunk(images: np.ndarray) -> list[np.ndarray]:
    """The nine descriptor matrices (float32) of one chunk of uint8 photos."""
    scaled = images.astype(np.float64) / 255.0
    return [f(scaled).astype(np.float32) for f in PHOTO_DESCRIPTORS.values()]


@contextmanager
def _reporter(progress: Progress, label: str, total: int) -> Iterator[Callable[[int], None]]:
    """`advance(done)` for a job of `total` items, shown as `progress` asks."""
    if callable(progress):
        yield lambda done: progress(f"{label}: {done:,} / {total:,}")
        return
    with progress_bar(bool(progress), label, total) as advance_one:
        last = 0

        def advance(done: int) -> None:
            nonlocal last
            for _ in range(done - last):
                advance_one()
            last = done

        yield advance


def default_workers() -> int:
    """Worker processes for describing photos: the cores this process may use, at most 2."""
    return max(1, min(2, len(os.sched_getaffinity(0))))


def describe_photos(
    images: np.ndarray,
    progress: Progress = False,
    workers: int | None = None,
    chunk_size: int = PHOTOS_PER_CALL,
) -> dict[str, np.ndarray]:
    """Name -> (n, d) float32 matrix of each of the nine descriptors of uint8 photos (n, h, w).

    With `workers` > 1 the chunks are described in that many spawned processes (numpy's
    array programs here are single-threaded), in order, so the result is the same. By
    default (None) that is `default_workers()` for 8,192 photos or more (starting the
    processes costs about a second), else one.
    """
    images = np.asarray(images)
    if images.ndim != 3 or images.dtype != np.uint8:
        raise ValueError(f"need uint8 photos (n, h, w), got {images.dtype}{images.shape}")
    if workers is None:
        workers = default_workers() if len(images) >= PARALLEL_MIN_PHOTOS else 1
    chunks = [images[i : i + chunk_size] for i in range(0, len(images), chunk_size)]
    parts: list[list[np.ndarray]] = []
    with _reporter(progress, "describing photos", len(images)) as advance, ExitStack() as stack:
        if workers > 1 and len(chunks) > 1:
            context = multiprocessing.get_context("spawn")  # no fork of a threaded parent
            pool = stack.enter_context(ProcessPoolExecutor(workers, mp_context=context))
            described = pool.map(_describe_chunk, chunks)
        else:
            described = map(_describe_chunk, chunks)
        done = 0
        for part in described:
            parts.append(part)
            done += len(part[0])
            advance(done)
    return {
        name: np.concatenate([part[d] for part in parts])
        for d, name in enumerate(PHOTO_DESCRIPTORS)
    }


def _files_digest(directory: Path) -> str:
    """sha256 over the four idx files' bytes: a changed data package misses the cache."""
    if not is_installed(directory):
        raise FashionMNISTMissingError(missing_message(directory))
    digest = hashlib.sha256()
    for files in SPLIT_FILES.values():
        for name in files:
            digest.update((directory / name).read_bytes())
    return digest.hexdigest()


def cache_key(directory: Path, limit: int | None) -> str:
    payload = json.dumps(
        {
            "version": DESCRIPTOR_VERSION,
            "descriptors": descriptor_settings(),
            "files": _files_digest(directory),
            "limit": limit,
        },
        sort_keys=True,
    )
    return hashlib.sha256(payload.encode()).hexdigest()[:16]


@dataclass(frozen=True)
class FashionMNISTCollection:
    """The photos' labels and cached descriptors, answering `simulators.catalog`'s questions."""

    name: ClassVar[str] = "fashion-mnist"

    labels: np.ndarray  # (n,) uint8 class of each photo (train ids first, then test)
    descriptors: dict[str, np.ndarray]  # name -> (n, d) float32, `PHOTO_DESCRIPTORS` order
    key: str  # the descriptor cache's key
    phi_map: PhiMap = field(init=False, repr=False)
    _retrieval: tuple[np.ndarray, np.ndarray] = field(init=False, repr=False)

    def __post_init__(self) -> None:
        if list(self.descriptors) != list(PHOTO_DESCRIPTORS):
            raise ValueError(f"descriptors must be {list(PHOTO_DESCRIPTORS)} in that order")
        object.__setattr__(self, "phi_map", PhiMap().fit(self.descriptors))
        if self.phi_map.n_images != len(self.labels):
            raise ValueError(f"{self.phi_map.n_images} descriptor rows, {len(self.labels)} labels")
        # standardise each column, then weight each block 1/sqrt(its length * 9)
        means, scales = [], []
        for matrix in self.descriptors.values():
            std = matrix.std(axis=0, dtype=np.float64)
            weight = 1.0 / np.sqrt(matrix.shape[1] * len(self.descriptors))
            means.append(matrix.mean(axis=0, dtype=np.float64))
            scales.append(np.where(std > 0, weight / np.where(std > 0, std, 1.0), 0.0))
        retrieval = (np.concatenate(means), np.concatenate(scales))
        object.__setattr__(self, "_retrieval", tuple(a.astype(np.float32) for a in retrieval))

    @property
    def n_images(self) -> int:
        return int(self.labels.shape[0])

    @property
    def feature_names(self) -> tuple[str, ...]:
        return tuple(self.phi_map.feature_names)

    @property
    def ground_truth_ids(self) -> np.ndarray:
        """Every photo has a known class, so every photo can be a query."""
        return np.arange(self.n_images)

    @property
    def cache_key(self) -> str:
        return self.key

    def phi(self, image_id: int, candidate_ids: np.ndarray) -> np.ndarray:
        """(k, 36) float32: the nine descriptors under the four measures, descriptor-major."""
        ids = check_image_ids(candidate_ids, self.n_images)
        query = check_image_id(image_id, self.n_images)
        return self.phi_map.phi(query, ids).astype(np.float32)

    def relevance(self, image_id: int, candidate_ids: np.ndarray) -> np.ndarray:
        query = self.labels[check_image_id(image_id, self.n_images)]
        ids = check_image_ids(candidate_ids, self.n_images)
        return graded_relevance(int(query), self.labels[ids])

    def retrieval_features(self, rows: np.ndarray | slice) -> np.ndarray:
        """Standardised, block-equalised descriptors of these photos: (m, 543) float32."""
        mean, scale = self._retrieval
        stacked = np.hstack([matrix[rows] for matrix in self.descriptors.values()])
        return ((stacked - mean) * scale).astype(np.float32)

    # ---- on-disk cache -------------------------------------------------------------

    def save(self, directory: str | os.PathLike) -> Path:
        """Write npy arrays + JSON meta atomically (`cache_files.atomic_directory`)."""
        with atomic_directory(directory) as tmp:
            np.save(tmp / "labels.npy", self.labels)
            for name, matrix in self.descriptors.items():
                np.save(tmp / f"{name}.npy", matrix)
            meta = {"key": self.key, "descriptors": descriptor_settings()}
            (tmp / "meta.json").write_text(json.dumps(meta, sort_keys=True))
        return Path(directory)

    @classmethod
    def load(cls, directory: str | os.PathLike) -> FashionMNISTCollection:
        root = Path(directory)
        meta = json.loads((root / "meta.json").read_text())

        def read(name: str) -> np.ndarray:
            return np.load(root / f"{name}.npy", allow_pickle=False)

        descriptors = {name: read(name) for name in PHOTO_DESCRIPTORS}
        return cls(read("labels"), descriptors, meta["key"])

    @classmethod
    def load_or_build(
        cls,
        cache_dir: str | os.PathLike,
        progress: Progress = True,
        directory: Path | str = DEFAULT_DIR,
        limit: int | None = None,
        workers: int | None = None,
    ) -> FashionMNISTCollection:
        """The cached collection under `cache_dir`, described on a miss.

        `limit` keeps the first `limit` photos of each split (for tests on a small slice).
        """
        directory = Path(directory)
        key = cache_key(directory, limit)
        target = Path(cache_dir) / f"fashion-mnist-{key}"
        if (target / "meta.json").exists():
            return cls.load(target)
        data = load_fashion_mnist(directory, limit)
        descriptors = describe_photos(data.images, progress=progress, workers=workers)
        return cls.load(cls(data.labels, descriptors, key).save(target))


def load_served(
    cache_dir: str | os.PathLike,
    progress: Progress = True,
    directory: Path | str = DEFAULT_DIR,
    limit: int | None = None,
    index_seed: int = 0,
) -> ServedCollection:
    """The collection and its first-stage candidate index, both cached under `cache_dir`."""
    collection = FashionMNISTCollection.load_or_build(cache_dir, progress, directory, limit)
    if callable(progress):
        progress("indexing Fashion-MNIST for candidate retrieval")
    index = CandidateIndex.load_or_build(
        collection, cache_dir, seed=index_seed, progress=progress is True
    )
    return ServedCollection(collection, index)


PAPER_VAL_QUERIES = 1_500
PAPER_TEST_QUERIES = 750


def _served_for_testbed(
    cache_dir: str | os.PathLike | None,
    progress: Callable[[str], None] | None,
    directory: Path | str,
    limit: int | None,
) -> ServedCollection:
    if cache_dir is None:
        raise ValueError("the Fashion-MNIST test beds need a cache_dir for their descriptors")
    served = load_served(cache_dir, progress=progress or False, directory=directory, limit=limit)
    if progress is not None:
        progress("sampling training pairs and judging validation and test queries")
    return served


def load_fashion_mnist_testbed(
    seed: int = 0,
    train_rows: int = DEFAULT_TRAIN_ROWS,
    max_val_queries: int | None = PAPER_VAL_QUERIES,
    max_test_queries: int | None = PAPER_TEST_QUERIES,
    cache_dir: str | os.PathLike | None = None,
    progress: Callable[[str], None] | None = None,
    sample_size: int = DATABASE_SAMPLE,
    directory: Path | str = DEFAULT_DIR,
    limit: int | None = None,
) -> CBIRTestBed:
    """The paper's Table 2 protocol on Fashion-MNIST (`cbir_testbed.sampled_testbed`).

    Five folds of the 70,000 photos; 200,000 training pairs from three folds' queries;
    by default the paper's 1,500 validation and 750 test queries (§5.1: 300 and 150 from
    each of five folds), each ranking a uniform sample of 1,000 photos of the whole
    collection. `cache_dir` (required) holds the descriptors.
    """
    served = _served_for_testbed(cache_dir, progress, directory, limit)
    return sampled_testbed(
        served.collection, seed, train_rows, max_val_queries, max_test_queries, sample_size
    )


def load_fashion_mnist_retrieved_testbed(
    seed: int = 0,
    train_rows: int = DEFAULT_TRAIN_ROWS,
    max_val_queries: int | None = PAPER_VAL_QUERIES,
    max_test_queries: int | None = PAPER_TEST_QUERIES,
    cache_dir: str | os.PathLike | None = None,
    progress: Callable[[str], None] | None = None,
    candidates: int = SERVED_CANDIDATES,
    directory: Path | str = DEFAULT_DIR,
    limit: int | None = None,
) -> CBIRTestBed:
    """As `load_fashion_mnist_testbed`, but each query ranks the 300 candidates the §5.5
    stream's first stage retrieves for it (`cbir_testbed.served_testbed`): what a learned
    model adds on top of the stream's retrieval."""
    served = _served_for_testbed(cache_dir, progress, directory, limit)
    return served_testbed(
        served, seed, train_rows, max_val_queries, max_test_queries, candidates=candidates
    )
