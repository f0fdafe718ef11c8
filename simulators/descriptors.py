"""Nine real image descriptors for content-based image retrieval.

The online-LTR paper builds its 36-d query-dependent feature phi(q, p) from nine
descriptors times four similarity measures (§5.1). These are the nine: pure functions of
a 2-d grayscale float image (any size; intensities expected in [0, 1]) returning a 1-d
float64 vector whose length depends only on the parameters, never on the image size, so
the same functions serve 8x8 digits and full-size PubFig faces.

Histogram-like descriptors (intensity, HOG, LBP, Gabor energies, projection profiles,
zoning) are non-negative, as the chi-square measure needs. Moments and DCT coefficients
can be negative; `simulators.similarity` documents how chi-square treats those.

Example:
    >>> import numpy as np
    >>> from sklearn.datasets import load_digits
    >>> image = load_digits().images[0] / 16.0
    >>> features = describe([image])
    >>> list(features) == list(DESCRIPTORS) and features["hog"].shape[0] == 1
    True
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence

import numpy as np
from skimage.feature import hog, local_binary_pattern
from skimage.transform import resize

from rankstream.simulators import batch_descriptors as batch

Descriptor = Callable[[np.ndarray], np.ndarray]


def _check_image(image: np.ndarray) -> np.ndarray:
    """Return the image as float64 or raise a ValueError naming what is wrong."""
    array = np.asarray(image, dtype=np.float64)
    if array.ndim != 2:
        raise ValueError(f"image must be 2-d grayscale, got shape {array.shape}")
    if min(array.shape) < 2:
        raise ValueError(f"image must be at least 2x2 pixels, got shape {array.shape}")
    if not np.all(np.isfinite(array)):
        raise ValueError("image contains NaN or Inf")
    return array


def _grid_blocks(image: np.ndarray, grid: tuple[int, int]) -> list[np.ndarray]:
    """Split an image into a rows x cols grid of (nearly) equal blocks, row-major.

    A grid finer than the image is clamped to one pixel per block, so small images still
    yield `grid[0] * grid[1]` blocks (some repeated) and a fixed-length descriptor.
    """
    rows = np.array_split(np.arange(image.shape[0]), grid[0])
    cols = np.array_split(np.arange(image.shape[1]), grid[1])
    blocks = []
    for row_index in rows:
        row_index = row_index if row_index.size else np.array([image.shape[0] - 1])
        for col_index in cols:
            col_index = col_index if col_index.size else np.array([image.shape[1] - 1])
            blocks.append(image[np.ix_(row_index, col_index)])
    return blocks


def _normalised(values: np.ndarray) -> np.ndarray:
    """Scale non-negative values to sum 1 (all zeros stay zeros)."""
    total = values.sum()
    return values / total if total > 0 else values


def raw_pixels(image: np.ndarray, shape: tuple[int, int] = (8, 8)) -> np.ndarray:
    """Intensities resampled to a fixed `shape` (anti-aliased), flattened row-major."""
    image = _check_image(image)
    if image.shape != tuple(shape):
        image = resize(image, shape, order=1, anti_aliasing=True, mode="reflect")
    return image.ravel()


def intensity_histogram(
    image: np.ndarray, bins: int = 16, value_range: tuple[float, float] = (0.0, 1.0)
) -> np.ndarray:
    """Share of pixels in each of `bins` equal intensity bins; sums to 1."""
    return batch.intensity_histograms(_check_image(image)[None], bins, value_range)[0]


def hog_descriptor(
    image: np.ndarray,
    orientations: int = 9,
    cells: tuple[int, int] = (4, 4),
    cells_per_block: tuple[int, int] = (1, 1),
) -> np.ndarray:
    """Histogram of oriented gradients on a fixed grid of `cells` (scikit-image HOG).

    The cell size is the image size divided by the grid, so the length is
    `orientations * cells[0] * cells[1]` for 1x1 blocks whatever the image size.
    """
    image = _check_image(image)
    if min(cells) < 1:
        raise ValueError(f"cells must be positive, got {cells}")
    size = (max(image.shape[0], cells[0]), max(image.shape[1], cells[1]))
    pixels_per_cell = (size[0] // cells[0], size[1] // cells[1])
    cropped_size = (pixels_per_cell[0] * cells[0], pixels_per_cell[1] * cells[1])
    if image.shape != cropped_size:
        image = resize(image, cropped_size, order=1, anti_aliasing=True, mode="reflect")
    return hog(
        image,
        orientations=orientations,
        pixels_per_cell=pixels_per_cell,
        cells_per_block=cells_per_block,
        block_norm="L2-Hys",
        feature_vector=True,
    ).astype(np.float64)


def lbp_histogram(
    image: np.ndarray, points: int = 8, radius: float = 1.0, grid: tuple[int, int] = (2, 2)
) -> np.ndarray:
    """Uniform rotation-invariant LBP code histograms per grid block, each summing to 1.

    The image is quantised to 8 bits first because scikit-image's LBP compares pixel
    values exactly and warns on floats (noise-level differences would flip codes).
    """
    image = _check_image(image)
    quantised = np.round(np.clip(image, 0.0, 1.0) * 255).astype(np.uint8)
    codes = local_binary_pattern(quantised, points, radius, method="uniform")
    n_codes = points + 2
    histograms = [
        _normalised(np.bincount(block.ravel().astype(np.int64), minlength=n_codes)[:n_codes])
        for block in _grid_blocks(codes, grid)
    ]
    return np.concatenate(histograms).astype(np.float64)


def gabor_energies(
    image: np.ndarray,
    frequencies: tuple[float, ...] = (0.15, 0.3),
    orientations: int = 4,
    grid: tuple[int, int] = (2, 2),
) -> np.ndarray:
    """Mean Gabor response magnitude per filter and grid block (non-negative).

    Length `len(frequencies) * orientations * grid[0] * grid[1]`, filter-major.
    """
    image = _check_image(image)
    return batch.gabor_energies(image[None], tuple(frequencies), orientations, grid)[0]


def projection_profiles(image: np.ndarray, bins: int = 8) -> np.ndarray:
    """Row and column ink profiles resampled to `bins` each; together they sum to 1."""
    image = _check_image(image)
    ink = np.clip(image, 0.0, None)
    rows = np.array([block.sum() for block in np.array_split(ink.sum(axis=1), bins)])
    cols = np.array([block.sum() for block in np.array_split(ink.sum(axis=0), bins)])
    return _normalised(np.concatenate([rows, cols]))


def zoning(image: np.ndarray, grid: tuple[int, int] = (4, 4)) -> np.ndarray:
    """Mean intensity in each zone of a rows x cols grid (the classic OCR zoning)."""
    return batch.zoning(_check_image(image)[None], grid)[0]


def moments(image: np.ndarray) -> np.ndarray:
    """Seven Hu invariants and seven scale-normalised central moments (orders 2 and 3).

    Hu invariants span many orders of magnitude, so they are reported log-scaled
    (`batch_descriptors.signed_log`).
    """
    return batch.moment_features(_check_image(image)[None])[0]


def dct_lowfreq(image: np.ndarray, size: int = 6) -> np.ndarray:
    """The `size` x `size` lowest-frequency 2-d DCT-II coefficients.

    Scaled by 1/sqrt(h*w) on top of the orthonormal DCT so the DC term is the mean
    intensity and the values do not grow with the image size.
    """
    return batch.dct_lowfreq(_check_image(image)[None], size)[0]


DESCRIPTORS: dict[str, Descriptor] = {
    "raw_pixels": raw_pixels,
    "intensity_histogram": intensity_histogram,
    "hog": hog_descriptor,
    "lbp": lbp_histogram,
    "gabor": gabor_energies,
    "projection_profiles": projection_profiles,
    "zoning": zoning,
    "moments": moments,
    "dct": dct_lowfreq,
}
"""The nine descriptors in their fixed order (phi's feature order follows it)."""

NON_NEGATIVE = frozenset(
    ["raw_pixels", "intensity_histogram", "hog", "lbp", "gabor", "projection_profiles", "zoning"]
)
"""Descriptors that are never negative for images with intensities >= 0."""


def describe(
    images: Iterable[np.ndarray] | np.ndarray, names: Sequence[str] | None = None
) -> dict[str, np.ndarray]:
    """Compute descriptors for a batch of images: name -> (n_images, d_name) float64.

    `images` is a 3-d array (n, h, w) or any iterable of 2-d images (sizes may differ).
    """
    names = list(DESCRIPTORS) if names is None else list(names)
    unknown = [name for name in names if name not in DESCRIPTORS]
    if unknown:
        raise ValueError(f"unknown descriptor(s) {unknown}; known: {list(DESCRIPTORS)}")
    image_list = list(images)
    if not image_list:
        raise ValueError("describe() needs at least one image")
    return {name: np.vstack([DESCRIPTORS[name](image) for image in image_list]) for name in names}
