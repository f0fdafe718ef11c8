"""Live counterfactual estimates (`selection.live_estimates`): the same numbers as
`ranking.counterfactual` over the same sessions, however they arrive; the engine on the
impressions that carry its scores; kept across a restart of the click join that keeps
them, published as the `counterfactual` record and as gauges."""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest
from test_click_join import _run, _send, _settings, _stream

from rankstream.ranking.counterfactual import difference, estimate, policy_terms, rerank
from rankstream.selection.live_estimates import COUNTERFACTUAL_RECORD, LOGGED, LiveEstimates
from rankstream.selection.unicon_baseline import publish_unicon
from rankstream.stream.click_schema import Impression
from rankstream.stream.embedded import EmbeddedTransport
from rankstream.stream.embedded_store import EmbeddedModelStore
from rankstream.telemetry.prometheus_metrics import sample_value
from rankstream.workers.click_join_options import NONE, JoinOptions

P = np.array([1.0, 0.6, 0.4, 0.3, 0.2, 0.15, 0.12, 0.08])  # the last two are clipped at 0.1


class Taste:
    """A linear scorer: phi . w."""

    def __init__(self, w: np.ndarray) -> None:
        self.w = w

    def score(self, phi: np.ndarray) -> np.ndarray:
        return np.asarray(phi, dtype=np.float64) @ self.w


class Broken:
    """A scorer whose state went bad: it refuses to score."""

    def score(self, phi: np.ndarray) -> np.ndarray:
        raise ValueError("scores are not finite")


def _sessions(n: int, seed: int) -> list[tuple[Impression, np.ndarray]]:
    """n impressions of 5-8 results, every other one with the engine's scores; clicks
    from users who click more at the top."""
    rng = np.random.default_rng(seed)
    out = []
    for i in range(n):
        shown = int(rng.integers(5, 9))
        impression = Impression(
            impression_id=f"{seed:04x}{i:028x}", time=float(i), model="m", version=1,
            model_versions={"m": 1}, candidate_ids=np.arange(shown, dtype=np.int64),
            phi=rng.standard_normal((shown, 3)).astype(np.float32),
            engine_scores=rng.standard_normal(shown) if i % 2 else None,
        )  # fmt: skip
        out.append((impression, rng.random(shown) < 0.6 * P[:shown]))
    return out


def test_the_live_estimates_are_the_batch_estimator_over_the_same_sessions() -> None:
    taste = Taste(np.array([1.0, -0.5, 0.25]))
    live = LiveEstimates(k=5)
    live.scorers = {"taste": (3, taste), "broken": (2, Broken())}
    sessions = _sessions(300, seed=1)
    for start in range(0, 300, 37):  # batches of any size give the same moments
        live.add([(imp, c, P) for imp, c in sessions[start : start + 37]])
    clicked = [c for _, c in sessions]
    phi = [imp.phi for imp, _ in sessions]

    def terms(rows: list[int], ranks: list[np.ndarray]):
        return policy_terms([clicked[i] for i in rows], ranks, P, k=5)

    everyone = list(range(300))
    engine_rows = [i for i, (imp, _) in enumerate(sessions) if imp.engine_scores is not None]
    logged = terms(everyone, [np.arange(len(c)) for c in clicked])
    mine = terms(everyone, [rerank(taste.score(p)) for p in phi])
    engine = terms(engine_rows, [rerank(sessions[i][0].engine_scores) for i in engine_rows])
    mine_on_engine = terms(engine_rows, [rerank(taste.score(phi[i])) for i in engine_rows])
    expected = {
        LOGGED: estimate(logged), "taste": estimate(mine), "engine": estimate(engine),
    }  # fmt: skip
    expected_differences = {
        "taste - logged": difference(mine, logged),
        "taste - engine": difference(mine_on_engine, engine),
    }
    summary = live.summary()
    assert logged.clipped > 0  # the clipped ranks are in the log
    for found, wanted in ((summary["policies"], expected),
                          (summary["differences"], expected_differences)):  # fmt: skip
        for name, reference in wanted.items():
            got = found[name]
            assert got["impressions"] == reference.impressions
            assert got["clicks"] == reference.clicks
            assert got["clipped_clicks"] == reference.clipped_clicks
            for key in ("ips", "snips"):
                assert got[key] == pytest.approx(getattr(reference, key), rel=1e-12)
                assert got[f"{key}_interval"] == pytest.approx(
                    list(getattr(reference, f"{key}_interval")), rel=1e-12
                )
    assert summary["policies"]["taste"]["versions"] == [3, 3]
    assert "broken" not in summary["policies"]  # left out, with why; the others go on
    assert summary["left_out"] == {"broken": "v2: scores are not finite"}
    assert summary["policies"][LOGGED]["versions"] is None
    assert len(engine_rows) == summary["policies"]["engine"]["impressions"] == 150
    restored = LiveEstimates(k=5)
    restored.restore(json.loads(json.dumps(live.to_state())))
    assert restored.summary() == summary


def test_each_impression_may_bring_its_own_propensities() -> None:
    """A live log's propensity estimate moves between impressions: the terms with one
    array per impression are each impression's own terms with its array."""
    sessions = _sessions(40, seed=3)
    rng = np.random.default_rng(4)
    own = [np.r_[np.sort(rng.uniform(0.3, 1.0, 4))[::-1], np.full(4, 0.05)] for _ in sessions]
    clicked = [c for _, c in sessions]
    ranks = [rerank(imp.phi[:, 0]) for imp, _ in sessions]
    together = policy_terms(clicked, ranks, own, k=5)
    alone = [policy_terms([c], [r], p, k=5) for c, r, p in zip(clicked, ranks, own, strict=True)]
    np.testing.assert_allclose(together.x, [t.x[0] for t in alone], rtol=1e-15)
    np.testing.assert_allclose(together.w, [t.w[0] for t in alone], rtol=1e-15)
    assert together.clipped == sum(t.clipped for t in alone) > 0
    with pytest.raises(ValueError, match="shorter"):
        policy_terms(clicked[:1], ranks[:1], [own[0][:2]], k=5)


