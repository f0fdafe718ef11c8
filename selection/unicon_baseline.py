"""The one Uni-Con publisher: the simulator and `serve` both publish the baseline here.

Uni-Con (equal weights on standardized phi, `ranking.baselines.UniCon`) is label-free,
but its scaling is fitted on candidates' phi. The record is always stamped with its
width (`stream.store.WIDTH_KEY`), so a store of any width serves it from the first
request (`stream.store.stored_width` reads an unstamped model as the legacy 36).

Calibration on a sample, not a request: the record carries the running per-feature
count, mean and sum of squared deviations of every candidate it was scaled on (Chan et
al.'s pairwise update, exact in any order), and each publish adds its candidates and
saves a new version, until `target` candidates were seen; from then on it is final and
publishing returns its version. The simulator publishes once with its calibration
queries' candidates (its own target: they are its sample); `serve`, starting from an
empty store, adds each ranking request's candidates until `Settings.unicon_calibration`
(default 1,000, over any number of requests), so a one-candidate smoke test as first
request scales nothing for good. A feature with zero variance so far gets std 1
(`ranking.scaling.Standardizer`): no division by zero.

Two publishers racing are fenced (`expected_version`): the loser keeps the winner's
record and returns its version; its candidates are simply not counted.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from rankstream.ranking.baselines import UNI_CON, UniCon
from rankstream.ranking.scaling import Standardizer
from rankstream.ranking.validation import as_float_matrix
from rankstream.stream.store import WIDTH_KEY, FencingError, ModelStore, StoredModel, check_width
from rankstream.telemetry.structured_log import get_logger, log_event

ROWS, TARGET = "calibration_rows", "calibration_target"
MEAN, M2 = "calibration.mean", "calibration.m2"

log = get_logger("rankstream.baseline")


def calibrating(stored: StoredModel | None) -> bool:
    """True while a stored Uni-Con has seen fewer candidates than its target (or is absent).

    A record without calibration counts (written before this publisher) is final.
    """
    if stored is None:
        return True
    rows, target = stored.meta.get(ROWS), stored.meta.get(TARGET)
    return isinstance(rows, int) and isinstance(target, int) and rows < target


def publish_unicon(
    store: ModelStore, phi: Any, width: int, target: int, source: str = "candidates"
) -> int:
    """Add `phi`'s rows to Uni-Con's calibration and publish it; its version.

    A final Uni-Con (calibrated on `target` candidates, or by an older writer) is left
    as it is. `phi` (n, width) must be finite; `source` says where the rows came from.
    """
    if target < 1:
        raise ValueError(f"the calibration target must be >= 1 candidates, got {target}")
    phi = as_float_matrix(phi, "phi", width)
    existing = store.load(UNI_CON)
    if not calibrating(existing):
        assert existing is not None
        return existing.version
    count, mean, m2 = _running(existing, width)
    count, mean, m2 = _merged(count, mean, m2, phi)
    scaler = Standardizer.from_state(
        {"kind": "standardizer", "dim": width},
        {"mean": mean, "std": _std(count, mean, m2)},
    )
    meta, arrays = UniCon(scaler=scaler).to_state()
    target = int(existing.meta.get(TARGET, target)) if existing is not None else target
    meta.update({WIDTH_KEY: width, ROWS: count, TARGET: target, "calibration": source})
    arrays.update({MEAN: mean, M2: m2})
    expected = 0 if existing is None else existing.version
    try:
        version = store.save(
            UNI_CON, kind="linear", meta=meta, arrays=arrays, offsets={}, expected_version=expected
        )
    except FencingError:  # another publisher wrote first: serve theirs
        return store.load(UNI_CON).version  # type: ignore[union-attr]
    log_event(
        log,
        "published Uni-Con",
        version=version,
        phi_dim=width,
        calibration_rows=count,
        calibration_target=target,
        final=count >= target,
        source=source,
    )
    return version


def _running(existing: StoredModel | None, width: int) -> tuple[int, np.ndarray, np.ndarray]:
    if existing is None:
        return 0, np.zeros(width), np.zeros(width)
    check_width(existing, width)
    return int(existing.meta[ROWS]), existing.arrays[MEAN], existing.arrays[M2]


def _merged(
    count: int, mean: np.ndarray, m2: np.ndarray, rows: np.ndarray
) -> tuple[int, np.ndarray, np.ndarray]:
    """The running moments with `rows` added (Chan, Golub & LeVeque's pairwise update).

    >>> rows = np.array([[1.0, 2.0], [3.0, 2.0], [5.0, 2.0]])
    >>> n, mean, m2 = _merged(*_merged(0, np.zeros(2), np.zeros(2), rows[:1]), rows[1:])
    >>> n, mean.tolist(), (m2 / n).tolist() == rows.var(axis=0).tolist()
    (3, [3.0, 2.0], True)
    """
    k = rows.shape[0]
    if k == 0:
        return count, mean, m2
    batch_mean = rows.mean(axis=0)
    batch_m2 = ((rows - batch_mean) ** 2).sum(axis=0)
    total = count + k
    delta = batch_mean - mean
    return total, mean + delta * (k / total), m2 + batch_m2 + delta**2 * (count * k / total)


def _std(count: int, mean: np.ndarray, m2: np.ndarray) -> np.ndarray:
    """Per-feature std; 1 where the candidates so far do not vary (or are one).

    "Do not vary" allows for rounding: a constant feature's m2 may come out a few ulps
    above 0, which must not become a divisor of 1e-9.

    >>> _std(2, np.array([5.0, 0.0]), np.array([1e-30, 2.0])).tolist()
    [1.0, 1.0]
    """
    std = np.sqrt(np.maximum(m2, 0.0) / count)
    std[~(std > 1e-9 * np.maximum(1.0, np.abs(mean)))] = 1.0
    return std
