"""OnlineRanker as a river estimator: river's own checks, its datasets, pipelines and
evaluation, dict and data-frame features by name, bool labels; the array path unchanged."""

from __future__ import annotations

import copy
import hashlib
import json
import pickle

import numpy as np
import pandas as pd
import pytest
from river import checks, compose, datasets, evaluate, metrics, preprocessing

from rankstream.ranking.learners import names
from rankstream.ranking.online import OnlineRanker
from rankstream.ranking.scaling import Standardizer

ALGOS = names()

# river.checks.check_estimator runs every check of a binary mini-batch classifier; a
# check listed here would be skipped through `_unit_test_skips`, with its reason. None is.
EXEMPT: dict[str, str] = {}


@pytest.mark.parametrize("algo", ALGOS)
def test_river_check_estimator_passes(algo):
    model = OnlineRanker(algo)
    assert model._unit_test_skips() == set(EXEMPT)
    ran = {check.__name__ for check in checks.yield_checks(model)}
    # the checks that the reported problems failed are among those that run
    assert {
        "check_clone_is_idempotent",
        "check_emerging_features",
        "check_shuffle_features_no_impact",
        "check_learn_many_matches_learn_one",
        "check_predict_proba_one_binary",
        "check_pickling",
    } <= ran
    checks.check_estimator(model)


def test_clone_and_pickle_keep_scaler_and_warm_start():
    scaler = Standardizer().fit(np.random.default_rng(0).standard_normal((20, 3)))
    model = OnlineRanker("arow", r=2.0, scaler=scaler, warm_start=[1.0, 2.0, 3.0])
    model.learn_many(np.eye(3), [1, -1, 1])
    clone = model.clone()
    assert clone.scaler is not scaler
    np.testing.assert_array_equal(clone.scaler.std_, scaler.std_)
    np.testing.assert_array_equal(clone.weights, [1.0, 2.0, 3.0])  # fresh: the warm start
    assert (clone.r, clone.n_seen, clone.width) == (2.0, 0, 3)
    assert repr(clone) == repr(model.clone())
    restored = pickle.loads(pickle.dumps(model))
    np.testing.assert_array_equal(restored.sigma, model.sigma)
    np.testing.assert_array_equal(restored.weights, model.weights)


def _majority(dataset) -> float:
    labels = [y for _, y in dataset]
    return max(labels.count(True), labels.count(False)) / len(labels)


@pytest.mark.parametrize("algo", ALGOS)
def test_learns_a_river_dataset_in_a_pipeline(algo):
    """Phishing's dict rows (named features, bool labels) through river's own scaler."""
    model = compose.Pipeline(preprocessing.StandardScaler(), OnlineRanker(algo))
    accuracy = evaluate.progressive_val_score(datasets.Phishing(), model, metrics.Accuracy())
    majority = _majority(datasets.Phishing())  # 0.56
    assert accuracy.get() > majority + 0.2
    ranker = model["OnlineRanker"]
    first_x, _ = next(iter(datasets.Phishing()))
    assert ranker.feature_names == tuple(first_x)
    assert ranker.n_seen == datasets.Phishing().n_samples


def test_bool_and_signed_labels_are_the_same():
    rng = np.random.default_rng(1)
    X = rng.standard_normal((80, 4))
    signs = np.where(X[:, 0] - X[:, 2] > 0, 1, -1)
    for algo in ALGOS:
        signed = OnlineRanker(algo).learn_many(X, signs)
        boolean = OnlineRanker(algo).learn_many(X, signs > 0)
        series = OnlineRanker(algo).learn_many(pd.DataFrame(X), pd.Series(signs > 0))
        one = OnlineRanker(algo)
        for x, label in zip(X, signs > 0, strict=True):
            one.learn_one(dict(enumerate(x)), bool(label))
        for other in (boolean, series, one):
            np.testing.assert_array_equal(other.weights, signed.weights)
            assert other.n_updates == signed.n_updates


@pytest.mark.parametrize("label", [0, 2, -0.5, "yes", None, np.nan])
def test_other_labels_are_refused(label):
    model = OnlineRanker("opar1").learn_one({"a": 1.0}, True)
    before = model.weights
    with pytest.raises(ValueError, match="True/False or"):
        model.learn_one({"a": 2.0}, label)
    np.testing.assert_array_equal(model.weights, before)
    assert model.n_seen == 1


