"""Stored models as scorers: the kind registry and the cache (`selection/scoring.py`)."""

from __future__ import annotations

import numpy as np
import pytest

from rankstream.ranking.baselines import UNI_CON, UniCon
from rankstream.ranking.online import OnlineRanker
from rankstream.ranking.scaling import Standardizer
from rankstream.selection.scoring import SCORERS, ScorerCache, scorer_for
from rankstream.stream.embedded_store import EmbeddedModelStore

RNG = np.random.default_rng(3)
PHI = RNG.random((40, 36)).astype(np.float32)


def _scaler() -> Standardizer:
    return Standardizer().fit(RNG.random((200, 36)))


def _save_linear(store, name, model, kind="linear") -> int:
    meta, arrays = model.to_state()
    return store.save(
        name,
        kind=kind,
        meta=meta,
        arrays=arrays,
        offsets={},
        expected_version=store.latest_versions().get(name, 0),
    )


def test_linear_and_online_kinds_score_like_the_models_they_store() -> None:
    store = EmbeddedModelStore()
    unicon = UniCon(scaler=_scaler())
    ranker = OnlineRanker(algo="opar1", scaler=_scaler())
    ranker.learn_many(RNG.standard_normal((30, 36)), np.where(RNG.random(30) < 0.5, 1.0, -1.0))
    _save_linear(store, UNI_CON, unicon)
    _save_linear(store, "opar1", ranker, kind="online")
    for name, model in ((UNI_CON, unicon), ("opar1", ranker)):
        scores = scorer_for(store.load(name)).score(PHI)
        assert scores.dtype == np.float64 and scores.shape == (40,)
        np.testing.assert_array_equal(scores, model.score(PHI))
    assert {"linear", "online"} <= set(SCORERS)


def test_bad_kinds_states_and_phi_raise_clear_errors() -> None:
    store = EmbeddedModelStore()
    store.save("reservoir", kind="reservoir", meta={}, arrays={}, offsets={}, expected_version=0)
    with pytest.raises(ValueError, match="no scorer"):
        scorer_for(store.load("reservoir"))
    store.save(
        "odd", kind="linear", meta={"kind": "mystery"}, arrays={}, offsets={}, expected_version=0
    )
    with pytest.raises(ValueError, match="mystery"):
        scorer_for(store.load("odd"))
    _save_linear(store, UNI_CON, UniCon(scaler=_scaler()))
    scorer = scorer_for(store.load(UNI_CON))
    with pytest.raises(ValueError):
        scorer.score(PHI[:, :35])
    bad = PHI.copy()
    bad[0, 0] = np.nan
    with pytest.raises(ValueError, match="NaN"):
        scorer.score(bad)


def test_cache_returns_exact_versions_and_none_once_trimmed() -> None:
    store = EmbeddedModelStore(keep_versions=2)
    ranker = OnlineRanker(algo="opr", scaler=_scaler())
    weights = []
    for _ in range(3):
        ranker.learn_many(RNG.standard_normal((5, 36)), np.ones(5))
        weights.append(ranker.score(PHI))
        _save_linear(store, "opr", ranker, kind="online")
    cache = ScorerCache(store, capacity=2)
    assert cache.get("opr", 1) is None  # trimmed: never replaced by a newer version
    np.testing.assert_array_equal(cache.get("opr", 2).score(PHI), weights[1])
    np.testing.assert_array_equal(cache.get("opr", 3).score(PHI), weights[2])
    assert cache.scorable("opr") is True and cache.scorable("nope") is None
