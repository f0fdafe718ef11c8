"""rankstream installs under its own import name only, from a wheel as from the source.

The repository keeps its top-level folders (ranking/, stream/, workers/, simulators/,
harness/); pyproject.toml maps each into the `rankstream` package. These tests check
the mapping against the folders and install a freshly built wheel into a new virtual
environment: it must import as `rankstream.*`, claim no other top-level name (PyPI has
unrelated `ranking`, `stream`, `workers` and `simulators` distributions), carry the
files `rankstream services up` reads, and run its CLI.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import sysconfig
import tomllib
import venv
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
_NOT_SOURCE = (".git", ".venv", "build", "report", "*.egg-info", "__pycache__", ".*_cache")
CONFIG = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]


def _folder_packages() -> set[str]:
    """Every package the mapped folders hold (directories with an __init__.py)."""
    found = set()
    for package, folder in CONFIG["package-dir"].items():
        for init in (ROOT / folder).rglob("__init__.py"):
            relative = init.parent.relative_to(ROOT / folder).parts
            inner = ".".join([package, *relative])
            # a folder mapped on its own (rankstream/ holds no harness/ of its own)
            owner = max(
                (p for p in CONFIG["package-dir"] if inner == p or inner.startswith(p + ".")),
                key=len,
            )
            if owner == package:
                found.add(inner)
    return found


def test_every_folder_package_is_listed() -> None:
    assert set(CONFIG["packages"]) == _folder_packages()


def test_every_listed_package_has_its_folder() -> None:
    for folder in CONFIG["package-dir"].values():
        assert (ROOT / folder / "__init__.py").is_file(), folder


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("wheel")
    source = tmp_path_factory.mktemp("source") / "rankstream"  # setuptools writes build/
    shutil.copytree(ROOT, source, ignore=shutil.ignore_patterns(*_NOT_SOURCE))
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q",
         "-w", str(out), str(source)],
        check=True,
        capture_output=True,
        env={**os.environ, "PIP_DISABLE_PIP_VERSION_CHECK": "1"},
    )  # fmt: skip
    (found,) = out.glob("rankstream-*.whl")
    return found


def test_the_wheel_claims_only_rankstream(wheel: Path) -> None:
    with zipfile.ZipFile(wheel) as archive:
        names = archive.namelist()
    tops = {name.split("/")[0] for name in names}
    assert tops == {"rankstream", next(t for t in tops if t.endswith(".dist-info"))}
    for expected in (
        "rankstream/ranking/online.py",
        "rankstream/stream/schema.py",
        "rankstream/workers/online_worker.py",
        "rankstream/simulators/collection.py",
        "rankstream/harness/chaos.py",
        "rankstream/deploy/kafka/pom.xml",
        "rankstream/deploy/prometheus/prometheus.yml.template",
    ):
        assert expected in names, expected


@pytest.fixture(scope="module")
def installed(wheel: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A new virtual environment with the wheel; the dependencies come from this one's
    site-packages as a plain path entry, so its editable rankstream finder is not loaded."""
    env_dir = tmp_path_factory.mktemp("venv")
    venv.create(env_dir, with_pip=False)
    python = env_dir / "bin" / "python"
    site = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()
    Path(site, "dependencies.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    subprocess.run(
        [sys.executable, "-m", "pip", "--python", str(python), "install", "--no-deps", "-q",
         str(wheel)],
        check=True,
        capture_output=True,
        env={**os.environ, "PIP_DISABLE_PIP_VERSION_CHECK": "1"},
    )  # fmt: skip
    return python


def _run(python: Path, code: str, cwd: Path) -> str:
    done = subprocess.run(
        [str(python), "-c", code], cwd=cwd, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_the_installed_wheel_imports_as_rankstream(installed: Path, tmp_path: Path) -> None:
    out = _run(
        installed,
        "import importlib.util, pkgutil, rankstream\n"
        "mods = [m.name for m in pkgutil.walk_packages(rankstream.__path__, 'rankstream.')]\n"
        "for name in mods: name.endswith('__main__') or __import__(name)\n"
        "print(rankstream.__file__)\n"
        "print(len(mods))\n"
        "print([n for n in ('ranking', 'stream', 'workers', 'simulators', 'harness', 'telemetry',"
        " 'producers', 'selection')"
        " if importlib.util.find_spec(n) is not None])\n",
        tmp_path,
    )
    where, count, claimed = out.splitlines()
    assert str(ROOT) not in where, "imported the source tree, not the wheel"
    assert int(count) > 80
    assert claimed == "[]"


def test_the_installed_wheel_finds_its_deploy_files(installed: Path, tmp_path: Path) -> None:
    out = _run(
        installed,
        "from rankstream.harness.services.install import DEPLOY_DIR\n"
        "print(DEPLOY_DIR)\n"
        "print((DEPLOY_DIR / 'kafka' / 'pom.xml').is_file())\n",
        tmp_path,
    )
    where, exists = out.splitlines()
    assert str(ROOT) not in where and exists == "True"


def test_the_installed_cli_runs(installed: Path, tmp_path: Path) -> None:
    done = subprocess.run(
        [str(installed), "-m", "rankstream", "--help"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert "demo" in done.stdout and "worker" in done.stdout
