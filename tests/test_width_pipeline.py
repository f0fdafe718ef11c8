"""The whole embedded pipeline at feature widths 36, 8 and 128 (`Settings.phi_dim`).

The simulator is 36-wide, so a synthetic engine stands in for it: the stream
generator's candidates of width w (graded by a hidden linear scorer), ranked by the
model the store serves, the top judged by `simulators.judged_feedback.judge` (the simulator's
own judging). Everything else is the real pipeline on one embedded transport and
store: online worker, batch worker, evaluator, recorder, direct replay, replay through
a worker, and serving. Messages and models of another width are refused.
"""

from __future__ import annotations

import dataclasses
import uuid
from pathlib import Path

import numpy as np
import pytest

from rankstream.harness.generator import TripletGenerator
from rankstream.ranking.baselines import UNI_CON
from rankstream.ranking.batch_models import CMDSDMLParams, RankMKLParams
from rankstream.ranking.sequential import PairedTest
from rankstream.selection.judged_race import CHAMPION_RECORD, ChampionPolicy
from rankstream.selection.unicon_baseline import publish_unicon
from rankstream.selection.what_serves import ServingModel
from rankstream.simulators.judged_feedback import RetrievedQuery, judge
from rankstream.stream.embedded import EmbeddedTransport
from rankstream.stream.embedded_store import EmbeddedModelStore
from rankstream.stream.recording_files import WidthMismatchError
from rankstream.stream.recording_replay import replay_log
from rankstream.stream.schema import (
    JudgedQuery,
    decode_dead_letter,
    encode_query,
    encode_triplets,
    triplet_key,
)
from rankstream.stream.settings import Settings
from rankstream.stream.store import WrongWidthError, stored_width
from rankstream.workers.batch_worker import BatchOptions, BatchWorker
from rankstream.workers.checkpoint import weights_sha256
from rankstream.workers.direct_replay import DirectOptions, train_from_log
from rankstream.workers.evaluator import Evaluator, EvaluatorOptions
from rankstream.workers.online_worker import OnlineWorker, WorkerOptions
from rankstream.workers.recorder import Recorder, RecorderOptions

ALGOS = ("opr", "opar1", "opar2", "ogdr", "arow")
QUERIES, CANDIDATES, JUDGED = 36, 120, 30
SCALER_ROWS = 1000
POLL = 100_000


class SyntheticEngine:
    """A search engine of any width: rank candidates with the served model, judge the top."""

    def __init__(self, settings: Settings, transport: EmbeddedTransport, store, seed: int) -> None:
        self.settings = settings
        self.generator = TripletGenerator(seed=seed, width=settings.phi_dim)
        self.serving = ServingModel(store, width=settings.phi_dim)
        self.producer = transport.producer()
        self.rng = np.random.default_rng(seed)
        self.seq = 0

    def publish_unicon(self, store) -> None:
        """Uni-Con on standardized phi, its scaler fitted on candidates never served."""
        calibration = np.concatenate([self.generator.candidates(CANDIDATES)[1] for _ in range(5)])
        publish_unicon(store, calibration, self.settings.phi_dim, len(calibration))

    def step(self, query_id: int) -> int:
        served = self.serving.refresh()
        ids, phi, relevance = self.generator.candidates(CANDIDATES)
        query = RetrievedQuery(query_id, -1, ids, phi, relevance)
        record, block = judge(query, served.scorer.score(phi), JUDGED, self.seq, self.rng)
        self.seq += len(block)
        key = triplet_key(query_id)
        if len(block):
            self.producer.send(self.settings.triplets_topic, encode_triplets(block), key=key)
        judged = JudgedQuery(
            seq=query_id,
            query_id=query_id,
            candidate_ids=record.candidate_ids,
            phi=record.phi,
            relevance=record.relevance,
            served_by=served.name,
            served_version=served.version,
            model_versions=served.model_versions,
            judged=record.n_judged,
        )
        self.producer.send(self.settings.queries_topic, encode_query(judged), key=key)
        return len(block)


