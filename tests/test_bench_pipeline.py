"""`rankstream bench pipeline`: JSON shape on the real services; lost/duplicated accounting."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest

from rankstream.cli import main
from rankstream.config import Settings
from rankstream.pipeline_bench import _SeqCounter, run_once


class _Block:
    def __init__(self, seq: list[int]) -> None:
        self.seq = np.array(seq)


def test_seq_counter_finds_lost_and_duplicated() -> None:
    counter = _SeqCounter()
    for seq in ([0, 1, 2], [2, 3], [5, 9]):
        counter(None, _Block(seq))
    assert counter.lost_and_duplicated(6) == (1, 2)  # 4 lost; 2 twice, 9 out of range


def test_embedded_run_loses_and_duplicates_nothing(embedded_settings: Settings) -> None:
    result = run_once(embedded_settings, 12_000, 1500, checkpoint_records=5000)
    assert (result.triplets, result.lost, result.duplicated) == (12_000, 0, 0)
    assert result.checkpoints >= 2 and result.seconds > 0  # every 5,000 records + final


def test_bench_refuses_to_run_without_services(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("RANKSTREAM_KAFKA_BOOTSTRAP", raising=False)
    monkeypatch.delenv("RANKSTREAM_REDIS_URL", raising=False)
    assert main(["bench", "pipeline", "--triplets", "10", "--json"]) == 2


def test_bench_pipeline_json_on_real_services(service_settings: Settings) -> None:
    env = dict(os.environ, RANKSTREAM_KAFKA_BOOTSTRAP=service_settings.kafka_bootstrap or "",
               RANKSTREAM_REDIS_URL=service_settings.redis_url or "",
               RANKSTREAM_TOPIC_PREFIX=service_settings.topic_prefix)
    out = subprocess.run(
        [sys.executable, "-m", "rankstream.cli", "bench", "pipeline", "--triplets", "40000",
         "--block-size", "2000", "--repeats", "2", "--checkpoint-records", "15000", "--json"],
        env=env, capture_output=True, timeout=300, check=True).stdout
    result = json.loads(out)
    assert set(result) == {"triplets", "seconds", "triplets_per_s", "lost", "duplicated",
                           "checkpoints"}
    assert (result["triplets"], result["lost"], result["duplicated"]) == (40_000, 0, 0)
    assert result["checkpoints"] >= 2  # periodic ones plus the final one
    assert result["triplets_per_s"] == pytest.approx(40_000 / result["seconds"], rel=0.01)
