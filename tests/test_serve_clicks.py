"""Impressions and clicks through the HTTP API (issue 26): every ranking is logged as an
impression in displayed order with its phi, logging off logs none, a full queue drops
and counts, clicks are strict (nothing of a refused request reaches a topic) and
idempotent, and a click batch round-trips to the same Click records; on the embedded
default and on a real Kafka + Redis.

Reading a topic after the app's lifespan has closed is deterministic: closing the
impression log writes everything queued before it returns.
"""

from __future__ import annotations

import dataclasses
import threading
import time

import numpy as np
import pyarrow as pa
import pytest
from starlette.testclient import TestClient

from rankstream.producers import click_producer
from rankstream.producers import impression_producer as impression_log
from rankstream.producers.click_producer import ClickProducer
from rankstream.producers.impression_producer import ImpressionLog, served_impression
from rankstream.serve.app import create_app
from rankstream.serve.bodies import ARROW
from rankstream.stream.click_schema import (
    Click,
    Impression,
    decode_clicks,
    decode_impressions,
    encode_clicks,
    impression_key,
)
from rankstream.stream.connect import open_transport
from rankstream.stream.embedded import reset_embedded
from rankstream.stream.settings import DEFAULT_PHI_DIM as PHI_DIM
from rankstream.stream.settings import Settings
from rankstream.stream.transport import Message
from rankstream.telemetry import prometheus_metrics as metrics

K = 6
IDS = [31, 7, 502, 44, 9, 18]
PHI = np.random.default_rng(3).random((K, PHI_DIM))


def _rank(**change) -> dict:
    return {"candidate_ids": IDS, "phi": PHI.tolist(), **change}


def _arrow_rank(**metadata: str) -> bytes:
    table = pa.table({"candidate_ids": pa.array(IDS, pa.int64()),
                      "phi": pa.FixedSizeListArray.from_arrays(
                          pa.array(PHI.reshape(-1).astype(np.float32)), PHI_DIM)})  # fmt: skip
    table = table.replace_schema_metadata(metadata or None)
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema) as writer:
        writer.write_table(table)
    return sink.getvalue().to_pybytes()


def _impressions_in(messages: list[Message]) -> int:
    return sum(len(decode_impressions(m.value).records) for m in messages)


def _read(settings: Settings, topic: str, expected: int | None = None, count=len) -> list[Message]:
    """Every message of `topic` from its beginning; with `expected`, polls until `count`
    of the messages reaches it (a hang guard of 60 s, never the thing tested)."""
    transport = open_transport(settings)
    consumer = transport.consumer()
    try:
        partitions = transport.partitions_for(topic)
        consumer.assign([(topic, p) for p in partitions])
        for p in partitions:
            consumer.seek_to_beginning(topic, p)
        messages: list[Message] = []
        deadline = time.monotonic() + 60
        while True:
            messages += consumer.poll(timeout_ms=200 if expected else 0, max_records=1000)
            if expected is None or count(messages) >= expected or time.monotonic() > deadline:
                break
        return messages
    finally:
        consumer.close()
        transport.close()


def _check_impression(imp: Impression, answer: dict, query_id=None, request_id=None) -> None:
    """The impression is the answer as shown: ids best first, each with its own phi."""
    assert imp.impression_id == answer["impression_id"]
    assert imp.candidate_ids.tolist() == answer["candidate_ids"]
    rows = [IDS.index(c) for c in answer["candidate_ids"]]
    assert np.array_equal(imp.phi, PHI[rows].astype(np.float32))
    assert (imp.model, imp.version) == (answer["model"], answer["version"])
    assert imp.model_versions == {answer["model"]: answer["version"]}
    assert (imp.query_id, imp.request_id) == (query_id, request_id)
    assert imp.teams is None and imp.team_models == () and imp.shown_probability is None


