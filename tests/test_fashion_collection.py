"""Fashion-MNIST as a collection, on a slice of the real files: the nine descriptors and
their cache, the 36-d phi and the invariances its measures claim, graded relevance, the
catalog Protocol both collections implement, and the feedback loop and test beds on it."""

from __future__ import annotations

import numpy as np
import pytest

from rankstream.simulators import fashion_collection
from rankstream.simulators.catalog import COLLECTIONS, load_collection
from rankstream.simulators.cbir_testbed import sampled_testbed, served_testbed
from rankstream.simulators.fashion_collection import (
    PHOTO_DESCRIPTORS,
    FashionMNISTCollection,
    describe_photos,
)
from rankstream.simulators.fashion_mnist import graded_relevance, load_fashion_mnist
from rankstream.simulators.images import ImageCollection
from rankstream.simulators.judged_feedback import FeedbackSimulator
from rankstream.simulators.similarity import SIMILARITIES

SLICE = 150  # photos of each split: 300 in all
NON_NEGATIVE = ("intensity_histogram", "gradient_histogram", "hog", "lbp", "gabor", "thumbnail")


@pytest.fixture(scope="module")
def cache(tmp_path_factory):
    return tmp_path_factory.mktemp("fashion-cache")


@pytest.fixture(scope="module")
def served(cache):
    return load_collection("fashion-mnist", cache, progress=False, limit=SLICE)


@pytest.fixture(scope="module")
def photos() -> np.ndarray:
    return load_fashion_mnist(limit=SLICE).images


def test_nine_descriptors_of_fixed_shapes(served) -> None:
    collection = served.collection
    assert list(collection.descriptors) == list(PHOTO_DESCRIPTORS) and len(PHOTO_DESCRIPTORS) == 9
    widths = {name: matrix.shape[1] for name, matrix in collection.descriptors.items()}
    assert widths == {
        "intensity_histogram": 16, "gradient_histogram": 20, "hog": 324, "lbp": 40,
        "gabor": 32, "glcm": 12, "moments": 14, "dct": 36, "thumbnail": 49,
    }  # fmt: skip
    for name, matrix in collection.descriptors.items():
        assert matrix.shape[0] == 2 * SLICE and matrix.dtype == np.float32, name
        assert np.all(np.isfinite(matrix)), name
        assert np.ptp(matrix, axis=0).max() > 0, name  # photos differ in every descriptor
        if name in NON_NEGATIVE:
            assert matrix.min() >= 0, name


def test_parallel_description_gives_the_same_matrices(photos) -> None:
    serial = describe_photos(photos[:40], workers=1, chunk_size=16)
    parallel = describe_photos(photos[:40], workers=2, chunk_size=16)
    for name in PHOTO_DESCRIPTORS:
        np.testing.assert_array_equal(serial[name], parallel[name])


def test_descriptors_are_cached_once(served, cache, monkeypatch) -> None:
    def refuse(*_args, **_kwargs):
        raise AssertionError("the cache should have been used")

    monkeypatch.setattr(fashion_collection, "describe_photos", refuse)
    again = FashionMNISTCollection.load_or_build(cache, progress=False, limit=SLICE)
    assert again.cache_key == served.collection.cache_key
    for name, matrix in served.collection.descriptors.items():
        np.testing.assert_array_equal(again.descriptors[name], matrix)
    with pytest.raises(AssertionError, match="cache"):  # another slice is another cache
        FashionMNISTCollection.load_or_build(cache, progress=False, limit=SLICE - 1)


def test_progress_messages_count_the_photos(tmp_path, photos) -> None:
    messages: list[str] = []
    describe_photos(photos[:40], progress=messages.append, chunk_size=16)
    assert messages[-1] == "describing photos: 40 / 40"


def test_phi_is_36_descriptor_major_features(served) -> None:
    collection = served.collection
    names = collection.feature_names
    assert len(names) == 36 and names[:4] == tuple(f"intensity_histogram:{m}" for m in SIMILARITIES)
    phi = collection.phi(3, np.arange(50))
    assert phi.shape == (50, 36) and phi.dtype == np.float32 and np.all(np.isfinite(phi))


def test_measures_are_symmetric_and_highest_on_the_image_itself(served) -> None:
    collection = served.collection
    ids = np.arange(collection.n_images)
    for query in (0, 17, 250):
        phi = collection.phi(query, ids)
        assert np.all(phi[query] >= phi.max(axis=0) - 1e-5)  # nothing is nearer than itself
        self_values = np.tile([0.0, 0.0, 1.0, 0.0], 9)  # -euclid, -l1, cosine, -chi2
        np.testing.assert_allclose(phi[query], self_values, atol=1e-5)
        for other in (1, 99, 298):
            np.testing.assert_allclose(
                collection.phi(query, np.array([other]))[0],
                collection.phi(other, np.array([query]))[0],
                rtol=1e-5,
                atol=1e-6,
            )


