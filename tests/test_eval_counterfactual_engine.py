"""`rankstream eval counterfactual`'s `engine` policy on a recording made by the product:
serve in shadow mode (embedded transport and store) answers position-based users with the
engine's own order, a few requests name a stored model instead (logged without engine
scores), the users' clicks go through /v1/clicks, and the recorder writes both streams.

Premises that hold on every run: in shadow mode the users saw the engine's order, so on
the impressions carrying engine_scores the engine's reranking is the logged order itself
(ties included: the engine's scores are whole numbers, the request's order is not
theirs), hence its estimate is exactly the logged policy's there and their paired
difference exactly 0; the stored model knows the users' taste and the engine ranks
against it, so the model minus the engine is decided above 0 (seeded clicks). The
impressions without engine scores are counted, not silently dropped."""

from __future__ import annotations

import json
import uuid

import numpy as np
import pytest
from starlette.testclient import TestClient

from rankstream.cli import main
from rankstream.ranking.counterfactual import difference, estimate, policy_terms, rerank
from rankstream.serve.app import create_app
from rankstream.stream.connect import open_transport
from rankstream.stream.embedded_store import embedded_store
from rankstream.stream.settings import Settings
from rankstream.workers.recorder import Recorder, RecorderOptions
from tests.test_eval_counterfactual import TASTE, D, store_taste_and_prior

SHOWN, SHADOWED, NAMED = 6, 300, 20
PROPENSITIES = 1.0 / np.arange(1, SHOWN + 1)  # examination by displayed rank (the stored prior)


def _engine_scores(phi: np.ndarray) -> list[float]:
    """A poor engine: the users' taste reversed, rounded to whole numbers (ties)."""
    return np.round(-2.0 * (phi.astype(np.float64) @ TASTE)).tolist()


@pytest.fixture(scope="module")
def recorded(tmp_path_factory):
    """Serve in shadow mode, SHADOWED engine rankings then NAMED ones naming `taste`, each
    clicked by position-based users (seeded) and closed; recorded. Per impression: its
    clicks and phi in displayed order, and whether it carried engine scores."""
    prefix = f"test-cfe-{uuid.uuid4().hex[:8]}"
    data = tmp_path_factory.mktemp("serve")
    settings = Settings(topic_prefix=prefix, phi_dim=D, shadow=True, data_dir=str(data))
    store_taste_and_prior(prefix)
    store = embedded_store(prefix)
    rng = np.random.default_rng(41)
    shown = []
    with TestClient(create_app(settings, store=store, poll_seconds=0.05)) as client:
        for i in range(SHADOWED + NAMED):
            ids = rng.choice(10**6, size=SHOWN, replace=False)
            phi = rng.standard_normal((SHOWN, D)).astype(np.float32)
            body = {"candidate_ids": ids.tolist(), "phi": phi.tolist()}
            if i < SHADOWED:
                body["engine_scores"] = _engine_scores(phi)
            else:
                body["model"] = "taste"
            reply = client.post("/v1/rank", json=body)
            assert reply.status_code == 200, reply.text
            answer = reply.json()
            order = [ids.tolist().index(c) for c in answer["candidate_ids"]]
            displayed = phi[order]
            attractive = 1.0 / (1.0 + np.exp(-(displayed.astype(np.float64) @ TASTE)))
            clicked = rng.random(SHOWN) < PROPENSITIES * attractive
            hits = np.asarray(answer["candidate_ids"])[clicked].tolist()
            closed = {"impression_id": answer["impression_id"], "session_over": True,
                      "clicks": [{"candidate_id": c} for c in hits]}  # fmt: skip
            posted = client.post("/v1/clicks", json=closed)
            assert posted.status_code == 200, posted.text
            shown.append((clicked, displayed, i < SHADOWED, answer["model"]))
    directory = tmp_path_factory.mktemp("recording")
    topics = {kind: settings.topic(kind) for kind in ("impressions", "clicks")}
    options = RecorderOptions(messages_per_file=100, exit_when_idle=0.3, poll_ms=20)
    transport = open_transport(settings)
    assert Recorder(settings, directory, topics, options, transport=transport).run() == 0
    return prefix, directory, shown


