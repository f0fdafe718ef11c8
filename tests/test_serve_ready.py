"""`/readyz` of an engine-only serve (issue 38): ready from an empty store, and still ready
once its workers have saved their records (the click join's propensities and interleaving
evidence, the evaluator's scores naming Uni-Con) and after clicks for impressions it never
logged, before any ranking; not ready while the stored Uni-Con cannot be loaded.

The workers' saves are driven here, not waited for: the click join is stepped and closed
(its final checkpoint saves its records, as the embedded one's first checkpoint does a
second after start) and the registry is refreshed, so no test waits on a cadence.
"""

from __future__ import annotations

import numpy as np
from starlette.testclient import TestClient

from rankstream.ranking.baselines import UNI_CON
from rankstream.selection.scoring import EVALUATOR_RECORD
from rankstream.selection.unicon_baseline import publish_unicon
from rankstream.serve.app import create_app
from rankstream.stream.embedded import reset_embedded
from rankstream.stream.embedded_store import EmbeddedModelStore
from rankstream.stream.settings import DEFAULT_PHI_DIM as PHI_DIM
from rankstream.stream.settings import Settings
from rankstream.workers.click_join import ClickJoin
from rankstream.workers.click_join_options import JoinOptions

PHI = np.random.default_rng(11).random((20, PHI_DIM))
RANK = {"candidate_ids": list(range(20)), "phi": PHI.tolist()}


def _client(store: EmbeddedModelStore) -> TestClient:
    reset_embedded()
    settings = Settings(topic_prefix="ready")
    return TestClient(create_app(settings, store=store, poll_seconds=60.0))


def _readyz(client: TestClient) -> tuple[int, dict]:
    client.app.state.serve.registry.refresh()  # what the reload thread does on a save
    reply = client.get("/readyz")
    return reply.status_code, reply.json()


def _join_once(settings: Settings, store: EmbeddedModelStore) -> set[str]:
    """Run the click join over what is on its topics; the records its checkpoint saved."""
    join = ClickJoin(settings, JoinOptions(), store=store)
    join.step(timeout_ms=10)
    join.step(timeout_ms=10)
    join.close(final_checkpoint=True)
    return set(store.latest_versions())


def _evaluator_names_uni_con(store: EmbeddedModelStore) -> None:
    meta = {"champion": UNI_CON, "rolling_ndcg": {}, "counts": {}, "queries_evaluated": 0}
    store.save(EVALUATOR_RECORD, kind="scores", meta=meta, arrays={}, offsets={},
               expected_version=store.latest_versions().get(EVALUATOR_RECORD, 0))  # fmt: skip


def test_an_engine_only_serve_stays_ready_from_an_empty_store_until_its_first_ranking() -> None:
    store = EmbeddedModelStore()
    with _client(store) as client:
        settings = client.app.state.serve.settings
        assert _readyz(client)[0] == 200
        saved = _join_once(settings, store)
        _evaluator_names_uni_con(store)
        assert saved and UNI_CON not in saved  # the premise: records saved, no model yet
        assert _readyz(client) == (200, {"ready": True, "champion": UNI_CON, "problems": []})
        unknown = {"impressions": [{"impression_id": f"{i:032x}", "clicks": [{"candidate_id": 3}]}
                                   for i in range(5)]}  # fmt: skip
        assert client.post("/v1/clicks", json=unknown).status_code == 200
        _join_once(settings, store)
        assert _readyz(client)[0] == 200
        ranked = client.post("/v1/rank", json=RANK).json()
        assert (ranked["model"], ranked["version"]) == (UNI_CON, 1)
        assert _readyz(client)[0] == 200


def test_a_stored_uni_con_that_cannot_be_loaded_is_not_ready() -> None:
    store = EmbeddedModelStore()
    publish_unicon(store, np.ones((4, 10)), width=10, target=1)  # another deployment's width
    with _client(store) as client:
        status, document = _readyz(client)
        assert client.get("/healthz").status_code == 200
        ranked = client.post("/v1/rank", json=RANK)
    assert status == 503 and document["problems"] == [f"champion {UNI_CON!r} is not loaded"]
    assert ranked.status_code == 404 and "no model is loaded" in ranked.text
