"""`rankstream bench pipeline`: JSON shape on the real services; lost/duplicated accounting."""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
import time

import numpy as np
import pytest

from rankstream.cli import main
from rankstream.harness.accounting import SeqCounter
from rankstream.harness.pipeline_bench import (
    StreamSpec,
    compare,
    comparison_summary,
    expect_all,
    run_once,
    start_producers,
    stream_messages,
)
from rankstream.stream.connect import open_store, open_transport
from rankstream.stream.schema import decode_triplets
from rankstream.stream.settings import Settings


class _Block:
    def __init__(self, seq: list[int]) -> None:
        self.seq = np.array(seq)


def test_seq_counter_finds_lost_and_duplicated() -> None:
    counter = SeqCounter()
    for seq in ([0, 1, 2], [2, 3], [5, 9]):
        counter(None, _Block(seq))
    assert counter.lost_and_duplicated(6) == (1, 2)  # 4 lost; 2 twice, 9 out of range


def test_the_stream_is_simulator_shaped_with_every_seq_once() -> None:
    blocks = stream_messages(StreamSpec(5000, queries_per_message=2, seed=3))
    assert np.array_equal(np.concatenate([b.seq for b in blocks]), np.arange(5000))
    assert all(len(set(b.query_id.tolist())) <= 2 for b in blocks)
    assert np.mean([len(b.image_id) for b in blocks[:-1]]) == 100  # two queries of 50 images


def test_producers_report_bytes_and_what_each_partition_received(
    embedded_settings: Settings,
) -> None:
    spec = StreamSpec(3000, version=1, seed=1)
    transport = open_transport(embedded_settings)
    transport.ensure_topics({embedded_settings.triplets_topic: 3})
    go, status, producers = start_producers(embedded_settings, spec, 2, partitions=3)
    expect_all(status, producers, "ready", 60)
    go.set()
    produced = expect_all(status, producers, "ok", 60)
    consumer = transport.consumer()
    topic = embedded_settings.triplets_topic
    consumer.assign([(topic, p) for p in range(3)])
    messages = consumer.poll(timeout_ms=100, max_records=10_000)
    received = [0, 0, 0]
    for m in messages:
        received[m.partition] += len(decode_triplets(m.value))
    assert received == [sum(p.partition_triplets[k] for p in produced) for k in range(3)]
    assert sum(p.bytes for p in produced) == sum(len(m.value) for m in messages)


def test_embedded_comparison_loses_nothing_and_version_2_is_a_fraction_of_the_bytes(
    embedded_settings: Settings,
) -> None:
    runs = compare(embedded_settings, 6000, repeats=1, checkpoint_records=2500, producers=1)
    summary = comparison_summary(runs, 1)
    assert [r.version for r in runs[1] + runs[2]] == [1, 2]
    assert (summary["lost"], summary["duplicated"], summary["triplets"]) == (0, 0, 6000)
    assert summary["v1"]["bytes_per_triplet"] > 322
    assert summary["bytes_ratio_v2_to_v1"] <= 0.25


def test_embedded_run_loses_and_duplicates_nothing(embedded_settings: Settings) -> None:
    result = run_once(
        embedded_settings, StreamSpec(12_000, queries_per_message=5), checkpoint_records=5000
    )
    assert (result.triplets, result.lost, result.duplicated) == (12_000, 0, 0)
    assert result.checkpoints >= 2 and result.seconds > 0  # every 5,000 records + final
    assert result.prefix.startswith(f"{embedded_settings.topic_prefix}.bench-")
    run_store = open_store(dataclasses.replace(embedded_settings, topic_prefix=result.prefix))
    assert run_store.names() == []  # the run deleted its models


def test_a_run_on_real_services_deletes_its_models_and_topics(service_settings: Settings) -> None:
    result = run_once(service_settings, StreamSpec(6000), checkpoint_records=2000)
    assert (result.lost, result.duplicated) == (0, 0)
    run_settings = dataclasses.replace(service_settings, topic_prefix=result.prefix)
    store = open_store(run_settings)
    transport = open_transport(run_settings)
    try:
        assert store.names() == [] and store.load("opr") is None
        topics = [run_settings.triplets_topic, run_settings.dead_letter_topic]
        deadline = time.monotonic() + 30  # the broker deletes asynchronously
        while any(map(transport.partitions_for, topics)) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert [transport.partitions_for(t) for t in topics] == [[], []]
    finally:
        store.close()
        transport.close()


def test_bench_refuses_to_run_without_services(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("RANKSTREAM_KAFKA_BOOTSTRAP", raising=False)
    monkeypatch.delenv("RANKSTREAM_REDIS_URL", raising=False)
    assert main(["bench", "pipeline", "--triplets", "10", "--json"]) == 2


def test_bench_pipeline_json_on_real_services(service_settings: Settings) -> None:
    env = dict(
        os.environ,
        RANKSTREAM_KAFKA_BOOTSTRAP=service_settings.kafka_bootstrap or "",
        RANKSTREAM_REDIS_URL=service_settings.redis_url or "",
        RANKSTREAM_TOPIC_PREFIX=service_settings.topic_prefix,
    )
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "rankstream.cli",
            "bench",
            "pipeline",
            "--triplets",
            "20000",
            "--queries-per-message",
            "2",
            "--repeats",
            "2",
            "--checkpoint-records",
            "8000",
            "--json",
        ],
        env=env,
        capture_output=True,
        timeout=300,
        check=True,
    ).stdout
    result = json.loads(out)
    assert (result["triplets"], result["repeats"], result["queries_per_message"]) == (20_000, 2, 2)
    assert (result["lost"], result["duplicated"]) == (0, 0)
    for version in ("v1", "v2"):
        run = result[version]
        assert (run["triplets"], run["lost"], run["duplicated"]) == (20_000, 0, 0)
        assert run["checkpoints"] >= 2  # periodic ones plus the final one
        assert run["triplets_per_s"] == pytest.approx(20_000 / run["seconds"], rel=0.01)
        assert len(run["runs_triplets_per_s"]) == 2
    assert result["bytes_ratio_v2_to_v1"] == pytest.approx(
        result["v2"]["bytes_per_triplet"] / result["v1"]["bytes_per_triplet"], rel=1e-3
    )
    assert result["bytes_ratio_v2_to_v1"] <= 0.25
    assert result["speedup_v2_over_v1"] == pytest.approx(
        result["v2"]["triplets_per_s"] / result["v1"]["triplets_per_s"], rel=1e-2
    )


def test_the_kafka_comparison_alternates_the_two_on_the_same_stream(
    service_settings: Settings,
) -> None:
    """Both sides on the session's one Kafka: paired runs, wire v2, named and summed."""
    from rankstream.harness.pipeline_bench import compare_kafka, kafka_comparison_summary

    seen: list[tuple[int, str]] = []
    bootstrap = service_settings.kafka_bootstrap or ""
    runs = compare_kafka(
        service_settings, bootstrap, 6000, repeats=2, checkpoint_records=2500, producers=1,
        on_run=lambda repeat, name, run: seen.append((repeat, name)),
    )  # fmt: skip
    assert seen == [(0, "configured"), (0, "other"), (1, "other"), (1, "configured")]
    summary = kafka_comparison_summary(runs, {"configured": bootstrap, "other": bootstrap})
    assert (summary["wire_version"], summary["lost"], summary["duplicated"]) == (2, 0, 0)
    assert summary["configured"]["brokers"] == summary["other"]["brokers"] == 1
    assert summary["ratio_other_to_configured"] > 0
