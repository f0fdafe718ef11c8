"""A learner is declared once, in `ranking.learners`, and everything else follows.

A newcomer's toy rule with a hyper-parameter of its own (`step`, declared here with its
default, help and validation grid), registered from this test without touching any other
module, learns through `OnlineRanker`, the online worker on the embedded pipeline
(checkpointed to the store), direct replay of a recording (the same weights on every
path), scale-out's per-partition models and their mix (its state mixed as its spec
says), the demo's report and plots, and `eval cbir` (its grid validated); the command
line accepts it and its `--step`. And the built-in list is the one the rest derives from.
"""

from __future__ import annotations

import inspect
import json
import uuid
from pathlib import Path

import numpy as np
import pytest

from rankstream.harness.generator import TripletGenerator
from rankstream.ranking import learners
from rankstream.ranking.learners import HYPERPARAMETERS, HyperParameter, LearnerSpec
from rankstream.ranking.online import OnlineRanker
from rankstream.stream.connect import open_store, open_transport
from rankstream.stream.recording_writer import RecordingWriter
from rankstream.stream.schema import block_key, encode_triplets
from rankstream.stream.settings import Settings
from rankstream.stream.transport import Message
from rankstream.workers.checkpoint import weights_sha256
from rankstream.workers.direct_replay import DirectOptions, train_from_log
from rankstream.workers.online_worker import OnlineWorker, WorkerOptions
from rankstream.workers.scaleout import partition_model_name

TOY = "toy"
STEP = HyperParameter("step", 0.5, "the toy's fixed step", grid=(0.01, 0.5))


def toy_kernel(w, state, X, y, params) -> int:  # type: ignore[no-untyped-def]
    """A fixed-step margin perceptron: w += step y x while y w.x < 1 (plain Python)."""
    updates = 0
    for row, label in zip(X, y, strict=True):
        if label * float(w @ row) < 1.0:
            w += params["step"] * label * row
            state["steps"][0] += 1.0
            updates += 1
    return updates


def mix_steps(states, share, stds, std) -> dict:  # type: ignore[no-untyped-def]
    """Scale-out's mix of the toy's state: the partitions' steps add up."""
    return {"steps": sum(state["steps"] for state in states)}


