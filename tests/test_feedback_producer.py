"""The feedback library: a judged query from an engine -> triplets + judged query on the stream."""

from __future__ import annotations

import numpy as np
import pytest

from rankstream.producers.candidate_checks import FieldError
from rankstream.producers.feedback_producer import Feedback, FeedbackProducer
from rankstream.ranking.judgments import UNJUDGED, feedback_triplets
from rankstream.stream.embedded import EmbeddedTransport
from rankstream.stream.schema import decode_query, decode_triplets
from rankstream.stream.settings import DEFAULT_PHI_DIM as PHI_DIM
from rankstream.stream.settings import Settings
from rankstream.telemetry.prometheus_metrics import sample_value

SETTINGS = Settings(topic_prefix="ingest")


def _feedback(query_id: int = 5, k: int = 40, seed: int = 0, **changes) -> Feedback:
    rng = np.random.default_rng(seed)
    relevance = rng.integers(0, 3, k).astype(np.int8)
    relevance[rng.random(k) < 0.6] = UNJUDGED  # most candidates are never judged
    fields = {
        "query_id": query_id,
        "candidate_ids": rng.permutation(10_000)[:k],
        "phi": rng.random((k, PHI_DIM), dtype=np.float32),
        "relevance": relevance,
        "served_by": "opar1",
        "served_version": 4,
        "model_versions": {"opar1": 4, "uni_con": 1},
    }
    return Feedback(**{**fields, **changes})


def _messages(transport: EmbeddedTransport, topic: str):
    consumer = transport.consumer()
    consumer.assign([(topic, p) for p in transport.partitions_for(topic)])
    return consumer.poll(timeout_ms=0, max_records=1000)


@pytest.fixture
def producer() -> tuple[FeedbackProducer, EmbeddedTransport]:
    transport = EmbeddedTransport()
    transport.ensure_topics({SETTINGS.triplets_topic: 1, SETTINGS.queries_topic: 1})
    return FeedbackProducer(SETTINGS, transport.producer(), seed=3), transport


def test_every_judged_pair_with_different_grades_becomes_one_triplet(producer) -> None:
    library, transport = producer
    feedback = _feedback()
    receipt = library.deliver(feedback)
    [message] = _messages(transport, SETTINGS.triplets_topic)
    block = decode_triplets(message.value)
    rel = feedback.relevance
    judged = np.flatnonzero(rel != UNJUDGED)
    pairs = {
        frozenset((int(feedback.candidate_ids[a]), int(feedback.candidate_ids[b])))
        for a in judged
        for b in judged
        if rel[a] > rel[b]
    }
    got = {frozenset(p) for p in zip(block.p1_id.tolist(), block.p2_id.tolist(), strict=True)}
    assert got == pairs and len(block) == len(pairs) == receipt.triplets  # each pair once
    assert set(block.image_id.tolist()) <= set(feedback.candidate_ids[judged].tolist())
    row = {int(c): i for i, c in enumerate(feedback.candidate_ids)}
    p1 = np.array([row[int(i)] for i in block.p1_id])
    np.testing.assert_array_equal(block.phi1, feedback.phi[p1])
    np.testing.assert_array_equal(block.rel1, rel[p1])
    assert set(np.unique(block.y())) == {-1.0, 1.0}  # coin-oriented
    assert block.seq.tolist() == list(range(len(block))) and message.key == b"5"


def test_the_judged_query_keeps_unjudged_candidates_as_null_grades(producer) -> None:
    library, transport = producer
    feedback = _feedback()
    library.deliver(feedback)
    [message] = _messages(transport, SETTINGS.queries_topic)
    query = decode_query(message.value)
    assert message.key == b"5" and query.served_by == "opar1" and query.served_version == 4
    np.testing.assert_array_equal(query.relevance, feedback.relevance)
    np.testing.assert_array_equal(query.judged, feedback.relevance != UNJUDGED)
    assert query.model_versions == {"opar1": 4, "uni_con": 1}


def test_the_same_feedback_always_yields_the_same_triplets(producer) -> None:
    library, transport = producer
    again = FeedbackProducer(SETTINGS, transport.producer(), seed=3)
    library.deliver(_feedback())
    again.deliver(_feedback())
    first, second = (decode_triplets(m.value) for m in _messages(transport, "ingest.triplets"))
    np.testing.assert_array_equal(first.p1_id, second.p1_id)
    np.testing.assert_array_equal(first.rel1, second.rel1)


