"""Sessions an engine can close (issue 38): `POST /v1/clicks` with `"session_over": true`
(JSON), a null-candidate row after the clicks (Arrow), or `ClickProducer.send(...,
session_over=True)` in process close the impression's session in the click join at once;
the same clicks without it leave the session open for the click window (30 minutes, so
no test here waits for it). A non-boolean `session_over` is a 422 naming the field.

Everything runs on the embedded transport: the app ranks (its impression is logged) and
takes the clicks; once its lifespan has closed the topics hold both, and the join is run
over them until it has read every message (its final checkpoint sends the triplets)."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest
from join_runs import run_to_end
from starlette.testclient import TestClient

from rankstream.producers.click_producer import ClickProducer, sessions_over
from rankstream.serve.app import create_app
from rankstream.serve.bodies import ARROW
from rankstream.serve.openapi import openapi_document
from rankstream.stream.click_schema import Click, decode_clicks
from rankstream.stream.connect import open_transport
from rankstream.stream.embedded import reset_embedded
from rankstream.stream.embedded_store import EmbeddedModelStore
from rankstream.stream.schema import decode_triplets
from rankstream.stream.settings import DEFAULT_PHI_DIM as PHI_DIM
from rankstream.stream.settings import Settings
from rankstream.workers.click_join import ClickJoin
from rankstream.workers.click_join_options import NONE, JoinOptions

IDS = list(range(100, 108))
PHI = np.random.default_rng(8).random((len(IDS), PHI_DIM))


def _settings() -> Settings:
    reset_embedded()
    return Settings(topic_prefix="session-over", api_deadline_s=60.0)  # a loaded machine


def _ranked(settings: Settings, clicks_body=None, **post) -> tuple[str, list[int], int]:
    """Rank once and post the clicks `clicks_body(impression_id, shown)` makes; the
    impression id, the ids as shown, the clicks request's status."""
    app = create_app(settings, store=EmbeddedModelStore(), poll_seconds=60.0)
    with TestClient(app) as client:
        ranked = client.post("/v1/rank", json={"candidate_ids": IDS, "phi": PHI.tolist()}).json()
        status = 0
        if clicks_body is not None:
            body = clicks_body(ranked["impression_id"], ranked["candidate_ids"])
            status = client.post("/v1/clicks", **{post.get("as", "json"): body},
                                 headers=post.get("headers", {})).status_code  # fmt: skip
    return ranked["impression_id"], ranked["candidate_ids"], status


def _join(settings: Settings) -> tuple[ClickJoin, list[tuple[int, int]]]:
    """The join run over every impression and click message; its (winner, loser) ids."""
    join = ClickJoin(settings, JoinOptions(learn=(NONE,)), store=EmbeddedModelStore())
    run_to_end(join, settings)
    reader = open_transport(settings)
    consumer = reader.consumer(None)
    consumer.assign([(settings.triplets_topic, 0)])
    consumer.seek_to_beginning(settings.triplets_topic, 0)
    pairs = []
    while batch := consumer.poll(timeout_ms=50, max_records=500):
        for message in batch:
            block = decode_triplets(message.value, width=PHI_DIM)
            pairs += list(zip(block.p1_id.tolist(), block.p2_id.tolist(), strict=True))
    consumer.close()
    return join, pairs


def _json_clicks(session_over: bool | None):
    def body(impression_id: str, shown: list[int]) -> dict:
        entry = {"impression_id": impression_id,
                 "clicks": [{"candidate_id": shown[2]}, {"candidate_id": shown[4]}]}  # fmt: skip
        return entry if session_over is None else {**entry, "session_over": session_over}

    return body


@pytest.mark.parametrize("session_over", [True, False, None])
def test_session_over_closes_the_session_with_its_clicks_else_it_waits(session_over) -> None:
    settings = _settings()
    _, shown, status = _ranked(settings, _json_clicks(session_over))
    assert status == 200
    join, pairs = _join(settings)
    if session_over:  # closed at once: each click over every other shown result
        assert join.handler.window.sessions == {}
        assert sorted(pairs) == sorted(
            (shown[c], other) for c in (2, 4) for other in shown if other != shown[c]
        )
    else:  # open until the click window: nothing learned yet
        assert len(join.handler.window.sessions) == 1 and pairs == []


