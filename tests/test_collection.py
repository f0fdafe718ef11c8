"""The synthetic ImageCLEF/Flickr collection and its candidate index, at a small scale."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

import rankstream.simulators.collection as collection_module
from rankstream.simulators.collection import (
    DISTRACTOR,
    SYNTHETIC_DESCRIPTORS,
    Collection,
    build_collection,
    descriptor_slices,
    global_codes_input,
    total_dim,
)
from rankstream.simulators.retrieval import CandidateIndex

N_IMAGES = 8000


@pytest.fixture(scope="module")
def small() -> Collection:
    return build_collection(n_images=N_IMAGES, seed=3, progress=False)


@pytest.fixture(scope="module")
def index(small: Collection) -> CandidateIndex:
    return CandidateIndex.build(small, seed=0, progress=False)


def test_same_seed_same_collection_other_seed_differs(small: Collection) -> None:
    again = build_collection(n_images=N_IMAGES, seed=3, progress=False)
    other = build_collection(n_images=N_IMAGES, seed=4, progress=False)
    np.testing.assert_array_equal(small.features, again.features)
    np.testing.assert_array_equal(small.topics, again.topics)
    assert not np.array_equal(small.features, other.features)


def test_shape_and_classes(small: Collection) -> None:
    assert small.features.shape == (N_IMAGES, total_dim())
    assert small.features.dtype == np.float32
    assert np.isfinite(small.features).all() and (small.features >= 0).all()
    # 20 topics + the distractor class; n_ground_truth defaults to >= 40 per topic here
    assert set(np.unique(small.topics)) == {DISTRACTOR, *range(20)}
    assert len(small.ground_truth_ids) == 800
    assert len(small.feature_names) == 36 == len(set(small.feature_names))
    assert small.feature_names[0] == f"{SYNTHETIC_DESCRIPTORS[0].name}:euclidean"


def test_graded_relevance_follows_the_topic_hierarchy(small: Collection) -> None:
    query = int(small.ground_truth_ids[0])
    topic = small.topics[query]
    ids = np.arange(N_IMAGES)
    rel = small.relevance(query, ids)
    cand = small.topics
    same_super = np.isin(cand, np.flatnonzero(small.super_topic_of == small.super_topic_of[topic]))
    np.testing.assert_array_equal(rel == 2, cand == topic)
    np.testing.assert_array_equal(rel == 1, same_super & (cand != topic))
    assert (rel[cand == DISTRACTOR] == 0).all()
    distractor = int(np.flatnonzero(small.topics == DISTRACTOR)[0])
    assert not small.relevance(distractor, ids).any()


def test_phi_is_36_similarities_and_self_is_most_similar(small: Collection) -> None:
    query = int(small.ground_truth_ids[5])
    ids = np.array([query, 1, 2, 3])
    phi = small.phi(query, ids)
    assert phi.shape == (4, 36) and phi.dtype == np.float32
    # identical descriptors: distances 0 (the maximum of a negative distance), cosine 1
    names = small.feature_names
    for j, name in enumerate(names):
        if name.endswith(":cosine"):
            assert phi[0, j] == pytest.approx(1.0, abs=1e-6)
        else:
            assert phi[0, j] == 0.0
        assert phi[0, j] >= phi[1:, j].max()


def test_descriptors_differ_in_informativeness_per_topic(small: Collection) -> None:
    """How far a descriptor brings same-topic images closer follows its informativeness
    s[t, d] for that topic, and the best descriptor is not the same for every topic."""
    rng = np.random.default_rng(0)
    gt = small.ground_truth_ids
    everyone = np.arange(N_IMAGES)
    euclid = np.arange(0, 36, 4)
    topics = range(small.params.n_topics)
    ratio = np.zeros((len(topics), len(SYNTHETIC_DESCRIPTORS)))
    for topic in topics:
        members = gt[small.topics[gt] == topic]
        for query in rng.choice(members, 5, replace=False):
            same = members[members != query][:30]
            phi_same = small.phi(int(query), same)[:, euclid]
            phi_other = small.phi(int(query), rng.choice(everyone, 30, replace=False))[:, euclid]
            # ratio of mean distances (both negative): < 1 means same-topic images are closer
            ratio[topic] += phi_same.mean(0) / phi_other.mean(0) / 5
    correlation = np.corrcoef(small.informativeness.ravel(), ratio.ravel())[0, 1]
    assert correlation < -0.6, correlation
    assert len(set(ratio.argmin(axis=1))) >= 3  # different topics, different best descriptors


def test_cache_round_trip_loads_without_rebuilding(tmp_path, monkeypatch) -> None:
    built = Collection.load_or_build(tmp_path, progress=False, n_images=3000, seed=1)
    monkeypatch.setattr(
        collection_module, "build_collection", lambda **_: pytest.fail("cache missed")
    )
    loaded = Collection.load_or_build(tmp_path, progress=False, n_images=3000, seed=1)
    np.testing.assert_array_equal(built.features, loaded.features)
    np.testing.assert_array_equal(built.topics, loaded.topics)
    np.testing.assert_array_equal(built.informativeness, loaded.informativeness)
    assert loaded.params == built.params
    assert len(list(tmp_path.iterdir())) == 1  # no temporary directories left behind
    with pytest.raises(pytest.fail.Exception):  # a different key is a miss
        Collection.load_or_build(tmp_path, progress=False, n_images=3000, seed=2)


@pytest.mark.parametrize(
    "params",
    [{"n_images": 10}, {"n_topics": 0}, {"n_images": 5000, "signal": float("nan")}],
)
def test_bad_parameters_raise(params) -> None:
    with pytest.raises(ValueError):
        build_collection(progress=False, **params)


def test_bad_ids_raise(small: Collection) -> None:
    with pytest.raises(ValueError, match="outside"):
        small.phi(N_IMAGES, np.array([0]))
    with pytest.raises(ValueError, match="outside"):
        small.relevance(0, np.array([N_IMAGES]))
    with pytest.raises(ValueError, match="integer"):
        small.phi(0, np.array([0.5]))


def test_candidates_are_near_neighbours_of_the_query(
    small: Collection, index: CandidateIndex
) -> None:
    codes = (global_codes_input(small.features) - index.mean) @ index.projection
    recalls = []
    for query in small.ground_truth_ids[:20]:
        got = index.candidates(int(query), 100)
        assert len(got) == 100 == len(np.unique(got)) and query not in got
        dist = ((codes - codes[query]) ** 2).sum(axis=1)
        dist[query] = np.inf
        np.testing.assert_allclose(np.diff(dist[got]) >= -1e-5, True)  # nearest first
        recalls.append(len(np.intersect1d(got, np.argsort(dist)[:100])) / 100)
    assert np.mean(recalls) > 0.9  # the probed cells hold almost all true neighbours
    np.testing.assert_array_equal(index.candidates(7, 50), index.candidates(7, 50))


def test_index_cache_round_trip(small: Collection, index: CandidateIndex, tmp_path) -> None:
    loaded = CandidateIndex.load(index.save(tmp_path / "index"))
    np.testing.assert_array_equal(loaded.candidates(11, 60), index.candidates(11, 60))


def test_descriptor_slices_cover_the_features() -> None:
    slices = descriptor_slices()
    assert slices[0].start == 0 and slices[-1].stop == total_dim()
    assert all(a.stop == b.start for a, b in itertools.pairwise(slices))
