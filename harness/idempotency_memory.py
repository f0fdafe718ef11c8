"""What a million remembered feedback keys cost Redis: `used_memory` before and after.

    python -m rankstream.harness.idempotency_memory [--keys 1000000]   (RANKSTREAM_REDIS_URL)

Writes `--keys` keys as `POST /v1/feedback` leaves them once answered (key
`{prefix}:idem:query_id:N`, its first answer as JSON, the retention as TTL), in
pipelines of 10,000, under a fresh prefix; reads INFO memory before and after; deletes
them; prints one JSON object with bytes per key and MiB per million keys.
"""

from __future__ import annotations

import argparse
import json
import uuid

import orjson

from rankstream.producers.feedback_producer import Receipt
from rankstream.serve.delivery import receipt_document
from rankstream.stream.redis_store import redis_client
from rankstream.stream.settings import Settings

BATCH = 10_000


def measure(settings: Settings, keys: int) -> dict[str, float]:
    client = redis_client(settings.redis_url, settings.redis_password)  # type: ignore[arg-type]
    prefix = f"idem-memory-{uuid.uuid4().hex[:8]}:idem"
    ttl_ms = int(settings.idempotency_retention_s * 1000)
    before = int(client.info("memory")["used_memory"])
    try:
        for start in range(0, keys, BATCH):
            pipe = client.pipeline(transaction=False)
            for query_id in range(start, min(start + BATCH, keys)):
                receipt = Receipt(query_id, query_id, 283, query_id * 283, 30, 4)
                pipe.set(f"{prefix}:query_id:{query_id}",
                         orjson.dumps(receipt_document(receipt)), px=ttl_ms)  # fmt: skip
            pipe.execute()
        after = int(client.info("memory")["used_memory"])
    finally:
        for batch in _batches(client.scan_iter(f"{prefix}:*", count=BATCH)):
            client.delete(*batch)
        client.close()
    per_key = (after - before) / keys
    return {"keys": keys, "used_memory_before": before, "used_memory_after": after,
            "bytes_per_key": round(per_key, 1),
            "mib_per_million_keys": round(per_key * 1e6 / 2**20, 1)}  # fmt: skip


def _batches(names, size: int = BATCH):  # type: ignore[no-untyped-def]
    batch = []
    for name in names:
        batch.append(name)
        if len(batch) == size:
            yield batch
            batch = []
    if batch:
        yield batch


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--keys", type=int, default=1_000_000)
    args = parser.parse_args()
    settings = Settings.from_env()
    if not settings.redis_url:
        parser.error("set RANKSTREAM_REDIS_URL")
    print(json.dumps(measure(settings, args.keys)))


if __name__ == "__main__":
    main()
