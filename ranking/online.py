"""Online pairwise rankers: OPR, OPAR-I, OPAR-II, OGDR and AROW.

Each streamed triplet (q, p1, p2) with label y in {+1, -1} arrives as the row
x = phi(q, p1) - phi(q, p2). With margin m = y w.x and hinge loss l = max(0, 1 - m),
the four rules of Gao et al., "Online Learning to Rank for Content-Based Image
Retrieval" (IJCAI 2015; /work/shared/papers/online-ltr-cbir_opr-opar-ogdr.txt) are

* OPR, eq. (1):      w += y x            when m <= 0
* OPAR-I, eqs. (4)-(5): w += min(C, l / |x|^2) y x
* OPAR-II, eq. (4) with the lambda_t that follows (5):
                     w += l / (|x|^2 + 1/(2C)) y x
* OGDR, eq. (7):     w += eta y x        when l > 0

and a row with |x|^2 = 0 (as computed in float64, so a row whose entries all lie
below ~1e-154 counts as zero) changes nothing. One reading choice: the paper's OPR
updates when m < 0; we update when m <= 0, because with w = 0 every margin is 0 and
the strict reading would never move (DESIGN.md makes the same call).

AROW is the second-order rule the paper points to (Dredze et al., 2008) in the form
of Crammer, Kulesza & Dredze, "Adaptive Regularization of Weight Vectors", NIPS 2009,
applied to pair differences with a full covariance Sigma (d x d, starting at I):
beta = 1 / (x' Sigma x + r), and when l > 0: alpha = l beta, w += alpha y Sigma x,
Sigma -= beta (Sigma x)(Sigma x)'.

Each learner is declared once in `ranking.learners` (name, label, hyper-parameters,
kernel). The sequential loops are compiled with numba (`ranking.kernels`, cache=True:
the compile is paid once per machine); the four linear rules share one loop and differ
only in the step size chosen through their spec's rule code, as river's
`linear_model/pa.py` dispatches its PA variants; AROW runs its own compiled loop, and
a learner added with `ranking.learners.register` its own kernel on the validated rows.
The compiled loops read triplets in their normalized form (an image table phi and row
indices p1, p2; `learn_many_together`) and gather x = phi[p1] - phi[p2] themselves.

Example: learn that the first feature decides the order.

>>> import numpy as np
>>> rng = np.random.default_rng(0)
>>> X = rng.standard_normal((500, 3))
>>> y = np.where(X[:, 0] > 0, 1.0, -1.0)
>>> ranker = OnlineRanker(algo="opar1", C=0.1).learn_many(X, y)
>>> int(np.argmax(np.abs(ranker.weights)))
0
>>> ranker.score(np.eye(3)).shape
(3,)
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from rankstream.ranking import learners
from rankstream.ranking.kernels import BAD_LABEL, NONFINITE, learn_linear
from rankstream.ranking.scaling import Standardizer, linear_scores
from rankstream.ranking.validation import as_float_matrix, as_float_vector

_NONFINITE_WEIGHTS = "this batch would make the weights non-finite; model unchanged"


_HYPER = learners.HYPERPARAMETERS


def _first_bad_row(X: np.ndarray, labels: np.ndarray) -> ValueError | None:
    """The error for the first row a kernel must not see (a bad label, NaN/Inf), if any."""
    bad_label = np.flatnonzero((labels != 1.0) & (labels != -1.0))
    nonfinite = np.flatnonzero(~np.isfinite(X).all(axis=1))
    first = min(bad_label[:1].tolist() + nonfinite[:1].tolist(), default=None)
    if first is None:
        return None
    status = BAD_LABEL if bad_label.size and bad_label[0] == first else NONFINITE
    return _batch_error(status, first, labels)


def _labels(y: object, n: int) -> np.ndarray:
    """y as float64 (n,); the +1/-1 check runs in the compiled pass (it names the row)."""
    labels = np.asarray(y)
    if labels.ndim != 1 or labels.shape[0] != n:
        raise ValueError(f"y must have shape ({n},) to match the rows, got {labels.shape}")
    if labels.dtype == bool or not np.issubdtype(labels.dtype, np.number):
        raise ValueError(f"y must be numeric +1/-1 labels, got dtype {labels.dtype}")
    return _readonly(np.ascontiguousarray(labels, dtype=np.float64))


def _batch_error(status: int, bad_row: int, labels: np.ndarray) -> ValueError | None:
    """The ValueError `learn_many` raises for a kernel status, or None when OK."""
    if status == BAD_LABEL:
        return ValueError(f"y[{bad_row}] = {labels[bad_row]!r}; labels must be +1 or -1")
    if status == NONFINITE:
        return ValueError(f"X row {bad_row} contains NaN or Inf (or values too large)")
    return None


def _readonly(array: np.ndarray) -> np.ndarray:
    """A read-only view: decoded blocks are read-only, and numba compiles (and caches)
    one specialisation per writability, so every input is handed over read-only."""
    if not array.flags.writeable:
        return array
    view = array.view()
    view.flags.writeable = False
    return view


def _learn_linear_models(
    rankers: Sequence[OnlineRanker],
    phi: np.ndarray,
    p1: np.ndarray | None,
    p2: np.ndarray | None,
    labels: np.ndarray,
) -> list[ValueError | None]:
    """Run `learn_linear` for linear rankers whose width is known; commit each that passed.

    Rankers sharing a scaler (equal std, e.g. fitted on the same rows) share one
    scaled x per row. Returns per ranker None or the error its `learn_many` raises.
    """
    k, d = len(rankers), phi.shape[1]
    groups: dict[bytes, int] = {}
    scales: list[np.ndarray] = []
    group = np.empty(k, dtype=np.int64)
    for m, ranker in enumerate(rankers):
        std = np.ones(d) if ranker.scaler is None else ranker.scaler.std_
        group[m] = groups.setdefault(std.tobytes(), len(groups))
        if group[m] == len(scales):
            scales.append(std)
    rules = np.array([r.spec.linear_rule for r in rankers], dtype=np.int64)
    params = np.array([getattr(r, r.spec.uses[0]) if r.spec.uses else 0.0 for r in rankers])
    W = np.array([ranker._w for ranker in rankers])
    n_updates = np.zeros(k, dtype=np.int64)
    status = np.zeros(k, dtype=np.int64)
    bad_row = np.full(k, -1, dtype=np.int64)
    unscaled = all(ranker.scaler is None for ranker in rankers)
    learn_linear(
        rules,
        params,
        W,
        None if unscaled else np.array(scales),
        group,
        phi,
        p1,
        p2,
        labels,
        n_updates,
        status,
        bad_row,
    )
    errors: list[ValueError | None] = []
    for m, ranker in enumerate(rankers):
        error = _batch_error(int(status[m]), int(bad_row[m]), labels)
        if error is None and not np.isfinite(W[m]).all():
            error = ValueError(_NONFINITE_WEIGHTS)
        if error is None:
            ranker._commit(W[m].copy(), None, int(n_updates[m]), labels.shape[0])
        errors.append(error)
    return errors


def _learn(
    rankers: Sequence[OnlineRanker],
    phi: np.ndarray,
    p1: np.ndarray | None,
    p2: np.ndarray | None,
    labels: np.ndarray,
) -> list[ValueError | None]:
    """Validated rows to rankers of known width: the linear ones in one fused pass,
    each other one through its own kernel; per ranker None or its error."""
    errors: dict[int, ValueError | None] = {}
    linear = [m for m, r in enumerate(rankers) if r.spec.linear_rule is not None]
    if linear:
        found = _learn_linear_models([rankers[m] for m in linear], phi, p1, p2, labels)
        errors.update(zip(linear, found, strict=True))
    for m, ranker in enumerate(rankers):
        if m not in errors:
            errors[m] = ranker._learn_own(phi, p1, p2, labels)
    return [errors[m] for m in range(len(rankers))]


def _as_phi(phi: object, dim: int | None) -> np.ndarray:
    """The image table (m, d) as C-ordered float32 or float64 (kept: widened in the loop)."""
    arr = np.asarray(phi)
    if arr.dtype in (np.float32, np.float64):
        if arr.ndim != 2:
            raise ValueError(f"phi must be 2-d (m, d), got {arr.ndim}-d shape {arr.shape}")
        if dim is not None and arr.shape[1] != dim:
            raise ValueError(f"phi has {arr.shape[1]} columns, expected {dim}")
        return _readonly(np.ascontiguousarray(arr))
    return _readonly(as_float_matrix(arr, "phi", dim, check_finite=False))


def _as_rows(index: object, name: str, n_images: int) -> np.ndarray:
    """Triplets' rows of the image table as int32 (n,); each must lie in 0..m-1."""
    arr = np.asarray(index)
    if arr.ndim != 1 or not np.issubdtype(arr.dtype, np.integer):
        raise ValueError(f"{name} must be 1-d integer rows of phi, got {arr.dtype} {arr.shape}")
    if arr.size:
        low, high = int(arr.min()), int(arr.max())
        if low < 0 or high >= n_images:
            bad = int(np.flatnonzero((arr < 0) | (arr >= n_images))[0])
            raise ValueError(f"{name}[{bad}] = {arr[bad]} is not a row of phi (0..{n_images - 1})")
    return _readonly(np.ascontiguousarray(arr, dtype=np.int32))


