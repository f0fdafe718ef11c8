"""The feedback producer: judged queries onto the stream, as triplets and judged queries.

Every producer of feedback uses this library: the simulator (`workers.simulator`), the
HTTP ingestion endpoint (`POST /v1/feedback`, `serve.app`) and any engine written
in Python, directly:

    from rankstream.stream.settings import Settings
    from rankstream.producers.feedback_producer import Feedback, FeedbackProducer

    with FeedbackProducer.open(Settings.from_env()) as producer:
        receipt = producer.deliver(Feedback(query_id=7, candidate_ids=ids, phi=phi,
                                            relevance=grades, served_by="opar1",
                                            served_version=12))

What it writes, for each judged query (the same schema and keys as the simulator):

* the query's triplets: every pair of judged candidates with different grades
  (`ranking.judgments`, the one place pairs are formed), each once, oriented by a coin
  drawn from a generator seeded with (producer seed, query id), so the same feedback
  always yields the same triplets; none when the judged candidates hold fewer than two
  distinct grades (counted: `rankstream_queries_without_triplets_total`);
* its judged query, one `rankstream.queries` message (version 2: unjudged candidates
  carry a null grade; version 3 when it carries the engine's own `engine_scores`, which
  the evaluator scores as the model `engine`) on `settings.queries_topic`, keyed by its query id
  (`stream.schema.triplet_key`), stamped with `model_versions`, the version of every
  model current before any of them could learn from this feedback (the evaluator
  scores each at that version).

Batching, like Kafka's linger (`producers.feedback_batching`: why, and the defaults): queries wait
in a pending list and go out together, as ONE `rankstream.triplets` message on
`settings.triplets_topic` holding up to `queries_per_message` queries' triplets (one
wire group each, in order; a query's triplets never split across messages; key = its
first query's id, `stream.schema.block_key`), followed by each query's judged-query
message in order. The pending queries go out when `queries_per_message` are waiting,
when a send finds the oldest waiting `linger_s` or longer (there is no timer thread: a
quiet producer holds its last queries until its next send, `send_pending` or `flush`),
and on `flush` and `close`. A batch whose message would exceed the broker's limit goes
out one query a message instead, so batching never refuses a query that fits alone.

Triplet `seq` numbers and the judged query's `seq` count this producer's output from
`first_seq`/`first_query_seq`: unique per producer, not across producers.

`send` queues a query (and hands due batches to the transport, which batches too);
`flush` hands over what is pending and returns once the broker acknowledged
everything (acks=all); `deliver` is both, for callers that answer only after the
acknowledgement (the HTTP endpoint). The counters (`triplets_sent`, `queries_sent`,
`rankstream_triplets_produced_total`, `rankstream_judged_queries_produced_total`,
`rankstream_queries_without_triplets_total`) count a query when it is handed to the
transport, not when it is queued.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from rankstream.producers.candidate_checks import (
    FieldError,
    check_candidates,
    check_engine_scores,
    check_query_id,
    check_relevance,
)
from rankstream.producers.feedback_batching import (
    DEFAULT_LINGER_S,
    QUERIES_PER_MESSAGE,
    check_batching,
)
from rankstream.producers.owned_producer import OwnedProducer
from rankstream.ranking.judgments import UNJUDGED, distinct_grades, feedback_triplets
from rankstream.ranking.triplets import TripletBlock
from rankstream.stream.connect import open_transport
from rankstream.stream.schema import (
    MAX_MESSAGE_BYTES,
    JudgedQuery,
    block_key,
    encode_query,
    encode_triplets,
    triplet_key,
)
from rankstream.stream.settings import Settings
from rankstream.stream.store import check_name
from rankstream.stream.transport import Producer
from rankstream.telemetry import prometheus_metrics as metrics


@dataclass(frozen=True)
class Feedback:
    """One judged query from an engine: its candidates and what the user said of them.

    `relevance` holds a grade (0 = not relevant, higher = more) for each candidate the
    user judged and `UNJUDGED` (-1) for the others. `model_versions` defaults to the
    versions current when the feedback is produced (see the module docstring).
    """

    query_id: int
    candidate_ids: np.ndarray  # int (k,)
    phi: np.ndarray  # float (k, 36)
    relevance: np.ndarray  # int (k,), UNJUDGED where not judged
    served_by: str = "unknown"
    served_version: int = 0
    model_versions: Mapping[str, int] = field(default_factory=dict)
    engine_scores: np.ndarray | None = None  # the engine's own scores, one per candidate


@dataclass(frozen=True)
class Receipt:
    """What one judged query became: its triplets (0 with < 2 distinct grades)."""

    query_id: int
    seq: int  # the judged query's seq
    triplets: int
    first_triplet_seq: int
    judged: int
    distinct_grades: int


def check_feedback(feedback: Feedback, width: int) -> JudgedQuery:
    """The feedback as a judged query (seq 0), or FieldError naming the bad field;
    `width` is the deployment's phi width."""
    query_id = check_query_id(feedback.query_id)
    ids, phi = check_candidates(feedback.candidate_ids, feedback.phi, width)
    relevance = check_relevance(feedback.relevance, ids.shape[0])
    judged = relevance != UNJUDGED
    if not judged.any():
        raise FieldError("relevance", "no candidate is judged (every grade is null)")
    try:
        check_name(feedback.served_by)
    except ValueError:
        raise FieldError("served_by", f"not a model name: {feedback.served_by!r}") from None
    version = feedback.served_version
    if isinstance(version, bool) or not isinstance(version, int | np.integer) or version < 0:
        raise FieldError("served_version", f"must be an integer >= 0, got {version!r}")
    versions = dict(feedback.model_versions)
    for name, v in versions.items():
        if not isinstance(name, str) or isinstance(v, bool) or not isinstance(v, int) or v < 1:
            raise FieldError("model_versions", f"{name!r}: {v!r} is not a version >= 1")
    return JudgedQuery(
        seq=0,
        query_id=query_id,
        candidate_ids=ids,
        phi=phi,
        relevance=relevance,
        served_by=feedback.served_by,
        served_version=int(version),
        model_versions=versions,
        judged=judged,
        engine_scores=None
        if feedback.engine_scores is None
        else check_engine_scores(feedback.engine_scores, ids.shape[0]),
    )


