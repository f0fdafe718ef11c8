"""The test beds `rankstream eval cbir --dataset NAME` builds, by name.

The one list of them: `rankstream.evals.cbir` evaluates them and the command offers
their names as choices. Each loader is imported only when it is called, so the command
line can list the names without importing scikit-image, numba or the data.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class LazyLoader:
    """`module.function(**options)`, imported on the first call."""

    module: str
    function: str

    def __call__(self, **options: Any) -> Any:
        return getattr(importlib.import_module(self.module), self.function)(**options)


DATASETS: dict[str, LazyLoader] = {
    "digits": LazyLoader("rankstream.simulators.digits", "load_digits_testbed"),
    "synthetic": LazyLoader("rankstream.simulators.cbir_testbed", "load_synthetic_testbed"),
    "fashion-mnist": LazyLoader(
        "rankstream.simulators.fashion_collection", "load_fashion_mnist_testbed"
    ),
    "fashion-mnist-retrieved": LazyLoader(
        "rankstream.simulators.fashion_collection", "load_fashion_mnist_retrieved_testbed"
    ),
}
"""Dataset name -> loader(seed=, train_rows=, max_val_queries=, max_test_queries=,
cache_dir=, progress=) returning a `simulators.cbir_testbed.CBIRTestBed`."""
