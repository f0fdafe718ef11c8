"""What `rankstream eval dml` can be told: `DmlEvalConfig`, declared once.

Kept apart from `evals.dml` (scikit-learn, the learners) so the command line is built from
these fields without them (`workers.options`).
"""

from __future__ import annotations

from dataclasses import dataclass

from rankstream.workers.options import option


@dataclass(frozen=True)
class DmlEvalConfig:
    """The data set, the splits and the kNN's K of the paper's Tables 3-7 (`evals.dml`)."""

    dataset: str = option(
        "digits",
        "ordinal labels: digits (ink quintiles) or pubfig (an attribute's ranks)",
        choices=("digits", "pubfig"),
    )
    attribute: str | None = option(None, "PubFig attribute (none: Young)")
    repeats: int = option(20, "random train/test splits")
    n_train: int = option(10, "training images per label")
    ks: tuple[int, ...] = option((5,), "target neighbours K (e.g. --k 4 5 6)", name="k")
    s: int | None = option(
        None, "cMDS-DML embedding dimension (none: max(3, labels - 1), see Algorithm 1)"
    )
    pca_components: int | None = option(
        None, "PCA dimension (none: PubFig 150 as in the paper, digits 40)", name="pca"
    )
    validation_splits: int = option(
        10, "extra random splits that choose each learner's settings (by mean MAE)"
    )
    seed: int = option(0, "seed of the random splits")