def test_a_frame_is_read_by_column_name():
    """The reordered-columns bug: columns are matched by name, never by position."""
    rng = np.random.default_rng(2)
    frame = pd.DataFrame(rng.standard_normal((60, 3)), columns=["colour", "shape", "texture"])
    y = pd.Series(frame["colour"] - frame["texture"] > 0)
    reordered = frame[["texture", "colour", "shape"]]
    declared = ("colour", "shape", "texture")
    for algo in ALGOS:
        expected = OnlineRanker(algo).learn_many(frame.to_numpy(), y.to_numpy())
        model = OnlineRanker(algo, features=declared).learn_many(reordered, y)
        np.testing.assert_array_equal(model.weights, expected.weights)
        margins = expected.margin_many(frame.to_numpy())
        np.testing.assert_array_equal(model.margin_many(reordered), margins)
        first_sight = OnlineRanker(algo).learn_many(reordered, y)
        assert first_sight.feature_names == ("texture", "colour", "shape")
        np.testing.assert_allclose(first_sight.margin_many(frame), margins, rtol=1e-12)
        with pytest.raises(ValueError, match="integer position"):
            expected.margin_many(frame)  # its columns are positions: names are not guessed
    predicted = model.predict_many(reordered)
    assert isinstance(predicted, pd.Series) and predicted.dtype == bool
    assert predicted.index.equals(reordered.index)
    proba = model.predict_proba_many(reordered)
    assert list(proba.columns) == [False, True]
    assert predicted.tolist() == [model.predict_one(dict(row)) for _, row in reordered.iterrows()]


def _digest(model: OnlineRanker) -> str:
    digest = hashlib.sha256(model.weights.tobytes())
    if model.sigma is not None:
        digest.update(model.sigma.tobytes())
    return digest.hexdigest()[:16]


# sha256 (first 16 hex digits) of the weights (and AROW's Sigma) that main's code path
# (commit 21eb5b8, before OnlineRanker became a river estimator) learned from the
# stream below, without and with a scaler; and its number of updates.
MAIN_DIGESTS = {
    ("opr", False): ("128eec3525415c4e", 65),
    ("opr", True): ("329e9b7e07ae29a4", 64),
    ("opar1", False): ("f630d355517965f4", 154),
    ("opar1", True): ("254f3122f4a65c7e", 156),
    ("opar2", False): ("363f5f11621aeb72", 162),
    ("opar2", True): ("769d3cbe6c9711e2", 159),
    ("ogdr", False): ("9da96d954ea6a7de", 113),
    ("ogdr", True): ("4916b8d7e0ce8ca9", 114),
    ("arow", False): ("647a8b546d562fbb", 294),
    ("arow", True): ("36a01391de3d507e", 294),
}


def _main_stream():
    rng = np.random.default_rng(20240616)
    X = rng.standard_normal((500, 13)) * rng.uniform(0.1, 3.0, 13)
    X[[7, 123, 400]] = 0.0
    y = np.where(X @ rng.standard_normal(13) + 0.5 * rng.standard_normal(500) > 0, 1.0, -1.0)
    return X, y, Standardizer().fit(rng.standard_normal((40, 13)))


@pytest.mark.parametrize(("algo", "scaled"), sorted(MAIN_DIGESTS))
def test_learn_many_on_arrays_is_bit_identical_to_main(algo, scaled):
    X, y, scaler = _main_stream()
    model = OnlineRanker(algo, C=0.3, eta=0.05, r=0.7, scaler=scaler if scaled else None)
    model.learn_many(X[:200], y[:200]).learn_many(X[200:], y[200:])
    assert (_digest(model), model.n_updates) == MAIN_DIGESTS[algo, scaled]
    # the same rows as named dicts, one at a time, learn the same bits
    named = OnlineRanker(algo, C=0.3, eta=0.05, r=0.7, scaler=scaler if scaled else None,
                         features=[f"f{j}" for j in range(13)])  # fmt: skip
    for x, label in zip(X, y > 0, strict=True):
        named.learn_one({f"f{j}": x[j] for j in reversed(range(13)) if x[j] != 0.0}, label)
    assert _digest(named) == _digest(model)


