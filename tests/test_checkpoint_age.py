"""`rankstream_last_checkpoint_timestamp_seconds{model}`: set by every successful save."""

from __future__ import annotations

import time

import numpy as np
import pytest

from rankstream.harness.generator import TripletGenerator
from rankstream.stream.connect import open_store, open_transport
from rankstream.stream.schema import block_key, encode_triplets
from rankstream.stream.settings import Settings
from rankstream.stream.store import FencingError
from rankstream.telemetry.prometheus_metrics import sample_value
from rankstream.workers.batch_worker import RESERVOIR_NAME, BatchOptions, BatchWorker
from rankstream.workers.checkpoint import TrackedModel, save_checkpoint

GAUGE = "rankstream_last_checkpoint_timestamp_seconds"


def test_an_online_checkpoint_stamps_its_model(embedded_settings: Settings) -> None:
    name = f"opr-{embedded_settings.topic_prefix}"  # a label no other test sets
    block = TripletGenerator(seed=3).block(50)
    model = TrackedModel(name=name, algo="opr", scaler_rows=10)
    model.learn("t", 0, 0, block.phi1, block.phi2, np.sign(block.rel1 - block.rel2))
    assert sample_value(GAUGE, {"model": name}) == 0.0
    before = time.time()
    save_checkpoint(open_store(embedded_settings), model, writer="test")
    assert before <= sample_value(GAUGE, {"model": name}) <= time.time()


def test_a_refused_save_leaves_the_stamp_alone(embedded_settings: Settings) -> None:
    name = f"opar1-{embedded_settings.topic_prefix}"
    store = open_store(embedded_settings)
    block = TripletGenerator(seed=4).block(50)
    model = TrackedModel(name=name, algo="opar1", scaler_rows=10)
    model.learn("t", 0, 0, block.phi1, block.phi2, np.sign(block.rel1 - block.rel2))
    store.save(name, kind="online", meta={}, arrays={}, offsets={}, expected_version=0)
    with pytest.raises(FencingError):  # someone else wrote v1
        save_checkpoint(store, model, writer="test")
    assert sample_value(GAUGE, {"model": name}) == 0.0


def test_the_batch_worker_stamps_its_reservoir(embedded_settings: Settings) -> None:
    transport = open_transport(embedded_settings)
    transport.ensure_topics({embedded_settings.triplets_topic: 1})
    producer = transport.producer()
    for block in TripletGenerator(seed=5).blocks(600, 200):
        producer.send(
            embedded_settings.triplets_topic, encode_triplets(block), key=block_key(block)
        )
    producer.flush()
    before = time.time()
    options = BatchOptions(
        reservoir=300, seed=1, models=("rankmkl",), min_triplets=10**9, max_poll_records=1
    )
    worker = BatchWorker(embedded_settings, options)
    assert worker.run(until=lambda w: w.counters.messages >= 3) == 0  # a clean stop persists
    assert sample_value(GAUGE, {"model": RESERVOIR_NAME}) >= before
