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
from typing import Any

from rankstream.simulators.images import ServedCollection

CollectionLoader = Callable[..., ServedCollection]


def load_synthetic(
    cache_dir: str | os.PathLike,
    progress: bool = True,
    n_images: int | None = None,
    collection_seed: int = 0,
) -> ServedCollection:
    """The synthetic collection (default: the paper's 1,007,157 images) and its index."""
    from rankstream.simulators.collection import load_served

    return load_served(cache_dir, progress, n_images=n_images, collection_seed=collection_seed)


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