@dataclass
class _Pending:
    """A queued judged query and its triplets, until both are handed to the transport."""

    query: JudgedQuery
    triplets: TripletBlock
    triplets_out: bool  # its triplets were handed over (at once when it has none)


class FeedbackProducer(OwnedProducer):
    """Judged queries -> triplets + judged-query messages, batched (module docstring);
    thread-safe."""

    def __init__(
        self,
        settings: Settings,
        producer: Producer,
        *,
        seed: int = 0,
        first_seq: int = 0,
        first_query_seq: int = 0,
        queries_per_message: int = QUERIES_PER_MESSAGE,
        linger_s: float = DEFAULT_LINGER_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        check_batching(queries_per_message, linger_s)
        super().__init__(producer)
        self.settings = settings
        self.seed = int(seed)
        self.queries_per_message = queries_per_message
        self.linger_s = float(linger_s)
        self.triplets_sent = 0
        self.queries_sent = 0
        self._next_seq = int(first_seq)
        self._next_query_seq = int(first_query_seq)
        self._clock = clock
        self._pending: list[_Pending] = []
        self._oldest = 0.0  # when the oldest pending query was queued
        self._lock = threading.RLock()

    @classmethod
    def open(cls, settings: Settings, **options: Any) -> FeedbackProducer:
        """A producer on the configured transport (Kafka, or the embedded one), owned."""
        transport = open_transport(settings)
        transport.ensure_topics({settings.triplets_topic: 1, settings.queries_topic: 1})
        producer = transport.producer()
        self = cls(settings, producer, **options)
        self._own(producer, transport)
        return self

    @property
    def pending(self) -> int:
        """Judged queries queued and not yet handed to the transport."""
        return len(self._pending)

    def send(self, feedback: Feedback) -> Receipt:
        """Check the feedback, form its triplets and queue both (sent as the module says)."""
        query = check_feedback(feedback, self.settings.phi_dim)
        rng = np.random.default_rng([self.seed, query.query_id % 2**64])
        with self._lock:  # seq numbers and the send order of one query stay together
            seq, first = self._next_query_seq, self._next_seq
            triplets = feedback_triplets(
                query.query_id,
                query.candidate_ids,
                query.phi,
                query.relevance,
                query.judged,
                first,
                rng,
            )
            self.send_records(JudgedQuery(**{**query.__dict__, "seq": seq}), triplets)
        return Receipt(
            query_id=query.query_id,
            seq=seq,
            triplets=len(triplets),
            first_triplet_seq=first,
            judged=query.n_judged,
            distinct_grades=distinct_grades(query.relevance, query.judged),
        )

    def send_records(self, query: JudgedQuery, triplets: TripletBlock) -> None:
        """Queue a judged query's triplet block (possibly empty) and the judged query; the
        pending queries go out once `queries_per_message` wait or the oldest has waited
        `linger_s`.

        For producers that formed the triplets themselves (the simulator's judge, with
        its own seeded coins); seq numbers continue after the block's.
        """
        with self._lock:
            now = self._clock()
            if not self._pending:
                self._oldest = now
            self._pending.append(_Pending(query, triplets, triplets_out=not len(triplets)))
            if len(triplets):
                self._next_seq = max(self._next_seq, int(triplets.seq[-1]) + 1)
            self._next_query_seq = max(self._next_query_seq, int(query.seq) + 1)
            due = now - self._oldest >= self.linger_s
            if due or len(self._pending) >= self.queries_per_message:
                self._send_pending()

    def send_pending(self) -> None:
        """Hand every pending query to the transport now (without waiting for acks)."""
        with self._lock:
            self._send_pending()

    def _send_pending(self) -> None:
        """The pending triplets as one message (see `_triplet_messages`), then each judged
        query in order. An entry leaves the list only once both its messages were handed
        over, so a failed send raises here and the rest goes with the next send or flush,
        never twice."""
        waiting = [entry for entry in self._pending if not entry.triplets_out]
        for value, key, entries in self._triplet_messages(waiting):
            self.producer.send(self.settings.triplets_topic, value, key=key)
            for entry in entries:
                entry.triplets_out = True
                metrics.TRIPLETS_PRODUCED.inc(len(entry.triplets))
                self.triplets_sent += len(entry.triplets)
        while self._pending:
            query = self._pending[0].query
            key = triplet_key(query.query_id)
            self.producer.send(self.settings.queries_topic, encode_query(query), key=key)
            if not len(self._pending.pop(0).triplets):
                metrics.QUERIES_WITHOUT_TRIPLETS.inc()
            metrics.JUDGED_QUERIES_PRODUCED.inc()
            self.queries_sent += 1

    @staticmethod
    def _triplet_messages(
        entries: list[_Pending],
    ) -> list[tuple[bytes, bytes, list[_Pending]]]:
        """(value, key, entries it carries): the entries' blocks concatenated in order into
        one message keyed by its first query's id; one message a query instead if together
        they exceed the broker's limit (batching never refuses a query that fits alone)."""
        if not entries:
            return []
        block = TripletBlock.concatenate([entry.triplets for entry in entries])
        value = encode_triplets(block)
        if len(value) <= MAX_MESSAGE_BYTES or len(entries) == 1:
            return [(value, block_key(block), entries)]
        return [
            (encode_triplets(entry.triplets), block_key(entry.triplets), [entry])
            for entry in entries
        ]

    def flush(self, timeout: float | None = None) -> None:
        """Hand over the pending queries; return once the broker acknowledged every message
        sent so far."""
        self.send_pending()
        self.producer.flush(timeout)

    def deliver(self, feedback: Feedback, timeout: float | None = None) -> Receipt:
        """`send`, then `flush`: the feedback (and anything queued before it) is on the
        broker when this returns."""
        receipt = self.send(feedback)
        self.flush(timeout)
        return receipt

    def close(self, timeout: float | None = None) -> None:
        """Flush (pending queries included), and close the producer and transport if
        `open` made them; with `timeout`, give up waiting for acknowledgements after that
        many seconds (`rankstream serve`'s shutdown grace) and close anyway."""
        try:
            self.send_pending()
        finally:
            super().close(timeout)
