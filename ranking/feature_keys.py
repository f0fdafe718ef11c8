"""Which column of a linear model each feature key reads: river's dict rows and named frames.

A model's columns are either integer positions 0..d-1 (rows given as arrays, or dicts
keyed by position) or names in a fixed order: declared up front, or fixed at first sight
(the keys of the first dict or frame, in their order) and extended, when the model may
grow, by appending keys not seen before in the order they come. A key absent from a row
is 0 (river's sparse convention), so a row may carry any subset of the known keys.

Reading a row never changes the order: `FeatureKeys.place` says where its keys go (and
which names would be new), and `FeatureKeys.adopt` commits those names once the model
has learned the row. So a prediction, or a batch the model refuses, leaves the order as
it was.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable, Sequence
from dataclasses import dataclass

import numpy as np


def is_position(key: object) -> bool:
    """An integer key (not a bool): a column position rather than a name."""
    return isinstance(key, int | np.integer) and not isinstance(key, bool)


@dataclass(frozen=True)
class Placement:
    """Where a row's keys go: `columns[i]` for the i-th key, in a model `width` wide.

    Columns >= the model's current width are new ones (the model grows to `width` to
    learn the row; a prediction reads them as weight 0). `new_names` are the names
    the order gains when the row is learned (empty for positions)."""

    columns: np.ndarray
    width: int | None
    new_names: tuple[Hashable, ...]


class FeatureKeys:
    """The order of a model's columns: positions, or names (declared or fixed at first sight)."""

    def __init__(self, names: Iterable[Hashable] | None = None) -> None:
        self._column: dict[Hashable, int] | None = None
        if names is not None:
            declared = tuple(names)
            if not declared:
                raise ValueError("features must name at least one feature")
            self._column = {}
            self.adopt(declared)

    @property
    def names(self) -> tuple[Hashable, ...] | None:
        """The feature names in column order, or None while the columns are positions."""
        return None if self._column is None else tuple(self._column)

    def adopt(self, names: Sequence[Hashable]) -> None:
        """Append names (new, distinct) to the order; the first names make it a named order."""
        if not names:
            return
        column = {} if self._column is None else self._column
        for name in names:
            if name in column:
                raise ValueError(f"feature {name!r} is named twice")
            column[name] = len(column)
        self._column = column

    def place(self, keys: Sequence[Hashable], width: int | None, grows: bool) -> Placement:
        """The columns of `keys` in a model `width` wide (None: not known yet).

        A model whose width is not known yet takes positions when every key is an
        integer, names otherwise. Keys the model has no column for get new columns when
        it `grows`; otherwise they are an error, as are names on a model of positions.
        """
        if len(set(keys)) != len(keys):
            raise ValueError("a row names the same feature twice")
        if self._column is None and (width is not None or all(map(is_position, keys))):
            return self._place_positions(keys, width, grows)
        column = {} if self._column is None else self._column
        new_names = tuple(key for key in keys if key not in column)
        if new_names and not grows:
            shown = ", ".join(map(repr, new_names[:3]))
            raise ValueError(f"feature {shown} is not among the {len(column)} declared features")
        if new_names:
            column = column | {name: len(column) + i for i, name in enumerate(new_names)}
        columns = np.fromiter((column[key] for key in keys), dtype=np.intp, count=len(keys))
        return Placement(columns, len(column), new_names)

    def _place_positions(
        self, keys: Sequence[Hashable], width: int | None, grows: bool
    ) -> Placement:
        for key in keys:
            if not is_position(key):
                raise ValueError(
                    f"feature key {key!r} is not an integer position: this model's columns "
                    "are positions (declare features=... to read named keys)"
                )
        columns = np.array([int(key) for key in keys], dtype=np.intp)
        if columns.size and columns.min() < 0:
            raise ValueError(f"feature key {int(columns.min())} is a negative position")
        needed = int(columns.max()) + 1 if columns.size else 0
        if width is not None and needed > width and not grows:
            raise ValueError(f"feature key {needed - 1} is outside 0..{width - 1}")
        return Placement(columns, max(needed, width or 0) or width, ())
