"""Candidate retrieval over a million images without scanning them all.

The simulated search engine first fetches K candidates per query (default 300) and
only those get the 36 phi features and the serving model's ranking. Scanning 1M images
with 36 measures per query is too slow for a stream, so this is an inverted-file (IVF)
index, topic-agnostic like a real engine's first stage:

1. every image gets a compact *global code*: the collection's `retrieval_features`
   (for the synthetic collection each descriptor L1-normalised and square-rooted, the
   Hellinger map, so Euclidean distance on it tracks the Bhattacharyya similarity of
   histograms and ignores intensity, the nine blocks equally weighted), then PCA to
   `code_dim` (32) dimensions;
2. k-means (Lloyd, on a sample) splits the codes into ~sqrt(n) cells; images are stored
   cell by cell so a cell's codes are one contiguous slice;
3. a query probes cells nearest-centroid first until it has gathered at least
   `pool_factor * k` images, and returns the k nearest of those by code distance,
   nearest first, never the query image itself.

At 1M images a query touches ~1% of the codes (a few ms). The index is deterministic
from its seed and caches as npy arrays next to the collection. It serves any
`simulators.catalog.ImageCollection` (it reads `n_images`, `retrieval_features` and
`cache_key`).
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from rankstream.simulators.cache_files import atomic_directory
from rankstream.simulators.images import SERVED_CANDIDATES
from rankstream.simulators.progress_bar import progress_bar

if TYPE_CHECKING:
    from rankstream.simulators.images import ImageCollection

INDEX_VERSION = 1
_ASSIGN_CHUNK = 65_536


@dataclass(frozen=True)
class CandidateIndex:
    """IVF index: PCA projection, k-means centroids and cell-ordered codes."""

    mean: np.ndarray  # (D,) float32, PCA centre
    projection: np.ndarray  # (D, code_dim) float32
    centroids: np.ndarray  # (n_cells, code_dim) float32
    cell_start: np.ndarray  # (n_cells + 1,) int64: cell c holds rows cell_start[c]:cell_start[c+1]
    ids: np.ndarray  # (n,) int32 image id of each cell-ordered row
    codes: np.ndarray  # (n, code_dim) float32 cell-ordered codes
    position: np.ndarray  # (n,) int32 row of each image id (inverse of `ids`)
    pool_factor: int = 20

    @property
    def n_cells(self) -> int:
        return int(self.centroids.shape[0])

    @classmethod
    def build(
        cls,
        collection: ImageCollection,
        n_cells: int | None = None,
        code_dim: int = 32,
        seed: int = 0,
        sample_per_cell: int = 64,
        iterations: int = 12,
        progress: bool = True,
    ) -> CandidateIndex:
        """Fit PCA and k-means on a sample, then code and assign every image in chunks."""
        n = collection.n_images
        n_cells = n_cells or max(8, round(np.sqrt(n)))
        rng = np.random.default_rng(np.random.SeedSequence([seed, INDEX_VERSION]))
        sample_ids = np.sort(rng.choice(n, size=min(n, n_cells * sample_per_cell), replace=False))
        sample = collection.retrieval_features(sample_ids)
        mean = sample.mean(axis=0)
        _, vectors = np.linalg.eigh(np.cov(sample - mean, rowvar=False))
        projection = np.ascontiguousarray(vectors[:, ::-1][:, :code_dim], dtype=np.float32)
        sample_codes = (sample - mean) @ projection
        centroids = _kmeans(sample_codes, n_cells, iterations, rng)

        codes = np.empty((n, code_dim), dtype=np.float32)
        cells = np.empty(n, dtype=np.int32)
        n_chunks = -(-n // _ASSIGN_CHUNK)
        with progress_bar(progress, "indexing collection", n_chunks) as advance:
            for start in range(0, n, _ASSIGN_CHUNK):
                rows = slice(start, min(start + _ASSIGN_CHUNK, n))
                block = (collection.retrieval_features(rows) - mean) @ projection
                codes[rows] = block
                cells[rows] = _nearest(block, centroids)
                advance()
        order = np.argsort(cells, kind="stable").astype(np.int32)
        cell_start = np.searchsorted(cells[order], np.arange(n_cells + 1)).astype(np.int64)
        position = np.empty(n, dtype=np.int32)
        position[order] = np.arange(n, dtype=np.int32)
        return cls(mean, projection, centroids, cell_start, order, codes[order], position)

    def candidates(self, query_id: int, k: int = SERVED_CANDIDATES) -> np.ndarray:
        """The k images nearest the query image (excluding it), nearest first, int64."""
        if not 0 <= int(query_id) < len(self.ids):
            raise ValueError(f"query id {query_id} outside [0, {len(self.ids)})")
        if not 1 <= k < len(self.ids):
            raise ValueError(f"k must be in [1, {len(self.ids) - 1}], got {k}")
        q = self.codes[self.position[int(query_id)]]
        cell_order = np.argsort(((self.centroids - q) ** 2).sum(axis=1))
        sizes = np.diff(self.cell_start)[cell_order]
        n_probe = int(np.searchsorted(np.cumsum(sizes), self.pool_factor * (k + 1))) + 1
        rows = np.concatenate(
            [np.arange(self.cell_start[c], self.cell_start[c + 1]) for c in cell_order[:n_probe]]
        )
        dist = ((self.codes[rows] - q) ** 2).sum(axis=1)
        dist[self.ids[rows] == int(query_id)] = np.inf  # never return the query itself
        m = min(k, len(rows) - 1)
        top = np.argpartition(dist, m - 1)[:m]
        top = top[np.lexsort((self.ids[rows[top]], dist[top]))]  # ties broken by id
        return self.ids[rows[top]].astype(np.int64)

    # ---- cache ---------------------------------------------------------------------

    _ARRAYS = ("mean", "projection", "centroids", "cell_start", "ids", "codes", "position")

    def save(self, directory: str | os.PathLike) -> Path:
        with atomic_directory(directory) as tmp:
            for name in self._ARRAYS:
                np.save(tmp / f"{name}.npy", getattr(self, name))
            (tmp / "meta.json").write_text(json.dumps({"pool_factor": self.pool_factor}))
        return Path(directory)

    @classmethod
    def load(cls, directory: str | os.PathLike) -> CandidateIndex:
        root = Path(directory)
        meta = json.loads((root / "meta.json").read_text())
        arrays = {n: np.load(root / f"{n}.npy", allow_pickle=False) for n in cls._ARRAYS}
        return cls(**arrays, pool_factor=int(meta["pool_factor"]))

    @classmethod
    def load_or_build(
        cls,
        collection: ImageCollection,
        cache_dir: str | os.PathLike,
        seed: int = 0,
        progress: bool = True,
    ) -> CandidateIndex:
        """The cached index of this collection (same cache root as the collection)."""
        key = f"index-{collection.cache_key}-v{INDEX_VERSION}-s{seed}"
        directory = Path(cache_dir) / key
        if (directory / "meta.json").exists():
            return cls.load(directory)
        return cls.load(cls.build(collection, seed=seed, progress=progress).save(directory))


def _nearest(points: np.ndarray, centroids: np.ndarray) -> np.ndarray:
    """Index of the nearest centroid for each point (squared Euclidean, via one matmul)."""
    scores = points @ centroids.T
    scores *= -2.0
    scores += (centroids**2).sum(axis=1)
    return scores.argmin(axis=1).astype(np.int32)


def _kmeans(points: np.ndarray, n_cells: int, iterations: int, rng) -> np.ndarray:
    """Lloyd's k-means from random distinct points; an emptied cell is reseeded randomly."""
    centroids = points[rng.choice(len(points), size=n_cells, replace=False)].copy()
    for _ in range(iterations):
        assign = _nearest(points, centroids)
        counts = np.bincount(assign, minlength=n_cells)
        sums = np.zeros_like(centroids, dtype=np.float64)
        np.add.at(sums, assign, points)
        empty = counts == 0
        centroids[~empty] = (sums[~empty] / counts[~empty, None]).astype(np.float32)
        centroids[empty] = points[rng.choice(len(points), size=int(empty.sum()))]
    return centroids