@pytest.fixture
def toy() -> LearnerSpec:
    spec = learners.register(
        LearnerSpec(
            TOY,
            "Toy",
            "tab:cyan",
            "w += step y x while y w.x < 1",
            (STEP,),
            kernel=toy_kernel,
            initial_state=lambda dim: {"steps": np.zeros(1)},
            mix_state=mix_steps,
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
    ranker = OnlineRanker(algo=TOY, step=0.5).learn_many(X, y)
    assert ranker.step == 0.5 and ranker.params["step"] == 0.5
    assert ranker.clone().params == ranker.params  # river's _get_params reads **hyper back
    np.testing.assert_allclose(ranker.weights, _reference(X, y, 0.5), rtol=0, atol=1e-12)
    assert ranker.n_updates == ranker.to_state()[1]["steps"][0] > 0
    again = OnlineRanker.from_state(*ranker.to_state())
    np.testing.assert_array_equal(again.weights, ranker.weights)
    stored = OnlineRanker(algo="opar1", C=0.2).learn_many(X, y).to_state()
    assert stored[0]["params"]["step"] == STEP.default  # every hyper-parameter is stored
    learners.unregister(TOY)  # a process that never registered the toy loads it alike
    clicks = {h.name: h.default for h in learners.CLICK_HYPERPARAMETERS}
    assert OnlineRanker.from_state(*stored).params == {"C": 0.2, "eta": 1e-4, "r": 100.0, **clicks}
    learners.register(toy)
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
        algos=(TOY, "opar1"), hyper={"step": 0.05}, scaler_rows=1000, exit_when_idle=0.3, poll_ms=20
    )
    assert OnlineWorker(settings, options).run() == 0
    stored = open_store(settings).load(TOY)
    assert stored is not None and stored.meta["triplets_seen"] == 6000
    assert stored.meta["algo"] == TOY and stored.meta["params"]["step"] == 0.05

    replayed = train_from_log(
        tmp_path / "log", DirectOptions(algos=(TOY,), hyper={"step": 0.05}, scaler_rows=1000)
    ).summaries()[TOY]
    assert replayed["weights_sha256"] == weights_sha256(stored.arrays["weights"])
    assert replayed["triplets_seen"] == 6000


def test_the_command_line_takes_a_registered_rule(toy: LearnerSpec) -> None:
    from rankstream.cli import build_parser
    from rankstream.workers.options import from_arguments

    argv = ["worker", "online", "--algo", f"{TOY},arow", "--C", "0.3", "--step", "0.2"]
    options = from_arguments(WorkerOptions, build_parser().parse_args(argv))
    assert options.algos == (TOY, "arow") and options.hyper["C"] == 0.3
    assert options.hyper["step"] == 0.2


def test_scale_out_mixes_a_registered_rule_as_its_spec_says(toy: LearnerSpec) -> None:
    """Per-partition models of the toy, and their mix published by partition 0's owner:
    weights by scale-out's formula, the toy's own state by its `mix_state`."""
    settings = Settings(topic_prefix=f"t{uuid.uuid4().hex[:10]}")
    transport = open_transport(settings)
    transport.ensure_topics({settings.triplets_topic: 2})
    producer = transport.producer()
    for i, block in enumerate(TripletGenerator(seed=4).blocks(1200, 150)):
        producer.send(settings.triplets_topic, encode_triplets(block), partition=i % 2)
    producer.flush()
    options = WorkerOptions(
        algos=(TOY,), hyper={"step": 0.05}, group="g", per_partition=True, partitions=2,
        scaler_rows=200, exit_when_idle=0.3, poll_ms=20, mix_seconds=3600.0,
    )  # fmt: skip
    assert OnlineWorker(settings, options).run() == 0
    store = open_store(settings)
    parts = [store.load(partition_model_name(TOY, p)) for p in range(2)]
    mixed = store.load(TOY)
    assert mixed is not None and all(part is not None for part in parts)
    assert mixed.meta["params"]["step"] == 0.05 and mixed.meta["triplets_seen"] == 1200
    steps = sum(part.arrays["steps"][0] for part in parts)  # type: ignore[union-attr]
    assert mixed.arrays["steps"][0] == steps > 0
    n = np.array([part.meta["triplets_seen"] for part in parts], dtype=float)  # type: ignore[union-attr]
    raw = [part.arrays["weights"] / part.arrays["scaler.std"] for part in parts]  # type: ignore[union-attr]
    formula = sum(k / n.sum() * v for k, v in zip(n, raw, strict=True))
    np.testing.assert_allclose(
        mixed.arrays["weights"] / mixed.arrays["scaler.std"], formula, rtol=1e-12, atol=1e-15
    )


def test_the_demo_reports_and_draws_a_registered_rule(
    toy: LearnerSpec, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from rankstream.cli import main

    monkeypatch.setenv("RANKSTREAM_DATA_DIR", str(tmp_path / "cache"))
    out = tmp_path / "report"
    argv = ["demo", "--out", str(out), "--images", "3000", "--queries", "12", "--step", "0.1"]
    assert main([*argv, "--refit-every", "100"]) == 0
    report = json.loads((out / "report.json").read_text())
    assert report["options"]["hyper"]["step"] == 0.1
    assert report["scored_queries"][TOY] > 0 and 0.0 <= report["ndcg_at_50"][TOY] <= 1.0
    assert report["learning_seconds"][TOY] > 0
    assert (out / "ndcg_at_50.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_eval_cbir_validates_a_registered_rule_on_its_grid(
    toy: LearnerSpec, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    from rankstream.cli import main

    argv = ["eval", "cbir", "--train-rows", "600", "--max-queries", "4", "--json"]
    assert main([*argv, "--plot", str(tmp_path / "cbir.png")]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["params"][TOY]["step"] in STEP.grid
    assert 0.0 < result["map"][TOY] <= 1.0 and result["train_cpu_seconds"][TOY] > 0
    assert result["paper"]["table2_imageclef_map"][TOY] is None  # the paper has no toy


def test_the_worker_and_replay_defaults_come_from_the_registry() -> None:
    assert WorkerOptions().algos == learners.worker_defaults() == DirectOptions().algos
    assert learners.worker_defaults() == ("opr", "opar1", "opar2", "ogdr")
    assert learners.names() == ("opr", "opar1", "opar2", "ogdr", "arow")


def test_online_ranker_takes_exactly_the_declared_hyperparameters() -> None:
    """Its `**hyper` are HYPERPARAMETERS, filled in with their defaults; no other name."""
    parameters = inspect.signature(OnlineRanker).parameters
    assert list(parameters) == ["algo", "scaler", "warm_start", "dim", "features", "hyper"]
    assert parameters["hyper"].kind is inspect.Parameter.VAR_KEYWORD
    assert OnlineRanker().params == {name: h.default for name, h in HYPERPARAMETERS.items()}
    with pytest.raises(ValueError, match="unknown hyper-parameters"):
        OnlineRanker(algo="opr", gamma=1.0)


def test_a_hyperparameter_is_declared_once_across_learners() -> None:
    """OPAR-I and OPAR-II share C's one declaration; a second, different one is refused."""
    assert learners.learner("opar1").hyperparameters == learners.learner("opar2").hyperparameters
    other_c = HyperParameter("C", 1.0, "another C")
    spec = LearnerSpec("clash", "Clash", "black", "w += y x", (other_c,), kernel=toy_kernel)
    with pytest.raises(ValueError, match="declares hyper-parameter 'C' unlike"):
        learners.register(spec)
    assert "clash" not in learners.LEARNERS and HYPERPARAMETERS["C"].default == 1e-4


@pytest.mark.parametrize("value", [-1.0, 0.0, float("nan"), float("inf"), "x"])
def test_bad_hyperparameters_are_refused_where_they_are_given(value: object) -> None:
    with pytest.raises(ValueError, match="C must be"):
        WorkerOptions(hyper={"C": value})
    with pytest.raises(ValueError, match="C must be"):
        DirectOptions(hyper={"C": value})
    with pytest.raises(ValueError, match="C must be"):
        OnlineRanker(algo="opar1", C=value)  # type: ignore[arg-type]