def test_the_library_forms_pairs_exactly_as_the_shared_construction(producer) -> None:
    library, transport = producer
    feedback = _feedback(query_id=9)
    library.deliver(feedback)
    [message] = _messages(transport, SETTINGS.triplets_topic)
    rel = feedback.relevance
    expected = feedback_triplets(
        9,
        feedback.candidate_ids,
        feedback.phi,
        rel,
        rel != UNJUDGED,
        0,
        np.random.default_rng([3, 9]),
    )
    got = decode_triplets(message.value)
    np.testing.assert_array_equal(got.p1_id, expected.p1_id)
    np.testing.assert_array_equal(got.p2_id, expected.p2_id)


def test_fewer_than_two_distinct_grades_yield_no_triplets_and_are_counted(producer) -> None:
    library, transport = producer
    before = sample_value("rankstream_queries_without_triplets_total")
    relevance = np.full(40, UNJUDGED, np.int8)
    relevance[[3, 7, 9]] = 2  # three judged candidates, all equally relevant
    receipt = library.deliver(_feedback(relevance=relevance))
    assert receipt.triplets == 0 and receipt.distinct_grades == 1 and receipt.judged == 3
    assert _messages(transport, SETTINGS.triplets_topic) == []
    assert len(_messages(transport, SETTINGS.queries_topic)) == 1  # still evaluated
    assert sample_value("rankstream_queries_without_triplets_total") == before + 1


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"candidate_ids": np.r_[np.arange(39), 3]}, "candidate_ids"),
        ({"phi": np.ones((40, PHI_DIM + 1), np.float32)}, "phi"),
        ({"phi": np.full((40, PHI_DIM), np.nan, np.float32)}, "phi"),
        ({"phi": np.full((40, PHI_DIM), 1e300)}, "phi"),
        ({"relevance": np.full(40, 200, np.int16)}, "relevance"),
        ({"relevance": np.full(40, UNJUDGED, np.int8)}, "relevance"),
        ({"relevance": np.zeros(39, np.int8)}, "relevance"),
        ({"query_id": "7"}, "query_id"),
        ({"served_by": "no spaces"}, "served_by"),
        ({"model_versions": {"opr": 0}}, "model_versions"),
    ],
)
def test_bad_feedback_names_the_field_and_sends_nothing(producer, change, field) -> None:
    library, transport = producer
    with pytest.raises(FieldError) as caught:
        library.deliver(_feedback(**change))
    assert caught.value.field == field
    assert _messages(transport, SETTINGS.queries_topic) == []
    assert _messages(transport, SETTINGS.triplets_topic) == []


def test_open_owns_its_transport_and_seq_numbers_continue(embedded_settings) -> None:
    with FeedbackProducer.open(embedded_settings) as library:
        first = library.deliver(_feedback(query_id=1))
        second = library.deliver(_feedback(query_id=2, seed=1))
    assert (first.seq, second.seq) == (0, 1)
    assert second.first_triplet_seq == first.triplets


def test_partially_judged_feedback_trains_the_batch_models(embedded_settings) -> None:
    """The reservoir samples the triplets of partial judgments and the refit serves them."""
    from rankstream.ranking.batch_models import CMDSDMLParams, RankMKLParams
    from rankstream.selection.scoring import scorer_for
    from rankstream.stream.embedded import EmbeddedTransport
    from rankstream.stream.embedded_store import EmbeddedModelStore
    from rankstream.workers.batch_worker import BatchOptions, BatchWorker

    transport, store = EmbeddedTransport(), EmbeddedModelStore()
    transport.ensure_topics(
        {embedded_settings.triplets_topic: 1, embedded_settings.queries_topic: 1}
    )
    library = FeedbackProducer(embedded_settings, transport.producer())
    sent = sum(library.deliver(_feedback(query_id=q, seed=q)).triplets for q in range(12))
    batch = BatchWorker(
        embedded_settings,
        BatchOptions(reservoir=400, refit_records=None, refit_seconds=None,
                     persist_seconds=None, poll_ms=0, cmds_dml=CMDSDMLParams(max_iter=30),
                     rankmkl=RankMKLParams(max_pairs=100)),
        transport=transport, store=store,
    )  # fmt: skip
    batch.start()
    while batch.step(timeout_ms=0):
        pass
    assert batch.reservoir.n_seen == sent and sent > 400
    published = batch.refit()
    assert set(published) == {"cmds_dml", "rankmkl"}
    phi = _feedback().phi
    for name, version in published.items():
        scores = scorer_for(store.load_version(name, version)).score(phi)
        assert scores.shape == (40,) and np.isfinite(scores).all()
    batch.close()