def learn_many_together(
    rankers: Sequence[OnlineRanker], phi: object, p1: object, p2: object, y: object
) -> list[ValueError | None]:
    """Every ranker learns the triplets x_i = phi[p1[i]] - phi[p2[i]] with labels y (n,).

    The normalized form of `ranking.triplets.TripletBlock`: phi (m, d) holds each image
    once (float32 from the wire, or float64), p1 and p2 (n,) index its rows. Equal, bit
    for bit, to `ranker.learn_many(np.subtract(phi[p1], phi[p2], dtype=np.float64), y)`
    for each ranker in turn, but no difference or gathered row is materialised: the
    compiled loops gather each row themselves, and the linear rankers share one pass
    (each row's x formed once per distinct scaler). AROW runs its own compiled pass;
    a learner with a Python kernel gets the gathered rows (the slow path).

    Rankers are independent: returns, per ranker, None or the ValueError its
    `learn_many` would have raised (that ranker unchanged, the others updated).
    Shapes and indices that fit no ranker raise ValueError at once.
    """
    rankers = list(rankers)
    if len({id(r) for r in rankers}) != len(rankers):
        raise ValueError("each ranker may appear only once")
    widths = {r.dim for r in rankers} - {None}
    if len(widths) > 1:
        raise ValueError(f"rankers have different widths {sorted(widths)}")
    table = _as_phi(phi, next(iter(widths), None))
    rows1, rows2 = _as_rows(p1, "p1", table.shape[0]), _as_rows(p2, "p2", table.shape[0])
    if rows1.shape != rows2.shape:
        raise ValueError(f"p1 {rows1.shape} and p2 {rows2.shape} must have the same shape")
    labels = _labels(y, rows1.shape[0])
    for ranker in rankers:
        if ranker.dim is None:
            ranker._init_state(table.shape[1])
    return _learn(rankers, table, rows1, rows2, labels)


