"""The feedback desk's idempotency keys while the broker does not answer its bootstrap.

Opening the producer (bootstrap, topics) can take the client's request timeout (30 s)
when the broker does not answer, far past the API's deadline: the request is answered
503 and its thread goes on opening. No key may be held meanwhile: the client's retry with
the same key must not be told 409 "in progress" for an attempt that handed nothing over,
and once the broker answers, the retry publishes (once). Embedded transport and store;
the broker's silence is an opener that waits until the test lets it fail.
"""

from __future__ import annotations

import threading
import uuid

import numpy as np
import pytest

from rankstream.producers.feedback_producer import Feedback, FeedbackProducer
from rankstream.serve.delivery import FeedbackDesk
from rankstream.stream.connect import open_store
from rankstream.stream.errors import TransportError
from rankstream.stream.settings import DEFAULT_PHI_DIM as PHI_DIM
from rankstream.stream.settings import Settings

WAIT_S = 30.0  # a deadline that only guards a hang


def _feedback(query_id: int) -> Feedback:
    rng = np.random.default_rng(query_id)
    return Feedback(
        query_id=query_id,
        candidate_ids=np.arange(20),
        phi=rng.random((20, PHI_DIM), dtype=np.float32),
        relevance=np.array([2, 0, 1] + [-1] * 17, dtype=np.int8),
    )


def test_a_retry_while_the_first_attempt_still_opens_the_producer_is_not_told_in_progress(
    tmp_path,
) -> None:
    settings = Settings(topic_prefix=f"t{uuid.uuid4().hex[:12]}", data_dir=str(tmp_path))
    store = open_store(settings)
    opening, give_up = threading.Event(), threading.Event()
    opened: list[FeedbackProducer] = []

    def silent_broker_then_back(settings: Settings) -> FeedbackProducer:
        if not opened and not give_up.is_set():  # the first open: the broker is silent
            opening.set()
            assert give_up.wait(WAIT_S)
            raise TransportError("bootstrap: no answer from the broker")
        opened.append(FeedbackProducer.open(settings))
        return opened[-1]

    desk = FeedbackDesk(settings, store, open_producer=silent_broker_then_back)
    key, feedback = "query_id:7", _feedback(7)
    errors: list[BaseException] = []

    def first_attempt() -> None:  # the thread the API abandoned after its 503
        try:
            desk.accept(key, feedback)
        except TransportError as exc:
            errors.append(exc)

    first = threading.Thread(target=first_attempt)
    first.start()
    try:
        assert opening.wait(WAIT_S)
        # while the first attempt is still opening, its key is free: nothing holds it
        token = b"pending:probe"
        assert store.claim_key(key, token, 60.0) is None
        store.release_key(key, token)
    finally:
        give_up.set()
        first.join(WAIT_S)
    assert not first.is_alive() and len(errors) == 1  # that attempt failed: 503

    answer = desk.accept(key, feedback)  # the retry, the broker answering again
    assert answer["duplicate"] is False and answer["triplets"] > 0
    again = desk.accept(key, feedback)
    assert again == {**answer, "duplicate": True}  # published once
    assert opened[0].queries_sent == 1
    desk.close(5.0)


def test_a_producer_that_cannot_open_leaves_no_key_behind(tmp_path) -> None:
    settings = Settings(topic_prefix=f"t{uuid.uuid4().hex[:12]}", data_dir=str(tmp_path))
    store = open_store(settings)

    def unreachable(settings: Settings) -> FeedbackProducer:
        raise TransportError("bootstrap: no answer from the broker")

    desk = FeedbackDesk(settings, store, open_producer=unreachable)
    with pytest.raises(TransportError):
        desk.accept("query_id:8", _feedback(8))
    assert store.claim_key("query_id:8", b"pending:probe", 60.0) is None
    desk.close(1.0)