def _ranked_then_logged(settings: Settings, store=None) -> tuple[list[dict], list[Message]]:
    """A JSON ranking with the caller's ids, one without, an Arrow one; the impressions
    topic once the app has closed."""
    with TestClient(create_app(settings, store=store, poll_seconds=0.05)) as client:
        first = client.post("/v1/rank", json=_rank(query_id=77, request_id="rq-1"))
        second = client.post("/v1/rank", json=_rank(), headers={"X-Request-ID": "hdr-2"})
        arrow = client.post("/v1/rank", content=_arrow_rank(query_id="-5"),
                            headers={"content-type": ARROW, "accept": ARROW})  # fmt: skip
    assert first.status_code == second.status_code == arrow.status_code == 200
    table = pa.ipc.open_stream(arrow.content).read_all()
    meta = {k.decode(): v.decode() for k, v in table.schema.metadata.items()}
    arrow_answer = {"impression_id": meta["impression_id"], "model": meta["model"],
                    "version": int(meta["version"]),
                    "candidate_ids": table.column("candidate_ids").to_pylist()}  # fmt: skip
    assert meta["query_id"] == "-5" and "request_id" not in meta
    answers = [first.json(), second.json(), arrow_answer]
    return answers, _read(settings, settings.impressions_topic, 3, _impressions_in)


def _logged(settings: Settings, messages: list[Message], width: int = PHI_DIM) -> dict:
    """The impressions in `messages` by id, each once; a message is keyed by its first
    impression and sits on the partition every one of its impressions' keys maps to."""
    transport = open_transport(settings)
    logged: dict[str, Impression] = {}
    try:
        for message in messages:
            decoded = decode_impressions(message.value, width=width)
            assert decoded.rejects == [] and decoded.records
            assert message.key == impression_key(decoded.records[0].impression_id)
            for imp in decoded.records:
                key = impression_key(imp.impression_id)
                assert transport.partition_for(message.topic, key) == message.partition
                assert imp.impression_id not in logged
                logged[imp.impression_id] = imp
    finally:
        transport.close()
    return logged


def _check_logged(
    settings: Settings, answers: list[dict], messages: list[Message], width: int = PHI_DIM
) -> None:
    assert first_answer_fields(answers[0]) == {"query_id": 77, "request_id": "rq-1"}
    assert "query_id" not in answers[1] and answers[1]["request_id"] == "hdr-2"
    assert len({a["impression_id"] for a in answers}) == 3
    logged = _logged(settings, messages, width)
    assert len(logged) == 3
    _check_impression(logged[answers[0]["impression_id"]], answers[0], 77, "rq-1")
    _check_impression(logged[answers[1]["impression_id"]], answers[1], None, "hdr-2")
    _check_impression(logged[answers[2]["impression_id"]], answers[2], -5, None)


def first_answer_fields(answer: dict) -> dict:
    return {k: answer[k] for k in ("query_id", "request_id")}


# --- embedded ---------------------------------------------------------------------------
def test_every_ranking_is_logged_as_an_impression_in_displayed_order(embedded_settings):
    reset_embedded()
    answers, messages = _ranked_then_logged(embedded_settings)
    _check_logged(embedded_settings, answers, messages)


def test_logging_off_logs_nothing_and_still_answers_an_impression_id(embedded_settings):
    reset_embedded()
    settings = Settings(**{**embedded_settings.__dict__, "impression_logging": False})
    with TestClient(create_app(settings, poll_seconds=0.05)) as client:
        answer = client.post("/v1/rank", json=_rank())
    assert answer.status_code == 200 and len(answer.json()["impression_id"]) == 32
    assert _read(settings, settings.impressions_topic) == []


def _hold_the_writer(monkeypatch) -> tuple[threading.Event, threading.Event]:
    """The log's writer stops inside its next encoding (`entered` set) until `release`."""
    entered, release = threading.Event(), threading.Event()
    encode = impression_log.encode_impressions

    def held(impressions):
        entered.set()
        assert release.wait(60)  # a hang guard
        return encode(impressions)

    monkeypatch.setattr(impression_log, "encode_impressions", held)
    return entered, release


