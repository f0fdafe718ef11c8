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

The sequential loops are compiled with numba (cache=True: the compile is paid once
per machine); the four linear rules share one loop and differ only in the step size
chosen through a dispatch table (algo -> rule), as river's `linear_model/pa.py` does.

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

from collections.abc import Mapping
from typing import Any

import numpy as np
from numba import njit

from ranking.scaling import Standardizer, linear_scores
from ranking.validation import as_float_matrix, as_float_vector, check_positive

# Kernel status codes: which check stopped the loop at `bad_row`.
_OK, _NONFINITE, _BAD_LABEL = 0, 1, 2

# Linear rule codes. The rules differ only in their step size lambda_t; numba's
# on-disk cache cannot key a kernel that takes a compiled function as an argument
# (each process would compile and store a new copy), so the dispatch table below
# maps each algo to a code that `_step_size` switches on, in this one place.
_OPR, _OPAR1, _OPAR2, _OGDR = 0, 1, 2, 3


@njit(cache=True, fastmath=False)
def _step_size(rule: int, margin: float, sqnorm: float, param: float) -> float:
    """lambda_t of w += lambda_t y x; param is C (OPAR-I/II) or eta (OGDR)."""
    if rule == _OPR:  # eq. (1): a full step on a mistake, a zero margin included
        return 1.0 if margin <= 0.0 else 0.0
    loss = 1.0 - margin
    if loss <= 0.0:
        return 0.0
    if rule == _OPAR1:  # eq. (5): min(C, l / |x|^2)
        return min(param, loss / sqnorm)
    if rule == _OPAR2:  # the lambda_t after eq. (5): l / (|x|^2 + 1/(2C))
        return loss / (sqnorm + 1.0 / (2.0 * param))
    return param  # OGDR, eq. (7): eta while the hinge loss is positive


@njit(cache=True, fastmath=False)
def _learn_linear(rule, w, X, y, param):  # pragma: no cover - compiled
    """Sequential w += lambda_t y x over the rows of X, in place.

    Returns (n_updates, bad_row, status). Finiteness and labels are checked in the
    same pass (|x|^2 is NaN/Inf exactly when a value is, or overflows), so callers
    run it on a copy of w and keep the copy only when status is _OK.
    """
    n, d = X.shape
    n_updates = 0
    for i in range(n):
        yi = y[i]
        if yi != 1.0 and yi != -1.0:
            return n_updates, i, _BAD_LABEL
        dot = 0.0
        sqnorm = 0.0
        for j in range(d):
            xj = X[i, j]
            dot += w[j] * xj
            sqnorm += xj * xj
        if not sqnorm < np.inf:
            return n_updates, i, _NONFINITE
        if sqnorm == 0.0:
            continue
        lam = _step_size(rule, yi * dot, sqnorm, param)
        if lam != 0.0:
            c = lam * yi
            for j in range(d):
                w[j] += c * X[i, j]
            n_updates += 1
    return n_updates, -1, _OK


@njit(cache=True, fastmath=False)
def _learn_arow(w, sigma, X, y, r):  # pragma: no cover - compiled
    """Sequential AROW over the rows of X, updating w and sigma in place.

    Written for speed; equal to the textbook update up to rounding. The rank-one
    update Sigma -= beta v v' is kept as u = sqrt(beta) v and applied lazily, fused
    into the next update's sweep that computes v = Sigma x (one sweep over Sigma per
    update instead of two, four rows at a time so v is loaded and stored once per four
    rows), and flushed before returning. Entries are reduced by u_j u_k, so Sigma stays
    exactly symmetric and Sigma x can be accumulated row of Sigma by row (contiguous,
    vectorisable). Returns (n_updates, bad_row, status) like `_learn_linear`; on a bad
    row the pending update is not flushed, which is fine
    because callers discard their copies then.
    """
    n, d = X.shape
    v = np.empty(d)
    u = np.zeros(d)  # pending rank-one update: the true Sigma is sigma - u u'
    n_updates = 0
    for i in range(n):
        yi = y[i]
        if yi != 1.0 and yi != -1.0:
            return n_updates, i, _BAD_LABEL
        dot = 0.0
        sqnorm = 0.0
        for j in range(d):
            xj = X[i, j]
            dot += w[j] * xj
            sqnorm += xj * xj
        if not sqnorm < np.inf:
            return n_updates, i, _NONFINITE
        loss = 1.0 - yi * dot
        if sqnorm == 0.0 or loss <= 0.0:
            continue
        for k in range(d):
            v[k] = 0.0
        j = 0
        while j + 4 <= d:  # four rows of sigma per sweep: v is loaded/stored once
            x0, x1, x2, x3 = X[i, j], X[i, j + 1], X[i, j + 2], X[i, j + 3]
            u0, u1, u2, u3 = u[j], u[j + 1], u[j + 2], u[j + 3]
            for k in range(d):
                uk = u[k]
                s0 = sigma[j, k] - u0 * uk
                s1 = sigma[j + 1, k] - u1 * uk
                s2 = sigma[j + 2, k] - u2 * uk
                s3 = sigma[j + 3, k] - u3 * uk
                sigma[j, k] = s0
                sigma[j + 1, k] = s1
                sigma[j + 2, k] = s2
                sigma[j + 3, k] = s3
                v[k] = (((v[k] + s0 * x0) + s1 * x1) + s2 * x2) + s3 * x3  # row order kept
            j += 4
        while j < d:
            xj = X[i, j]
            uj = u[j]
            for k in range(d):
                s = sigma[j, k] - uj * u[k]
                sigma[j, k] = s
                v[k] += s * xj
            j += 1
        confidence = 0.0
        for j in range(d):
            confidence += X[i, j] * v[j]
        beta = 1.0 / (confidence + r)
        c = loss * beta * yi
        root_beta = np.sqrt(beta)
        for j in range(d):
            w[j] += c * v[j]
            u[j] = root_beta * v[j]
        n_updates += 1
    for j in range(d):
        uj = u[j]
        for k in range(d):
            sigma[j, k] -= uj * u[k]
    return n_updates, -1, _OK