class _Recorded:
    """The transport's producer, recording what was handed to it (and failing on demand)."""

    def __init__(self, inner, fail_on: str | None = None) -> None:
        self.inner, self.fail_on, self.sent = inner, fail_on, []

    def send(self, topic, value, key=None, partition=None) -> None:
        if topic == self.fail_on:
            self.fail_on = None
            raise ConnectionError("broker away")
        self.sent.append((topic, key))
        self.inner.send(topic, value, key=key, partition=partition)

    def flush(self, timeout=None) -> None:
        self.inner.flush(timeout)

    def close(self) -> None:
        self.inner.close()


def _batching(queries_per_message: int = 3, linger_s: float = 0.1, fail_on=None):
    """A batching library on a recorded producer, its clock in `now[0]` (never advanced
    unless a test says so)."""
    transport = EmbeddedTransport()
    transport.ensure_topics({SETTINGS.triplets_topic: 1, SETTINGS.queries_topic: 1})
    now = [0.0]
    recorded = _Recorded(transport.producer(), fail_on)
    library = FeedbackProducer(
        SETTINGS,
        recorded,
        seed=3,
        queries_per_message=queries_per_message,
        linger_s=linger_s,
        clock=lambda: now[0],
    )
    return library, transport, recorded, now


def _groups(transport: EmbeddedTransport) -> list[list[int]]:
    """Each triplets message's query ids, in order (one per group)."""
    blocks = [decode_triplets(m.value) for m in _messages(transport, SETTINGS.triplets_topic)]
    return [list(dict.fromkeys(b.query_id.tolist())) for b in blocks]


def _query_ids(transport: EmbeddedTransport) -> list[int]:
    return [decode_query(m.value).query_id for m in _messages(transport, SETTINGS.queries_topic)]


def test_queries_per_message_queries_share_one_triplets_message_then_their_judged_queries() -> None:
    library, transport, recorded, _ = _batching(queries_per_message=3)
    produced = sample_value("rankstream_triplets_produced_total")
    receipts = [library.send(_feedback(query_id=q, seed=q)) for q in (11, 12)]
    assert recorded.sent == [] and library.pending == 2
    assert sample_value("rankstream_triplets_produced_total") == produced  # not handed over
    receipts.append(library.send(_feedback(query_id=13, seed=13)))
    assert library.pending == 0
    triplets, queries = SETTINGS.triplets_topic, SETTINGS.queries_topic
    assert recorded.sent == [
        (triplets, b"11"),
        (queries, b"11"),
        (queries, b"12"),
        (queries, b"13"),
    ]
    [message] = _messages(transport, triplets)
    block = decode_triplets(message.value)
    assert _groups(transport) == [[11, 12, 13]] and _query_ids(transport) == [11, 12, 13]
    n = sum(r.triplets for r in receipts)
    assert block.seq.tolist() == list(range(n))  # each query's triplets whole, in order
    assert [int((block.query_id == q).sum()) for q in (11, 12, 13)] == [
        r.triplets for r in receipts
    ]
    assert sample_value("rankstream_triplets_produced_total") == produced + n
    assert (library.triplets_sent, library.queries_sent) == (n, 3)


def test_a_partial_batch_goes_out_on_flush_and_on_close() -> None:
    library, transport, _, _ = _batching(queries_per_message=8)
    library.send(_feedback(query_id=1, seed=1))
    library.send(_feedback(query_id=2, seed=2))
    assert _messages(transport, SETTINGS.triplets_topic) == []
    library.flush()
    assert (library.pending, _groups(transport), _query_ids(transport)) == (0, [[1, 2]], [1, 2])
    library.send(_feedback(query_id=3, seed=3))
    library.close()
    assert _groups(transport) == [[1, 2], [3]] and _query_ids(transport) == [1, 2, 3]