def test_a_full_queue_drops_and_counts_and_ranking_never_waits(embedded_settings, monkeypatch):
    """The writer is held inside its first impression; the queue (capacity 1) takes the
    second; the third is dropped, counted and logged, and every ranking was answered."""
    reset_embedded()
    entered, release = _hold_the_writer(monkeypatch)
    settings = Settings(**{**embedded_settings.__dict__, "impression_queue": 1})
    before = metrics.sample_value("rankstream_impressions_dropped_total", {"reason": "queue_full"})
    with TestClient(create_app(settings, poll_seconds=0.05)) as client:
        first = client.post("/v1/rank", json=_rank())
        assert entered.wait(60)
        queued = client.post("/v1/rank", json=_rank())
        dropped = client.post("/v1/rank", json=_rank())
        log = client.app.state.serve.impressions
        assert log.dropped["queue_full"] == 1 and log.waiting == 1
        release.set()
    assert first.status_code == queued.status_code == dropped.status_code == 200
    after = metrics.sample_value("rankstream_impressions_dropped_total", {"reason": "queue_full"})
    assert after - before == 1
    logged = [decode_impressions(m.value).records[0].impression_id
              for m in _read(settings, settings.impressions_topic, expected=2)]  # fmt: skip
    assert logged == [first.json()["impression_id"], queued.json()["impression_id"]]


def test_queued_impressions_share_messages_on_the_partitions_of_their_keys(
    embedded_settings, monkeypatch
):
    """The writer is held inside its first message while 40 more are queued: they go out
    together, a message per partition of a 4-partition topic, each impression on its
    key's partition, every one once and counted."""
    reset_embedded()
    topic = embedded_settings.impressions_topic
    open_transport(embedded_settings).ensure_topics({topic: 4})
    entered, release = _hold_the_writer(monkeypatch)
    log = ImpressionLog(embedded_settings, capacity=100)
    shown = np.arange(K)[::-1]
    made = [
        served_impression(f"imp-{i}", np.array(IDS), PHI, shown, "m", 1, {"m": 1}, time=i)
        for i in range(41)
    ]
    assert log.offer(lambda: made[0]) and entered.wait(60)
    assert all(log.offer(lambda imp=imp: imp) for imp in made[1:])
    release.set()
    assert log.close(30.0)["written"] == 41
    messages = _read(embedded_settings, topic)
    logged = _logged(embedded_settings, messages)
    assert sorted(logged) == sorted(imp.impression_id for imp in made)
    assert len(messages) <= 1 + 4  # the held first one, then one message per partition
    for imp in made:
        assert np.array_equal(logged[imp.impression_id].phi, PHI[::-1].astype(np.float32))
        assert logged[imp.impression_id].candidate_ids.tolist() == IDS[::-1]


def test_impressions_beyond_a_message_budget_go_in_several_messages():
    imp = served_impression("a", np.array(IDS), PHI, np.arange(K), "m", 1, {}, time=0.0)
    per = imp.phi.nbytes + imp.candidate_ids.nbytes
    budget = impression_log.MESSAGE_BYTES // per
    messages = impression_log.message_groups([imp] * (2 * budget + 1))
    assert [len(m) for m in messages] == [budget, budget, 1]


def test_the_impression_log_counts_what_it_could_not_make_or_write(embedded_settings):
    log = ImpressionLog(embedded_settings, capacity=4)

    def invalid() -> Impression:
        return served_impression("bad id", np.array([1]), np.ones((1, 3)), np.array([0]),
                                 "m", 1, {}, time=0.0)  # fmt: skip

    assert log.offer(invalid)
    counts = log.close(10.0)
    assert counts == {"written": 0, "dropped": {**dict.fromkeys(counts["dropped"], 0),
                                                "invalid": 1}}  # fmt: skip
    assert not log.offer(invalid) and log.dropped["shutdown"] == 1


def test_served_impression_keeps_fields_for_randomized_and_interleaved_lists():
    imp = served_impression(
        "abc", np.array([5, 6, 7]), np.eye(3), np.array([2, 0, 1]), "arow", 3, {"arow": 3},
        time=1.0, shown_probability=0.5, intervention="swap:1-2",
        teams=np.array([0, 1, 0]), team_models=("arow", "opar1"),
    )  # fmt: skip
    assert imp.candidate_ids.tolist() == [7, 5, 6] and np.array_equal(imp.phi, np.eye(3)[[2, 0, 1]])
    assert imp.teams.tolist() == [0, 1, 0] and imp.team_models == ("arow", "opar1")


