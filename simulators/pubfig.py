"""Loader for the PubFig relative-attributes test bed (Parikh & Grauman, ICCV 2011).

`data.mat` ships MATLAB cells and 1-based uint8 labels; this module turns them into plain
numpy arrays once, so RankMKL (feature groups, category orderings) and cMDS-DML (ordinal
attribute ranks) read the same, checked view of the data.

The root is `/work/shared/datasets/pubfig` unless `RANKSTREAM_PUBFIG_DIR` names another
folder holding `data.mat` and `images/`.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from scipy.io import loadmat

DEFAULT_ROOT = Path("/work/shared/datasets/pubfig")
ROOT_ENV_VAR = "RANKSTREAM_PUBFIG_DIR"
N_GIST = 512  # the first 512 feature columns are GIST, the last 30 the colour histogram
N_COLOR = 30


@dataclass(frozen=True)
class PubFigData:
    """The 772 PubFig faces with their features, categories and attribute orderings.

    `relative_ordering[a, c]` is the strength of attribute `a` in category `c`:
    a HIGHER value means MORE of the attribute (e.g. a higher "Young" value is a
    younger-looking celebrity); equal values mean equal strength (ties are real).
    """

    features: np.ndarray  # (n, 542) float64: GIST (512) then colour (30)
    class_labels: np.ndarray  # (n,) int64, 0-based index into class_names
    class_names: tuple[str, ...]  # the 8 celebrities
    attribute_names: tuple[str, ...]  # the 11 relative attributes
    relative_ordering: np.ndarray  # (11, 8) int64, higher = stronger attribute
    used_for_training: np.ndarray  # (n,) bool, Parikh & Grauman's train split
    image_paths: tuple[Path, ...]  # (n,) the face JPEG behind each row

    @property
    def gist(self) -> np.ndarray:
        """GIST descriptor block (n, 512)."""
        return self.features[:, :N_GIST]

    @property
    def color(self) -> np.ndarray:
        """Colour histogram block (n, 30)."""
        return self.features[:, N_GIST:]

    @property
    def n_samples(self) -> int:
        return int(self.features.shape[0])

    def attribute_index(self, name: str) -> int:
        """Index of an attribute by name (case-insensitive); ValueError lists the choices."""
        lowered = [a.lower() for a in self.attribute_names]
        if name.lower() not in lowered:
            raise ValueError(
                f"unknown PubFig attribute {name!r}; choose one of {list(self.attribute_names)}"
            )
        return lowered.index(name.lower())

    def attribute_strength(self, name: str) -> np.ndarray:
        """Per-image strength of an attribute (n,): its category's `relative_ordering` value."""
        return self.relative_ordering[self.attribute_index(name)][self.class_labels]


def resolve_root(root: Path | str | None = None) -> Path:
    """The data folder: the argument, else `RANKSTREAM_PUBFIG_DIR`, else the shared copy."""
    if root is not None:
        return Path(root)
    from_env = os.environ.get(ROOT_ENV_VAR)
    return Path(from_env) if from_env else DEFAULT_ROOT


def _strings(cell: np.ndarray) -> tuple[str, ...]:
    """A MATLAB cell array of strings (loaded as an object array) as a tuple of str."""
    return tuple(str(np.asarray(item).ravel()[0]) for item in np.asarray(cell).ravel())


def load_pubfig(root: Path | str | None = None) -> PubFigData:
    """Read `data.mat` and pair every row with its image file; errors name what is missing."""
    folder = resolve_root(root)
    mat_path = folder / "data.mat"
    if not mat_path.is_file():
        raise FileNotFoundError(
            f"PubFig data not found: {mat_path} does not exist "
            f"(set {ROOT_ENV_VAR} to the folder holding data.mat and images/)"
        )
    mat = loadmat(mat_path)
    required = (
        "feat",
        "class_labels",
        "class_names",
        "attribute_names",
        "relative_ordering",
        "used_for_training",
        "im_names",
    )
    missing = [key for key in required if key not in mat]
    if missing:
        raise ValueError(f"{mat_path} lacks the variables {missing}")

    features = np.ascontiguousarray(mat["feat"], dtype=np.float64)
    n = features.shape[0]
    if features.shape[1] != N_GIST + N_COLOR:
        raise ValueError(f"expected {N_GIST + N_COLOR} feature columns, got {features.shape[1]}")
    if not np.all(np.isfinite(features)):
        raise ValueError(f"{mat_path}: feat holds NaN or Inf")
    class_names = _strings(mat["class_names"])
    class_labels = np.asarray(mat["class_labels"], dtype=np.int64).ravel() - 1  # 1-based in MATLAB
    if (
        class_labels.shape != (n,)
        or class_labels.min() < 0
        or class_labels.max() >= len(class_names)
    ):
        raise ValueError(f"{mat_path}: class_labels do not index the {len(class_names)} classes")
    attribute_names = _strings(mat["attribute_names"])
    ordering = np.asarray(mat["relative_ordering"], dtype=np.int64)
    if ordering.shape != (len(attribute_names), len(class_names)):
        raise ValueError(
            f"relative_ordering has shape {ordering.shape}, expected "
            f"({len(attribute_names)}, {len(class_names)})"
        )
    used = np.asarray(mat["used_for_training"]).ravel().astype(bool)
    names = _strings(mat["im_names"])
    if len(names) != n or used.shape != (n,):
        raise ValueError(f"{mat_path}: im_names/used_for_training do not match {n} feature rows")
    images = folder / "images"
    paths = tuple(images / name for name in names)
    absent = [p.name for p in paths if not p.is_file()]
    if absent:
        raise FileNotFoundError(
            f"{len(absent)} PubFig images missing under {images}, e.g. {absent[:3]}"
        )
    return PubFigData(
        features=features,
        class_labels=class_labels,
        class_names=class_names,
        attribute_names=attribute_names,
        relative_ordering=ordering,
        used_for_training=used,
        image_paths=paths,
    )