def test_an_arrow_body_ends_the_session_with_a_null_candidate_row_after_its_clicks() -> None:
    def body(impression_id: str, shown: list[int]) -> bytes:
        table = pa.table({"impression_id": pa.array([impression_id] * 2),
                          "candidate_id": pa.array([shown[1], None], pa.int64())})  # fmt: skip
        sink = pa.BufferOutputStream()
        with pa.ipc.new_stream(sink, table.schema) as writer:
            writer.write_table(table)
        return sink.getvalue().to_pybytes()

    settings = _settings()
    _, shown, status = _ranked(settings, body, headers={"content-type": ARROW}, **{"as": "content"})
    assert status == 200
    join, pairs = _join(settings)
    assert join.handler.window.sessions == {}
    assert sorted(pairs) == sorted((shown[1], other) for other in shown if other != shown[1])


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"impression_id": "a", "clicks": [{"candidate_id": 1}], "session_over": "yes"},
         "session_over"),
        ({"impression_id": "a", "clicks": [{"candidate_id": 1}], "session_over": 1},
         "session_over"),
        ({"impression_id": "a", "clicks": [{"candidate_id": 1}], "session_over": None},
         "session_over"),
        ({"impressions": [{"impression_id": "a", "clicks": []},
                          {"impression_id": "b", "clicks": [], "session_over": "true"}]},
         "impressions[1].session_over"),
        ({"impression_id": "a", "clicks": [], "session_over": False}, "session_over"),
    ],
)  # fmt: skip
def test_a_session_over_that_is_not_a_boolean_is_refused_naming_it(body, field) -> None:
    settings = _settings()
    with TestClient(create_app(settings, store=EmbeddedModelStore(), poll_seconds=60.0)) as client:
        reply = client.post("/v1/clicks", json=body)
    assert reply.status_code == 422 and reply.json()["error"]["field"] == field


def test_the_openapi_document_describes_session_over_and_the_default() -> None:
    post = openapi_document(PHI_DIM)["paths"]["/v1/clicks"]["post"]
    one = post["requestBody"]["content"]["application/json"]["schema"]["oneOf"][0]
    assert one["properties"]["session_over"]["type"] == "boolean"
    assert one["properties"]["session_over"]["default"] is False
    assert "RANKSTREAM_CLICK_WINDOW_SECONDS, default 1800 s" in post["description"]


def test_the_python_producer_says_session_over_as_the_route_does() -> None:
    clicks = [Click("a", 1), Click("b", 2), Click("a", 3), Click.no_click("c")]
    assert sessions_over(clicks) == [Click("a", 1), Click("a", 3), Click.no_click("a"),
                                     Click("b", 2), Click.no_click("b"),
                                     Click.no_click("c")]  # fmt: skip
    settings = _settings()
    impression_id, shown, _ = _ranked(settings)
    with ClickProducer.open(settings) as producer:
        with pytest.raises(TypeError, match="session_over"):
            producer.send([Click(impression_id, shown[0])], session_over="yes")  # type: ignore[arg-type]
        assert producer.deliver([Click(impression_id, shown[3])], session_over=True) == 2
    join, pairs = _join(settings)
    assert join.handler.window.sessions == {}
    assert sorted(pairs) == sorted((shown[3], other) for other in shown if other != shown[3])
    rows = []
    reader = open_transport(settings)
    consumer = reader.consumer(None)
    consumer.assign([(settings.clicks_topic, 0)])
    consumer.seek_to_beginning(settings.clicks_topic, 0)
    while batch := consumer.poll(timeout_ms=50, max_records=50):
        rows += [c for m in batch for c in decode_clicks(m.value).records]
    consumer.close()
    assert rows == [Click(impression_id, shown[3]), Click.no_click(impression_id)]
