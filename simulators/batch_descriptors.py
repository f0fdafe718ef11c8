"""Image descriptors computed for a whole batch of same-size grey images at once.

`simulators.descriptors` describes one image at a time, which is right for 1,797 digits
and 772 faces but takes ~4 ms an image: an hour of CPU for Fashion-MNIST's 70,000.
These are the same kinds of descriptor as numpy array programs over an (n, h, w) batch,
so a chunk of thousands of photos costs about what one image does in Python overhead.

Every function takes float intensities in [0, 1], shape (n, h, w), and returns an
(n, d) float64 matrix whose length d depends only on the parameters. Where
scikit-image has the algorithm (HOG, GLCM properties, Hu moments, Gabor kernels) the
batch form follows its definition exactly and the tests hold it to scikit-image's own
output on real photos; the per-image functions of `simulators.descriptors` that have
a batch form here call it, so each descriptor has one implementation.

Each docstring says what the descriptor is invariant to; the tests check those claims.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from functools import lru_cache

import numpy as np
from scipy import fft
from skimage.feature import graycoprops
from skimage.filters import gabor_kernel

BatchDescriptor = Callable[[np.ndarray], np.ndarray]


def as_batch(images: np.ndarray) -> np.ndarray:
    """The images as a float64 (n, h, w) array, or a ValueError naming what is wrong."""
    batch = np.asarray(images, dtype=np.float64)
    if batch.ndim != 3:
        raise ValueError(f"need an (n, h, w) batch of grey images, got shape {batch.shape}")
    if batch.shape[0] < 1 or min(batch.shape[1:]) < 2:
        raise ValueError(f"need at least one image of at least 2x2 pixels, got {batch.shape}")
    if not np.all(np.isfinite(batch)):
        raise ValueError("images contain NaN or Inf")
    return batch


def _row_normalised(values: np.ndarray) -> np.ndarray:
    """Each row scaled to sum 1 (rows of zeros stay zeros)."""
    totals = values.sum(axis=1, keepdims=True)
    return np.divide(values, totals, out=np.zeros_like(values), where=totals > 0)


def _split_edges(length: int, parts: int) -> np.ndarray:
    """Start index of each of `parts` near-equal pieces of `length` (np.array_split's)."""
    sizes = np.full(parts, length // parts)
    sizes[: length % parts] += 1
    return np.concatenate([[0], np.cumsum(sizes)[:-1]])


def grid_means(values: np.ndarray, grid: tuple[int, int]) -> np.ndarray:
    """(n, h, w) -> (n, rows * cols): the mean of each block of a rows x cols grid, row-major.

    Blocks are np.array_split's; a grid finer than the image repeats the last pixel row or
    column, as `simulators.descriptors._grid_blocks` does, so the length stays fixed.
    """
    n, h, w = values.shape
    rows, cols = grid
    if rows < 1 or cols < 1:
        raise ValueError(f"grid must be positive, got {grid}")
    row_index = np.minimum(np.arange(max(h, rows)), h - 1) if rows > h else np.arange(h)
    col_index = np.minimum(np.arange(max(w, cols)), w - 1) if cols > w else np.arange(w)
    values = values[:, row_index][:, :, col_index]
    row_starts = _split_edges(values.shape[1], rows)
    col_starts = _split_edges(values.shape[2], cols)
    sums = np.add.reduceat(np.add.reduceat(values, row_starts, axis=1), col_starts, axis=2)
    counts = np.outer(
        np.diff([*row_starts, values.shape[1]]), np.diff([*col_starts, values.shape[2]])
    )
    return (sums / counts).reshape(n, rows * cols)


def _block_of_pixel(h: int, w: int, grid: tuple[int, int]) -> np.ndarray:
    """(h, w) int: the row-major index of the np.array_split grid block holding each pixel."""
    rows, cols = grid
    if not (1 <= rows <= h and 1 <= cols <= w):
        raise ValueError(f"a {grid} grid does not fit {h}x{w} images")
    row_block = np.searchsorted(_split_edges(h, rows), np.arange(h), side="right") - 1
    col_block = np.searchsorted(_split_edges(w, cols), np.arange(w), side="right") - 1
    return row_block[:, None] * cols + col_block[None, :]


def _bincount_rows(
    codes: np.ndarray, n_codes: int, weights: np.ndarray | None = None
) -> np.ndarray:
    """Per-row histograms of integer codes in [0, n_codes): (n, ...) -> (n, n_codes)."""
    n = codes.shape[0]
    flat = (codes.reshape(n, -1) + n_codes * np.arange(n)[:, None]).ravel()
    flat_weights = None if weights is None else weights.reshape(n, -1).ravel()
    counts = np.bincount(flat, weights=flat_weights, minlength=n * n_codes)
    return counts.reshape(n, n_codes).astype(np.float64)


def intensity_histograms(
    images: np.ndarray, bins: int = 16, value_range: tuple[float, float] = (0.0, 1.0)
) -> np.ndarray:
    """Share of pixels in each of `bins` equal intensity bins (np.histogram's); rows sum to 1.

    Invariant to any rearrangement of the pixels (flips, rotations by 90 degrees).
    """
    batch = as_batch(images)
    low, high = value_range
    clipped = np.clip(batch, low, high)
    edges = np.linspace(low, high, bins + 1)
    index = np.minimum(((clipped - low) * (bins / (high - low))).astype(np.int64), bins - 1)
    index -= clipped < edges[index]  # np.histogram's correction at bin edges
    index += (clipped >= edges[index + 1]) & (index != bins - 1)
    return _row_normalised(_bincount_rows(index, bins))


def _gradients(batch: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Central differences along rows and columns, zero on the border (scikit-image's HOG)."""
    g_row = np.zeros_like(batch)
    g_col = np.zeros_like(batch)
    g_row[:, 1:-1, :] = batch[:, 2:, :] - batch[:, :-2, :]
    g_col[:, :, 1:-1] = batch[:, :, 2:] - batch[:, :, :-2]
    return g_row, g_col


def _orientation_bins(
    g_row: np.ndarray, g_col: np.ndarray, orientations: int, canonical: bool = False
) -> np.ndarray:
    """Unsigned gradient orientation bin in [0, orientations]; `orientations` = none.

    Orientation in degrees in [0, 180) as scikit-image's HOG computes it; a pixel is in bin
    i when i * 180/o <= angle < (i + 1) * 180/o. An angle that rounds to 180 falls in no
    bin, as in scikit-image. With `canonical`, the gradient is first turned into the
    upper half-plane, so g and -g get the very same angle (scikit-image's `% 180` can
    round them to either side of a bin edge).
    """
    if canonical:
        flip = (g_row < 0) | ((g_row == 0) & (g_col < 0))
        g_row, g_col = np.where(flip, -g_row, g_row), np.where(flip, -g_col, g_col)
    angle = np.rad2deg(np.arctan2(g_row, g_col)) % 180
    edges = (180.0 / orientations) * np.arange(orientations + 1)
    return np.searchsorted(edges, angle, side="right") - 1


def gradient_histograms(
    images: np.ndarray, orientations: int = 12, magnitude_bins: int = 8
) -> np.ndarray:
    """Global edge statistics: an orientation histogram and a gradient-strength histogram.

    The first `orientations` values are unsigned gradient orientations weighted by
    gradient magnitude; the last `magnitude_bins` are the strengths of the pixels with a
    gradient, as a share of the image's strongest, in equal bins over (0, 1]. Each part
    sums to 1 (or is all zero for a flat image). Invariant to contrast (x -> a x, a > 0)
    and to rotation by 180 degrees.
    """
    batch = as_batch(images)
    g_row, g_col = _gradients(batch)
    magnitude = np.hypot(g_row, g_col)
    bins = _orientation_bins(g_row, g_col, orientations, canonical=True)
    oriented = _bincount_rows(bins, orientations + 1, weights=magnitude)[:, :orientations]
    strongest = magnitude.reshape(len(batch), -1).max(axis=1)
    relative = magnitude / np.where(strongest > 0, strongest, 1.0)[:, None, None]
    strength = np.minimum(np.ceil(relative * magnitude_bins).astype(np.int64), magnitude_bins)
    strengths = _bincount_rows(strength, magnitude_bins + 1)[:, 1:]  # bin 0: no gradient
    return np.hstack([_row_normalised(oriented), _row_normalised(strengths)])


HOG_EPS = 1e-5  # scikit-image's block-normalisation epsilon


def hog(
    images: np.ndarray,
    orientations: int = 9,
    cells: tuple[int, int] = (4, 4),
    cells_per_block: tuple[int, int] = (2, 2),
) -> np.ndarray:
    """scikit-image's HOG (L2-Hys blocks, no sqrt transform) on a fixed grid of cells.

    A cell is (h // cells[0]) x (w // cells[1]) pixels (pixels past the last whole cell
    are left out, as scikit-image does), so the length depends only on the parameters:
    28x28 photos in 4x4 cells are `skimage.feature.hog(photo, pixels_per_cell=(7, 7))`.
    A cell's histogram is the mean gradient magnitude per orientation bin; each block
    of cells_per_block cells is L2-normalised, clipped at 0.2 and L2-normalised again;
    blocks are concatenated row-major, as `hog(..., feature_vector=True)` does.
    Invariant to contrast (x -> a x, a > 0) up to the epsilon of the normalisation.
    """
    batch = as_batch(images)
    n, h, w = batch.shape
    n_cells = tuple(cells)
    b_row, b_col = cells_per_block
    if not (b_row <= n_cells[0] <= h and b_col <= n_cells[1] <= w):
        raise ValueError(
            f"{h}x{w} images are too small for {cells} cells in {cells_per_block} blocks"
        )
    pixels_per_cell = (h // n_cells[0], w // n_cells[1])
    g_row, g_col = _gradients(batch)
    magnitude = np.hypot(g_row, g_col)
    bins = _orientation_bins(g_row, g_col, orientations)
    cells = _cell_histograms(magnitude, bins, n_cells, pixels_per_cell, orientations)
    blocks = np.stack(
        [
            cells[:, r : r + b_row, c : c + b_col]
            for r in range(n_cells[0] - b_row + 1)
            for c in range(n_cells[1] - b_col + 1)
        ],
        axis=1,
    )  # (n, n_blocks, b_row, b_col, orientations)
    axes = (2, 3, 4)
    normed = blocks / np.sqrt(np.sum(blocks**2, axis=axes, keepdims=True) + HOG_EPS**2)
    normed = np.minimum(normed, 0.2)
    normed = normed / np.sqrt(np.sum(normed**2, axis=axes, keepdims=True) + HOG_EPS**2)
    return normed.reshape(n, -1)


def _cell_histograms(
    magnitude: np.ndarray,
    bins: np.ndarray,
    n_cells: tuple[int, int],
    pixels_per_cell: tuple[int, int],
    orientations: int,
) -> np.ndarray:
    """(n, cells_row, cells_col, orientations): mean magnitude per cell and orientation bin.

    scikit-image sums a cell's pixels row by row into a float32 total and returns it
    divided by the cell's area in float32; doing the same here makes the batch HOG equal
    to `skimage.feature.hog` to the last bit rather than to 1e-7.
    """
    c_row, c_col = pixels_per_cell
    one_hot = np.arange(orientations)
    cells = np.zeros((magnitude.shape[0], *n_cells, orientations), dtype=np.float32)
    for r in range(c_row):
        for c in range(c_col):
            rows = slice(r, n_cells[0] * c_row, c_row)
            cols = slice(c, n_cells[1] * c_col, c_col)
            hit = bins[:, rows, cols, None] == one_hot
            added = cells + np.where(hit, magnitude[:, rows, cols, None], 0.0)
            cells = added.astype(np.float32)
    return (cells / np.float32(c_row * c_col)).astype(np.float64)


# The 3x3 neighbourhood in circular order, counter-clockwise from the right-hand pixel
# (scikit-image's order for P = 8 points, without its interpolation of the diagonals).
_LBP_NEIGHBOURS = ((0, 1), (-1, 1), (-1, 0), (-1, -1), (0, -1), (1, -1), (1, 0), (1, 1))


def lbp_codes(images: np.ndarray) -> np.ndarray:
    """Rotation-invariant uniform LBP codes (riu2) of the 3x3 neighbourhood: (n, h, w) int.

    Ojala et al.'s original square neighbourhood: bit p is neighbour p >= centre (outside
    the image counts as 0); a pattern with at most two 0/1 changes around the circle gets
    its number of ones (0-8), any other pattern 9.
    """
    batch = as_batch(images)
    _, h, w = batch.shape
    padded = np.pad(batch, ((0, 0), (1, 1), (1, 1)))
    bits = np.stack(
        [padded[:, 1 + dr : 1 + dr + h, 1 + dc : 1 + dc + w] >= batch for dr, dc in _LBP_NEIGHBOURS]
    )
    changes = (bits != np.roll(bits, 1, axis=0)).sum(axis=0)
    points = len(_LBP_NEIGHBOURS)
    return np.where(changes <= 2, bits.sum(axis=0), points + 1)


def lbp_histograms(images: np.ndarray, grid: tuple[int, int] = (2, 2)) -> np.ndarray:
    """riu2 LBP code histograms (10 codes) per block of a grid, each block summing to 1.

    Invariant to any strictly increasing grey-level map that keeps black at 0 (LBP only
    compares pixels); a mirror image gives the same codes with the grid mirrored.
    """
    codes = lbp_codes(images)
    n_codes = len(_LBP_NEIGHBOURS) + 2
    _, h, w = codes.shape
    block = _block_of_pixel(h, w, grid)
    n_blocks = grid[0] * grid[1]
    counts = _bincount_rows(block[None] * n_codes + codes, n_blocks * n_codes)
    return counts / np.bincount(block.ravel(), minlength=n_blocks).repeat(n_codes)


@lru_cache(maxsize=32)
def gabor_bank(frequencies: tuple[float, ...], orientations: int) -> tuple[np.ndarray, ...]:
    """Complex scikit-image Gabor kernels, frequency-major, built once per parameter set."""
    return tuple(
        gabor_kernel(frequency, theta=np.pi * k / orientations)
        for frequency in frequencies
        for k in range(orientations)
    )


def gabor_energies(
    images: np.ndarray,
    frequencies: tuple[float, ...] = (0.15, 0.3),
    orientations: int = 4,
    grid: tuple[int, int] = (2, 2),
) -> np.ndarray:
    """Mean Gabor response magnitude per filter and grid block (non-negative).

    Each image is padded by mirroring, so the response has the image's size. Length
    `len(frequencies) * orientations * grid[0] * grid[1]`, filter-major. Transposing the
    image swaps the 0 and 90 degree filters (and transposes the grid).

    One padding wide enough for the largest kernel serves every filter, so the batch's
    spectrum is computed once; the circular convolution then equals the linear one on
    the image's pixels (the wrap-around only reaches the padding).
    """
    batch = as_batch(images)
    _, h, w = batch.shape
    kernels = gabor_bank(tuple(frequencies), orientations)
    pad_row = max(kernel.shape[0] // 2 for kernel in kernels)
    pad_col = max(kernel.shape[1] // 2 for kernel in kernels)
    padded = np.pad(batch, ((0, 0), (pad_row, pad_row), (pad_col, pad_col)), mode="symmetric")
    shape = padded.shape[1:]
    spectrum = fft.fft2(padded, axes=(1, 2))
    energies = []
    for kernel in kernels:
        response = fft.ifft2(spectrum * fft.fft2(kernel, s=shape), axes=(1, 2))
        top, left = pad_row + kernel.shape[0] // 2, pad_col + kernel.shape[1] // 2
        energies.append(grid_means(np.abs(response[:, top : top + h, left : left + w]), grid))
    return np.hstack(energies)


GLCM_PROPERTIES = ("contrast", "dissimilarity", "homogeneity", "ASM", "correlation", "entropy")


def glcm_offsets(distance: int) -> tuple[tuple[int, int], ...]:
    """(row, column) steps of scikit-image's angles 0, 45, 90 and 135 degrees at `distance`."""
    return (
        (0, distance),
        (-distance, distance),
        (-distance, 0),
        (-distance, -distance),
    )


def glcm_texture(
    images: np.ndarray, distances: tuple[int, ...] = (1, 2), levels: int = 16
) -> np.ndarray:
    """Grey-level co-occurrence texture: `GLCM_PROPERTIES` per distance, averaged over angles.

    Intensities are quantised to `levels` grey levels; for each distance and each of the
    four directions the symmetric, normalised co-occurrence matrix is what
    `skimage.feature.graycomatrix(..., symmetric=True, normed=True)` gives, and the
    properties are scikit-image's `graycoprops`. Averaged over the four directions, the
    result is invariant to flips and rotations by 90 degrees. Length
    `len(distances) * 6`, distance-major.
    """
    batch = as_batch(images)
    n, h, w = batch.shape
    grey = np.minimum((np.clip(batch, 0.0, 1.0) * levels).astype(np.int64), levels - 1)
    matrices = []
    for distance in distances:
        for dr, dc in glcm_offsets(distance):
            rows = slice(max(0, -dr), h - max(0, dr))
            cols = slice(max(0, -dc), w - max(0, dc))
            moved = (slice(rows.start + dr, rows.stop + dr), slice(cols.start + dc, cols.stop + dc))
            pairs = grey[:, rows, cols] * levels + grey[:, moved[0], moved[1]]
            counts = _bincount_rows(pairs, levels * levels).reshape(n, levels, levels)
            matrices.append(counts + counts.transpose(0, 2, 1))
    # graycoprops takes (levels, levels, distances, angles): images ride on the angle axis
    stacked = np.stack(matrices, axis=1).reshape(n, len(distances), 4, levels, levels)
    glcm = stacked.transpose(3, 4, 1, 0, 2).reshape(levels, levels, len(distances), n * 4)
    properties = [
        graycoprops(glcm, name).reshape(len(distances), n, 4).mean(axis=2)
        for name in GLCM_PROPERTIES
    ]  # each (distances, n)
    return np.stack(properties, axis=2).transpose(1, 0, 2).reshape(n, -1)


def central_moments(images: np.ndarray, order: int = 3) -> np.ndarray:
    """(n, order + 1, order + 1) central moments mu[p, q] (p along rows) about each image's
    centroid, zero where p + q > order, as scikit-image's `moments_central` gives them."""
    batch = as_batch(images)
    _, h, w = batch.shape
    rows, cols = np.arange(h, dtype=np.float64), np.arange(w, dtype=np.float64)
    mass = batch.sum(axis=(1, 2))
    safe = np.where(mass != 0, mass, 1.0)
    centre_row = np.einsum("nij,i->n", batch, rows) / safe
    centre_col = np.einsum("nij,j->n", batch, cols) / safe
    powers = np.arange(order + 1, dtype=np.float64)
    row_powers = (rows[None, :] - centre_row[:, None])[..., None] ** powers  # (n, h, p)
    col_powers = (cols[None, :] - centre_col[:, None])[..., None] ** powers  # (n, w, q)
    mu = np.einsum("nij,nip,njq->npq", batch, row_powers, col_powers)
    mu[:, np.add.outer(powers, powers) > order] = 0.0
    return mu


def hu_moments(nu: np.ndarray) -> np.ndarray:
    """The seven Hu invariants from normalised central moments nu (n, 4, 4): (n, 7).

    scikit-image's `moments_hu` formulas, vectorised. The first six are invariant to
    translation, scale, rotation and reflection; a reflection flips the seventh's sign.
    """
    n20, n02, n11 = nu[:, 2, 0], nu[:, 0, 2], nu[:, 1, 1]
    n30, n03, n21, n12 = nu[:, 3, 0], nu[:, 0, 3], nu[:, 2, 1], nu[:, 1, 2]
    t0, t1 = n30 + n12, n21 + n03
    q0, q1 = t0 * t0, t1 * t1
    n4 = 4 * n11
    s, d = n20 + n02, n20 - n02
    a, b = n30 - 3 * n12, 3 * n21 - n03
    return np.stack(
        [
            s,
            d * d + n4 * n11,
            a * a + b * b,
            q0 + q1,
            a * t0 * (q0 - 3 * q1) + b * t1 * (3 * q0 - q1),
            d * (q0 - q1) + n4 * t0 * t1,
            b * t0 * (q0 - 3 * q1) - a * t1 * (3 * q0 - q1),
        ],
        axis=1,
    )


MOMENT_ORDERS = ((2, 0), (1, 1), (0, 2), (3, 0), (2, 1), (1, 2), (0, 3))


def signed_log(values: np.ndarray) -> np.ndarray:
    """sign(h) * log10(1 + |h| * 1e6): Hu invariants span many orders of magnitude; this is
    monotone, finite at zero and brings them to comparable scales."""
    return np.sign(values) * np.log10(1.0 + np.abs(values) * 1e6)


def moment_features(images: np.ndarray) -> np.ndarray:
    """Seven log-scaled Hu invariants and seven scale-normalised central moments (orders 2
    and 3): (n, 14). An image without positive mass gets zeros.

    Invariant to translating the object within its background (central moments), the Hu
    part also to reflection (all but the seventh, whose sign flips) and rotation.
    """
    mu = central_moments(images, order=3)
    mass = mu[:, 0, 0]
    positive = mass > 0
    safe = np.where(positive, mass, 1.0)
    orders = np.add.outer(np.arange(4), np.arange(4))
    nu = mu / safe[:, None, None] ** (orders / 2 + 1)[None]
    features = np.hstack([signed_log(hu_moments(nu)), nu[:, *np.array(MOMENT_ORDERS).T]])
    features[~positive] = 0.0
    return np.nan_to_num(features, nan=0.0, posinf=0.0, neginf=0.0)


def dct_lowfreq(images: np.ndarray, size: int = 6) -> np.ndarray:
    """The `size` x `size` lowest-frequency 2-d DCT-II coefficients, row-major: (n, size**2).

    Scaled by 1/sqrt(h*w) on top of the orthonormal DCT so the DC term is the mean
    intensity and values do not grow with the image size. Linear in the image, so cosine
    similarity between an image's and its contrast-scaled copy's is 1.
    """
    batch = as_batch(images)
    n, h, w = batch.shape
    coefficients = fft.dctn(batch, type=2, norm="ortho", axes=(1, 2)) / math.sqrt(h * w)
    block = np.zeros((n, size, size))
    rows, cols = min(size, h), min(size, w)
    block[:, :rows, :cols] = coefficients[:, :rows, :cols]
    return block.reshape(n, -1)


def zoning(images: np.ndarray, grid: tuple[int, int] = (7, 7)) -> np.ndarray:
    """Mean intensity per zone of a rows x cols grid: a thumbnail of the silhouette."""
    return grid_means(as_batch(images), grid)