def _drain(step) -> None:
    while step():
        pass


@dataclasses.dataclass
class Run:
    settings: Settings
    transport: EmbeddedTransport
    store: EmbeddedModelStore
    online: OnlineWorker
    batch: BatchWorker
    evaluator: Evaluator
    recorder: Recorder
    recording: Path
    triplets: int


def run_pipeline(width: int, directory: Path) -> Run:
    settings = Settings(
        topic_prefix=f"w{width}-{uuid.uuid4().hex[:8]}", data_dir=str(directory), phi_dim=width
    )
    transport, store = EmbeddedTransport(), EmbeddedModelStore()
    services = {"transport": transport, "store": store}
    engine = SyntheticEngine(settings, transport, store, seed=width)
    engine.publish_unicon(store)
    online = OnlineWorker(
        settings,
        WorkerOptions(
            algos=ALGOS,
            checkpoint_records=None,
            checkpoint_seconds=None,
            scaler_rows=SCALER_ROWS,
            poll_ms=0,
            max_poll_records=POLL,
        ),
        **services,
    )
    batch = BatchWorker(
        settings,
        BatchOptions(
            reservoir=1500,
            refit_records=None,
            refit_seconds=None,
            persist_seconds=None,
            poll_ms=0,
            max_poll_records=POLL,
            cmds_dml=CMDSDMLParams(max_iter=40),
            rankmkl=RankMKLParams(max_pairs=200),
        ),
        **services,
    )
    evaluator = Evaluator(
        settings,
        EvaluatorOptions(
            window=20,
            publish_every=4,
            publish_seconds=None,
            poll_ms=0,
            max_poll_records=POLL,
            # 36 queries: the paired test may decide after 10 pairs (its default waits 100)
            policy=ChampionPolicy(test=PairedTest(min_pairs=10)),
        ),
        **services,
    )
    topics = {"triplets": settings.triplets_topic, "queries": settings.queries_topic}
    recording = directory / "recording"
    recorder = Recorder(
        settings,
        recording,
        topics,
        RecorderOptions(messages_per_file=10, roll_seconds=3600.0, poll_ms=0),
        transport=transport,
    )
    for worker in (online, batch, evaluator, recorder):
        worker.start()
    triplets = 0
    for query_id in range(QUERIES):
        triplets += engine.step(query_id)
        _drain(lambda: evaluator.step(timeout_ms=0))  # scored before anyone learns
        _drain(lambda: online.step(timeout_ms=0))
        _drain(batch.step)
        _drain(lambda: recorder.step(timeout_ms=0))
        online.checkpoint()
        if query_id in (QUERIES // 3, 2 * QUERIES // 3):
            batch.refit()
    evaluator.publish()
    recorder.checkpoint()
    return Run(settings, transport, store, online, batch, evaluator, recorder, recording, triplets)


@pytest.fixture(scope="module", params=[36, 8, 128], ids=lambda w: f"width{w}")
def pipeline(request, tmp_path_factory) -> Run:
    return run_pipeline(request.param, tmp_path_factory.mktemp(f"width{request.param}"))


def test_every_stored_model_carries_the_width_and_learned_models_beat_uni_con(pipeline):
    width, store = pipeline.settings.phi_dim, pipeline.store
    names = set(store.names())
    assert {*ALGOS, "cmds_dml", "rankmkl", "reservoir", UNI_CON} <= names
    for name in names - {"evaluator", CHAMPION_RECORD}:  # records, not models
        assert stored_width(store.load(name)) == width, name
    summary = pipeline.evaluator.summary()
    ndcg = summary["rolling_ndcg"]
    assert {*ALGOS, "cmds_dml", "rankmkl"} <= set(ndcg)
    assert max(ndcg[a] for a in ALGOS) > ndcg[UNI_CON] + 0.05
    assert summary["champion"] != UNI_CON
    assert pipeline.online.counters.records == pipeline.triplets
    assert pipeline.batch.reservoir.n_seen == pipeline.triplets
    assert pipeline.online.counters.dead_letters == pipeline.evaluator.dead_letters == 0


def test_serving_ranks_with_the_champion_at_its_width_only(pipeline):
    width, store = pipeline.settings.phi_dim, pipeline.store
    served = ServingModel(store, width=width).refresh()
    assert served.name == pipeline.evaluator.summary()["champion"]
    phi = TripletGenerator(seed=1, width=width).candidates(10)[1]
    assert served.scorer.score(phi).shape == (10,)
    with pytest.raises(ValueError, match=str(width)):
        served.scorer.score(np.zeros((10, width + 1), np.float32))
    with pytest.raises(WrongWidthError, match=f"{width}-wide"):
        ServingModel(store, width=width + 1).refresh()


def test_direct_replay_and_replay_through_a_worker_learn_the_same_weights(pipeline, tmp_path):
    width = pipeline.settings.phi_dim
    expected = {m.name: weights_sha256(m.weights) for m in pipeline.online.models}
    assert pipeline.recorder.counts[pipeline.settings.triplets_topic].rows == pipeline.triplets
    direct = train_from_log(
        pipeline.recording, DirectOptions(algos=ALGOS, scaler_rows=SCALER_ROWS, width=width)
    )
    assert {m.name: weights_sha256(m.weights) for m in direct.models} == expected
    with pytest.raises(WidthMismatchError, match=f"width {width}"):
        train_from_log(pipeline.recording, DirectOptions(algos=ALGOS, width=width + 1))

    settings = dataclasses.replace(pipeline.settings, topic_prefix="replayed")
    transport = EmbeddedTransport()
    replay_log(
        transport,
        pipeline.recording,
        {"triplets": settings.triplets_topic},
        speed=None,
        width=width,
    )
    worker = OnlineWorker(
        settings,
        WorkerOptions(algos=ALGOS, scaler_rows=SCALER_ROWS, exit_when_idle=0.2, poll_ms=10),
        transport=transport,
        store=EmbeddedModelStore(),
    )
    assert worker.run() == 0
    assert {m.name: weights_sha256(m.weights) for m in worker.models} == expected


def test_messages_of_another_width_are_dead_lettered_and_not_recorded(pipeline):
    settings, transport = pipeline.settings, pipeline.transport
    other = 36 if settings.phi_dim != 36 else 8
    generator = TripletGenerator(seed=2, width=other)
    block = generator.query_block()
    ids, phi, relevance = generator.candidates(20)
    query = JudgedQuery(0, 10**6, ids, phi, relevance, UNI_CON, 1, {UNI_CON: 1}, 10)
    producer = transport.producer()
    producer.send(settings.triplets_topic, encode_triplets(block), key=b"x")
    producer.send(settings.queries_topic, encode_query(query), key=b"x")
    letters_start = transport.end_offsets(settings.dead_letter_topic).get(0, 0)
    skipped = {t: c.skipped_messages for t, c in pipeline.recorder.counts.items()}
    _drain(lambda: pipeline.online.step(timeout_ms=0))
    _drain(lambda: pipeline.evaluator.step(timeout_ms=0))
    _drain(lambda: pipeline.recorder.step(timeout_ms=0))
    consumer = transport.consumer()
    consumer.assign([(settings.dead_letter_topic, 0)])
    consumer.seek(settings.dead_letter_topic, 0, letters_start)
    letters = [decode_dead_letter(m.value) for m in consumer.poll(timeout_ms=0)]
    assert sorted((d.source_topic, d.reason) for d in letters) == sorted(
        [(settings.triplets_topic, "wrong_width"), (settings.queries_topic, "wrong_width")]
    )
    assert all(str(other) in d.detail and str(settings.phi_dim) in d.detail for d in letters)
    for topic, count in pipeline.recorder.counts.items():
        assert count.skipped_messages == skipped[topic] + 1
