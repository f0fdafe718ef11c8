"""Install what the services need on first use: Debian packages and the Kafka jars.

Later runs find them (`shutil.which`, a completed jar directory) and do nothing.
The Debian postinst scripts would normally start a system-wide redis/prometheus;
a policy-rc.d that exits 101 tells invoke-rc.d not to, and without systemd the
install would otherwise fail or leave daemons behind on the default ports.
"""

from __future__ import annotations

import hashlib
import importlib.resources
import os
import shutil
import subprocess
import tempfile
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path

from rankstream.harness.services.process import log_tail
from rankstream.harness.services.progress import Progress
from rankstream.harness.services.service_error import ServiceError

# the Kafka recipe and the Prometheus template, shipped as package data (pyproject.toml)
DEPLOY_DIR = Path(str(importlib.resources.files("rankstream.deploy")))
POLICY_RC_D = Path("/usr/sbin/policy-rc.d")


def missing_packages(binaries: Mapping[str, str]) -> list[str]:
    """Debian packages (values) whose binary (key) is not on PATH."""
    return sorted({pkg for binary, pkg in binaries.items() if shutil.which(binary) is None})


@contextmanager
def _no_service_starts() -> Iterator[None]:
    """Keep package scripts from starting daemons, unless a policy already exists."""
    if POLICY_RC_D.exists():
        yield
        return
    POLICY_RC_D.write_text("#!/bin/sh\n# rankstream: no daemons during install\nexit 101\n")
    POLICY_RC_D.chmod(0o755)
    try:
        yield
    finally:
        POLICY_RC_D.unlink(missing_ok=True)


def on_path(package: str) -> bool:
    """A package whose binary has the package's name is installed if that is on PATH."""
    return shutil.which(package) is not None


def install_debian_packages(
    packages: list[str],
    log_path: Path,
    progress: Progress,
    installed: Callable[[str], bool] = on_path,
) -> None:
    """apt-get install the packages (apt-get update first only if the install fails).

    `installed(package)` checks each afterwards: by default its binary on PATH (the
    services' packages); a data package passes a check for the files it ships.
    """
    if not packages:
        return
    if os.geteuid() != 0:
        raise ServiceError(
            f"missing {', '.join(packages)} and not root; install them with: "
            f"sudo apt-get install -y --no-install-recommends {' '.join(packages)}"
        )
    if shutil.which("apt-get") is None:
        raise ServiceError(f"missing {', '.join(packages)} and apt-get is not available")
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    install = ["apt-get", "install", "-y", "--no-install-recommends", *packages]
    log_path.parent.mkdir(parents=True, exist_ok=True)
    step = progress.step(f"installing {', '.join(packages)} (apt-get)")
    with step, _no_service_starts(), open(log_path, "ab") as log:

        def apt(*argv: str) -> int:
            return subprocess.run(argv, stdout=log, stderr=subprocess.STDOUT, env=env).returncode

        if apt(*install) and (apt("apt-get", "update") or apt(*install)):
            raise ServiceError(f"apt-get install failed:\n{log_tail(log_path)}")
    still_missing = [pkg for pkg in packages if not installed(pkg)]
    if still_missing:
        raise ServiceError(f"apt-get installed but still missing: {', '.join(still_missing)}")


def kafka_jar_dir(cache_dir: Path) -> Path:
    """Where the jars of deploy/kafka/pom.xml live; a changed pom gets a fresh directory."""
    digest = hashlib.sha256((DEPLOY_DIR / "kafka" / "pom.xml").read_bytes()).hexdigest()[:12]
    return cache_dir / f"kafka-jars-{digest}"


def ensure_kafka_jars(cache_dir: Path, log_path: Path, progress: Progress) -> Path:
    """Resolve the broker's jars with Maven once; return the directory holding them."""
    jar_dir = kafka_jar_dir(cache_dir)
    if (jar_dir / ".complete").exists():
        return jar_dir
    for tool in ("mvn", "java"):
        if shutil.which(tool) is None:
            raise ServiceError(f"`{tool}` is not on PATH; Kafka needs Maven and a Java 17 JDK")
    cache_dir.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix="kafka-jars-", dir=cache_dir))
    command = [
        "mvn", "-q", "-B", "-f", str(DEPLOY_DIR / "kafka" / "pom.xml"),
        "dependency:copy-dependencies", f"-DoutputDirectory={staging}",
    ]  # fmt: skip
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with progress.step("resolving Kafka jars from Maven Central"), open(log_path, "ab") as log:
        if subprocess.run(command, stdout=log, stderr=subprocess.STDOUT).returncode:
            shutil.rmtree(staging, ignore_errors=True)
            raise ServiceError(f"maven could not resolve the Kafka jars:\n{log_tail(log_path)}")
    (staging / ".complete").touch()
    try:
        staging.rename(jar_dir)
    except OSError:  # another process finished first; its directory is just as good
        shutil.rmtree(staging, ignore_errors=True)
    return jar_dir