def _click_body(impression_id: str = "imp-1", **change) -> dict:
    body = {"impression_id": impression_id,
            "clicks": [{"candidate_id": 7, "position": 2, "time": 1.5, "dwell": 12.0}]}  # fmt: skip
    return {**body, **change}


BAD_CLICKS = [
    (_click_body(colour=1), "colour", "unknown_field"),
    (_click_body(clicks=[{"candidate_id": 7, "colour": 1}]), "clicks[0].colour", "unknown_field"),
    (_click_body(clicks=[{"candidate_id": True}]), "clicks[0].candidate_id", "invalid_field"),
    (_click_body(clicks=[{"candidate_id": "7"}]), "clicks[0].candidate_id", "invalid_field"),
    (_click_body(clicks=[{"position": 1}]), "clicks[0].candidate_id", "invalid_field"),
    (_click_body(clicks=[{"candidate_id": 7, "position": 0}]), "clicks[0].position",
     "invalid_field"),
    (_click_body(clicks=[{"candidate_id": 7, "dwell": -1}]), "clicks[0].dwell", "invalid_field"),
    (_click_body(clicks=[{"candidate_id": 7, "time": "now"}]), "clicks[0].time", "invalid_field"),
    (_click_body(impression_id="a b"), "impression_id", "invalid_field"),
    (_click_body(clicks=None), "clicks", "invalid_field"),
    ({"impressions": []}, "impressions", "invalid_field"),
    ({"impressions": [_click_body("x"), _click_body("y", clicks=[{"candidate_id": 1, "p": 2}])]},
     "impressions[1].clicks[0].p", "unknown_field"),
]  # fmt: skip


@pytest.mark.parametrize(("body", "field", "code"), BAD_CLICKS, ids=[b[1] for b in BAD_CLICKS])
def test_bad_clicks_name_the_field_and_reach_no_topic(embedded_settings, body, field, code):
    reset_embedded()
    with TestClient(create_app(embedded_settings, poll_seconds=0.05)) as client:
        reply = client.post("/v1/clicks", json=body)
    assert reply.status_code == 422, reply.text
    assert reply.json()["error"]["field"] == field and reply.json()["error"]["code"] == code
    assert _read(embedded_settings, embedded_settings.clicks_topic) == []


def _arrow_clicks(columns: dict[str, pa.Array], **metadata: str) -> bytes:
    table = pa.table(columns).replace_schema_metadata(metadata or None)
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema) as writer:
        writer.write_table(table)
    return sink.getvalue().to_pybytes()


BAD_ARROW_CLICKS = [
    (b"not arrow", 400, None),
    (_arrow_clicks({"impression_id": pa.array(["a"]), "candidate_id": pa.array([1]),
                    "colour": pa.array([1])}), 422, "colour"),
    (_arrow_clicks({"impression_id": pa.array(["a"])}), 422, "candidate_id"),
    (_arrow_clicks({"impression_id": pa.array(["a"]), "candidate_id": pa.array([1.5])}), 422,
     "candidate_id"),
    (_arrow_clicks({"impression_id": pa.array(["a", "b"]), "candidate_id": pa.array([1, 2]),
                    "position": pa.array([1, -3])}), 422, "position"),
    (_arrow_clicks({"impression_id": pa.array(["a"]), "candidate_id": pa.array([1])},
                   **{"rankstream.version": "2"}), 422, "rankstream.version"),
]  # fmt: skip


@pytest.mark.parametrize(("body", "status", "field"), BAD_ARROW_CLICKS)
def test_bad_arrow_clicks_are_refused_and_reach_no_topic(embedded_settings, body, status, field):
    reset_embedded()
    with TestClient(create_app(embedded_settings, poll_seconds=0.05)) as client:
        reply = client.post("/v1/clicks", content=body, headers={"content-type": ARROW})
    assert reply.status_code == status, reply.text
    assert reply.json()["error"]["field"] == field
    assert _read(embedded_settings, embedded_settings.clicks_topic) == []


