"""The online worker on the embedded transport and store (no services).

Exact resume, models checkpointed at different offsets, fencing and dead letters;
the Kafka/Redis versions of these checks are in test_worker_online_services.py.
"""

from __future__ import annotations

import uuid

import numpy as np
import pyarrow as pa
import pytest

from rankstream.harness.generator import TripletGenerator
from rankstream.stream.connect import open_store
from rankstream.stream.embedded import embedded_transport
from rankstream.stream.schema import decode_dead_letter, decode_triplets, encode_triplets, schema_of
from rankstream.stream.settings import Settings
from rankstream.telemetry.prometheus_metrics import sample_value
from rankstream.workers.checkpoint import TrackedModel, weights_sha256
from rankstream.workers.online_worker import (
    LINEAR_ALGOS,
    OnlineWorker,
    WorkerOptions,
)
from rankstream.workers.runtime import EXIT_FENCED, EXIT_OK

N_BLOCKS, BLOCK = 12, 250  # 3,000 triplets


def _settings() -> Settings:
    return Settings(topic_prefix=f"test-online-{uuid.uuid4().hex[:10]}")


def _produce(settings: Settings, values: list[bytes]) -> None:
    producer = embedded_transport().producer()
    for value in values:
        producer.send(settings.triplets_topic, value)
    producer.flush()


def _stream(seed: int = 7) -> list[bytes]:
    return [encode_triplets(b) for b in TripletGenerator(seed=seed).blocks(N_BLOCKS * BLOCK, BLOCK)]


def _options(**overrides: object) -> WorkerOptions:
    base = {
        "scaler_rows": 600,
        "checkpoint_records": 1000,
        "exit_when_idle": 0.3,
        "poll_ms": 50,
        "max_poll_records": 3,
    }
    base.update(overrides)
    return WorkerOptions(**base)  # type: ignore[arg-type]


def _hashes(settings: Settings) -> dict[str, tuple[str, int]]:
    store = open_store(settings)
    out = {}
    for name in LINEAR_ALGOS:
        stored = store.load(name)
        assert stored is not None, name
        out[name] = (weights_sha256(stored.arrays["weights"]), stored.meta["triplets_seen"])
    return out


def _uninterrupted(values: list[bytes]) -> dict[str, tuple[str, int]]:
    settings = _settings()
    _produce(settings, values)
    assert OnlineWorker(settings, _options()).run() == EXIT_OK
    return _hashes(settings)


def test_uninterrupted_run_learns_every_triplet_once() -> None:
    values = _stream()
    result = _uninterrupted(values)
    assert {seen for _, seen in result.values()} == {N_BLOCKS * BLOCK}
    assert len({h for h, _ in result.values()}) == len(LINEAR_ALGOS)  # four different rules
    store = open_store(_settings())
    assert store.load("opr") is None  # another prefix sees nothing


def test_crash_then_restart_is_bit_identical_even_with_staggered_checkpoints() -> None:
    values = _stream()
    expected = _uninterrupted(values)
    settings = _settings()
    _produce(settings, values)

    crashed = OnlineWorker(settings, _options())
    crashed.start()
    consumer = crashed.consumer
    assert consumer is not None
    crashed.process(consumer.poll(timeout_ms=100, max_records=5))
    assert crashed.checkpoint()
    # "opr" gets further than the others before the crash: staggered stored offsets.
    opr = next(m for m in crashed.models if m.name == "opr")
    others = [m for m in crashed.models if m.name != "opr"]
    crashed.handler.models = [opr]  # type: ignore[attr-defined]
    crashed.process(consumer.poll(timeout_ms=100, max_records=3))
    assert crashed.checkpoint()
    crashed.handler.models = [opr, *others]  # type: ignore[attr-defined]
    crashed.process(consumer.poll(timeout_ms=100, max_records=2))  # never checkpointed
    stored = open_store(settings)
    assert stored.load("opr").offsets[settings.triplets_topic] == {0: 8}  # type: ignore[union-attr]
    assert stored.load("ogdr").offsets[settings.triplets_topic] == {0: 5}  # type: ignore[union-attr]

    assert OnlineWorker(settings, _options()).run() == EXIT_OK
    assert _hashes(settings) == expected