def test_the_linger_sends_a_partial_batch_when_the_next_send_finds_it_old() -> None:
    library, transport, _, now = _batching(queries_per_message=8, linger_s=0.1)
    library.send(_feedback(query_id=1, seed=1))
    now[0] = 0.05
    library.send(_feedback(query_id=2, seed=2))
    assert library.pending == 2  # the oldest has waited 0.05 s
    now[0] = 0.1
    library.send(_feedback(query_id=3, seed=3))
    assert library.pending == 0 and _groups(transport) == [[1, 2, 3]]
    now[0] = 0.15
    library.send(_feedback(query_id=4, seed=4))
    assert library.pending == 1  # a new oldest, 0 s old


def test_a_zero_linger_sends_every_query_at_once() -> None:
    library, transport, _, _ = _batching(queries_per_message=8, linger_s=0.0)
    for q in (1, 2):
        library.send(_feedback(query_id=q, seed=q))
    assert library.pending == 0 and _groups(transport) == [[1], [2]]


def test_queries_without_triplets_still_send_their_judged_query_in_order() -> None:
    library, transport, _, _ = _batching(queries_per_message=3)
    before = sample_value("rankstream_queries_without_triplets_total")
    single_grade = np.full(40, UNJUDGED, np.int8)
    single_grade[[3, 7]] = 1
    library.send(_feedback(query_id=1, seed=1))
    library.send(_feedback(query_id=2, relevance=single_grade))
    assert sample_value("rankstream_queries_without_triplets_total") == before  # queued
    library.send(_feedback(query_id=3, seed=3))
    assert _groups(transport) == [[1, 3]] and _query_ids(transport) == [1, 2, 3]
    assert sample_value("rankstream_queries_without_triplets_total") == before + 1
    for q in (4, 5, 6):  # a batch with no triplets at all: no triplets message
        library.send(_feedback(query_id=q, relevance=single_grade))
    assert _groups(transport) == [[1, 3]] and _query_ids(transport) == [1, 2, 3, 4, 5, 6]


def test_deliver_leaves_nothing_pending() -> None:
    library, transport, _, _ = _batching(queries_per_message=8)
    library.send(_feedback(query_id=1, seed=1))
    receipt = library.deliver(_feedback(query_id=2, seed=2))
    assert library.pending == 0 and receipt.seq == 1
    assert _groups(transport) == [[1, 2]] and _query_ids(transport) == [1, 2]


def test_a_batch_too_big_for_one_message_goes_out_one_query_a_message(monkeypatch) -> None:
    from rankstream.producers import feedback_producer
    from rankstream.stream.schema import encode_triplets

    library, transport, _, _ = _batching(queries_per_message=3)
    f = _feedback(query_id=1, seed=1)
    judged = f.relevance != UNJUDGED
    one = feedback_triplets(
        1, f.candidate_ids, f.phi, f.relevance, judged, 0, np.random.default_rng(0)
    )
    monkeypatch.setattr(
        feedback_producer, "MAX_MESSAGE_BYTES", int(1.5 * len(encode_triplets(one)))
    )
    for q in (1, 2, 3):
        library.send(_feedback(query_id=q, seed=1))  # the same size each
    assert _groups(transport) == [[1], [2], [3]] and _query_ids(transport) == [1, 2, 3]


def test_a_failed_hand_over_keeps_the_rest_pending_and_sends_nothing_twice() -> None:
    library, transport, _, _ = _batching(queries_per_message=2, fail_on=SETTINGS.queries_topic)
    library.send(_feedback(query_id=1, seed=1))
    with pytest.raises(ConnectionError):
        library.send(_feedback(query_id=2, seed=2))
    assert library.pending == 2 and _groups(transport) == [[1, 2]]  # triplets out, queries not
    library.flush()
    assert library.pending == 0 and _groups(transport) == [[1, 2]]
    assert _query_ids(transport) == [1, 2]


@pytest.mark.parametrize(
    "bad",
    [
        {"queries_per_message": 0},
        {"queries_per_message": True},
        {"queries_per_message": 2.0},
        {"linger_s": -0.1},
        {"linger_s": float("nan")},
    ],
)
def test_batching_options_are_checked(bad) -> None:
    transport = EmbeddedTransport()
    with pytest.raises(ValueError, match=next(iter(bad))):
        FeedbackProducer(SETTINGS, transport.producer(), **bad)