def test_a_batch_naming_an_impression_twice_is_its_entries_in_order(embedded_settings):
    """A batch is its entries in order, as if posted one after another (rows of one
    impression may come apart in Arrow too): nothing refused, nothing merged or lost."""
    reset_embedded()
    again = _click_body("x", clicks=[{"candidate_id": 8}], session_over=True)
    batch = {"impressions": [_click_body("x"), _click_body("y", clicks=[]), again]}
    with TestClient(create_app(embedded_settings, poll_seconds=0.05)) as client:
        reply = client.post("/v1/clicks", json=batch)
    assert reply.status_code == 200, reply.text
    assert reply.json()["rows"] == 4 and reply.json()["clicks"] == 2
    found = [c for m in _read(embedded_settings, embedded_settings.clicks_topic)
             for c in decode_clicks(m.value).records]  # fmt: skip
    expected = [Click("x", 7, 2, 1.5, 12.0), Click("x", 8), Click.no_click("x")]
    assert [c for c in found if c.impression_id == "x"] == expected


def _post_clicks(client: TestClient) -> tuple[list, list[Click]]:
    """One impression as JSON, a batch of two (one unclicked) as JSON, the same content
    as the Arrow wire message; returns the answers and the clicks they carry."""
    single = _click_body("imp-a")
    batch = {"impressions": [_click_body("imp-b", clicks=[{"candidate_id": 3},
                                                          {"candidate_id": 9, "position": 5}]),
                             _click_body("imp-c", clicks=[])]}  # fmt: skip
    wire = [Click("imp-d", 4, 1, 10.0, 2.5), Click("imp-d", 8, None, 11.0), Click.no_click("imp-e")]
    answers = [
        client.post("/v1/clicks", json=single),
        client.post("/v1/clicks", json=batch),
        client.post("/v1/clicks", content=encode_clicks(wire), headers={"content-type": ARROW}),
    ]
    clicks = [Click("imp-a", 7, 2, 1.5, 12.0), Click("imp-b", 3), Click("imp-b", 9, 5),
              Click.no_click("imp-c"), *wire]  # fmt: skip
    return answers, clicks


def _click_rows(messages: list[Message]) -> int:
    return sum(len(decode_clicks(m.value).records) for m in messages)


def _check_clicks(
    settings: Settings, answers: list, clicks: list[Click], messages: list[Message]
) -> None:
    assert [a.status_code for a in answers] == [200, 200, 200], [a.text for a in answers]
    assert [a.json() for a in answers] == [
        {"impressions": 1, "clicks": 1, "rows": 1, "duplicate": False},
        {"impressions": 2, "clicks": 2, "rows": 3, "duplicate": False},
        {"impressions": 2, "clicks": 2, "rows": 3, "duplicate": False},
    ]
    # a message per request and partition: each row on its impression's partition, the
    # message keyed by its first impression, each impression's rows in the order posted
    transport = open_transport(settings)
    try:
        topic = settings.clicks_topic
        one_partition = len(transport.partitions_for(topic)) == 1
        decoded = [decode_clicks(m.value) for m in messages]
        assert all(d.rejects == [] for d in decoded)
        for message, d in zip(messages, decoded, strict=True):
            assert message.key == d.records[0].impression_id.encode()
            for click in d.records:
                key = click.impression_id.encode()
                assert transport.partition_for(topic, key) == message.partition
    finally:
        transport.close()
    assert len(messages) == 3 if one_partition else 3 <= len(messages) <= 5
    found = [c for d in decoded for c in d.records]
    for impression in dict.fromkeys(c.impression_id for c in clicks):
        assert [c for c in found if c.impression_id == impression] == [
            c for c in clicks if c.impression_id == impression
        ]
    assert len(found) == len(clicks)