def test_stale_worker_is_fenced_and_exits_non_zero() -> None:
    settings = _settings()
    values = _stream()
    _produce(settings, values[:6])
    stale = OnlineWorker(settings, _options())
    stale.start()
    assert stale.consumer is not None
    stale.process(stale.consumer.poll(timeout_ms=100, max_records=6))
    assert stale.checkpoint()

    _produce(settings, values[6:9])
    newer = OnlineWorker(settings, _options())  # e.g. the replacement after a false alarm
    assert newer.run() == EXIT_OK
    newest = open_store(settings).load("opar1")
    assert newest is not None and newest.version == 2

    _produce(settings, values[9:])
    before = sample_value("rankstream_fencing_errors_total", {"model": "opr"})
    assert stale.run() == EXIT_FENCED
    assert stale.fenced
    assert sample_value("rankstream_fencing_errors_total", {"model": "opr"}) == before + 1
    after = open_store(settings).load("opar1")
    assert after is not None and after.version == 2  # the stale worker wrote nothing
    assert after.meta["writer"] == newer.writer


def _unknown_version_message() -> bytes:
    columns = [pa.array([1], pa.int64())] * 4 + [pa.array([1], pa.int8()), pa.array([0], pa.int8())]
    phi = pa.FixedSizeListArray.from_arrays(pa.array(np.zeros(36, np.float32)), 36)
    schema = schema_of("triplets", version=1).with_metadata(
        {b"rankstream.schema": b"triplets", b"rankstream.version": b"99"}
    )
    batch = pa.RecordBatch.from_arrays([*columns, phi, phi], schema=schema)
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, schema) as writer:
        writer.write_batch(batch)
    return sink.getvalue().to_pybytes()


def _message_with_nan_rows(generator: TripletGenerator, n: int, bad: list[int]) -> bytes:
    cols = generator.block(n)
    phi1 = np.array(cols.phi1)
    phi1[bad, 3] = np.nan
    arrays = [
        pa.array(np.asarray(getattr(cols, f)))
        for f in ("seq", "query_id", "p1_id", "p2_id", "rel1", "rel2")
    ]
    phis = [
        pa.FixedSizeListArray.from_arrays(pa.array(p.reshape(-1)), 36) for p in (phi1, cols.phi2)
    ]
    batch = pa.RecordBatch.from_arrays([*arrays, *phis], schema=schema_of("triplets", version=1))
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, batch.schema) as writer:
        writer.write_batch(batch)
    return sink.getvalue().to_pybytes()


def _v2_message_with_a_nan_image(generator: TripletGenerator, image: int) -> tuple[bytes, list]:
    """A version-2 message (one judged query) whose image `image` has a NaN feature;
    returns it and the triplets (by index) that reference that image."""
    block = generator.query_block()
    phi = np.array(block.phi)
    phi[image, 0] = np.nan
    schema = schema_of("triplets")
    one = pa.array([0, len(block.image_id)], pa.int32())
    rows = pa.array([0, len(block)], pa.int32())
    flat = pa.FixedSizeListArray.from_arrays(pa.array(phi.reshape(-1)), 36)
    columns = [
        pa.array([int(block.query_id[0])], pa.int64()),
        pa.array([int(block.seq[0])], pa.int64()),
        pa.ListArray.from_arrays(one, pa.array(block.image_id)),
        pa.ListArray.from_arrays(one, flat),
        *(
            pa.ListArray.from_arrays(rows, pa.array(np.asarray(getattr(block, name), dtype)))
            for name, dtype in (
                ("p1", np.int16),
                ("p2", np.int16),
                ("rel1", np.int8),
                ("rel2", np.int8),
            )
        ),
    ]
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, schema) as writer:
        writer.write_batch(pa.RecordBatch.from_arrays(columns, schema=schema))
    bad = np.flatnonzero((block.p1 == image) | (block.p2 == image)).tolist()
    return sink.getvalue().to_pybytes(), bad


