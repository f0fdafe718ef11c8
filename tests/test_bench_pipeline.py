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
from rankstream.harness.pipeline_bench import run_once
from rankstream.stream.connect import open_store, open_transport
from rankstream.stream.settings import Settings


class _Block:
    def __init__(self, seq: list[int]) -> None:
        self.seq = np.array(seq)


def test_seq_counter_finds_lost_and_duplicated() -> None:
    counter = SeqCounter()
    for seq in ([0, 1, 2], [2, 3], [5, 9]):
        counter(None, _Block(seq))
    assert counter.lost_and_duplicated(6) == (1, 2)  # 4 lost; 2 twice, 9 out of range


def test_embedded_run_loses_and_duplicates_nothing(embedded_settings: Settings) -> None:
    result = run_once(embedded_settings, 12_000, 1500, checkpoint_records=5000)
    assert (result.triplets, result.lost, result.duplicated) == (12_000, 0, 0)
    assert result.checkpoints >= 2 and result.seconds > 0  # every 5,000 records + final
    assert result.prefix.startswith(f"{embedded_settings.topic_prefix}.bench-")
    run_store = open_store(dataclasses.replace(embedded_settings, topic_prefix=result.prefix))
    assert run_store.names() == []  # the run deleted its models


def test_a_run_on_real_services_deletes_its_models_and_topics(service_settings: Settings) -> None:
    result = run_once(service_settings, 6000, 1000, checkpoint_records=2000)
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
            "40000",
            "--block-size",
            "2000",
            "--repeats",
            "2",
            "--checkpoint-records",
            "15000",
            "--json",
        ],
        env=env,
        capture_output=True,
        timeout=300,
        check=True,
    ).stdout
    result = json.loads(out)
    assert set(result) == {
        "triplets",
        "seconds",
        "triplets_per_s",
        "lost",
        "duplicated",
        "checkpoints",
    }
    assert (result["triplets"], result["lost"], result["duplicated"]) == (40_000, 0, 0)
    assert result["checkpoints"] >= 2  # periodic ones plus the final one
    assert result["triplets_per_s"] == pytest.approx(40_000 / result["seconds"], rel=0.01)