def test_cosine_ignores_contrast_and_the_distances_do_not(photos) -> None:
    """Halving every pixel scales the linear descriptors (DCT, thumbnail): cosine is still
    1 while the distances see a change; the contrast-free descriptors (gradient
    histogram, LBP) do not move at all, so every measure gives its self-value."""
    images = photos[:30]
    dimmer = (images // 2) * 2  # even grey levels: halving them is exact
    full, half = describe_photos(dimmer), describe_photos(dimmer // 2)
    euclidean, cosine = SIMILARITIES["euclidean"], SIMILARITIES["cosine"]
    for name in ("dct", "thumbnail"):
        for a, b in zip(full[name], half[name], strict=True):
            assert cosine(a.astype(np.float64), b[None].astype(np.float64))[0] == pytest.approx(1)
            assert euclidean(a.astype(np.float64), b[None].astype(np.float64))[0] < -1e-3
    for name in ("gradient_histogram", "lbp"):
        np.testing.assert_allclose(full[name], half[name], atol=1e-6)


def test_euclidean_and_l1_ignore_a_common_translation(served) -> None:
    matrix = served.collection.descriptors["moments"].astype(np.float64)
    shift = np.linspace(-3.0, 3.0, matrix.shape[1])
    for measure in ("euclidean", "l1"):
        function = SIMILARITIES[measure]
        np.testing.assert_allclose(
            function(matrix[0] + shift, matrix[1:] + shift), function(matrix[0], matrix[1:])
        )


def test_relevance_is_the_class_grouping(served) -> None:
    collection = served.collection
    ids = np.arange(collection.n_images)
    for query in (0, 5, 160):
        got = collection.relevance(query, ids)
        np.testing.assert_array_equal(
            got, graded_relevance(collection.labels[query], collection.labels)
        )
        assert got[query] == 2 and set(np.unique(got)) <= {0, 1, 2}
    with pytest.raises(ValueError, match="outside"):
        collection.relevance(10_000, ids)
    with pytest.raises(ValueError, match="integer"):
        collection.phi(0, np.array([0.5]))


def test_both_collections_implement_the_protocol(served, tmp_path) -> None:
    assert set(COLLECTIONS) == {"synthetic", "fashion-mnist"}
    synthetic = load_collection("synthetic", tmp_path, progress=False, n_images=3000)
    for loaded in (served, synthetic):
        assert isinstance(loaded.collection, ImageCollection)
        assert len(loaded.collection.feature_names) == 36
    assert served.collection.name == "fashion-mnist" and synthetic.collection.name == "synthetic"
    with pytest.raises(ValueError, match="unknown collection"):
        load_collection("imagenet", tmp_path)


def test_first_stage_retrieval_finds_related_photos(served) -> None:
    collection, index = served.collection, served.index
    related, chance = [], []
    for query in range(0, collection.n_images, 15):
        ids = index.candidates(query, 30)
        assert query not in ids and len(set(ids.tolist())) == 30
        related.append((collection.relevance(query, ids) > 0).mean())
        others = np.delete(np.arange(collection.n_images), query)
        chance.append((collection.relevance(query, others) > 0).mean())
    assert np.mean(related) > np.mean(chance) + 0.2


def test_the_feedback_loop_serves_real_photos(served) -> None:
    simulator = FeedbackSimulator(served.collection, seed=2, candidates=100, index=served.index)
    for _ in range(5):
        judged, triplets = simulator.step(lambda phi: phi.sum(axis=1))
        assert judged.phi.shape == (100, 36) and judged.n_judged == 50
        assert judged.image_id not in judged.candidate_ids
        assert np.all(triplets.rel1 != triplets.rel2)
        np.testing.assert_array_equal(
            judged.relevance, served.collection.relevance(judged.image_id, judged.candidate_ids)
        )


def test_test_beds_meet_the_training_budget(served) -> None:
    """Queries whose candidates are all equally relevant give no pairs; the budget is
    spread over the others, so the test bed has exactly the rows asked for."""
    retrieved = served_testbed(served, seed=1, train_rows=5_000, candidates=8)
    sampled = sampled_testbed(served.collection, seed=1, train_rows=5_000, sample_size=80)
    for bed, width in ((retrieved, 8), (sampled, 80)):
        assert bed.train_X.shape == (5_000, 36)
        assert all(q.phi.shape == (width, 36) for q in bed.val_queries + bed.test_queries)
        query, first, second = bed.train_triplets[7]
        phi = served.collection.phi(int(query), np.array([first, second])).astype(np.float64)
        np.testing.assert_allclose(bed.train_X[7], phi[0] - phi[1], rtol=1e-6, atol=1e-6)
    flat = [
        q
        for q in retrieved.train_query_ids
        if np.ptp(served.collection.relevance(int(q), served.index.candidates(int(q), 8))) == 0
    ]
    assert flat, "the slice should have a query with all candidates equally relevant"
    assert not set(flat) & set(retrieved.train_triplets[:, 0].tolist())
