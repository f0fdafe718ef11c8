"""The model a simulator serves: the evaluator record's champion (`selection/what_serves.py`)."""

from __future__ import annotations

import numpy as np
import pytest

from rankstream.ranking.baselines import UNI_CON, UniCon
from rankstream.ranking.online import OnlineRanker
from rankstream.ranking.scaling import Standardizer
from rankstream.selection.scoring import EVALUATOR_RECORD
from rankstream.selection.what_serves import CHAMPION, ServingModel
from rankstream.stream.embedded_store import EmbeddedModelStore
from rankstream.telemetry.prometheus_metrics import sample_value

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


def test_serving_model_follows_the_evaluator_record_and_counts_switches() -> None:
    store = EmbeddedModelStore()
    _save_linear(store, UNI_CON, UniCon(scaler=_scaler()))
    ranker = OnlineRanker(algo="opar2", scaler=_scaler(), warm_start=RNG.standard_normal(36))
    _save_linear(store, "opar2", ranker, kind="online")
    store.save("reservoir", kind="reservoir", meta={}, arrays={}, offsets={}, expected_version=0)
    serving = ServingModel(store, CHAMPION)
    before = sample_value("rankstream_serving_switches_total")
    served = serving.refresh()
    assert (served.name, served.version) == (UNI_CON, 1)
    assert served.model_versions == {UNI_CON: 1, "opar2": 1}  # only scorable models
    store.save(
        EVALUATOR_RECORD,
        kind="scores",
        meta={"champion": "opar2"},
        arrays={},
        offsets={},
        expected_version=0,
    )
    served = serving.refresh()
    assert served.name == "opar2"
    np.testing.assert_array_equal(served.scorer.score(PHI), ranker.score(PHI))
    assert sample_value("rankstream_serving_model_info", {"model": "opar2"}) == 1
    assert sample_value("rankstream_serving_model_info", {"model": UNI_CON}) == 0
    assert sample_value("rankstream_serving_switches_total") == before + 2
    assert EVALUATOR_RECORD not in served.model_versions


def test_a_named_model_that_is_missing_is_an_error() -> None:
    store = EmbeddedModelStore()
    _save_linear(store, UNI_CON, UniCon(scaler=_scaler()))
    with pytest.raises(LookupError, match="opr"):
        ServingModel(store, "opr").refresh()
