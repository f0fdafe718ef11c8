"""LBP, HOG and Gabor features of the PubFig face images, cached on disk.

data.mat ships only GIST and colour; the RankMKL paper (§3.1) adds texture (LBP, Gabor
energies) and shape (HOG). Each face is read, converted to grayscale, resized to a fixed
size and described with `simulators.descriptors`, so the same descriptor code serves the
digits test bed and the faces. Computing all three for the 772 faces takes on the order of
a minute; the result is cached as an npz (no pickle) whose name hashes the image list and
the parameters, so a changed list or setting never reads a stale cache.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
from skimage import io
from skimage.color import rgb2gray
from skimage.transform import resize

from rankstream.simulators.descriptors import gabor_energies, hog_descriptor, lbp_histogram

FEATURE_NAMES = ("lbp", "hog", "gabor")


@dataclass(frozen=True)
class FaceFeatureParams:
    """Descriptor settings for 2-d grayscale faces; lengths are fixed by these alone."""

    size: int = 128  # faces are resized to size x size pixels
    lbp_points: int = 8
    lbp_radius: float = 1.0
    lbp_grid: tuple[int, int] = (8, 8)  # 8x8 blocks x 10 uniform codes = 640-d
    hog_orientations: int = 9
    hog_cells: tuple[int, int] = (8, 8)
    hog_cells_per_block: tuple[int, int] = (2, 2)  # 7x7 blocks x 2x2 cells x 9 = 1764-d
    gabor_frequencies: tuple[float, ...] = (0.05, 0.1, 0.2, 0.4)
    gabor_orientations: int = 6
    gabor_grid: tuple[int, int] = (4, 4)  # 4 x 6 filters x 16 blocks = 384-d


def load_face(path: Path | str, size: int) -> np.ndarray:
    """A face image as a size x size grayscale float array in [0, 1]."""
    image = io.imread(str(path))
    if image.ndim == 3:
        image = rgb2gray(image[..., :3])
    elif image.ndim != 2:
        raise ValueError(f"{path}: expected a grayscale or RGB image, got shape {image.shape}")
    image = np.asarray(image, dtype=np.float64)
    if image.max() > 1.0:
        image = image / 255.0
    return resize(image, (size, size), anti_aliasing=True, mode="reflect")


def describe_face(image: np.ndarray, params: FaceFeatureParams) -> dict[str, np.ndarray]:
    """LBP histogram, HOG and Gabor energies of one grayscale face."""
    return {
        "lbp": lbp_histogram(image, params.lbp_points, params.lbp_radius, params.lbp_grid),
        "hog": hog_descriptor(
            image, params.hog_orientations, params.hog_cells, params.hog_cells_per_block
        ),
        "gabor": gabor_energies(
            image, params.gabor_frequencies, params.gabor_orientations, params.gabor_grid
        ),
    }


def cache_key(image_paths: Sequence[Path | str], params: FaceFeatureParams) -> str:
    """Hash of the image file names, sizes and the descriptor parameters."""
    digest = hashlib.sha256(json.dumps(asdict(params), sort_keys=True).encode())
    for path in image_paths:
        path = Path(path)
        digest.update(f"{path.name}:{path.stat().st_size}\n".encode())
    return digest.hexdigest()[:16]


def face_features(
    image_paths: Sequence[Path | str],
    cache_dir: Path | str | None = None,
    params: FaceFeatureParams | None = None,
    progress: Callable[[int, int], None] | None = None,
) -> dict[str, np.ndarray]:
    """{"lbp", "hog", "gabor"} -> (n_images, d) float64, from the cache when present.

    `cache_dir` None computes without caching; `progress(done, total)` is called per image.
    """
    params = params or FaceFeatureParams()
    if len(image_paths) == 0:
        raise ValueError("image_paths is empty")
    cache_file = None
    if cache_dir is not None:
        cache_file = Path(cache_dir) / f"pubfig_faces_{cache_key(image_paths, params)}.npz"
        if cache_file.is_file():
            with np.load(cache_file, allow_pickle=False) as stored:
                return {name: stored[name] for name in FEATURE_NAMES}
    rows: dict[str, list[np.ndarray]] = {name: [] for name in FEATURE_NAMES}
    for done, path in enumerate(image_paths, start=1):
        for name, vector in describe_face(load_face(path, params.size), params).items():
            rows[name].append(vector)
        if progress is not None:
            progress(done, len(image_paths))
    features = {name: np.vstack(vectors) for name, vectors in rows.items()}
    for name, matrix in features.items():
        if not np.isfinite(matrix).all():
            raise ValueError(f"{name} features hold NaN or Inf")
    if cache_file is not None:
        cache_file.parent.mkdir(parents=True, exist_ok=True)
        partial = cache_file.with_suffix(".partial.npz")
        np.savez(partial, **features)
        partial.replace(cache_file)  # atomic: a reader never sees half a cache
    return features