# algo -> (rule code for `_step_size`, name of the hyper-parameter it reads)
_LINEAR_RULES: dict[str, tuple[int, str | None]] = {
    "opr": (_OPR, None),
    "opar1": (_OPAR1, "C"),
    "opar2": (_OPAR2, "C"),
    "ogdr": (_OGDR, "eta"),
}
ALGOS: tuple[str, ...] = (*_LINEAR_RULES, "arow")


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

    Parameters: `algo` one of ALGOS; `C` (OPAR-I/II aggressiveness), `eta` (OGDR
    step), `r` (AROW regulariser); `scaler`, a fitted Standardizer the ranker learns
    and scores through; `warm_start`, initial weights (Uni-Con is all ones on
    standardized phi); `dim`, the width when it should be fixed before any data.
    """

    def __init__(
        self,
        algo: str = "opar1",
        C: float = 0.1,
        eta: float = 0.01,
        r: float = 1.0,
        scaler: Standardizer | None = None,
        warm_start: object | None = None,
        dim: int | None = None,
    ) -> None:
        if algo not in ALGOS:
            raise ValueError(f"algo must be one of {', '.join(ALGOS)}; got {algo!r}")
        self.algo = algo
        self.C = check_positive(C, "C")
        self.eta = check_positive(eta, "eta")
        self.r = check_positive(r, "r")
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
        self._sigma: np.ndarray | None = None
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
        if self.algo == "arow" and self._sigma is None:
            self._sigma = np.eye(dim)

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
        return None if self._sigma is None else self._sigma.copy()

    @property
    def params(self) -> dict[str, float]:
        return {"C": self.C, "eta": self.eta, "r": self.r}

    # --------------------------------------------------------------- learning
    def learn_many(self, X: object, y: object) -> OnlineRanker:
        """Exact sequential updates over the rows of X (n, d) with labels y (n,).

        The whole batch is validated in the compiled pass and applied to copies,
        so a batch with a bad row (NaN/Inf, label not +1/-1) raises a ValueError
        naming that row and leaves the model untouched.
        """
        X = as_float_matrix(X, "X", self._dim, check_finite=False)
        labels = np.asarray(y)
        if labels.ndim != 1 or labels.shape[0] != X.shape[0]:
            raise ValueError(f"y must have shape ({X.shape[0]},) to match X, got {labels.shape}")
        if labels.dtype == bool or not np.issubdtype(labels.dtype, np.number):
            raise ValueError(f"y must be numeric +1/-1 labels, got dtype {labels.dtype}")
        labels = np.ascontiguousarray(labels, dtype=np.float64)
        if self.scaler is not None:
            X = self.scaler.transform_differences(X, check_finite=False)
        if self._dim is None:
            self._init_state(X.shape[1])
        w = self._w.copy()
        sigma = None if self._sigma is None else self._sigma.copy()
        if sigma is None:
            rule, param_name = _LINEAR_RULES[self.algo]
            param = 0.0 if param_name is None else getattr(self, param_name)
            n_updates, bad_row, status = _learn_linear(rule, w, X, labels, param)
        else:
            n_updates, bad_row, status = _learn_arow(w, sigma, X, labels, self.r)
        if status == _BAD_LABEL:
            raise ValueError(f"y[{bad_row}] = {labels[bad_row]!r}; labels must be +1 or -1")
        if status == _NONFINITE:
            raise ValueError(f"X row {bad_row} contains NaN or Inf (or values too large)")
        if not np.isfinite(w).all() or (sigma is not None and not np.isfinite(sigma).all()):
            raise ValueError("this batch would make the weights non-finite; model unchanged")
        self._w, self._sigma = w, sigma
        self.n_updates += int(n_updates)
        self.n_seen += X.shape[0]
        return self

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
        if self._sigma is not None:
            arrays["sigma"] = self._sigma.copy()
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
        if "sigma" in arrays:
            if ranker.algo != "arow":
                raise ValueError(f"state for {ranker.algo!r} must not hold 'sigma'")
            d = ranker.dim
            sigma = as_float_matrix(arrays["sigma"], "sigma", d)
            if sigma.shape != (d, d):
                raise ValueError(f"sigma must have shape ({d}, {d}), got {sigma.shape}")
            ranker._sigma = sigma.copy()
        ranker.n_updates = int(meta["n_updates"])
        ranker.n_seen = int(meta["n_seen"])
        return ranker
