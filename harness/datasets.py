"""Install the Debian data packages the real test beds read, like the services' packages.

Fashion-MNIST comes from Debian's `dataset-fashion-mnist`. `make demo` and `make test`
run `python -m rankstream.harness.datasets` first: it does nothing when the files are
there, apt-gets the package as root otherwise (`harness.services.install`), and says
which package to install (and how) when it cannot.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path

from rankstream.harness.services.install import install_debian_packages
from rankstream.harness.services.progress import Progress
from rankstream.harness.services.service_error import ServiceError
from rankstream.simulators import fashion_mnist

DATA_PACKAGES: dict[str, Callable[[], bool]] = {
    fashion_mnist.DEBIAN_PACKAGE: fashion_mnist.is_installed,
}
"""Debian data package -> whether the files the loaders read from it are in place."""


def missing_data_packages() -> list[str]:
    return sorted(package for package, installed in DATA_PACKAGES.items() if not installed())


def ensure_data_packages(log_path: Path, progress: Progress) -> None:
    """apt-get install whatever data package is missing (ServiceError if that fails)."""
    install_debian_packages(
        missing_data_packages(), log_path, progress, lambda package: DATA_PACKAGES[package]()
    )


def main() -> int:
    from rankstream.stream.settings import Settings

    log_path = Path(Settings.from_env().data_dir) / "apt-get-datasets.log"
    try:
        ensure_data_packages(log_path, Progress())
    except ServiceError as error:
        print(f"rankstream: {error}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