def test_the_click_join_publishes_and_keeps_its_estimates_across_a_restart() -> None:
    """One join over the whole stream, and a join stopped half-way whose successor
    resumes from its checkpoint: the same sessions, counted once, the same estimates."""
    events = []
    for kind, payload in _stream(n=80, seed=5):
        if kind == "imp" and int(payload.impression_id, 16) % 3:
            scores = -np.arange(len(payload.candidate_ids), dtype=np.float64)[::-1]
            payload = dataclasses.replace(payload, engine_scores=scores)  # worst shown first
        events.append((kind, payload))
    options = JoinOptions(checkpoint_records=7, checkpoint_seconds=None, learn=(NONE,))
    summaries = []
    for halves in ((events,), (events[:70], events[70:])):
        settings, transport, store = _settings(), EmbeddedTransport(), EmbeddedModelStore()
        rng = np.random.default_rng(0)
        publish_unicon(store, rng.standard_normal((50, 4)), 4, 50)
        for part in halves:
            _send(transport, settings, part)
            join = _run(settings, transport, store, options)
            join.close()
        record = store.load(COUNTERFACTUAL_RECORD)
        assert record is not None and record.kind == "counterfactual"
        summaries.append(record.meta["counterfactual"])
    whole, resumed = summaries
    sessions = whole["policies"][LOGGED]["impressions"]
    assert sessions == resumed["policies"][LOGGED]["impressions"] > 70
    assert set(whole["policies"]) == {LOGGED, "uni_con", "engine"}
    assert set(whole["differences"]) == {
        "engine - logged", "uni_con - logged", "uni_con - engine",
    }  # fmt: skip
    assert 0 < whole["policies"]["engine"]["impressions"] < sessions
    # the engine's scores put the shown results in reverse: its estimate differs from logged
    assert whole["differences"]["engine - logged"]["ips"] != 0
    for group in ("policies", "differences"):
        for name, found in whole[group].items():
            other = resumed[group][name]
            assert found["impressions"] == other["impressions"]
            assert found["ips"] == pytest.approx(other["ips"], rel=1e-9)
            assert found["ips_interval"] == pytest.approx(other["ips_interval"], rel=1e-9)
    assert sample_value(
        "rankstream_counterfactual_click_dcg", {"model": "uni_con", "estimator": "ips"}
    ) == pytest.approx(resumed["policies"]["uni_con"]["ips"])
    low = sample_value(
        "rankstream_counterfactual_difference_ci",
        {"model": "uni_con", "baseline": "engine", "estimator": "ips", "bound": "low"},
    )
    assert low == pytest.approx(resumed["differences"]["uni_con - engine"]["ips_interval"][0])


def test_v1_models_shows_each_models_estimate_and_the_kill_switch_gauge() -> None:
    """The join's record as serve lists it: each model's estimate with its paired
    differences from logged and the engine, the engine's own, the estimator's settings;
    pinning the engine (the kill switch) sets its gauge, unpinning clears it."""
    from rankstream.selection.engine_ranking import ENGINE, adopt_engine
    from rankstream.selection.live_estimates import COUNTERFACTUAL_KIND
    from rankstream.selection.pins import pin, unpin
    from rankstream.serve.models_listing import models_listing
    from rankstream.serve.registry import ModelRegistry
    from rankstream.stream.store import Fence, fenced_save

    store = EmbeddedModelStore()
    publish_unicon(store, np.random.default_rng(0).standard_normal((50, 3)), 3, 50)
    adopt_engine(store, "test")
    live = LiveEstimates()
    live.refresh(store, 3)
    assert set(live.scorers) == {"uni_con"}  # the engine's record has no scorer
    live.add([(imp, c, P) for imp, c in _sessions(100, seed=2)])
    summary = json.loads(json.dumps(live.summary()))
    fenced_save(store, COUNTERFACTUAL_RECORD, Fence(), kind=COUNTERFACTUAL_KIND,
                meta={"counterfactual": summary}, arrays={}, offsets={})  # fmt: skip
    registry = ModelRegistry(store, width=3)
    listing = models_listing(registry.refresh())
    entries = {m["name"]: m for m in listing["models"]}
    policies, differences = summary["policies"], summary["differences"]
    assert entries["uni_con"]["counterfactual"] == {
        **policies["uni_con"],
        "vs_logged": differences["uni_con - logged"],
        "vs_engine": differences["uni_con - engine"],
    }
    assert entries[ENGINE]["counterfactual"] == {
        **policies[ENGINE], "vs_logged": differences["engine - logged"], "vs_engine": None,
    }  # fmt: skip
    assert listing["counterfactual"]["logged"] == policies[LOGGED]
    assert listing["counterfactual"]["k"] == 10 and listing["counterfactual"]["level"] == 0.95
    pinned = {"model": ENGINE}
    assert sample_value("rankstream_model_pinned", pinned) == 0
    pin(store, ENGINE, 1)
    registry.refresh()
    assert sample_value("rankstream_model_pinned", pinned) == 1
    unpin(store, ENGINE)
    registry.refresh()
    assert sample_value("rankstream_model_pinned", pinned) == 0
