"""Ordinal-label test beds for cMDS-DML vs LDMLR (the paper's UMIST/FG-NET role).

* digits: scikit-learn's 1,797 8x8 images; label = quintile (0..4) of the image's ink,
  i.e. the sum of its pixel intensities. Digit identity is not ordinal; ink is, and it
  is a visual property a metric on the pixels can learn.
* pubfig: the 772 PubFig faces (GIST + colour features); label = the dense rank (0 =
  least) of the image's celebrity in one relative attribute (default Young), the way
  FG-NET's ages label faces. Tied categories share a rank.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from rankstream.simulators.pubfig import load_pubfig

ORDINAL_DATASETS = ("digits", "pubfig")
DEFAULT_ATTRIBUTE = "Young"
N_INK_QUANTILES = 5


@dataclass(frozen=True)
class OrdinalDataset:
    name: str
    X: np.ndarray  # (n, d) float64 features
    r: np.ndarray  # (n,) float64 ordinal labels 0..m-1
    description: str

    @property
    def levels(self) -> np.ndarray:
        return np.unique(self.r)


def ink_quantile_labels(images: np.ndarray, n_quantiles: int = N_INK_QUANTILES) -> np.ndarray:
    """Quantile index (0..n_quantiles-1) of each image's total intensity."""
    ink = np.asarray(images, dtype=np.float64).reshape(len(images), -1).sum(axis=1)
    edges = np.quantile(ink, np.linspace(0, 1, n_quantiles + 1)[1:-1])
    return np.searchsorted(edges, ink, side="right").astype(np.float64)


def digits_ink() -> OrdinalDataset:
    # sklearn.datasets: +4 s at import; only this data set needs it
    from sklearn.datasets import load_digits

    X, _ = load_digits(return_X_y=True)
    X = X.astype(np.float64)
    return OrdinalDataset(
        name="digits",
        X=X,
        r=ink_quantile_labels(X),
        description="sklearn digits, label = ink quintile (0..4)",
    )


def dense_ranks(values: np.ndarray) -> np.ndarray:
    """0-based dense ranks: equal values share a rank, ranks have no gaps."""
    _, inverse = np.unique(np.asarray(values), return_inverse=True)
    return inverse.astype(np.float64)


def pubfig_attribute(
    attribute: str = DEFAULT_ATTRIBUTE, root: Path | str | None = None
) -> OrdinalDataset:

    data = load_pubfig(root)
    index = data.attribute_index(attribute)
    return OrdinalDataset(
        name="pubfig",
        X=data.features,
        r=dense_ranks(data.attribute_strength(attribute)),
        description=f"PubFig, label = category rank in {data.attribute_names[index]} (0 = least)",
    )


def load_ordinal(name: str, attribute: str | None = None) -> OrdinalDataset:
    """One of `ORDINAL_DATASETS` by name; `attribute` applies to pubfig only."""
    if name == "digits":
        if attribute is not None:
            raise ValueError("--attribute applies to the pubfig data set only")
        return digits_ink()
    if name == "pubfig":
        return pubfig_attribute(attribute or DEFAULT_ATTRIBUTE)
    raise ValueError(f"unknown ordinal data set {name!r}; choose one of {list(ORDINAL_DATASETS)}")


def per_label_split(
    r: np.ndarray, n_per_label: int, rng: np.random.Generator
) -> tuple[np.ndarray, np.ndarray]:
    """The papers' protocol: n_per_label random training images per label, the rest test."""
    train = []
    for level in np.unique(r):
        members = np.flatnonzero(r == level)
        if members.size <= n_per_label:
            raise ValueError(
                f"label {level:g} has {members.size} images; cannot draw {n_per_label} for "
                "training and keep some for testing"
            )
        train.append(rng.choice(members, n_per_label, replace=False))
    train_idx = np.sort(np.concatenate(train))
    return train_idx, np.setdiff1d(np.arange(r.size), train_idx)
