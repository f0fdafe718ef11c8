"""`rankstream eval counterfactual`: a recording made here (embedded transport, the
recorder) of position-based users' clicks on a poor logged ranking, replayed against a
stored model that knows the users' taste and against the logged ranking itself.

The command's numbers are checked against `ranking.counterfactual` run on the simulated
clicks directly (the join's rules must keep exactly the clicks that were meant to count),
and what cannot join is reported by reason, one of each."""

from __future__ import annotations

import json
import uuid

import numpy as np
import pytest

from rankstream.cli import main
from rankstream.ranking.baselines import LinearScorer
from rankstream.ranking.counterfactual import difference, estimate, policy_terms, rerank
from rankstream.ranking.propensity import PropensityEstimator, shuffle_intervention
from rankstream.stream.click_schema import Click, Impression, encode_clicks, encode_impressions
from rankstream.stream.embedded import EmbeddedTransport
from rankstream.stream.embedded_store import embedded_store
from rankstream.stream.settings import Settings
from rankstream.stream.store import WIDTH_KEY
from rankstream.workers.recorder import Recorder, RecorderOptions

D, N, SHOWN = 4, 400, 6
TASTE = np.array([1.5, -1.0, 0.5, 0.0])  # the users' attractiveness: sigmoid(phi . TASTE)
PROPENSITIES = 1.0 / np.arange(1, SHOWN + 1)  # the stored estimate: the 1/rank prior


def _simulate(seed: int = 5) -> tuple[list, list[np.ndarray], list[np.ndarray]]:
    """Events to send, and per impression its clicks and phi (displayed order). Shown in
    the order of a poor ranking (the users' taste reversed); every 10th shuffled."""
    rng = np.random.default_rng(seed)
    events, clicked, phis = [], [], []
    for i in range(N):
        phi = rng.standard_normal((SHOWN, D)).astype(np.float32)
        phi = phi[np.argsort(phi @ TASTE, kind="stable")]  # worst first
        ids = np.arange(100 * i, 100 * i + SHOWN, dtype=np.int64)
        impression = Impression(
            impression_id=f"{i:032x}",
            time=float(i),
            model="engine",
            version=1,
            model_versions={},
            candidate_ids=ids,
            phi=phi,
            intervention=shuffle_intervention(SHOWN) if i % 10 == 0 else None,
        )
        attractive = 1.0 / (1.0 + np.exp(-(phi.astype(np.float64) @ TASTE)))
        clicks = rng.random(SHOWN) < PROPENSITIES * attractive
        iid = impression.impression_id
        rows = [Click(iid, int(ids[j]), time=i + 0.5) for j in np.flatnonzero(clicks)]
        events += [("imp", impression), ("click", [*rows, Click.no_click(iid, time=i + 0.9)])]
        clicked.append(clicks)
        phis.append(phi)
    events.append(("click", [Click(f"{99999:032x}", 5, time=30.0)]))  # no such impression
    events.append(("click", [Click(f"{3:032x}", 777, time=40.0)]))  # after 3's session-over
    events.insert(21, ("click", [Click(f"{10:032x}", 12345, time=10.6)]))  # not shown in 10
    return events, clicked, phis


@pytest.fixture(scope="module")
def recorded(tmp_path_factory):
    prefix = f"test-cf-{uuid.uuid4().hex[:8]}"
    settings = Settings(topic_prefix=prefix, phi_dim=D)
    transport = EmbeddedTransport()
    events, clicked, phis = _simulate()
    producer = transport.producer()
    for kind, payload in events:
        if kind == "imp":
            producer.send(settings.impressions_topic, encode_impressions([payload]))
        else:
            producer.send(settings.clicks_topic, encode_clicks(payload))
    producer.flush()
    directory = tmp_path_factory.mktemp("recording")
    topics = {kind: settings.topic(kind) for kind in ("impressions", "clicks")}
    options = RecorderOptions(messages_per_file=100, exit_when_idle=0.3, poll_ms=20)
    assert Recorder(settings, directory, topics, options, transport=transport).run() == 0
    store_taste_and_prior(prefix)
    return prefix, directory, clicked, phis


