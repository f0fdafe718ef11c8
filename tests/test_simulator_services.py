"""simulate + evaluator on the real Kafka and Redis; NDCG@50 read back from /metrics."""

from __future__ import annotations

import urllib.request

import pytest
from prometheus_client.parser import text_string_to_metric_families

from rankstream.ranking.baselines import UNI_CON
from rankstream.selection.scoring import EVALUATOR_RECORD
from rankstream.stream.connect import open_store
from rankstream.stream.settings import Settings
from rankstream.telemetry.prometheus_metrics import start_metrics_server
from rankstream.workers.evaluator import Evaluator, EvaluatorOptions
from rankstream.workers.simulator import SimulateOptions, Simulation


def _scrape(port: int) -> dict[tuple[str, str], float]:
    body = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read()
    return {
        (s.name, s.labels.get("model", "")): s.value
        for family in text_string_to_metric_families(body.decode())
        for s in family.samples
    }


def test_simulate_then_evaluate_through_kafka_and_redis(service_settings: Settings) -> None:
    options = SimulateOptions(triplets=2000, seed=1, images=20_000, calibration_queries=10)
    simulation = Simulation(service_settings, options)
    summary = simulation.run()
    assert summary["triplets"] >= 2000 and summary["served_by"] == {UNI_CON: summary["queries"]}

    port = start_metrics_server(Settings(metrics_port=0))
    evaluator = Evaluator(
        service_settings, EvaluatorOptions(window=500, exit_when_idle=3.0, poll_ms=100)
    )
    assert evaluator.run(until=lambda e: e.queries_evaluated >= summary["queries"]) == 0
    assert evaluator.queries_evaluated == summary["queries"] and evaluator.dead_letters == 0
    expected = evaluator.summary()["rolling_ndcg"][UNI_CON]
    assert 0.3 < expected <= 1.0
    scraped = _scrape(port)
    assert scraped[("rankstream_ndcg_at_50", UNI_CON)] == pytest.approx(expected)
    assert scraped[("rankstream_map", UNI_CON)] == pytest.approx(
        evaluator.summary()["rolling_map"][UNI_CON]
    )
    assert scraped[("rankstream_queries_evaluated_total", "")] >= summary["queries"]

    # the published record is in Redis and covers every judged query
    record = open_store(service_settings).load(EVALUATOR_RECORD)
    assert record.meta["rolling_ndcg"][UNI_CON] == pytest.approx(expected)
    assert record.meta["champion"] == UNI_CON
    offsets = record.offsets[service_settings.queries_topic]
    assert sum(offsets.values()) == summary["queries"]
