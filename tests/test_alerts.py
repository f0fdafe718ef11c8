"""The Prometheus alert rules the compose stack ships, loaded and tested.

deploy/prometheus/alerts.yml is loaded by the compose Prometheus (`rule_files`);
`promtool test rules` runs deploy/prometheus/alerts.test.yml, which makes every alert fire
on series that should raise it and stay quiet on look-alikes. The tests here also make
sure that file covers every alert and that promtool really fails on a broken expectation
(so a passing run means something).
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import yaml
from test_compose import DEPLOY, PROMETHEUS_CONFIG, SERVICES

ALERTS = DEPLOY / "prometheus" / "alerts.yml"
ALERTS_TEST = DEPLOY / "prometheus" / "alerts.test.yml"
WANTED = {
    "ChampionBelowUniCon",
    "ConsumerLagGrowing",
    "DeadLettersArriving",
    "CheckpointTooOld",
    "WorkerDown",
    "ClickJoinLagging",
}


def _alert_names() -> set[str]:
    groups = yaml.safe_load(ALERTS.read_text())["groups"]
    return {rule["alert"] for group in groups for rule in group["rules"] if "alert" in rule}


def _promtool(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    assert shutil.which("promtool"), "promtool missing although prometheus is installed"
    return subprocess.run(["promtool", *args], cwd=cwd, capture_output=True, text=True, timeout=120)


def test_the_issue_s_alerts_are_defined() -> None:
    assert _alert_names() >= WANTED


def test_prometheus_loads_the_rules_the_compose_file_mounts() -> None:
    config = yaml.safe_load(PROMETHEUS_CONFIG.read_text())
    assert config["rule_files"] == ["alerts.yml"]
    mounts = {}
    for mount in SERVICES["prometheus"]["volumes"]:
        source, target, *_ = mount.split(":")
        mounts[source] = target
    config_target = mounts["./prometheus/prometheus.compose.yml"]
    # rule_files resolve against the config file's directory, inside the container too
    assert mounts["./prometheus/alerts.yml"] == str(Path(config_target).parent / "alerts.yml")


def test_every_alert_fires_in_the_unit_tests() -> None:
    fired = set()
    for case in yaml.safe_load(ALERTS_TEST.read_text())["tests"]:
        for check in case.get("alert_rule_test", []):
            if check.get("exp_alerts"):
                fired.add(check["alertname"])
    assert fired == _alert_names(), f"never shown firing: {_alert_names() - fired}"


def test_promtool_test_rules_passes(services) -> None:
    """`services` installs Debian's prometheus package, which ships promtool."""
    result = _promtool("test", "rules", ALERTS_TEST.name, cwd=ALERTS_TEST.parent)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SUCCESS" in result.stdout


def test_promtool_fails_when_an_expectation_is_wrong(services, tmp_path: Path) -> None:
    """The same tests against rules whose thresholds were moved must fail."""
    shutil.copy(ALERTS_TEST, tmp_path / ALERTS_TEST.name)
    broken = ALERTS.read_text().replace("> 300", "> 3000").replace("> 10000", "> 100000")
    assert broken != ALERTS.read_text()
    (tmp_path / "alerts.yml").write_text(broken)
    result = _promtool("test", "rules", ALERTS_TEST.name, cwd=tmp_path)
    assert result.returncode != 0, result.stdout
    assert "CheckpointTooOld" in result.stdout + result.stderr
