"""What the feedback loop reads of an image collection: the interface both collections keep.

`simulators.judged_feedback.FeedbackSimulator` needs a collection that answers a few questions
(`ImageCollection`) and a first-stage retrieval over it (`CandidateRetriever`); the
synthetic collection (`simulators.collection`) and Fashion-MNIST's photos
(`simulators.fashion_collection`) implement them, and `simulators.catalog` names them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol, runtime_checkable

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


SERVED_CANDIDATES = 300
"""Candidates the first stage retrieves per query and a model ranks (the paper's §5.5)."""


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

    def candidates(self, query_id: int, k: int = SERVED_CANDIDATES) -> np.ndarray: ...


@dataclass(frozen=True)
class ServedCollection:
    """A collection and the first-stage retrieval the feedback loop serves it with."""

    collection: ImageCollection
    index: CandidateRetriever
