"""rankstream/evals/interleaving_eval.py: the serving loop that measures what interleaving costs."""

from __future__ import annotations

import numpy as np

from rankstream.evals.interleaving_eval import QueryPool, run


def _pool(seed: int = 0, queries: int = 60, candidates: int = 120, d: int = 6) -> QueryPool:
    """Grades from Uni-Con's own score (all-ones weights) plus noise: Uni-Con ranks well,
    its upside-down ranking badly."""
    rng = np.random.default_rng(seed)
    z = rng.standard_normal((queries, candidates, d)).astype(np.float32)
    score = z.sum(axis=2) + rng.standard_normal((queries, candidates))
    cut = np.quantile(score, [0.8, 0.95], axis=1).T
    relevance = (score > cut[:, :1]).astype(np.int64) + (score > cut[:, 1:]).astype(np.int64)
    return QueryPool(z, relevance)


def test_an_upside_down_challenger_is_refused_and_then_costs_nothing() -> None:
    pool = _pool()
    flipped = -np.ones(pool.z.shape[2])
    result = run(pool, [flipped], "perfect", share=1.0, impressions=400, seed=0, last=100)
    assert result["true_ndcg"]["c0"] < result["true_ndcg"]["uni_con"] - 0.3
    assert result["final_champion"] == "uni_con" and result["switches"] == []
    # refused long before 400 and re-opened at most at 2x and 4x its refusal: few drafts
    assert result["drafted"]["c0"] < 200
    assert result["loss_run"] > 0 and result["loss_last"] < result["loss_run"]


def test_without_interleaving_the_users_see_uni_con() -> None:
    pool = _pool()
    result = run(pool, [-np.ones(pool.z.shape[2])], "perfect", share=0.0, impressions=200, seed=1)
    assert result["loss_run"] == 0.0 and result["drafted"] == {}