def store_taste_and_prior(prefix: str) -> None:
    """The stored model `taste` (the users' own attractiveness, the best policy) and a
    `propensities` record of the prior alone (1/rank)."""
    store = embedded_store(prefix)
    model = LinearScorer()
    model.weights_ = TASTE.copy()
    meta, arrays = model.to_state()
    store.save("taste", kind="linear", meta={**meta, WIDTH_KEY: D}, arrays=arrays, offsets={},
               expected_version=0)  # fmt: skip
    prior = PropensityEstimator(depth=10, prior_eta=1.0, prior_clicks=10.0)  # no data: 1/rank
    store.save("propensities", kind="propensities", meta={"estimator": prior.to_state()},
               arrays={}, offsets={}, expected_version=0)  # fmt: skip


def _run(capsys, monkeypatch, prefix, *args) -> tuple[int, dict | None, str]:
    monkeypatch.setenv("RANKSTREAM_TOPIC_PREFIX", prefix)
    monkeypatch.setenv("RANKSTREAM_PHI_DIM", str(D))
    monkeypatch.delenv("RANKSTREAM_REDIS_URL", raising=False)
    code = main(["eval", "counterfactual", *map(str, args), "--json"])
    out, err = capsys.readouterr()
    return code, (json.loads(out) if out else None), err


def _same(found: dict, expected: dict) -> None:
    assert found.keys() == expected.keys()
    for key, value in expected.items():
        assert found[key] == pytest.approx(value, rel=1e-12), key


def test_estimates_over_a_recording_match_the_estimator_on_the_clicks(
    recorded, capsys, monkeypatch
):
    prefix, directory, clicked, phis = recorded
    code, report, _ = _run(capsys, monkeypatch, prefix, directory, "--propensities", "store")
    assert code == 0
    assert report["impressions"] == N and report["clicks"] == int(sum(c.sum() for c in clicked))
    assert report["skipped"]["clicks"] == {
        "late": 1,
        "unknown_candidate": 1,
        "unknown_impression": 1,
    }
    assert report["propensities"]["source"] == "store"
    assert report["propensities"]["values"] == pytest.approx(1.0 / np.arange(1, 11), abs=1e-6)
    assert set(report["policies"]) == {"logged", "taste@1"}
    logged = policy_terms(clicked, [np.arange(SHOWN)] * N, PROPENSITIES)
    reranked = [rerank(phi.astype(np.float64) @ TASTE) for phi in phis]
    taste = policy_terms(clicked, reranked, PROPENSITIES)
    for name, terms in (("logged", logged), ("taste@1", taste)):
        _same(report["policies"][name], estimate(terms).as_dict())
    paired = report["differences"]["taste@1 - logged"]
    _same(paired, difference(taste, logged).as_dict())
    assert paired["ips_interval"][0] > 0  # the taste model beats the reversed order, decided


def test_propensities_from_the_recordings_randomized_impressions(recorded, capsys, monkeypatch):
    prefix, directory, _, _ = recorded
    code, report, _ = _run(
        capsys, monkeypatch, prefix, directory, "--propensities", "recording", "--model", "taste"
    )
    assert code == 0
    assert report["propensities"]["source"] == "recording"
    assert report["propensities"]["randomized_impressions"] == N // 10  # the shuffled ones
    assert set(report["policies"]) == {"logged", "taste@1"}  # the baseline comes along
    code, report, _ = _run(capsys, monkeypatch, prefix, directory, "--baseline", "taste")
    assert code == 0 and set(report["differences"]) == {"logged - taste@1"}


def test_refusals_say_why(recorded, capsys, monkeypatch, tmp_path):
    prefix, directory, _, _ = recorded
    code, _, err = _run(capsys, monkeypatch, prefix, directory, "--model", "nobody")
    assert (code, err) == (2, "rankstream: no stored model nobody\n")
    code, _, err = _run(capsys, monkeypatch, prefix, tmp_path / "absent")
    assert code == 1 and "no recording at" in err
    code, _, err = _run(capsys, monkeypatch, prefix, directory, "--k", "0")
    assert (code, err) == (2, "rankstream: k must be >= 1, got 0\n")


def test_the_engine_is_undefined_on_impressions_without_its_scores(recorded, capsys, monkeypatch):
    """No impression here carries engine_scores: not in the default set (above); named as
    the baseline it is reported null, every impression counted as undefined for it."""
    prefix, directory, _, _ = recorded
    code, report, _ = _run(capsys, monkeypatch, prefix, directory, "--baseline", "engine")
    assert code == 0 and report["policies"]["engine"] is None
    assert report["undefined"]["engine"]["impressions"] == report["impressions"] == N
    assert report["differences"] == {"logged - engine": None, "taste@1 - engine": None}
    assert report["policies"]["taste@1"]["impressions"] == N  # the others are still estimated
