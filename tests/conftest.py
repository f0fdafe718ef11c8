"""Shared pytest fixtures.

Services (real Kafka, Redis, Prometheus) start lazily, once per session, under a
temporary root, only when a test asks for `services` (directly or through
`service_settings`); `pytest -m "not services"` therefore starts nothing. A test that
uses them is marked `services` automatically. If they cannot be installed or started
the test is skipped with the reason, except under CI=true, where it fails: integration
tests never skip silently in CI.

Add new fixtures below in their own section, with a line saying what they are for.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from rankstream.stream.settings import Settings

# scikit-learn's array API estimator checks run only when SciPy's array API support is on,
# and SciPy reads SCIPY_ARRAY_API once, at its first import. Nothing imported above pulls
# SciPy in (tests/test_estimator_checks.py asserts SciPy saw the setting), so setting it
# here makes those checks run instead of skipping.
os.environ.setdefault("SCIPY_ARRAY_API", "1")

# -- markers ------------------------------------------------------------------------


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        "engine: runs docker compose on a real Docker engine (`make compose-test`; "
        "tests/test_compose_engine.py)",
    )


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Mark every test that (transitively) uses the `services` fixture."""
    for item in items:
        if "services" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.services)


# -- data sets a test may not have -------------------------------------------------------


def _missing_data(error: BaseException) -> str | None:
    """Why a test could not get its data, when that is why it failed: Fashion-MNIST is
    not installed here and the error is about its files (the message names the Debian
    package and `make datasets`). Any other error, or any error while the files are
    there, stays a failure."""
    from rankstream.simulators import fashion_mnist

    if not isinstance(error, FileNotFoundError) or fashion_mnist.is_installed():
        return None
    where = str(fashion_mnist.DEFAULT_DIR)
    if where in str(error) or where in str(error.filename or ""):
        return fashion_mnist.missing_message(fashion_mnist.DEFAULT_DIR)
    return None


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo) -> Iterator[None]:
    """A test (or its fixture) that needs a data set this machine does not have is
    skipped with the reason, except under CI=true, where it fails: `make test` installs
    the data first, so CI never skips it."""
    outcome = yield
    report = outcome.get_result()
    if report.failed and call.excinfo is not None and not _in_ci():
        reason = _missing_data(call.excinfo.value)
        if reason is not None:
            report.outcome = "skipped"
            report.longrepr = (str(item.path), (item.location[1] or 0) + 1, f"Skipped: {reason}")


# -- real services --------------------------------------------------------------------


@dataclass(frozen=True)
class RunningServices:
    """Where the session's services listen, and the manager to stop/restart them."""

    kafka_bootstrap: str
    redis_url: str
    prometheus_url: str
    manager: object  # rankstream.harness.services.ServiceManager (imported lazily)

    @property
    def root(self) -> Path:
        return self.manager.root  # type: ignore[attr-defined]


def _in_ci() -> bool:
    return os.environ.get("CI", "").strip().lower() in ("1", "true", "yes")


@pytest.fixture(scope="session")
def services(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServices]:
    """Kafka + Redis + Prometheus for the whole session, under a temporary root."""
    from rankstream.harness.services import ServiceError, ServiceManager

    manager = ServiceManager(tmp_path_factory.mktemp("services"))
    try:
        endpoints = manager.up()
    except ServiceError as exc:
        manager.down()
        reason = f"local services unavailable: {exc}"
        if _in_ci():
            pytest.fail(reason, pytrace=False)
        pytest.skip(reason)
    try:
        yield RunningServices(
            kafka_bootstrap=endpoints.kafka_bootstrap,
            redis_url=endpoints.redis_url,
            prometheus_url=endpoints.prometheus_url,
            manager=manager,
        )
    finally:
        manager.down()


def _unique_prefix() -> str:
    return f"t{uuid.uuid4().hex[:12]}"


@pytest.fixture
def service_settings(services: RunningServices, tmp_path: Path) -> Settings:
    """Settings on the real services; a unique topic prefix isolates topics and keys."""
    return Settings(
        kafka_bootstrap=services.kafka_bootstrap,
        redis_url=services.redis_url,
        topic_prefix=_unique_prefix(),
        data_dir=str(tmp_path),
    )


@pytest.fixture
def embedded_settings(tmp_path: Path) -> Settings:
    """Settings with no Kafka or Redis: the in-process transport and store."""
    return Settings(topic_prefix=_unique_prefix(), data_dir=str(tmp_path))


# -- real image collections -------------------------------------------------------------


@pytest.fixture(scope="session")
def fashion_slice(tmp_path_factory: pytest.TempPathFactory):
    """Fashion-MNIST's first 200 photos of each split (400, more than the 300 candidates a
    query retrieves) with their index: the real files, described once per session."""
    from rankstream.simulators.catalog import load_collection

    cache = tmp_path_factory.mktemp("fashion-slice")
    return load_collection("fashion-mnist", cache, progress=False, limit=200)
