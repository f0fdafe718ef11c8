"""An engine nobody here wrote learns through `rankstream serve` from clicks alone.

`harness/http_click_engine.py` talks to serve over HTTP only (its own collection,
per-query min-max features, its own width; users who examine rank k with (1/k)^1.2 and
click 80% of the relevant and 15% of the irrelevant results they examine) and closes
every session it opens. Against the embedded default with only its width set, after
`IMPRESSIONS` impressions, every model ranks `FRESH` fresh queries (by model name): the
premise that holds on every run is that no learned model is upside down (each above a
random order, ~0.28, by 0.05), the best of OPR..OGDR reaches Uni-Con (~0.59) within 0.02
and PDGD beats it by 0.05. Before issue 38 the join's default pairs ("skips", inverse-
propensity weighted) taught OPR..OGDR the ranking upside down: ~0.08-0.10 on this
collection after 2,000 impressions (rankstream eval http-engine at 1293e3e).

Not asserted: every learned model within a small margin of Uni-Con. OPR's last iterate
(a perceptron step, w += s y x on every mistake, s up to 10) swings on these noisy pairs,
0.05-0.17 below Uni-Con at checkpoints of one 6,000-impression run, and as much in
process on the same pairs: `rankstream eval http-engine` reports it; it is not a premise
that holds on every run.
"""

from __future__ import annotations

import ast
from pathlib import Path

import numpy as np
import pytest

from rankstream.evals.http_engine import deployment
from rankstream.harness import http_click_engine
from rankstream.harness.http_click_engine import (
    UNI_CON,
    USER_MODELS,
    Api,
    ClickEngine,
    ClickModel,
    EngineOptions,
    QueryStream,
    ndcg,
)
from rankstream.stream.settings import Settings

IMPRESSIONS = 1_500
FRESH = 150
LINEAR = ("opr", "opar1", "opar2", "ogdr")


def test_the_engine_imports_nothing_of_rankstream() -> None:
    source = Path(http_click_engine.__file__).read_text()
    imported = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            imported |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            imported.add((node.module or "").split(".")[0])
    stdlib = {"__future__", "collections", "dataclasses", "json", "math", "time", "typing"}
    assert imported <= stdlib | {"urllib", "numpy"}, imported


def test_users_examine_by_position_and_click_by_grade() -> None:
    """(1/k)^eta examination times the grade's click probability, per rank."""
    users = ClickModel("t", 1.0, (0.2, 0.5, 1.0))
    rng = np.random.default_rng(0)
    grades = np.array([2, 0, 2, 1])
    counts = np.zeros(4)
    for _ in range(20_000):
        counts[users.clicks(grades, rng)] += 1
    expected = np.array([1.0, 0.5 * 0.2, 1 / 3, 0.25 * 0.5])
    assert np.allclose(counts / 20_000, expected, atol=0.015)


def test_a_user_who_stops_clicks_once() -> None:
    users = ClickModel("t", 0.0, (1.0, 1.0, 1.0), (1.0, 1.0, 1.0))
    assert users.clicks(np.array([0, 1, 2]), np.random.default_rng(0)) == [0]


def test_click_models_parse_and_refuse() -> None:
    assert ClickModel.parse("navigational") is USER_MODELS["navigational"]
    assert ClickModel.parse("pbm:2:0,0.5,1:0,0,1").stop == (0.0, 0.0, 1.0)
    for bad in ("pbm:1:0.1,0.2", "cascade", "pbm:1:0,0.5,1.5"):
        with pytest.raises(ValueError):
            ClickModel.parse(bad)


def test_the_collection_is_min_max_scaled_and_graded() -> None:
    query = QueryStream(width=10, seed=3, stream=1).query()
    assert query.phi.shape == (100, 10)
    assert np.allclose(query.phi.min(axis=0), 0) and np.allclose(query.phi.max(axis=0), 1)
    assert np.bincount(query.grades).tolist() == [85, 10, 5]
    assert len(set(query.candidate_ids.tolist())) == 100
    assert ndcg(np.sort(query.grades)[::-1], query.grades) == pytest.approx(1.0)


def random_order_ndcg(queries: list, rng: np.random.Generator) -> float:
    """The mean NDCG@50 of the queries' candidates in a random order (what "learned
    nothing" scores; the issue's upside-down learners scored far below it)."""
    return float(np.mean([ndcg(rng.permutation(q.grades), q.grades) for q in queries]))


@pytest.mark.slow
@pytest.mark.parametrize("width", [36, 12])
def test_a_click_only_engine_learns_from_its_clicks(
    width: int, embedded_settings: Settings, tmp_path: Path
) -> None:
    options = EngineOptions(
        width=width,
        seed=width,
        impressions=IMPRESSIONS,
        fresh=FRESH,
        reference_every=0,
        expect_models=(*LINEAR, "pdgd"),
        settle_seconds=300.0,  # a cold numba cache: the online worker compiles first
    )
    with deployment(embedded_settings, tmp_path, width) as url:
        engine = ClickEngine(Api(url), USER_MODELS["informational"], options)
        run = engine.run()
        models = {m["name"]: m for m in Api(url).call("/v1/models")["models"]}
    print("http engine:", run.report()["checkpoints"])  # shown by `pytest -rP`
    (checkpoint,) = run.checkpoints
    ndcg_of = {name: entry["ndcg"] for name, entry in checkpoint["models"].items()}
    unicon = ndcg_of.pop(UNI_CON)
    # the sessions closed and were learned from: the join's pairs reached every learner
    assert set(LINEAR) | {"pdgd"} <= set(ndcg_of), ndcg_of
    assert all((models[name]["triplets_seen"] or 0) > 1_000 for name in LINEAR), models
    random_order = random_order_ndcg(engine.fresh_queries, np.random.default_rng(0))
    assert unicon > random_order + 0.2, (unicon, random_order)
    # nothing learned upside down (the OPR..OGDR: ~0.09, random order ~0.28) ...
    assert all(value > random_order + 0.05 for value in ndcg_of.values()), ndcg_of
    # ... and the click path teaches: the best linear learner and PDGD reach Uni-Con
    assert max(ndcg_of[name] for name in LINEAR) > unicon - 0.02, ndcg_of
    assert ndcg_of["pdgd"] > unicon + 0.05, ndcg_of
