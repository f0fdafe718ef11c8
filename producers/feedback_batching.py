"""How the feedback producer batches: judged queries a triplets message, and their linger.

`producers.feedback_producer.FeedbackProducer` packs up to `QUERIES_PER_MESSAGE` judged queries'
triplets into one `rankstream.triplets` message, like Kafka's linger: Python Kafka's
cost per message (~0.4 ms end to end) dominates a message of one query's ~283
triplets, and at 8 queries a message (~2,260 triplets) wire version 2 reaches ~3x
version 1's throughput, at 1 only ~1.4x (docs/results/pipeline.md). A query waits at most
`DEFAULT_LINGER_S` for company (checked when the next one is sent).

A module of its own, free of numpy and pyarrow, so the CLI's parse-time defaults
(`rankstream simulate`, `bench pipeline`, `bench replay`) and the chaos harness read
the same numbers as the producer without importing the wire schema.
"""

QUERIES_PER_MESSAGE = 8  # judged queries packed into one triplets message (~2,260 triplets)
DEFAULT_LINGER_S = 0.1  # the longest a queued query waits for company, checked at each send


def check_batching(queries_per_message: object, linger_s: float) -> None:
    """ValueError unless queries_per_message is an integer >= 1 and linger_s >= 0 (inf:
    only the count sends a batch)."""
    if (
        isinstance(queries_per_message, bool)
        or not isinstance(queries_per_message, int)
        or queries_per_message < 1
    ):
        raise ValueError(
            f"queries_per_message must be an integer >= 1, got {queries_per_message!r}"
        )
    if not linger_s >= 0:
        raise ValueError(f"linger_s must be >= 0 seconds, got {linger_s!r}")
