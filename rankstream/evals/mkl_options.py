"""What `rankstream eval mkl` can be told: `MKLEvalConfig`, declared once.

Kept apart from `evals.mkl` (the features, the solver) so the command line is built from
these fields without them (`workers.options`).
"""

from __future__ import annotations

from dataclasses import dataclass

from rankstream.workers.options import option


@dataclass(frozen=True)
class MKLEvalConfig:
    """The attributes, pairs and cross-validation grids of the RankMKL paper's Table 1."""

    attributes: tuple[str, ...] | None = option(
        None, "comma-separated attribute names (none: all 11)"
    )
    max_train_pairs: int = option(
        20_000, "category-level training pairs per attribute, sampled down to this many"
    )
    max_test_pairs: int | None = option(None, "subsample test pairs (none: all)")
    cv_folds: int = option(3, "folds (stratified by category) that choose C, the bandwidth and lam")
    cv_max_pairs: int = option(
        5_000, "training pairs per cross-validation fit (keeps the grid affordable)"
    )
    c_grid: tuple[float, ...] = option((0.01, 0.1, 1.0, 10.0), cli=False)
    gamma_scales: tuple[float, ...] = option((0.25, 0.5, 1.0, 2.0), cli=False)
    lam: float = option(
        1.0, cli=False
    )  # RankMKL's lam while C is chosen (irrelevant for one group)
    lam_grid: tuple[float, ...] = option((0.01, 0.1, 1.0, 10.0, 100.0), cli=False)
    seed: int = option(0, "seed of the pair sampling and folds")

    def __post_init__(self) -> None:
        for name, least in (("max_train_pairs", 1), ("cv_folds", 2), ("cv_max_pairs", 1)):
            if getattr(self, name) < least:
                raise ValueError(f"{name} is too small: {getattr(self, name)}")
