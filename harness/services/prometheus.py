"""Prometheus from the Debian package, scraping whatever targets are listed in files.

Workers and tests add a scrape target by writing `<root>/prometheus/targets/<job>.json`
(file_sd_configs; Prometheus watches the directory), so nothing restarts when a new
process starts exporting metrics.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import urllib.error
import urllib.request
from collections.abc import Mapping
from pathlib import Path
from string import Template

from rankstream.harness.services.install import DEPLOY_DIR
from rankstream.harness.services.progress import Progress
from rankstream.harness.services.service import Service


class PrometheusService(Service):
    name = "prometheus"
    apt_binaries = (("prometheus", "prometheus"),)
    startup_timeout = 30.0

    @property
    def targets_dir(self) -> Path:
        return self.dir / "targets"

    def command(self, ports: Mapping[str, int], progress: Progress) -> list[str]:
        self.targets_dir.mkdir(parents=True, exist_ok=True)
        template = Template((DEPLOY_DIR / "prometheus" / "prometheus.yml.template").read_text())
        config = template.substitute(targets_dir=self.targets_dir, self_port=ports["port"])
        (self.dir / "prometheus.yml").write_text(config)
        return [
            shutil.which("prometheus") or "prometheus",
            f"--config.file={self.dir / 'prometheus.yml'}",
            f"--storage.tsdb.path={self.dir / 'data'}",
            f"--web.listen-address=127.0.0.1:{ports['port']}",
            "--storage.tsdb.retention.time=2d",
        ]

    def is_ready(self, ports: Mapping[str, int]) -> bool:
        try:
            with urllib.request.urlopen(f"{self.address(ports)}/-/ready", timeout=1.0) as reply:
                return reply.status == 200
        except (urllib.error.URLError, OSError):
            return False

    def address(self, ports: Mapping[str, int]) -> str:
        return f"http://127.0.0.1:{ports['port']}"


def write_scrape_target(targets_dir: Path, job: str, address: str) -> Path:
    """Add host:port to job's file_sd file (creating it); returns the file's path.

    Prometheus picks the file up within its 5 s refresh (usually at once, via inotify)
    and labels the series `job=<job>`. Written to a temporary name and renamed, so
    Prometheus never reads half a file.
    """
    if not re.fullmatch(r"[A-Za-z0-9_.:-]+", job):
        raise ValueError(f"job name {job!r} must be letters, digits, '_', '.', ':' or '-'")
    host, _, port = address.rpartition(":")
    if not host or not port.isdigit():
        raise ValueError(f"scrape target {address!r} must be host:port")
    targets_dir.mkdir(parents=True, exist_ok=True)
    path = targets_dir / f"{job}.json"
    targets: list[str] = []
    if path.exists():
        targets = [t for group in json.loads(path.read_text()) for t in group["targets"]]
    if address not in targets:
        targets.append(address)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps([{"targets": targets, "labels": {"job": job}}], indent=1))
    os.replace(tmp, path)
    return path