def _dense_row(x: object, dim: int | None) -> np.ndarray:
    """A river-style feature dict {index: value} or a 1-d array as a dense (d,) row.

    Dict keys are feature positions: ints, or strings holding ints ("3"); absent keys
    are 0 (river's sparse convention). The width comes from the model once known.
    """
    if not isinstance(x, Mapping):
        return as_float_vector(x, "x", dim)
    positions: dict[int, float] = {}
    for key, value in x.items():
        is_position = isinstance(key, int | np.integer) and not isinstance(key, bool)
        if not (is_position or (isinstance(key, str) and key.strip().isdigit())):
            raise ValueError(f"feature key {key!r} is not an integer position")
        pos = int(key)
        if pos < 0 or (dim is not None and pos >= dim):
            raise ValueError(f"feature key {key!r} is outside 0..{(dim or 0) - 1}")
        positions[pos] = value
    if dim is None:
        raise ValueError("a dict row needs a known width: learn from an array first or pass dim")
    row = np.zeros(dim)
    for pos, value in positions.items():
        row[pos] = value
    return as_float_vector(row, "x", dim)


class OnlineRanker:
    """A linear ranker w learned online from pair differences; score(phi) = w.phi.

    Parameters: `algo`, a learner of `ranking.learners.LEARNERS`; its hyper-parameters
    (`ranking.learners.HYPERPARAMETERS`: `C` for OPAR-I/II, `eta` for OGDR, `r` for
    AROW; each learner reads only its own, all are validated); `scaler`, a fitted
    Standardizer the ranker learns and scores through; `warm_start`, initial weights
    (Uni-Con is all ones on standardized phi); `dim`, the width when it should be fixed
    before any data.
    """

    def __init__(
        self,
        algo: str = "opar1",
        C: float = _HYPER["C"].default,
        eta: float = _HYPER["eta"].default,
        r: float = _HYPER["r"].default,
        scaler: Standardizer | None = None,
        warm_start: object | None = None,
        dim: int | None = None,
    ) -> None:
        self.spec = learners.learner(algo)
        self.algo = algo
        self.C, self.eta, self.r = (
            _HYPER[n].check(v) for n, v in (("C", C), ("eta", eta), ("r", r))
        )
        self.scaler = scaler
        if scaler is not None and scaler.dim is None:
            raise ValueError("scaler must be fitted (on training phi) before use")
        start = None if warm_start is None else as_float_vector(warm_start, "warm_start")
        widths = {
            "dim": dim,
            "scaler": scaler.dim if scaler is not None else None,
            "warm_start": None if start is None else start.shape[0],
        }
        known = {k: v for k, v in widths.items() if v is not None}
        if len(set(known.values())) > 1:
            raise ValueError(f"inconsistent widths: {known}")
        self._dim: int | None = next(iter(known.values()), None)
        self._w: np.ndarray | None = None
        self._state: dict[str, np.ndarray] = {}  # a kernel learner's extra arrays (AROW: sigma)
        self.n_updates = 0
        self.n_seen = 0
        if start is not None:
            self._w = start.copy()
        if self._dim is not None:
            self._init_state(self._dim)

    # ------------------------------------------------------------------ state
    def _init_state(self, dim: int) -> None:
        if dim < 1:
            raise ValueError(f"width must be >= 1, got {dim}")
        self._dim = dim
        if self._w is None:
            self._w = np.zeros(dim)
        if not self._state:
            self._state = self.spec.initial_state(dim)

    @property
    def dim(self) -> int | None:
        """Feature width, fixed by dim/scaler/warm_start or the first batch."""
        return self._dim

    @property
    def weights(self) -> np.ndarray:
        """The weights w (d,), float64 (a copy); empty until the width is known."""
        return np.zeros(0) if self._w is None else self._w.copy()

    @property
    def sigma(self) -> np.ndarray | None:
        """AROW's covariance (d, d) (a copy); None for the first-order rules."""
        sigma = self._state.get("sigma")
        return None if sigma is None else sigma.copy()

    @property
    def params(self) -> dict[str, float]:
        """Every hyper-parameter's value (the learner reads those its spec `uses`)."""
        return {name: getattr(self, name) for name in _HYPER}

    # --------------------------------------------------------------- learning
    def learn_many(self, X: object, y: object) -> OnlineRanker:
        """Exact sequential updates over the rows of X (n, d) with labels y (n,).

        The whole batch is validated in the compiled pass and applied to copies,
        so a batch with a bad row (NaN/Inf, label not +1/-1) raises a ValueError
        naming that row and leaves the model untouched.
        """
        X = as_float_matrix(X, "X", self._dim, check_finite=False)
        labels = _labels(y, X.shape[0])
        if self._dim is None:
            self._init_state(X.shape[1])
        error = _learn([self], _readonly(X), None, None, labels)[0]
        if error is not None:
            raise error
        return self

    def _learn_own(
        self, phi: np.ndarray, p1: np.ndarray | None, p2: np.ndarray | None, labels: np.ndarray
    ) -> ValueError | None:
        """Learn through the spec's own kernel (not a linear rule); commit only on success."""
        w = self._w.copy()
        state = {name: array.copy() for name, array in self._state.items()}
        scale = None if self.scaler is None else self.scaler.std_
        try:
            if self.spec.triplet_kernel is not None:
                n_updates, status, bad_row = self.spec.triplet_kernel(
                    w, state, phi, p1, p2, scale, labels, self.params
                )
                error = _batch_error(int(status), int(bad_row), labels)
            else:
                X = phi if p1 is None else np.subtract(phi[p1], phi[p2], dtype=np.float64)
                error = _first_bad_row(X, labels)
                if error is None:
                    if self.scaler is not None:
                        X = self.scaler.transform_differences(X, check_finite=False)
                    n_updates = self.spec.kernel(w, state, X, labels, self.params)  # type: ignore[misc]
        except ValueError as exc:
            return exc
        if error is not None:
            return error
        finite = np.isfinite(w).all() and all(np.isfinite(a).all() for a in state.values())
        if not finite:
            return ValueError(_NONFINITE_WEIGHTS)
        self._commit(w, state, int(n_updates), labels.shape[0])
        return None

    def _commit(
        self, w: np.ndarray, state: dict[str, np.ndarray] | None, n_updates: int, n: int
    ) -> None:
        self._w = w
        if state is not None:
            self._state = state
        self.n_updates += n_updates
        self.n_seen += n

    def learn_one(self, x: object, y: float) -> OnlineRanker:
        """river-style single update: x a dict {position: value} or a 1-d array."""
        row = _dense_row(x, self._dim)
        return self.learn_many(row[None, :], np.array([y], dtype=np.float64))

    # ---------------------------------------------------------------- scoring
    def predict_one(self, x: object) -> float:
        """w.x for one pair difference (scaled like training rows): > 0 means p1 first."""
        row = _dense_row(x, self._dim)
        if self.scaler is not None:
            row = self.scaler.transform_differences(row[None, :])[0]
        return 0.0 if self._w is None else float(row @ self._w)

    def score(self, Phi: object) -> np.ndarray:
        """Scores (m,) of candidates phi (m, d); higher ranks first."""
        if self._w is None:
            return np.zeros(as_float_matrix(Phi, "Phi").shape[0])
        return linear_scores(Phi, self._w, self.scaler)

    # ---------------------------------------------------------------- storage
    def to_state(self) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
        """JSON-able meta and named float64 arrays (no pickle) for the model store."""
        meta: dict[str, Any] = {
            "kind": "online_ranker",
            "algo": self.algo,
            "params": self.params,
            "dim": self._dim,
            "n_updates": self.n_updates,
            "n_seen": self.n_seen,
            "scaler": None,
        }
        arrays: dict[str, np.ndarray] = {}
        if self._w is not None:
            arrays["weights"] = self._w.copy()
        arrays.update({name: array.copy() for name, array in self._state.items()})
        if self.scaler is not None:
            scaler_meta, scaler_arrays = self.scaler.to_state()
            meta["scaler"] = scaler_meta
            arrays.update({f"scaler.{k}": v for k, v in scaler_arrays.items()})
        return meta, arrays

    @classmethod
    def from_state(cls, meta: dict[str, Any], arrays: dict[str, np.ndarray]) -> OnlineRanker:
        """Rebuild exactly the ranker `to_state` described."""
        if meta.get("kind") != "online_ranker":
            raise ValueError(f"state kind {meta.get('kind')!r} is not 'online_ranker'")
        scaler = None
        if meta.get("scaler") is not None:
            prefix = "scaler."
            scaler = Standardizer.from_state(
                meta["scaler"],
                {k[len(prefix) :]: v for k, v in arrays.items() if k.startswith(prefix)},
            )
        ranker = cls(
            algo=meta["algo"],
            **meta["params"],
            scaler=scaler,
            warm_start=arrays.get("weights"),
            dim=meta.get("dim"),
        )
        expected = ranker.spec.initial_state(ranker.dim) if ranker.dim is not None else {}
        extra = {k for k in arrays if k != "weights" and not k.startswith("scaler.")}
        if extra - set(expected):
            raise ValueError(
                f"state for {ranker.algo!r} must not hold {sorted(extra - set(expected))}"
            )
        for name, template in expected.items():
            if name in arrays:
                array = np.asarray(arrays[name], dtype=np.float64)
                if array.shape != template.shape:
                    raise ValueError(f"{name} must have shape {template.shape}, got {array.shape}")
                if not np.isfinite(array).all():
                    raise ValueError(f"{name} contains NaN or Inf")
                ranker._state[name] = array.copy()
        ranker.n_updates = int(meta["n_updates"])
        ranker.n_seen = int(meta["n_seen"])
        return ranker