def test_clicks_round_trip_and_a_retry_publishes_nothing(embedded_settings):
    reset_embedded()
    with TestClient(create_app(embedded_settings, poll_seconds=0.05)) as client:
        answers, clicks = _post_clicks(client)
        again = client.post("/v1/clicks", json=_click_body("imp-a"))  # default key: content
        later = client.post("/v1/clicks", json=_click_body("imp-a", clicks=[{"candidate_id": 1}]))
        keyed = [client.post("/v1/clicks", json=_click_body(f"imp-k{i}"),
                             headers={"Idempotency-Key": "same"}) for i in range(2)]  # fmt: skip
    _check_clicks(embedded_settings, answers, clicks,
                  _read(embedded_settings, embedded_settings.clicks_topic)[:3])  # fmt: skip
    assert again.json() == {**answers[0].json(), "duplicate": True}
    assert later.json()["duplicate"] is False
    assert [k.json()["duplicate"] for k in keyed] == [False, True]
    keys = [m.key for m in _read(embedded_settings, embedded_settings.clicks_topic)]
    assert keys == [b"imp-a", b"imp-b", b"imp-d", b"imp-a", b"imp-k0"]  # a message a request


def test_the_click_producer_writes_what_the_route_writes(embedded_settings):
    reset_embedded()
    clicks = [Click("i1", 1, 1), Click("i2", 5), Click("i1", 2, 2)]
    with ClickProducer.open(embedded_settings) as producer:
        assert producer.deliver(clicks) == 3
    (message,) = _read(embedded_settings, embedded_settings.clicks_topic)  # one partition
    assert message.key == b"i1"
    assert decode_clicks(message.value).records == [clicks[0], clicks[2], clicks[1]]


def test_the_click_producer_puts_each_impression_on_its_partition(embedded_settings, monkeypatch):
    """On a 4-partition topic: one message per partition touched (cut at MESSAGE_ROWS,
    an impression never split), each row on its impression's key's partition, keyed by
    its first impression; given only a producer, one message per impression."""
    reset_embedded()
    clicks = [Click(f"imp-{i % 12}", 100 + i) for i in range(36)]  # 3 rows an impression
    transport = open_transport(embedded_settings)
    read: dict[str, list[Message]] = {}
    for run, rows_cap, given in (("grouped", 5, True), ("whole", 4096, True),
                                 ("single", 4096, False)):  # fmt: skip
        settings = dataclasses.replace(embedded_settings, topic_prefix=f"producer-{run}")
        topic = settings.clicks_topic
        transport.ensure_topics({topic: 4})
        monkeypatch.setattr(click_producer, "MESSAGE_ROWS", rows_cap)
        with ClickProducer(settings, transport.producer(),
                           transport if given else None) as producer:  # fmt: skip
            assert producer.deliver(clicks) == 36
        read[run] = _read(settings, topic)
    partitions = {transport.partition_for(topic, f"imp-{i}".encode()) for i in range(12)}
    grouped, whole, single = read.values()
    assert len(grouped) == 12  # 3 rows an impression, at most 5 a message: one each
    assert len(whole) == len(partitions) > 1
    assert sorted(m.key for m in single) == sorted(f"imp-{i}".encode() for i in range(12))
    for messages in (grouped, whole, single):
        rows = []
        for message in messages:
            records = decode_clicks(message.value).records
            assert message.key == records[0].impression_id.encode()
            for click in records:
                key = click.impression_id.encode()
                assert transport.partition_for(topic, key) == message.partition
            rows += records
        for i in range(12):
            assert [c for c in rows if c.impression_id == f"imp-{i}"] == clicks[i::12]
    transport.close()


# --- real Kafka + Redis -------------------------------------------------------------------
def test_impressions_are_logged_on_kafka(service_settings):
    answers, messages = _ranked_then_logged(service_settings)
    _check_logged(service_settings, answers, messages)


def test_a_click_batch_round_trips_through_kafka(service_settings):
    with TestClient(create_app(service_settings, poll_seconds=0.05)) as client:
        refused = client.post("/v1/clicks", json=_click_body(clicks=[{"candidate_id": 1.5}]))
        answers, clicks = _post_clicks(client)
        again = client.post("/v1/clicks", json=_click_body("imp-a"))
    assert refused.status_code == 422 and again.json()["duplicate"] is True
    messages = _read(service_settings, service_settings.clicks_topic, 7, count=_click_rows)
    _check_clicks(service_settings, answers, clicks, messages)
