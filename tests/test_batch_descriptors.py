"""Batch descriptors on real Fashion-MNIST photos: scikit-image's results and the
invariances each descriptor's docstring claims."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import signal

from rankstream.simulators import batch_descriptors as batch
from rankstream.simulators.fashion_mnist import load_fashion_mnist


@pytest.fixture(scope="module")
def photos() -> np.ndarray:
    """60 real photos (the first 30 of each split) as floats in [0, 1]."""
    return load_fashion_mnist(limit=30).images / 255.0


def test_hog_is_scikit_images_to_the_bit(photos) -> None:
    from skimage.feature import hog

    for cells_per_block in ((2, 2), (1, 1)):
        expected = np.stack(
            [hog(p, 9, (7, 7), cells_per_block, block_norm="L2-Hys") for p in photos]
        )
        np.testing.assert_array_equal(batch.hog(photos, 9, (4, 4), cells_per_block), expected)


def test_glcm_texture_is_scikit_images_graycoprops(photos) -> None:
    from skimage.feature import graycomatrix, graycoprops

    got = batch.glcm_texture(photos, distances=(1, 2), levels=16)
    assert got.shape == (len(photos), 12)
    quarter = np.pi / 4
    # scikit-image rounds the step, so distance 2's diagonals are at distance 2 * sqrt(2)
    steps = {1: [(1, a * quarter) for a in range(4)], 2: [(2, 0), (8**0.5, quarter)]}
    steps[2] += [(2, 2 * quarter), (8**0.5, 3 * quarter)]
    for photo, row in zip(photos, got, strict=True):
        grey = np.minimum((photo * 16).astype(np.uint8), 15)
        expected = []
        for distance in (1, 2):
            glcm = np.concatenate(
                [
                    graycomatrix(grey, [d], [a], 16, symmetric=True, normed=True)
                    for d, a in steps[distance]
                ],
                axis=3,
            )
            expected += [graycoprops(glcm, name).mean() for name in batch.GLCM_PROPERTIES]
        np.testing.assert_allclose(row, expected, rtol=1e-12, atol=1e-14)


def test_central_and_hu_moments_are_scikit_images(photos) -> None:
    from skimage.measure import moments_central, moments_hu, moments_normalized

    mu = batch.central_moments(photos)
    for photo, got in zip(photos, mu, strict=True):
        expected = moments_central(photo, order=3)
        np.testing.assert_allclose(got, expected, rtol=1e-10, atol=1e-8)
        nu = moments_normalized(expected, order=3)
        hu = batch.hu_moments(np.nan_to_num(nu)[None])[0]
        np.testing.assert_allclose(hu, moments_hu(nu), rtol=1e-9, atol=1e-15)


def test_gabor_energies_match_direct_convolution(photos) -> None:
    """One shared spectrum per batch gives what per-kernel linear convolution gives."""
    got = batch.gabor_energies(photos[:5], frequencies=(0.15, 0.3), orientations=4, grid=(2, 2))
    for photo, row in zip(photos[:5], got, strict=True):
        expected = []
        for kernel in batch.gabor_bank((0.15, 0.3), 4):
            pad = (kernel.shape[0] // 2, kernel.shape[1] // 2)
            padded = np.pad(photo, (pad, pad), mode="symmetric")
            magnitude = np.abs(signal.convolve(padded, kernel, mode="valid", method="direct"))
            expected += [magnitude[r : r + 14, c : c + 14].mean() for r in (0, 14) for c in (0, 14)]
        np.testing.assert_allclose(row, expected, rtol=1e-10)


def test_lbp_codes_match_a_pixel_loop(photos) -> None:
    photo = photos[3]
    codes = batch.lbp_codes(photo[None])[0]
    padded = np.pad(photo, 1)
    for r in range(28):
        for c in range(28):
            bits = [
                padded[1 + r + dr, 1 + c + dc] >= photo[r, c] for dr, dc in batch._LBP_NEIGHBOURS
            ]
            changes = sum(bits[p] != bits[p - 1] for p in range(8))
            assert codes[r, c] == (sum(bits) if changes <= 2 else 9)


def test_every_batch_descriptor_is_finite_with_a_fixed_length(photos) -> None:
    functions = [
        batch.intensity_histograms, batch.gradient_histograms, batch.hog, batch.lbp_histograms,
        batch.gabor_energies, batch.glcm_texture, batch.moment_features, batch.dct_lowfreq,
        batch.zoning,
    ]  # fmt: skip
    cropped = photos[:, 2:25, 1:27]  # another size: same lengths
    for function in functions:
        full, other = function(photos), function(cropped)
        assert full.shape[0] == len(photos) and full.shape[1] == other.shape[1], function
        assert np.all(np.isfinite(full)) and np.all(np.isfinite(other)), function
    for function in (batch.intensity_histograms, batch.gradient_histograms):
        sums = function(photos).reshape(len(photos), -1)
        assert np.all(sums >= 0)
    np.testing.assert_allclose(batch.intensity_histograms(photos).sum(axis=1), 1.0)
    parts = batch.gradient_histograms(photos, orientations=12, magnitude_bins=8)
    np.testing.assert_allclose(parts[:, :12].sum(axis=1), 1.0)
    np.testing.assert_allclose(parts[:, 12:].sum(axis=1), 1.0)
    np.testing.assert_allclose(batch.lbp_histograms(photos).reshape(-1, 4, 10).sum(axis=2), 1.0)


def test_intensity_histogram_ignores_where_pixels_are(photos) -> None:
    base = batch.intensity_histograms(photos)
    for moved in (photos[:, ::-1], photos.transpose(0, 2, 1), np.roll(photos, 5, axis=2)):
        np.testing.assert_array_equal(batch.intensity_histograms(moved), base)


def test_edge_descriptors_ignore_contrast(photos) -> None:
    dimmer = photos * 0.5  # a power of two: the gradients scale exactly
    np.testing.assert_array_equal(
        batch.gradient_histograms(dimmer), batch.gradient_histograms(photos)
    )
    np.testing.assert_allclose(batch.hog(dimmer), batch.hog(photos), rtol=1e-6, atol=1e-9)


def test_gradient_histogram_ignores_a_half_turn(photos) -> None:
    turned = photos[:, ::-1, ::-1]
    np.testing.assert_allclose(
        batch.gradient_histograms(turned), batch.gradient_histograms(photos), atol=1e-12
    )


def test_lbp_ignores_monotone_grey_maps_and_mirrors_with_its_grid(photos) -> None:
    base = batch.lbp_histograms(photos, grid=(2, 2))
    np.testing.assert_array_equal(batch.lbp_histograms(photos**2, grid=(2, 2)), base)
    np.testing.assert_array_equal(batch.lbp_histograms(np.sqrt(photos), grid=(2, 2)), base)
    mirrored = batch.lbp_histograms(photos[:, :, ::-1], grid=(2, 2)).reshape(-1, 2, 2, 10)
    np.testing.assert_array_equal(mirrored[:, :, ::-1].reshape(base.shape), base)


def test_glcm_texture_ignores_flips_and_quarter_turns(photos) -> None:
    base = batch.glcm_texture(photos)
    for moved in (
        photos[:, ::-1],
        photos[:, :, ::-1],
        photos.transpose(0, 2, 1),
        np.rot90(photos, axes=(1, 2)),
    ):
        np.testing.assert_allclose(batch.glcm_texture(moved), base, rtol=1e-12, atol=1e-14)


def test_gabor_transposition_swaps_horizontal_and_vertical_filters(photos) -> None:
    base = batch.gabor_energies(photos, (0.15, 0.3), 4, (2, 2)).reshape(-1, 2, 4, 2, 2)
    moved = batch.gabor_energies(photos.transpose(0, 2, 1), (0.15, 0.3), 4, (2, 2))
    moved = moved.reshape(-1, 2, 4, 2, 2).transpose(0, 1, 2, 4, 3)  # grid transposed back
    # orientation k (angle k * 45 degrees) becomes 90 - k * 45: 0 <-> 2, 1 and 3 stay
    np.testing.assert_allclose(moved[:, :, [2, 1, 0, 3]], base, rtol=1e-9, atol=1e-12)


def test_moments_ignore_where_the_object_sits(photos) -> None:
    canvas = np.zeros((len(photos), 40, 40))
    canvas[:, 2:30, 3:31] = photos
    moved = np.roll(canvas, (7, 6), axis=(1, 2))
    np.testing.assert_allclose(
        batch.moment_features(moved), batch.moment_features(canvas), rtol=1e-9, atol=1e-12
    )
    hu, hu_mirrored = (batch.moment_features(x)[:, :7] for x in (photos, photos[:, :, ::-1]))
    np.testing.assert_allclose(hu_mirrored[:, :6], hu[:, :6], rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(hu_mirrored[:, 6], -hu[:, 6], rtol=1e-9, atol=1e-12)


def test_dct_is_linear_and_its_dc_term_the_mean(photos) -> None:
    coefficients = batch.dct_lowfreq(photos)
    np.testing.assert_allclose(coefficients[:, 0], photos.mean(axis=(1, 2)), rtol=1e-12)
    np.testing.assert_allclose(batch.dct_lowfreq(0.3 * photos), 0.3 * coefficients, rtol=1e-12)


def test_bad_batches_are_refused() -> None:
    with pytest.raises(ValueError, match=r"\(n, h, w\)"):
        batch.hog(np.zeros((28, 28)))
    with pytest.raises(ValueError, match="NaN"):
        batch.dct_lowfreq(np.full((1, 4, 4), np.nan))
    with pytest.raises(ValueError, match="too small"):
        batch.hog(np.zeros((1, 3, 3)))
    with pytest.raises(ValueError, match="grid"):
        batch.lbp_histograms(np.zeros((1, 3, 3)), grid=(4, 4))
