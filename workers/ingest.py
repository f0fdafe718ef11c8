"""The feedback producer: one judged query onto the stream, as triplets and a judged query.

Every producer of feedback uses this library: the simulator (`workers.simulator`), the
HTTP ingestion endpoint (`POST /v1/feedback`, `workers.serve_app`) and any engine written
in Python, directly:

    from rankstream.stream.settings import Settings
    from rankstream.workers.ingest import Feedback, FeedbackProducer

    with FeedbackProducer.open(Settings.from_env()) as producer:
        receipt = producer.deliver(Feedback(query_id=7, candidate_ids=ids, phi=phi,
                                            relevance=grades, served_by="opar1",
                                            served_version=12))

What it writes, for each judged query (the same schema and keys as the simulator):

* the query's triplets, one `rankstream.triplets` message on `settings.triplets_topic`:
  every pair of judged candidates with different grades (`ranking.judgments`, the one
  place pairs are formed), each once, oriented by a coin drawn from a generator seeded
  with (producer seed, query id), so the same feedback always yields the same triplets;
  none when the judged candidates hold fewer than two distinct grades (counted:
  `rankstream_queries_without_triplets_total`);
* then its judged query, one `rankstream.queries` message (version 2: unjudged
  candidates carry a null grade) on `settings.queries_topic`, stamped with
  `model_versions`, the version of every model current before any of them could learn
  from this feedback (the evaluator scores each at that version).

Both are keyed by the query id in ASCII decimal (`stream.schema.triplet_key`). Triplet
`seq` numbers and the judged query's `seq` count this producer's output from
`first_seq`/`first_query_seq`: unique per producer, not across producers.

`send` hands the messages to the transport (Kafka batches them); `flush` returns once
the broker acknowledged everything sent (acks=all); `deliver` is both, for callers that
answer only after the acknowledgement (the HTTP endpoint).
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import TracebackType

import numpy as np

from rankstream.ranking.judgments import UNJUDGED, distinct_grades, feedback_triplets
from rankstream.ranking.triplets import TripletBlock
from rankstream.stream.connect import open_transport
from rankstream.stream.schema import JudgedQuery, encode_query, encode_triplets, triplet_key
from rankstream.stream.settings import Settings
from rankstream.stream.store import check_name
from rankstream.stream.transport import Producer, Transport
from rankstream.workers import metrics
from rankstream.workers.candidates import (
    FieldError,
    check_candidates,
    check_query_id,
    check_relevance,
)


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
    )


class FeedbackProducer:
    """Judged queries -> triplets + judged-query messages (module docstring); thread-safe."""

    def __init__(
        self,
        settings: Settings,
        producer: Producer,
        *,
        seed: int = 0,
        first_seq: int = 0,
        first_query_seq: int = 0,
    ) -> None:
        self.settings = settings
        self.producer = producer
        self.seed = int(seed)
        self.triplets_sent = 0
        self.queries_sent = 0
        self._next_seq = int(first_seq)
        self._next_query_seq = int(first_query_seq)
        self._lock = threading.RLock()
        self._owned: list[Producer | Transport] = []

    @classmethod
    def open(cls, settings: Settings, **options: int) -> FeedbackProducer:
        """A producer on the configured transport (Kafka, or the embedded one), owned."""
        transport = open_transport(settings)
        transport.ensure_topics({settings.triplets_topic: 1, settings.queries_topic: 1})
        producer = transport.producer()
        self = cls(settings, producer, **options)
        self._owned = [producer, transport]
        return self

    def send(self, feedback: Feedback) -> Receipt:
        """Check the feedback, form its triplets and hand both messages to the transport."""
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
        """Send a judged query's triplet block (if any), then the judged query itself.

        For producers that formed the triplets themselves (the simulator's judge, with
        its own seeded coins); seq numbers continue after the block's.
        """
        with self._lock:
            self._send_records(query, triplets)

    def _send_records(self, query: JudgedQuery, triplets: TripletBlock) -> None:
        key = triplet_key(query.query_id)
        n = len(triplets)
        if n:
            self.producer.send(self.settings.triplets_topic, encode_triplets(triplets), key=key)
        else:
            metrics.QUERIES_WITHOUT_TRIPLETS.inc()
        self.producer.send(self.settings.queries_topic, encode_query(query), key=key)
        metrics.TRIPLETS_PRODUCED.inc(n)
        metrics.JUDGED_QUERIES_PRODUCED.inc()
        self.triplets_sent += n
        self.queries_sent += 1
        if n:
            self._next_seq = max(self._next_seq, int(triplets.seq[-1]) + 1)
        self._next_query_seq = max(self._next_query_seq, int(query.seq) + 1)

    def flush(self, timeout: float | None = None) -> None:
        """Return once the broker acknowledged every message sent so far."""
        self.producer.flush(timeout)

    def deliver(self, feedback: Feedback, timeout: float | None = None) -> Receipt:
        """`send`, then `flush`: the feedback is on the broker when this returns."""
        receipt = self.send(feedback)
        self.flush(timeout)
        return receipt

    def close(self) -> None:
        """Flush, and close the producer and transport if `open` made them."""
        if self._owned:
            self.flush()
        for owned in self._owned:
            owned.close()
        self._owned = []

    def __enter__(self) -> FeedbackProducer:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()
