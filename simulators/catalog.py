"""The image collections the §5.5 feedback loop can serve, by name.

`simulators.feedback.FeedbackSimulator` needs a collection that answers five questions
(`ImageCollection`) and a first-stage retrieval over it (`CandidateRetriever`). Two
collections implement them: the synthetic ImageCLEF/Flickr-like one
(`simulators.collection`) and Fashion-MNIST's 70,000 real photos
(`simulators.fashion_collection`). Both use `simulators.retrieval.CandidateIndex` as
their first stage, built from the collection's own `retrieval_features`.

`COLLECTIONS` maps a name to a loader `loader(cache_dir, progress, **options) ->
ServedCollection`; everything a loader builds (collections, descriptors, indexes) is
cached under `cache_dir`, which the caller chooses (simulators never read the
environment).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

import numpy as np


@runtime_checkable
class ImageCollection(Protocol):
    """What the feedback loop, the candidate index and the test beds read of a collection."""

    name: str  # the catalog name, also put in reports

    @property
    def n_images(self) -> int: ...

    @property
    def feature_names(self) -> tuple[str, ...]:
        """The 36 phi columns, descriptor-major ("descriptor:measure")."""
        ...

    @property
    def ground_truth_ids(self) -> np.ndarray:
        """The images whose relevance is known: the ones queries are drawn from."""
        ...

    @property
    def cache_key(self) -> str:
        """A short string naming this exact collection, for caches built on it."""
        ...

    def phi(self, image_id: int, candidate_ids: np.ndarray) -> np.ndarray:
        """(k, 36) float32 query-dependent features of the candidates."""
        ...

    def relevance(self, image_id: int, candidate_ids: np.ndarray) -> np.ndarray:
        """(k,) int8 graded relevance (0, 1, 2) of the candidates to the query image."""
        ...

    def retrieval_features(self, rows: np.ndarray | slice) -> np.ndarray:
        """(m, D) float32 input of the first-stage retrieval's codes for these images."""
        ...


def check_image_id(image_id: int, n_images: int) -> int:
    """The id as an int, or a ValueError if it names no image of the collection."""
    i = int(image_id)
    if not 0 <= i < n_images:
        raise ValueError(f"image id {image_id} outside [0, {n_images})")
    return i


def check_image_ids(ids: np.ndarray, n_images: int) -> np.ndarray:
    """Candidate ids as a 1-d integer array, or a ValueError saying what is wrong."""
    arr = np.asarray(ids)
    if arr.ndim != 1 or not np.issubdtype(arr.dtype, np.integer):
        raise ValueError(f"candidate ids must be a 1-d integer array, got {arr.dtype}{arr.shape}")
    if arr.size and (arr.min() < 0 or arr.max() >= n_images):
        raise ValueError(f"candidate ids outside [0, {n_images})")
    return arr


class CandidateRetriever(Protocol):
    """The search engine's first stage: the k images nearest a query, nearest first."""

    def candidates(self, query_id: int, k: int = 300) -> np.ndarray: ...


@dataclass(frozen=True)
class ServedCollection:
    """A collection and the first-stage retrieval the feedback loop serves it with."""

    collection: ImageCollection
    index: CandidateRetriever


CollectionLoader = Callable[..., ServedCollection]


def load_synthetic(
    cache_dir: str | os.PathLike,
    progress: bool = True,
    n_images: int | None = None,
    collection_seed: int = 0,
) -> ServedCollection:
    """The synthetic collection (default: the paper's 1,007,157 images) and its index."""
    from rankstream.simulators.collection import PAPER_N_IMAGES, Collection
    from rankstream.simulators.retrieval import CandidateIndex

    collection = Collection.load_or_build(
        cache_dir, progress=progress, n_images=n_images or PAPER_N_IMAGES, seed=collection_seed
    )
    index = CandidateIndex.load_or_build(
        collection, cache_dir, seed=collection_seed, progress=progress
    )
    return ServedCollection(collection, index)


def load_fashion_mnist(
    cache_dir: str | os.PathLike, progress: bool = True, **options: Any
) -> ServedCollection:
    """Fashion-MNIST's 70,000 photos (descriptors cached once) and their index.

    Options are `simulators.fashion_collection.load_served`'s (`directory`, `limit`,
    `index_seed`).
    """
    from rankstream.simulators.fashion_collection import load_served

    return load_served(cache_dir, progress=progress, **options)


COLLECTIONS: dict[str, CollectionLoader] = {
    "synthetic": load_synthetic,
    "fashion-mnist": load_fashion_mnist,
}
"""Collection name -> loader(cache_dir, progress, **options) -> ServedCollection."""


def load_collection(
    name: str, cache_dir: str | os.PathLike, progress: bool = True, **options: Any
) -> ServedCollection:
    """The named collection with its first-stage index, built or read under `cache_dir`."""
    if name not in COLLECTIONS:
        raise ValueError(f"unknown collection {name!r}; choose from {sorted(COLLECTIONS)}")
    return COLLECTIONS[name](cache_dir, progress=progress, **options)
