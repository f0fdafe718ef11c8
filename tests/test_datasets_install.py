"""`python -m rankstream.harness.datasets`: the data packages install like the services'."""

from __future__ import annotations

import subprocess

import pytest

from rankstream.harness import datasets
from rankstream.harness.services import install
from rankstream.harness.services.progress import Progress
from rankstream.harness.services.service_error import ServiceError
from rankstream.simulators import fashion_mnist
from rankstream.simulators.fashion_mnist import DEBIAN_PACKAGE


@pytest.fixture
def apt_calls(monkeypatch, tmp_path) -> list[tuple[str, ...]]:
    """Record apt-get invocations instead of running them (as root, apt-get present)."""
    calls: list[tuple[str, ...]] = []

    def fake_run(argv, **_kwargs):
        calls.append(tuple(argv))
        return subprocess.CompletedProcess(argv, 0)

    monkeypatch.setattr(install.subprocess, "run", fake_run)
    monkeypatch.setattr(install.os, "geteuid", lambda: 0)
    monkeypatch.setattr(install.shutil, "which", lambda name: f"/usr/bin/{name}")
    monkeypatch.setattr(install, "POLICY_RC_D", tmp_path / "policy-rc.d")
    return calls


def test_the_fashion_mnist_package_is_listed_and_checked_by_its_files(tmp_path) -> None:
    """Installed means the loader's four idx files are there (any machine, no data needed)."""
    assert datasets.DATA_PACKAGES[DEBIAN_PACKAGE] is fashion_mnist.is_installed
    names = [name for files in fashion_mnist.SPLIT_FILES.values() for name in files]
    for name in names[:-1]:
        (tmp_path / name).write_bytes(b"")
    assert not fashion_mnist.is_installed(tmp_path)
    (tmp_path / names[-1]).write_bytes(b"")
    assert fashion_mnist.is_installed(tmp_path)


def test_nothing_happens_when_the_files_are_there(apt_calls, monkeypatch, tmp_path) -> None:
    monkeypatch.setitem(datasets.DATA_PACKAGES, DEBIAN_PACKAGE, lambda: True)
    datasets.ensure_data_packages(tmp_path / "apt.log", Progress(quiet=True))
    assert apt_calls == []


def test_a_missing_package_is_apt_installed_and_then_checked(apt_calls, monkeypatch, tmp_path):
    monkeypatch.setitem(datasets.DATA_PACKAGES, DEBIAN_PACKAGE, lambda: False)
    with pytest.raises(ServiceError, match=f"still missing: {DEBIAN_PACKAGE}"):
        datasets.ensure_data_packages(tmp_path / "apt.log", Progress(quiet=True))
    assert apt_calls[0] == ("apt-get", "install", "-y", "--no-install-recommends", DEBIAN_PACKAGE)
    assert not (tmp_path / "policy-rc.d").exists()  # the no-daemons policy is removed again


def test_without_root_the_error_names_the_package(monkeypatch, tmp_path) -> None:
    monkeypatch.setitem(datasets.DATA_PACKAGES, DEBIAN_PACKAGE, lambda: False)
    monkeypatch.setattr(install.os, "geteuid", lambda: 1000)
    with pytest.raises(ServiceError, match=f"sudo apt-get install .*{DEBIAN_PACKAGE}"):
        datasets.ensure_data_packages(tmp_path / "apt.log", Progress(quiet=True))


def test_main_reports_failure_on_stderr(monkeypatch, capsys) -> None:
    monkeypatch.setitem(datasets.DATA_PACKAGES, DEBIAN_PACKAGE, lambda: False)
    monkeypatch.setattr(install.os, "geteuid", lambda: 1000)
    assert datasets.main() == 1
    assert DEBIAN_PACKAGE in capsys.readouterr().err