def test_malformed_records_are_dead_lettered_and_learning_continues() -> None:
    settings = _settings()
    generator = TripletGenerator(seed=3)
    good = [encode_triplets(generator.block(400)) for _ in range(3)]
    nan_image, bad_triplets = _v2_message_with_a_nan_image(generator, 7)
    values = [
        good[0],
        b"\x00not arrow at all",
        _unknown_version_message(),
        _message_with_nan_rows(generator, 300, [4, 17]),
        good[1],
        good[2],
        nan_image,
    ]
    _produce(settings, values)
    before = sample_value("rankstream_dead_letters_total", {"reason": "bad_bytes"})
    assert OnlineWorker(settings, _options(scaler_rows=300)).run() == EXIT_OK
    assert sample_value("rankstream_dead_letters_total", {"reason": "bad_bytes"}) == before + 1

    consumer = embedded_transport().consumer()
    consumer.assign([(settings.dead_letter_topic, 0)])
    letters = [decode_dead_letter(m.value) for m in consumer.poll(timeout_ms=100)]
    assert [(d.reason, d.source_offset) for d in letters] == [
        ("bad_bytes", 1),
        ("unknown_version", 2),
        ("non_finite", 3),
        ("non_finite", 6),
    ]
    assert letters[2].rows == [4, 17] and letters[0].original == values[1]
    assert letters[3].rows == bad_triplets and len(bad_triplets) > 0

    n_image = len(decode_triplets(nan_image)) + len(bad_triplets)
    for name, (_, seen) in _hashes(settings).items():
        # the good rows of the NaN messages count
        assert seen == 3 * 400 + 298 + n_image - len(bad_triplets), name
    stored = open_store(settings).load("opar2")
    assert stored is not None and stored.offsets[settings.triplets_topic] == {0: 7}
    assert np.isfinite(stored.arrays["weights"]).all()


def test_a_batch_the_ranker_refuses_leaves_model_and_offsets_unchanged() -> None:
    model = TrackedModel(name="opr", algo="opr", scaler_rows=1)
    ok = np.ones((2, 36), np.float32)
    model.learn("t", 0, 0, ok * 2, ok, np.array([-1.0, 1.0]))
    weights = model.weights
    with pytest.raises(ValueError, match="labels"):
        model.learn("t", 0, 1, ok * 3, ok, np.array([1.0, 0.0]))
    assert np.array_equal(model.weights, weights) and model.next_offset("t", 0) == 1
    model.skip("t", 0, 1)  # what the worker does next (and dead-letters the message)
    assert model.next_offset("t", 0) == 2 and model.triplets_seen == 2


def test_options_are_validated() -> None:
    with pytest.raises(ValueError, match="distinct"):
        WorkerOptions(algos=("opr", "opr"))
    with pytest.raises(ValueError, match="exit_when_idle"):
        WorkerOptions(exit_when_idle=0)


class _FlakyStore:
    """Wraps a store; the next `failures` saves raise the store's "unavailable" error."""

    def __init__(self, inner: object, failures: int) -> None:
        self.inner, self.failures = inner, failures

    def __getattr__(self, name: str) -> object:
        return getattr(self.inner, name)

    def save(self, name: str, **kwargs: object) -> int:
        if self.failures:
            self.failures -= 1
            from rankstream.stream.errors import StoreUnavailableError

            raise StoreUnavailableError("redis went away")
        return self.inner.save(name, **kwargs)  # type: ignore[attr-defined]


def test_failed_checkpoint_is_retried_and_never_advances_offsets_alone() -> None:
    settings = _settings()
    _produce(settings, _stream()[:4])
    store = _FlakyStore(open_store(settings), failures=1)
    worker = OnlineWorker(settings, _options(), store=store)  # type: ignore[arg-type]
    worker.start()
    assert worker.consumer is not None
    worker.process(worker.consumer.poll(timeout_ms=100, max_records=4))
    failures = sample_value("rankstream_checkpoint_failures_total")
    assert not worker.checkpoint()
    assert sample_value("rankstream_checkpoint_failures_total") == failures + 1
    assert all(m.dirty for m in worker.models) and open_store(settings).load("opr") is None
    assert worker.run() == EXIT_OK  # retried after the back-off, then the final checkpoint
    stored = open_store(settings).load("opr")
    assert stored is not None and stored.offsets[settings.triplets_topic] == {0: 4}
    assert stored.meta["triplets_seen"] == 4 * BLOCK


def test_consumer_lag_is_reported_in_records() -> None:
    settings = _settings()
    _produce(settings, _stream()[:4])
    worker = OnlineWorker(settings, _options())
    worker.start()
    assert worker.consumer is not None
    worker.process(worker.consumer.poll(timeout_ms=100, max_records=1))
    worker._maybe_report_lag()
    labels = {"topic": settings.triplets_topic, "partition": "0"}
    assert worker.stats.lag_records == {0: 3 * BLOCK}  # 3 messages x 250 records each
    assert sample_value("rankstream_consumer_lag_records", labels) == 3 * BLOCK


def test_group_mode_resumes_exactly() -> None:
    values = _stream()
    expected = _uninterrupted(values)
    settings = _settings()
    _produce(settings, values[:5])
    assert OnlineWorker(settings, _options(group="g1")).run() == EXIT_OK
    _produce(settings, values[5:])
    assert OnlineWorker(settings, _options(group="g1")).run() == EXIT_OK  # resumes at 5
    assert _hashes(settings) == expected