@pytest.mark.parametrize("algo", ALGOS)
def test_growing_is_exactly_a_model_declared_wide(algo):
    """Keys that appear late get columns whose past rows held 0: the grown model is,
    bit for bit, the one declared with every feature from the start."""
    rng = np.random.default_rng(3)
    rows = []
    for t in range(120):
        present = ["a", "b"] + (["c"] if t >= 30 else []) + (["d", "e"] if t >= 70 else [])
        rows.append(({k: float(rng.standard_normal()) for k in present}, bool(t % 3)))
    grown, declared = OnlineRanker(algo), OnlineRanker(algo, features=("a", "b", "c", "d", "e"))
    for x, y in rows:
        grown.learn_one(x, y)
        declared.learn_one(x, y)
    assert grown.feature_names == ("a", "b", "c", "d", "e") and grown.width == 5
    assert _digest(grown) == _digest(declared)
    assert grown.margin_one({"f": 1.0, "a": 1.0}) == grown.weights[0]  # unknown: weight 0
    positions = OnlineRanker(algo)
    for x, y in rows:
        positions.learn_one({"abcde".index(k): v for k, v in x.items()}, y)
    assert positions.feature_names is None and _digest(positions) == _digest(grown)


def test_a_declared_width_refuses_new_keys_and_a_refused_batch_changes_nothing():
    model = OnlineRanker("arow", features=("a", "b")).learn_one({"a": 1.0}, True)
    with pytest.raises(ValueError, match="'c' is not among the 2 declared features"):
        model.learn_one({"a": 1.0, "c": 1.0}, True)
    with pytest.raises(ValueError, match="declared features"):
        model.predict_one({"c": 1.0})
    grows = OnlineRanker("arow").learn_one({"a": 1.0}, True)
    state = grows.to_state()
    bad = pd.DataFrame({"a": [1.0, 2.0], "z": [np.nan, 1.0]})
    with pytest.raises(ValueError, match="row 0"):
        grows.learn_many(bad, pd.Series([True, False]))
    assert grows.feature_names == ("a",) and grows.width == 1
    assert grows.to_state()[0] == state[0]
    assert grows.sigma.shape == (1, 1)
    with pytest.raises(ValueError, match="integer position"):
        OnlineRanker(dim=2).learn_one({"a": 1.0}, True)
    with pytest.raises(ValueError, match="inconsistent"):
        OnlineRanker(features=("a", "b"), dim=3)
    with pytest.raises(ValueError, match="named twice"):
        OnlineRanker(features=("a", "a"))
    with pytest.raises(ValueError, match="not one string"):
        OnlineRanker(features="ab")


@pytest.mark.parametrize("algo", ALGOS)
def test_feature_names_travel_in_the_state(algo):
    model = OnlineRanker(algo)
    for x, y in datasets.Phishing().take(50):
        model.learn_one(x, y)
    meta, arrays = model.to_state()
    meta = json.loads(json.dumps(meta))
    restored = OnlineRanker.from_state(meta, {k: v.copy() for k, v in arrays.items()})
    assert restored.to_state()[0] == meta
    assert restored.feature_names == model.feature_names
    for x, y in [({"new": 1.0, "popup_window": 1.0}, True), *datasets.Phishing().take(20)]:
        model.learn_one(x, y)
        restored.learn_one(copy.deepcopy(x), y)
    assert _digest(restored) == _digest(model)
    assert restored.feature_names[-1] == "new"


def test_states_written_before_feature_names_still_load():
    scaler = Standardizer().fit(np.random.default_rng(4).standard_normal((10, 3)))
    meta, arrays = OnlineRanker("opar2", scaler=scaler).learn_many(np.eye(3), [1, 1, -1]).to_state()
    old = {k: v for k, v in meta.items() if k not in ("features", "grows")}
    restored = OnlineRanker.from_state(old, arrays)
    np.testing.assert_array_equal(restored.weights, arrays["weights"])
    assert restored.feature_names is None and restored.width == 3
    with pytest.raises(ValueError, match="outside"):
        restored.learn_one({3: 1.0}, True)
