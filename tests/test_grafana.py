"""Grafana provisioning and the rankstream dashboard stay consistent with the rest.

The datasource points at the compose Prometheus under the uid the panels use; the
dashboard provider loads the directory compose mounts; every panel queries metrics the
workers really export; and promtool parses every query. Whether each query returns data
from a running pipeline is tests/test_prometheus_dashboard.py's job.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import yaml
from test_compose import DEPLOY, SERVICES

GRAFANA = DEPLOY / "grafana"
DASHBOARD_FILE = GRAFANA / "dashboards" / "rankstream.json"
DATASOURCES_DIR = GRAFANA / "provisioning" / "datasources"
PROVIDERS_DIR = GRAFANA / "provisioning" / "dashboards"

# Grafana's range variables, replaced by a fixed window wherever a query runs outside it.
GRAFANA_WINDOW_VARIABLES = ("$__rate_interval", "$__interval", "$__range")


def load_dashboard() -> dict[str, Any]:
    return json.loads(DASHBOARD_FILE.read_text())


def dashboard_queries(window: str = "1m") -> list[tuple[str, str, str]]:
    """(panel title, refId, PromQL) of every target, Grafana variables set to `window`."""
    queries = []
    for panel in load_dashboard()["panels"]:
        for target in panel.get("targets", []):
            expr = target["expr"]
            for variable in GRAFANA_WINDOW_VARIABLES:
                expr = expr.replace(variable, window)
            queries.append((panel["title"], target["refId"], expr))
    return queries


def metric_names(expr: str) -> set[str]:
    """rankstream metric families an expression reads (histogram suffixes stripped)."""
    return {
        re.sub(r"_(bucket|sum|count)$", "", name)
        for name in re.findall(r"\brankstream_[a-z0-9_]+", expr)
    }


def _yaml_files(directory: Path) -> list[dict[str, Any]]:
    files = sorted(directory.glob("*.yml")) + sorted(directory.glob("*.yaml"))
    assert files, f"no provisioning files in {directory}"
    return [yaml.safe_load(f.read_text()) for f in files]


def _grafana_mounts() -> dict[str, str]:
    """host path (relative to deploy/) -> container path, for the grafana service."""
    mounts = {}
    for mount in SERVICES["grafana"]["volumes"]:
        source, target, *_ = mount.split(":")
        mounts[source] = target
    return mounts


def _panel_datasource_uids() -> set[str]:
    uids = set()
    for panel in load_dashboard()["panels"]:
        uids.add(panel["datasource"]["uid"])
        uids |= {t["datasource"]["uid"] for t in panel.get("targets", [])}
    return uids


# -- provisioning -------------------------------------------------------------------------


def test_datasource_is_the_compose_prometheus_under_the_panels_uid() -> None:
    (datasource,) = [d for f in _yaml_files(DATASOURCES_DIR) for d in f["datasources"]]
    assert datasource["type"] == "prometheus" and datasource["isDefault"] is True
    listen = next(
        a for a in SERVICES["prometheus"]["command"] if a.startswith("--web.listen-address=")
    )
    assert datasource["url"] == "http://prometheus" + listen.split("=", 1)[1]
    assert _panel_datasource_uids() == {datasource["uid"]}


def test_dashboard_provider_loads_the_mounted_dashboards() -> None:
    mounts = _grafana_mounts()
    assert mounts["./grafana/provisioning"] == "/etc/grafana/provisioning"
    (provider,) = [p for f in _yaml_files(PROVIDERS_DIR) for p in f["providers"]]
    assert provider["type"] == "file"
    assert provider["options"]["path"] == mounts["./grafana/dashboards"]
    home = SERVICES["grafana"]["environment"]["GF_DASHBOARDS_DEFAULT_HOME_DASHBOARD_PATH"]
    assert home == f"{mounts['./grafana/dashboards']}/{DASHBOARD_FILE.name}"


# -- the dashboard ---------------------------------------------------------------------------


def test_dashboard_panels_are_well_formed_and_do_not_overlap() -> None:
    dashboard = load_dashboard()
    panels = dashboard["panels"]
    assert dashboard["uid"] and len({p["id"] for p in panels}) == len(panels)
    cells: set[tuple[int, int]] = set()
    for panel in panels:
        assert panel.get("targets") or panel["type"] == "row", f"{panel['title']}: no queries"
        refs = [t["refId"] for t in panel.get("targets", [])]
        assert len(refs) == len(set(refs)), f"{panel['title']}: duplicate refIds"
        pos = panel["gridPos"]
        assert pos["x"] >= 0 and pos["x"] + pos["w"] <= 24
        mine = {(x, y) for x in range(pos["x"], pos["x"] + pos["w"])
                for y in range(pos["y"], pos["y"] + pos["h"])}  # fmt: skip
        assert not (mine & cells), f"{panel['title']} overlaps another panel"
        cells |= mine


def test_dashboard_shows_what_the_issue_asks_for() -> None:
    read = set().union(*(metric_names(q) for _, _, q in dashboard_queries()))
    wanted = {
        "rankstream_ndcg_at_50",
        "rankstream_triplets_produced_total",
        "rankstream_triplets_consumed_total",
        "rankstream_consumer_lag_records",
        "rankstream_model_version",
        "rankstream_checkpoint_seconds",
        "rankstream_refit_seconds",
        "rankstream_dead_letters_total",
        # the click join (issue 26): impressions, clicks, CTR@k, MRR, lag, propensities
        "rankstream_join_impressions_total",
        "rankstream_join_clicks_total",
        "rankstream_join_impressions_clicked_at_total",
        "rankstream_join_reciprocal_rank_total",
        "rankstream_join_lag_seconds",
        "rankstream_click_propensity",
        # the interleaving race (issue 27): per challenger impressions, wins/losses/ties,
        # the test statistic against its threshold log(k/alpha), decision
        "rankstream_interleaving_impressions_interleaved_total",
        "rankstream_interleaving_outcomes_total",
        "rankstream_interleaving_log_statistic",
        "rankstream_interleaving_decision",
        "rankstream_interleaving_threshold",
        "rankstream_champion_race_threshold",
        # issue 38: the share of the champion's rankings each challenger takes
        "rankstream_challenger_impression_share",
        # issue 41: the engine against the challengers: estimates, races, kill switch
        "rankstream_counterfactual_click_dcg",
        "rankstream_counterfactual_click_dcg_ci",
        "rankstream_counterfactual_difference",
        "rankstream_counterfactual_difference_ci",
        "rankstream_model_pinned",
    }
    assert wanted <= read, f"no panel for {wanted - read}"
    gain = [q for _, _, q in dashboard_queries() if 'model="uni_con"' in q]
    assert gain, "no panel compares the models with Uni-Con"


def test_the_engine_row_shows_estimates_races_decisions_and_the_kill_switch() -> None:
    """The row "Engine against challengers" and, below it to the next row or the end,
    panels reading the counterfactual estimates, the races, their decisions and the pin."""
    panels = sorted(
        load_dashboard()["panels"], key=lambda p: (p["gridPos"]["y"], p["gridPos"]["x"])
    )
    (start,) = [i for i, p in enumerate(panels)
                if p["type"] == "row" and p["title"] == "Engine against challengers"]  # fmt: skip
    below = []
    for panel in panels[start + 1 :]:
        if panel["type"] == "row":
            break
        below.append(panel)
    read = set().union(*(metric_names(t["expr"]) for p in below for t in p["targets"]))
    assert {
        "rankstream_counterfactual_click_dcg",
        "rankstream_counterfactual_difference",
        "rankstream_interleaving_log_statistic",
        "rankstream_champion_race_log_statistic",
        "rankstream_interleaving_decision",
        "rankstream_champion_race_decision",
        "rankstream_champion_switches_total",
        "rankstream_model_pinned",
    } <= read


def test_every_queried_metric_is_exported_by_the_workers() -> None:
    from prometheus_client import REGISTRY

    from rankstream.selection import what_serves as serving_model
    from rankstream.telemetry import prometheus_metrics as metrics

    assert metrics and serving_model
    exported = {family.name for family in REGISTRY.collect()}
    # prometheus_client names a Counter's family without "_total"
    exported |= {f"{name}_total" for name in exported}
    for title, ref, expr in dashboard_queries():
        missing = metric_names(expr) - exported
        assert not missing, f"{title} ({ref}) queries unexported {missing}"


def test_promtool_parses_every_panel_query(services, tmp_path: Path) -> None:
    """Each query as a recording rule: `promtool check rules` parses the PromQL.

    `services` installs Debian's prometheus package, which ships promtool.
    """
    assert shutil.which("promtool"), "promtool missing although prometheus is installed"
    rules = [
        {"record": f"rankstream:panel_{i}", "expr": expr}
        for i, (_, _, expr) in enumerate(dashboard_queries())
    ]
    path = tmp_path / "panels.rules.yml"
    path.write_text(yaml.safe_dump({"groups": [{"name": "panels", "rules": rules}]}))
    result = subprocess.run(
        ["promtool", "check", "rules", str(path)], capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0, result.stdout + result.stderr
