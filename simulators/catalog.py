"""The image collections the §5.5 feedback loop can serve, by name.

`simulators.judged_feedback.FeedbackSimulator` needs a collection that answers five questions
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

import inspect
import os
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # the command line lists the names without importing numpy
    from rankstream.simulators.images import ServedCollection

CollectionLoader = Callable[..., "ServedCollection"]


def load_synthetic(
    cache_dir: str | os.PathLike,
    progress: bool = True,
    n_images: int | None = None,
    collection_seed: int = 0,
) -> ServedCollection:
    """The synthetic collection (default: the paper's 1,007,157 images) and its index."""
    # a loader imports numpy and its collection (+0.45 s synthetic, +3 s Fashion-MNIST)
    from rankstream.simulators.collection import load_served

    return load_served(cache_dir, progress, n_images=n_images, collection_seed=collection_seed)


def load_fashion_mnist(
    cache_dir: str | os.PathLike,
    progress: bool = True,
    directory: str | os.PathLike | None = None,
    limit: int | None = None,
    index_seed: int = 0,
) -> ServedCollection:
    """Fashion-MNIST's 70,000 photos (descriptors cached once) and their index.

    `directory` holds the idx files (default: where Debian's package puts them),
    `limit` keeps the first photos of each split, `index_seed` seeds the first stage
    (`simulators.fashion_collection.load_served`).
    """
    # see load_synthetic
    from rankstream.simulators.fashion_collection import DEFAULT_DIR, load_served

    return load_served(
        cache_dir,
        progress=progress,
        directory=DEFAULT_DIR if directory is None else directory,
        limit=limit,
        index_seed=index_seed,
    )


COLLECTIONS: dict[str, CollectionLoader] = {
    "synthetic": load_synthetic,
    "fashion-mnist": load_fashion_mnist,
}
"""Collection name -> loader(cache_dir, progress, **options) -> ServedCollection."""


def check_name(name: str) -> str:
    """`name` if the catalog has it; a ValueError naming the choices otherwise."""
    if name not in COLLECTIONS:
        raise ValueError(f"unknown collection {name!r}; choose from {sorted(COLLECTIONS)}")
    return name


def loader_options(name: str) -> tuple[str, ...]:
    """The options the named collection's loader takes (its keyword parameters)."""
    parameters = inspect.signature(COLLECTIONS[check_name(name)]).parameters
    return tuple(p for p in parameters if p not in ("cache_dir", "progress"))


def check_options(name: str, options: dict[str, Any]) -> dict[str, Any]:
    """`options` if the named collection's loader takes them all; a ValueError otherwise.

    >>> check_options("fashion-mnist", {"n_images": 1000})  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    ValueError: collection 'fashion-mnist' takes no option n_images; it takes directory, ...
    """
    known = loader_options(name)
    unknown = [option for option in options if option not in known]
    if unknown:
        raise ValueError(
            f"collection {name!r} takes no option {', '.join(unknown)}; "
            f"it takes {', '.join(known) or 'none'}"
        )
    return options


def load_collection(
    name: str, cache_dir: str | os.PathLike, progress: bool = True, **options: Any
) -> ServedCollection:
    """The named collection with its first-stage index, built or read under `cache_dir`."""
    check_options(name, options)
    return COLLECTIONS[name](cache_dir, progress=progress, **options)