def test_a_failing_poll_backs_off_and_the_worker_carries_on() -> None:
    from rankstream.stream.errors import TransportError

    settings = _settings()
    _produce(settings, _stream()[:4])
    worker = OnlineWorker(settings, _options())
    worker.start()
    consumer = worker.consumer
    assert consumer is not None
    real_poll, calls = consumer.poll, []

    def flaky_poll(**kwargs: int) -> list:
        calls.append(1)
        if len(calls) == 1:
            raise TransportError("broker went away")
        return real_poll(**kwargs)

    consumer.poll = flaky_poll  # type: ignore[method-assign]
    assert worker.run() == EXIT_OK
    assert len(calls) > 2 and _hashes(settings)["opr"][1] == 4 * BLOCK


# --- the public step API and per-model learning time ------------------------------------
STEP_ALGOS = (*LINEAR_ALGOS, "arow")


def _stepping_worker(settings: Settings, **overrides: object) -> OnlineWorker:
    options = _options(algos=STEP_ALGOS, checkpoint_seconds=3600.0, **overrides)
    worker = OnlineWorker(settings, options)
    worker.start()
    return worker


def test_step_processes_a_poll_and_checkpoints_when_due() -> None:
    settings = _settings()
    _produce(settings, _stream())
    worker = _stepping_worker(settings, checkpoint_records=2 * BLOCK, max_poll_records=2)
    store = open_store(settings)
    assert worker.step(timeout_ms=0) == 2 * BLOCK  # two messages of BLOCK records
    # the scaler holds the first 600 rows back, so nothing is checkpointable yet
    assert worker.stats.checkpoints == 0 and store.load("opr") is None
    assert worker.step(timeout_ms=0) == 2 * BLOCK
    assert worker.stats.checkpoints == 1  # 1,000 records >= checkpoint_records
    stored = store.load("opr")
    assert stored is not None and stored.offsets[settings.triplets_topic] == {0: 4}
    while worker.step(timeout_ms=0):
        pass
    assert worker.counters.records == N_BLOCKS * BLOCK
    assert worker.step(timeout_ms=0) == 0  # nothing left
    worker.close(final_checkpoint=True)
    assert all(store.load(name).meta["triplets_seen"] == N_BLOCKS * BLOCK for name in STEP_ALGOS)


def test_close_is_idempotent_and_final_checkpoint_is_optional() -> None:
    settings = _settings()
    _produce(settings, _stream())
    store = open_store(settings)
    worker = _stepping_worker(settings, checkpoint_records=10**9, max_poll_records=100)
    assert worker.step(timeout_ms=0) == N_BLOCKS * BLOCK
    worker.close()
    worker.close()
    assert store.load("opr") is None  # no final checkpoint unless asked
    again = _stepping_worker(settings, checkpoint_records=10**9, max_poll_records=100)
    again.step(timeout_ms=0)
    again.close(final_checkpoint=True)
    version = store.load("opr").version
    again.close(final_checkpoint=True)  # closed: nothing more to save, nothing raised
    assert store.load("opr").version == version


def test_learn_seconds_are_zero_before_and_positive_for_every_model_after_learning() -> None:
    settings = _settings()
    _produce(settings, _stream())
    worker = _stepping_worker(settings, max_poll_records=4)  # 1,000 rows: scalers fitted
    assert worker.learn_seconds == dict.fromkeys(STEP_ALGOS, 0.0)
    before = {m: sample_value("rankstream_learn_seconds_total", {"model": m}) for m in STEP_ALGOS}
    worker.step(timeout_ms=0)
    assert all(seconds > 0 for seconds in worker.learn_seconds.values()), worker.learn_seconds
    fitted = dict(worker.learn_seconds)
    while worker.step(timeout_ms=0):
        pass
    worker.close()
    for model, seconds in worker.learn_seconds.items():
        exported = sample_value("rankstream_learn_seconds_total", {"model": model})
        assert exported - before[model] == pytest.approx(seconds), model
    # past the scaler fit the linear models learn in one fused pass, split equally
    shares = [worker.learn_seconds[m] - fitted[m] for m in LINEAR_ALGOS]
    assert shares[0] > 0 and shares == pytest.approx([shares[0]] * len(shares), rel=1e-9)
    assert worker.learn_seconds["arow"] > fitted["arow"]  # timed on its own