def _run(capsys, monkeypatch, prefix, *args) -> tuple[int, dict | None, str]:
    monkeypatch.setenv("RANKSTREAM_TOPIC_PREFIX", prefix)
    monkeypatch.setenv("RANKSTREAM_PHI_DIM", str(D))
    monkeypatch.delenv("RANKSTREAM_REDIS_URL", raising=False)
    code = main(["eval", "counterfactual", *map(str, args), "--propensities", "store", "--json"])
    out, err = capsys.readouterr()
    return code, (json.loads(out) if out else None), err


def _same(found: dict, expected: dict) -> None:
    assert found.keys() == expected.keys()
    for key, value in expected.items():
        assert found[key] == pytest.approx(value, rel=1e-12, abs=1e-12), key


def test_in_shadow_mode_the_engines_estimate_is_the_logged_ones_and_a_better_model_beats_it(
    recorded, capsys, monkeypatch
):
    prefix, directory, shown = recorded
    assert [m for _, _, carried, m in shown if carried] == ["engine"] * SHADOWED  # shadow
    code, report, _ = _run(capsys, monkeypatch, prefix, directory)
    assert code == 0
    assert {"logged", "engine", "taste@1"} <= set(report["policies"])  # engine by default
    assert "engine" not in report["models_left_out"]
    assert report["impressions"] == SHADOWED + NAMED
    assert report["undefined"] == {
        "engine": {"impressions": NAMED, "reason": "no engine_scores logged with the impression"}
    }
    clicked = [c for c, _, _, _ in shown]
    p = np.asarray(report["propensities"]["values"])
    assert p[:SHOWN] == pytest.approx(PROPENSITIES, abs=1e-6)
    carried = [c for c, _, has, _ in shown if has]
    logged_there = policy_terms(carried, [np.arange(SHOWN)] * SHADOWED, PROPENSITIES)
    _same(report["policies"]["engine"], estimate(logged_there).as_dict())
    assert report["policies"]["engine"]["impressions"] == SHADOWED
    assert report["policies"]["logged"]["impressions"] == SHADOWED + NAMED
    logged = policy_terms(clicked, [np.arange(SHOWN)] * len(shown), PROPENSITIES)
    _same(report["policies"]["logged"], estimate(logged).as_dict())
    versus = report["differences"]["engine - logged"]  # paired where the engine is defined
    assert versus["impressions"] == SHADOWED
    assert versus["ips"] == 0.0 and versus["ips_interval"] == [0.0, 0.0]

    code, report, _ = _run(capsys, monkeypatch, prefix, directory, "--baseline", "engine")
    assert code == 0
    assert {"logged - engine", "taste@1 - engine"} <= set(report["differences"])
    taste = policy_terms(
        carried,
        [rerank(d.astype(np.float64) @ TASTE) for _, d, has, _ in shown if has],
        PROPENSITIES,
    )
    beats = report["differences"]["taste@1 - engine"]
    _same(beats, difference(taste, logged_there).as_dict())
    assert beats["impressions"] == SHADOWED and beats["ips_interval"][0] > 0  # decided
    assert report["policies"]["taste@1"]["ips"] != report["policies"]["engine"]["ips"]


def test_the_engine_comes_along_as_baseline_and_is_null_where_nothing_carries_its_scores(
    recorded, capsys, monkeypatch
):
    prefix, directory, _ = recorded
    code, report, _ = _run(
        capsys, monkeypatch, prefix, directory, "--model", "taste", "--baseline", "engine"
    )
    assert code == 0 and set(report["policies"]) == {"engine", "taste@1"}
    code, report, _ = _run(capsys, monkeypatch, prefix, directory, "--model", "taste")
    assert code == 0 and set(report["policies"]) == {"logged", "taste@1"}
    assert report["undefined"] == {}  # not a policy here
