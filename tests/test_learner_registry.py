"""A learner is declared once, in `ranking.learners`, and everything else follows.

A newcomer's toy rule, registered from this test without touching any other module,
learns through `OnlineRanker`, the online worker on the embedded pipeline (checkpointed
to the store) and direct replay of a recording, with the same weights on every path;
the command line accepts it. And the built-in list is the one the rest derives from.
"""

from __future__ import annotations

import inspect
import uuid
from pathlib import Path

import numpy as np
import pytest

from rankstream.harness.generator import TripletGenerator
from rankstream.ranking import learners
from rankstream.ranking.learners import HYPERPARAMETERS, LearnerSpec
from rankstream.ranking.online import OnlineRanker
from rankstream.stream.connect import open_store, open_transport
from rankstream.stream.recording import RecordingWriter
from rankstream.stream.schema import block_key, encode_triplets
from rankstream.stream.settings import Settings
from rankstream.stream.transport import Message
from rankstream.workers.checkpoint import weights_sha256
from rankstream.workers.online import OnlineWorker, WorkerOptions
from rankstream.workers.replay import DirectOptions, train_from_log

TOY = "toy"


def toy_kernel(w, state, X, y, params) -> int:  # type: ignore[no-untyped-def]
    """A fixed-step margin perceptron: w += C y x while y w.x < 1 (plain Python)."""
    updates = 0
    for row, label in zip(X, y, strict=True):
        if label * float(w @ row) < 1.0:
            w += params["C"] * label * row
            state["steps"][0] += 1.0
            updates += 1
    return updates


@pytest.fixture
def toy() -> LearnerSpec:
    spec = learners.register(
        LearnerSpec(
            TOY,
            "Toy",
            "w += C y x while y w.x < 1",
            ("C",),
            kernel=toy_kernel,
            initial_state=lambda dim: {"steps": np.zeros(1)},
        )
    )
    yield spec
    learners.unregister(TOY)


def _reference(X: np.ndarray, y: np.ndarray, C: float) -> np.ndarray:
    w = np.zeros(X.shape[1])
    for row, label in zip(X, y, strict=True):
        if label * (w @ row) < 1.0:
            w = w + C * label * row
    return w


def test_a_registered_rule_learns_through_online_ranker(toy: LearnerSpec) -> None:
    rng = np.random.default_rng(0)
    X = rng.standard_normal((300, 5))
    y = np.where(X[:, 1] > 0, 1.0, -1.0)
    ranker = OnlineRanker(algo=TOY, C=0.5).learn_many(X, y)
    np.testing.assert_allclose(ranker.weights, _reference(X, y, 0.5), rtol=0, atol=1e-12)
    assert ranker.n_updates == ranker.to_state()[1]["steps"][0] > 0
    again = OnlineRanker.from_state(*ranker.to_state())
    np.testing.assert_array_equal(again.weights, ranker.weights)
    bad = X[:3].copy()
    bad[2, 0] = np.nan
    before = ranker.weights
    with pytest.raises(ValueError, match=r"X row 2"):
        ranker.learn_many(bad, y[:3])
    np.testing.assert_array_equal(ranker.weights, before)  # the batch left no trace


def test_a_registered_rule_runs_through_the_worker_and_replay(
    toy: LearnerSpec, tmp_path: Path
) -> None:
    settings = Settings(topic_prefix=f"t{uuid.uuid4().hex[:10]}", data_dir=str(tmp_path))
    blocks = list(TripletGenerator(seed=3).blocks(6000, 500))
    producer = open_transport(settings).producer()
    writer = RecordingWriter(tmp_path / "log", "triplets", settings.triplets_topic)
    for offset, block in enumerate(blocks):
        value = encode_triplets(block)
        producer.send(settings.triplets_topic, value, key=block_key(block))
        writer.add(Message(settings.triplets_topic, 0, offset, block_key(block), value, offset))
    producer.flush()
    writer.commit()

    options = WorkerOptions(
        algos=(TOY, "opar1"), hyper={"C": 0.05}, scaler_rows=1000, exit_when_idle=0.3, poll_ms=20
    )
    assert OnlineWorker(settings, options).run() == 0
    stored = open_store(settings).load(TOY)
    assert stored is not None and stored.meta["triplets_seen"] == 6000
    assert stored.meta["algo"] == TOY and stored.meta["params"]["C"] == 0.05

    replayed = train_from_log(
        tmp_path / "log", DirectOptions(algos=(TOY,), hyper={"C": 0.05}, scaler_rows=1000)
    ).summaries()[TOY]
    assert replayed["weights_sha256"] == weights_sha256(stored.arrays["weights"])
    assert replayed["triplets_seen"] == 6000


def test_the_command_line_takes_a_registered_rule(toy: LearnerSpec) -> None:
    from rankstream.cli import build_parser
    from rankstream.workers.options import from_arguments

    args = build_parser().parse_args(["worker", "online", "--algo", f"{TOY},arow", "--C", "0.3"])
    options = from_arguments(WorkerOptions, args)
    assert options.algos == (TOY, "arow") and options.hyper["C"] == 0.3


def test_the_worker_and_replay_defaults_come_from_the_registry() -> None:
    assert WorkerOptions().algos == learners.worker_defaults() == DirectOptions().algos
    assert learners.worker_defaults() == ("opr", "opar1", "opar2", "ogdr")
    assert learners.names() == ("opr", "opar1", "opar2", "ogdr", "arow")


def test_online_ranker_takes_exactly_the_declared_hyperparameters() -> None:
    """Its signature's hyper-parameters are HYPERPARAMETERS, with their defaults."""
    parameters = inspect.signature(OnlineRanker).parameters
    declared = {name: parameters[name].default for name in parameters if name in HYPERPARAMETERS}
    assert declared == {name: h.default for name, h in HYPERPARAMETERS.items()}
    known = {"algo", "scaler", "warm_start", "dim", "features", *HYPERPARAMETERS}
    assert set(parameters) == known


@pytest.mark.parametrize("value", [-1.0, 0.0, float("nan"), float("inf"), "x"])
def test_bad_hyperparameters_are_refused_where_they_are_given(value: object) -> None:
    with pytest.raises(ValueError, match="C must be"):
        WorkerOptions(hyper={"C": value})
    with pytest.raises(ValueError, match="C must be"):
        DirectOptions(hyper={"C": value})
    with pytest.raises(ValueError, match="C must be"):
        OnlineRanker(algo="opar1", C=value)  # type: ignore[arg-type]
