"""The one Uni-Con publisher (`selection.unicon_baseline`): stamped width, a calibration sample
gathered over requests, no division by a zero variance, racing publishers fenced."""

from __future__ import annotations

import numpy as np
import pytest
from starlette.testclient import TestClient

from rankstream.ranking.baselines import UNI_CON, UniCon
from rankstream.ranking.scaling import Standardizer
from rankstream.selection.scoring import scorer_for
from rankstream.selection.unicon_baseline import calibrating, publish_unicon
from rankstream.serve.app import create_app
from rankstream.stream.embedded import reset_embedded
from rankstream.stream.embedded_store import EmbeddedModelStore
from rankstream.stream.settings import Settings
from rankstream.stream.store import WrongWidthError, stored_width

RNG = np.random.default_rng(4)


def _rank_body(phi: np.ndarray, start: int = 0) -> dict:
    return {"candidate_ids": list(range(start, start + len(phi))), "phi": phi.tolist()}


@pytest.mark.parametrize("width", [8, 10, 128])
def test_an_empty_store_of_any_width_serves_from_its_first_request(width: int) -> None:
    reset_embedded()
    store = EmbeddedModelStore()
    app = create_app(Settings(topic_prefix="base", phi_dim=width), store=store, poll_seconds=0.05)
    with TestClient(app) as client:
        reply = client.post("/v1/rank", json=_rank_body(RNG.random((40, width))))
        assert reply.status_code == 200, reply.text
        assert (reply.json()["model"], reply.json()["version"]) == (UNI_CON, 1)
    assert stored_width(store.load(UNI_CON)) == width


def test_uni_con_is_calibrated_on_a_sample_over_requests_not_on_the_first() -> None:
    """A one-candidate smoke test first (every feature's variance 0: std 1, scores
    finite), then 25-candidate requests: a new version each, until 60 candidates were
    seen; from then on Uni-Con is final, scaled as if fitted on those 76 at once."""
    reset_embedded()
    store = EmbeddedModelStore()
    settings = Settings(topic_prefix="base", phi_dim=6, unicon_calibration=60)
    requests = [RNG.random((1, 6))] + [RNG.normal(5.0, 3.0, (25, 6)) for _ in range(5)]
    requests = [phi.astype(np.float32) for phi in requests]  # the API reads phi as float32
    answered = []
    with TestClient(create_app(settings, store=store, poll_seconds=0.05)) as client:
        for i, phi in enumerate(requests):
            reply = client.post("/v1/rank", json=_rank_body(phi, 100 * i))
            assert reply.status_code == 200, reply.text
            assert np.isfinite(reply.json()["scores"]).all()
            answered.append(reply.json()["version"])
    assert answered == [1, 2, 3, 4, 4, 4]  # 1, 26, 51, 76 >= 60: final
    stored = store.load(UNI_CON)
    assert not calibrating(stored) and stored.meta["calibration_rows"] == 76
    fitted = Standardizer().fit(np.concatenate(requests[:4]).astype(np.float64))
    model = UniCon.from_state(stored.meta, stored.arrays)
    np.testing.assert_allclose(model.scaler_.mean_, fitted.mean_, rtol=1e-12)
    np.testing.assert_allclose(model.scaler_.std_, fitted.std_, rtol=1e-12)


def test_constant_features_and_the_simulators_final_publish() -> None:
    store = EmbeddedModelStore()
    phi = np.column_stack([np.full(50, 7.0), RNG.random(50), np.zeros(50)])
    assert publish_unicon(store, phi, 3, target=50, source="test") == 1
    stored = store.load(UNI_CON)
    assert stored.arrays["scaler.std"][[0, 2]].tolist() == [1.0, 1.0]
    assert not calibrating(stored)
    assert publish_unicon(store, RNG.random((10, 3)), 3, target=50) == 1  # final: kept
    scores = scorer_for(stored, 3).score(phi)
    assert np.isfinite(scores).all()
    with pytest.raises(WrongWidthError):
        scorer_for(stored, 4)


def test_a_calibrating_record_of_another_width_is_refused_not_merged() -> None:
    store = EmbeddedModelStore()
    publish_unicon(store, RNG.random((5, 3)), 3, target=50)
    with pytest.raises(WrongWidthError):
        publish_unicon(store, RNG.random((5, 4)), 4, target=50)
    with pytest.raises(ValueError, match="phi"):
        publish_unicon(store, [[float("nan"), 0.0, 1.0]], 3, target=50)
