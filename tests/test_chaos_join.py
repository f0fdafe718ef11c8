"""`rankstream chaos --join`: SIGKILLs of the click join on real Kafka and Redis, against an
uninterrupted join of the same stream (every output message once, byte for byte; the
learners' weights bit-identical)."""

from __future__ import annotations

import pytest

from rankstream.harness.chaos_join import JoinChaosPlan, join_stream, run_join_chaos
from rankstream.stream.click_schema import decode_clicks, decode_impressions
from rankstream.stream.settings import Settings


def test_the_join_stream_and_kill_points_are_seeded() -> None:
    plan = JoinChaosPlan(impressions=50, kills=2, seed=3)
    assert join_stream(plan, 4) == join_stream(plan, 4)
    assert join_stream(plan, 4) != join_stream(JoinChaosPlan(impressions=50, kills=2, seed=4), 4)
    messages = join_stream(plan, 4)
    assert [kind for kind, _, _ in messages[:4]] == ["imp", "click", "imp", "click"]
    impression = decode_impressions(messages[0][2], width=4).records[0]
    clicks = decode_clicks(messages[1][2]).records
    assert clicks[-1].candidate_id is None  # every session ends with its end row
    assert {c.impression_id for c in clicks} == {impression.impression_id}
    points = plan.kill_points()
    assert points == sorted(points) and 0 < points[0] < points[1] < 50
    with pytest.raises(ValueError):
        JoinChaosPlan(impressions=50, kills=6)


def test_sigkills_of_the_join_lose_and_repeat_nothing(service_settings: Settings) -> None:
    plan = JoinChaosPlan(impressions=1_000, kills=3, seed=1, seconds_per_kill=2.5)
    result = run_join_chaos(service_settings, plan)
    assert result.kills == 3, result.to_json()
    assert result.worker_starts >= 4 and result.exits.get("-9") == 3
    assert result.messages > 100 and result.triplets > 1_000
    assert (result.lost, result.duplicated, result.differing) == (0, 0, 0), result.to_json()
    assert result.identical_weights, result.to_json()
    assert result.models["pdgd"]["reference_sha256"] != "", result.to_json()  # PDGD compared
    assert result.ok
