"""The Prometheus names of docs/reference/metrics.md are a contract with Grafana: exported."""

from __future__ import annotations

import urllib.request

from prometheus_client import generate_latest

from rankstream.stream.settings import Settings
from rankstream.telemetry import prometheus_metrics as metrics

CONTRACT = {
    "rankstream_ndcg_at_50": {"model"},
    "rankstream_map": {"model"},
    "rankstream_queries_evaluated_total": set(),
    "rankstream_triplets_consumed_total": set(),
    "rankstream_model_updates_total": {"model"},
    "rankstream_model_version": {"model"},
    "rankstream_consumer_lag_records": {"topic", "partition"},
    "rankstream_checkpoint_seconds": set(),
    "rankstream_refit_seconds": {"model"},
    "rankstream_dead_letters_total": {"reason"},
    "rankstream_triplets_produced_total": set(),
}


def _families() -> dict[str, set[str]]:
    """Sample name -> label names, for every rankstream sample currently exported."""
    metrics.NDCG_AT_50.labels(model="opr").set(0.5)
    metrics.MEAN_AVERAGE_PRECISION.labels(model="opr").set(0.5)
    metrics.MODEL_UPDATES.labels(model="opr").inc(0)
    metrics.MODEL_VERSION.labels(model="opr").set(1)
    metrics.CONSUMER_LAG_RECORDS.labels(topic="t", partition="0").set(0)
    metrics.REFIT_SECONDS.labels(model="rankmkl").observe(0.1)
    metrics.DEAD_LETTERS.labels(reason="other").inc(0)
    found: dict[str, set[str]] = {}
    for family in metrics.REGISTRY.collect():
        for sample in family.samples:
            if sample.name.startswith("rankstream_"):
                found.setdefault(sample.name, set()).update(sample.labels)
    return found


def test_every_contract_metric_is_exported_with_its_labels() -> None:
    found = _families()
    for name, labels in CONTRACT.items():
        sample = name if name in found else f"{name}_count"  # histograms export _count/_sum
        assert sample in found, name
        assert found[sample] - {"le"} == labels, name


def test_dead_letter_reasons_are_bounded() -> None:
    assert metrics.bounded_reason("unknown_version") == "unknown_version"
    assert metrics.bounded_reason("query 12345 looked odd") == "other"


def test_metrics_server_serves_the_contract_names() -> None:
    port = metrics.start_metrics_server(Settings(metrics_port=0))
    assert port is not None and port > 0
    body = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
    assert "rankstream_triplets_consumed_total" in body
    assert body.count("# TYPE rankstream_") >= len(CONTRACT)
    assert generate_latest(metrics.REGISTRY)


def test_no_metrics_server_without_a_port() -> None:
    assert metrics.start_metrics_server(Settings(metrics_port=None)) is None


def test_every_schema_reason_is_a_label_value() -> None:
    from rankstream.stream.schema import REASONS

    assert set(REASONS) <= metrics.DEAD_LETTER_REASONS


def test_contracts_names_only_metrics_that_exist() -> None:
    """Every `rankstream_*` name docs/reference/metrics.md gives is a family some process exports
    (the workers', the serving model's and the HTTP API's): the dashboard and alert
    authors read the names there."""
    import re
    from pathlib import Path

    from rankstream.selection import what_serves as serving_model
    from rankstream.serve import app

    assert app and serving_model
    families = {family.name for family in metrics.REGISTRY.collect()}
    root = Path(__file__).resolve().parents[1]
    text = (root / "docs" / "reference" / "metrics.md").read_text()
    named = set(re.findall(r"\brankstream_[a-z0-9_]+", text))
    unknown = {
        name for name in named if re.sub(r"_(total|bucket|sum|count)$", "", name) not in families
    }
    assert not unknown, f"docs/reference/metrics.md names metrics nobody exports: {sorted(unknown)}"
