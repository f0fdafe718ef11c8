"""How the feedback producer batches: judged queries a triplets message, and their linger.

`workers.ingest.FeedbackProducer` packs up to `QUERIES_PER_MESSAGE` judged queries'
triplets into one `rankstream.triplets` message, like Kafka's linger: Python Kafka's
cost per message (~0.4 ms end to end) dominates a message of one query's ~283
triplets, and at 8 queries a message (~2,260 triplets) wire version 2 reaches ~3x
version 1's throughput, at 1 only ~1.4x (README "Benchmarks"). A query waits at most
`DEFAULT_LINGER_S` for company (checked when the next one is sent).

A module of its own, free of numpy and pyarrow, so the CLI's parse-time defaults
(`rankstream simulate`, `bench pipeline`, `bench replay`) and the chaos harness read
the same numbers as the producer without importing the wire schema.
"""

QUERIES_PER_MESSAGE = 8  # judged queries packed into one triplets message (~2,260 triplets)
DEFAULT_LINGER_S = 0.1  # the longest a queued query waits for company, checked at each send
