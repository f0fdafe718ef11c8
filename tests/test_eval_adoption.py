"""`rankstream eval adoption` at tiny sizes: shadow's order equality is exact, the race and
the counterfactual summaries hold what they say, a seed gives the same result."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from rankstream.evals.adoption import (
    clopper_pearson_upper,
    evaluate_adoption,
    examination,
    mean_interval,
)
from rankstream.simulators.click_feedback import RELEVANCE_GRADES
from rankstream.simulators.click_models import click_model
from rankstream.simulators.collection import build_collection
from rankstream.simulators.retrieval import CandidateIndex
from rankstream.stream.settings import Settings

N_IMAGES = 20_000


@pytest.fixture(scope="module")
def world():
    collection = build_collection(n_images=N_IMAGES, seed=0, progress=False)
    return collection, CandidateIndex.build(collection, seed=0, progress=False)


def _run(world, engine: str, seed: int = 0) -> dict:
    collection, index = world
    settings = dataclasses.replace(Settings(), intervention_share=0.0)
    return evaluate_adoption(
        engine, "informational", ["informational", "pbm:0.5"], shadow_impressions=24,
        checkpoint=8, runs=2, horizon=300, share=0.5, seed=seed, held_out=6, pool_queries=12,
        settings=settings, collection=collection, index=index,
    )  # fmt: skip


def test_shadow_shows_the_engines_order_on_every_impression_and_scores_checkpoints(world):
    result = _run(world, "single-descriptor")
    shadow = result["shadow"]
    assert shadow["impressions"] == 24 and shadow["randomized_share"] == 0.0
    assert shadow["shown_equals_engine_order"] == 1.0
    assert shadow["served_by"] == {"engine": 24}
    assert shadow["checkpoints"] == [8, 16, 24]
    assert "uni_con" in shadow["true_ndcg_held_out"]
    for values in shadow["true_ndcg_held_out"].values():
        assert len(values) == 3 and all(v is None or 0.0 <= v <= 1.0 for v in values)
    for users, cell in result["race"]["users"].items():
        assert cell["runs"] == 2 and users in ("informational", "pbm:0.5")
        assert 0 <= cell["switched_runs"] <= 2
        assert cell["left_engine_fraction"] == cell["switched_runs"] / 2
        assert cell["left_engine_upper_95"] >= cell["left_engine_fraction"]
        assert sum(cell["winners"].values()) == cell["switched_runs"]
    again = _run(world, "single-descriptor")  # a seed gives the same result (but the time)
    assert again["shadow"].pop("seconds") >= 0 and result["shadow"].pop("seconds") >= 0
    assert again == result


def test_the_cascade_users_examination_is_exact_and_pbm_is_its_propensities():
    grades = np.array([[2, 0, 1], [0, 0, 0]])  # grades 0..2
    inf = click_model("informational", RELEVANCE_GRADES)
    exam = examination(inf, grades)
    # rank 2 is read unless rank 1 (grade 2) was clicked (.9) and the user stopped (.5)
    assert exam[0].tolist() == pytest.approx([1.0, 0.55, 0.55 * (1 - 0.4 * 0.1)])
    assert exam[1].tolist() == pytest.approx([1.0, 0.96, 0.96**2])
    pbm = click_model("pbm:0.5", RELEVANCE_GRADES)
    assert examination(pbm, grades)[1].tolist() == pytest.approx(pbm.propensities(3).tolist())


def test_clopper_pearson_and_the_t_interval():
    assert clopper_pearson_upper(0, 200) == pytest.approx(1 - 0.05 ** (1 / 200))
    assert clopper_pearson_upper(3, 3) == 1.0
    found = mean_interval([1.0, 2.0, 3.0])
    assert found["mean"] == 2.0 and found["interval"] == pytest.approx(
        [2 - 2.4841, 2 + 2.4841], abs=1e-4
    )
