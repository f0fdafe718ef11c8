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

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
from numba import njit

from rankstream.ranking.scaling import Standardizer, linear_scores
from rankstream.ranking.validation import as_float_matrix, as_float_vector, check_positive

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


@njit(cache=True, fastmath=False, nogil=True)
def _learn_linear(
    rules, params, W, scales, group, order, starts, A, B, y, n_updates, status, bad_row
):  # pragma: no cover - compiled
    """Sequential w_m += lambda_t y x_m for several linear models m at once, in place.

    Row i of the data is x = A[i] - B[i] (each entry widened to float64 first, exactly
    as `np.subtract(A, B, dtype=np.float64)`), or A[i] when B is None; model m learns
    x / scales[group[m]] (its scaler's std: a division, like `transform_differences`),
    or x itself when scales is None (no model has a scaler: one group).
    Each distinct scaler's x is computed once per row into a small buffer, and the
    margins of four models at a time (order[starts[g]:starts[g+1]] lists group g's
    models; the rest one by one) are accumulated in one sweep over the features as
    independent chains, |x|^2 riding along with the first, so four models cost about
    what one does (each sum runs in j order, so it is bound by the adder's latency, and
    four chains fill the gap). Per model the arithmetic and its order are those of one
    model alone (no fast-math), so the weights are bit-identical to separate calls.
    W holds copies; n_updates, status and bad_row (k,) are outputs:
    a model stops at its first bad row (label not +1/-1 stops all; a non-finite
    |x|^2 stops the models of that scaler) and callers keep only models left _OK.
    """
    n, d = A.shape
    k = group.shape[0]
    n_groups = 1 if scales is None else scales.shape[0]
    xs = np.empty((n_groups, d))
    sqnorms = np.empty(n_groups)
    dots = np.empty(k)
    for i in range(n):
        yi = y[i]
        if yi != 1.0 and yi != -1.0:
            for m in range(k):
                if status[m] == _OK:
                    status[m], bad_row[m] = _BAD_LABEL, i
            return
        if scales is None:  # no scaler: x itself (vectorised, like the rest of this step)
            for j in range(d):
                xs[0, j] = (
                    np.float64(A[i, j])
                    if B is None
                    else (np.float64(A[i, j]) - np.float64(B[i, j]))
                )
        else:
            for g in range(n_groups):
                if B is None:
                    for j in range(d):
                        xs[g, j] = np.float64(A[i, j]) / scales[g, j]
                else:
                    for j in range(d):
                        xs[g, j] = (np.float64(A[i, j]) - np.float64(B[i, j])) / scales[g, j]
        for g in range(n_groups):  # |x|^2 rides along with the first sweep of margins
            b, end = starts[g], starts[g + 1]
            sq = 0.0
            while b + 4 <= end:  # four models per sweep
                m0, m1, m2, m3 = order[b], order[b + 1], order[b + 2], order[b + 3]
                d0 = d1 = d2 = d3 = 0.0
                if b == starts[g]:
                    for j in range(d):
                        xj = xs[g, j]
                        sq += xj * xj
                        d0 += W[m0, j] * xj
                        d1 += W[m1, j] * xj
                        d2 += W[m2, j] * xj
                        d3 += W[m3, j] * xj
                else:
                    for j in range(d):
                        xj = xs[g, j]
                        d0 += W[m0, j] * xj
                        d1 += W[m1, j] * xj
                        d2 += W[m2, j] * xj
                        d3 += W[m3, j] * xj
                dots[m0], dots[m1], dots[m2], dots[m3] = d0, d1, d2, d3
                b += 4
            while b < end:  # the rest one by one
                m0 = order[b]
                d0 = 0.0
                if b == starts[g]:
                    for j in range(d):
                        xj = xs[g, j]
                        sq += xj * xj
                        d0 += W[m0, j] * xj
                else:
                    for j in range(d):
                        d0 += W[m0, j] * xs[g, j]
                dots[m0] = d0
                b += 1
            sqnorms[g] = sq
        for m in range(k):
            if status[m] != _OK:
                continue
            g = group[m]
            sqnorm = sqnorms[g]
            if not sqnorm < np.inf:
                status[m], bad_row[m] = _NONFINITE, i
                continue
            if sqnorm == 0.0:
                continue
            yi = y[i]
            lam = _step_size(rules[m], yi * dots[m], sqnorm, params[m])
            if lam != 0.0:
                c = lam * yi
                for j in range(d):
                    W[m, j] += c * xs[g, j]
                n_updates[m] += 1


# Sigma's rows are padded to a multiple of this many columns inside the AROW kernel,
# so the compiled sweep over a row has no scalar remainder: with d = 36 and 8-wide
# (AVX-512) or 4-wide (AVX2) vectors, the 4-entry tail otherwise ran scalar and cost
# ~20% of the pass (profiled: `rankstream bench learners`, 4.6 -> 5.6 M rows/s).
_AROW_PAD = 8


@njit(cache=True)
def _zeros_aligned(n):  # pragma: no cover - compiled
    """n float64 zeros starting on a 64-byte (cache line, AVX-512 vector) boundary.

    numba's allocator aligns to 16 bytes only; with rows of Sigma padded to 8 doubles,
    an aligned start keeps every vector load inside one cache line (measured: 4.7-5.5
    M rows/s from process to process without it, 5.7-5.9 with it).
    """
    buf = np.zeros(n + 7)
    start = (-buf.ctypes.data % 64) // 8
    return buf[start : start + n]


@njit(cache=True, fastmath=False)
def _learn_arow(w, sigma_out, X, y, r):  # pragma: no cover - compiled
    """Sequential AROW over the rows of X, updating w and sigma_out in place.

    Written for speed; equal to the textbook update up to rounding, in a fixed order,
    so runs are bit-for-bit repeatable. Three layout choices:

    * The rank-one update Sigma -= beta v v' is kept as u = sqrt(beta) v and applied
      lazily, fused into the next update's sweep that computes v = Sigma x (one sweep
      over Sigma per update instead of two, four rows at a time so v is loaded and
      stored once per four rows), and flushed before returning. Entries are reduced
      by u_j u_k, so Sigma stays exactly symmetric and Sigma x can be accumulated row
      of Sigma by row (contiguous, vectorisable).
    * Sigma is worked on in a cache-line-aligned scratch copy whose rows are padded
      with zero columns to a multiple of `_AROW_PAD` (u and v padded alike; the pads
      stay exactly 0), so the sweep vectorises without a scalar tail.
    * w.x, |x|^2 and x'Sigma x are summed in four interleaved partial sums, which
      breaks their serial add chains.

    Returns (n_updates, bad_row, status) like `_learn_linear`; on a bad row sigma_out
    is left as it was and w is partly updated, which is fine because callers pass
    copies and discard them then.
    """
    n, d = X.shape
    dp = (d + _AROW_PAD - 1) // _AROW_PAD * _AROW_PAD
    d4 = d - d % 4
    scratch = _zeros_aligned((d + 2) * dp)
    sigma = scratch[: d * dp].reshape((d, dp))
    sigma[:, :d] = sigma_out
    v = scratch[d * dp : (d + 1) * dp]
    u = scratch[(d + 1) * dp :]  # pending rank-one update: the true Sigma is sigma - u u'
    n_updates = 0
    for i in range(n):
        yi = y[i]
        if yi != 1.0 and yi != -1.0:
            return n_updates, i, _BAD_LABEL
        a0 = a1 = a2 = a3 = 0.0  # partial sums of w.x
        q0 = q1 = q2 = q3 = 0.0  # partial sums of |x|^2
        for j in range(0, d4, 4):
            x0, x1, x2, x3 = X[i, j], X[i, j + 1], X[i, j + 2], X[i, j + 3]
            a0 += w[j] * x0
            a1 += w[j + 1] * x1
            a2 += w[j + 2] * x2
            a3 += w[j + 3] * x3
            q0 += x0 * x0
            q1 += x1 * x1
            q2 += x2 * x2
            q3 += x3 * x3
        for j in range(d4, d):
            xj = X[i, j]
            a0 += w[j] * xj
            q0 += xj * xj
        dot = (a0 + a1) + (a2 + a3)
        sqnorm = (q0 + q1) + (q2 + q3)
        if not sqnorm < np.inf:
            return n_updates, i, _NONFINITE
        loss = 1.0 - yi * dot
        if sqnorm == 0.0 or loss <= 0.0:
            continue
        for k in range(dp):
            v[k] = 0.0
        j = 0
        while j + 4 <= d:  # four rows of sigma per sweep: v is loaded/stored once
            x0, x1, x2, x3 = X[i, j], X[i, j + 1], X[i, j + 2], X[i, j + 3]
            u0, u1, u2, u3 = u[j], u[j + 1], u[j + 2], u[j + 3]
            for k in range(dp):
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
            for k in range(dp):
                s = sigma[j, k] - uj * u[k]
                sigma[j, k] = s
                v[k] += s * xj
            j += 1
        c0 = c1 = c2 = c3 = 0.0  # partial sums of x'Sigma x
        for j in range(0, d4, 4):
            c0 += X[i, j] * v[j]
            c1 += X[i, j + 1] * v[j + 1]
            c2 += X[i, j + 2] * v[j + 2]
            c3 += X[i, j + 3] * v[j + 3]
        for j in range(d4, d):
            c0 += X[i, j] * v[j]
        beta = 1.0 / (((c0 + c1) + (c2 + c3)) + r)
        c = loss * beta * yi
        root_beta = np.sqrt(beta)
        for j in range(d):
            w[j] += c * v[j]
        for j in range(dp):
            u[j] = root_beta * v[j]
        n_updates += 1
    for j in range(d):
        uj = u[j]
        for k in range(d):
            sigma_out[j, k] = sigma[j, k] - uj * u[k]
    return n_updates, -1, _OK


# algo -> (rule code for `_step_size`, name of the hyper-parameter it reads)
_LINEAR_RULES: dict[str, tuple[int, str | None]] = {
    "opr": (_OPR, None),
    "opar1": (_OPAR1, "C"),
    "opar2": (_OPAR2, "C"),
    "ogdr": (_OGDR, "eta"),
}
ALGOS: tuple[str, ...] = (*_LINEAR_RULES, "arow")


_NONFINITE_WEIGHTS = "this batch would make the weights non-finite; model unchanged"


def _labels(y: object, n: int) -> np.ndarray:
    """y as float64 (n,); the +1/-1 check runs in the compiled pass (it names the row)."""
    labels = np.asarray(y)
    if labels.ndim != 1 or labels.shape[0] != n:
        raise ValueError(f"y must have shape ({n},) to match X, got {labels.shape}")
    if labels.dtype == bool or not np.issubdtype(labels.dtype, np.number):
        raise ValueError(f"y must be numeric +1/-1 labels, got dtype {labels.dtype}")
    return np.ascontiguousarray(labels, dtype=np.float64)


def _batch_error(status: int, bad_row: int, labels: np.ndarray) -> ValueError | None:
    """The ValueError `learn_many` raises for a kernel status, or None when _OK."""
    if status == _BAD_LABEL:
        return ValueError(f"y[{bad_row}] = {labels[bad_row]!r}; labels must be +1 or -1")
    if status == _NONFINITE:
        return ValueError(f"X row {bad_row} contains NaN or Inf (or values too large)")
    return None


def _learn_linear_models(
    rankers: Sequence[OnlineRanker], A: np.ndarray, B: np.ndarray | None, labels: np.ndarray
) -> list[ValueError | None]:
    """Run `_learn_linear` for linear rankers whose width is known; commit each that passed.

    Rankers sharing a scaler (equal std, e.g. fitted on the same rows) share one
    scaled x per row. Returns per ranker None or the error its `learn_many` raises.
    """
    k, d = len(rankers), A.shape[1]
    groups: dict[bytes, int] = {}
    scales: list[np.ndarray] = []
    group = np.empty(k, dtype=np.int64)
    for m, ranker in enumerate(rankers):
        std = np.ones(d) if ranker.scaler is None else ranker.scaler.std_
        key = std.tobytes()
        if key not in groups:
            groups[key] = len(scales)
            scales.append(std)
        group[m] = groups[key]
    rules = np.empty(k, dtype=np.int64)
    params = np.empty(k)
    for m, ranker in enumerate(rankers):
        rule, param_name = _LINEAR_RULES[ranker.algo]
        rules[m] = rule
        params[m] = 0.0 if param_name is None else getattr(ranker, param_name)
    order_list: list[int] = []
    starts = np.zeros(len(scales) + 1, dtype=np.int64)
    for g in range(len(scales)):
        order_list += [m for m in range(k) if group[m] == g]
        starts[g + 1] = len(order_list)
    W = np.array([ranker._w for ranker in rankers])
    n_updates = np.zeros(k, dtype=np.int64)
    status = np.zeros(k, dtype=np.int64)
    bad_row = np.full(k, -1, dtype=np.int64)
    unscaled = all(ranker.scaler is None for ranker in rankers)
    _learn_linear(
        rules,
        params,
        W,
        None if unscaled else np.array(scales),
        group,
        np.array(order_list, dtype=np.int64),
        starts,
        A,
        B,
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
            ranker._commit(W[m].copy(), None, int(n_updates[m]), A.shape[0])
        errors.append(error)
    return errors


def _as_phi(phi: object, name: str, dim: int | None) -> np.ndarray:
    """phi (n, d) as C-ordered float32 or float64 (kept: widened inside the kernel)."""
    arr = np.asarray(phi)
    if arr.dtype in (np.float32, np.float64):
        if arr.ndim != 2:
            raise ValueError(f"{name} must be 2-d (n, d), got {arr.ndim}-d shape {arr.shape}")
        if dim is not None and arr.shape[1] != dim:
            raise ValueError(f"{name} has {arr.shape[1]} columns, expected {dim}")
        return np.ascontiguousarray(arr)
    return as_float_matrix(arr, name, dim, check_finite=False)


def learn_many_together(
    rankers: Sequence[OnlineRanker], phi1: object, phi2: object, y: object
) -> list[ValueError | None]:
    """Every ranker learns the rows x = phi1 - phi2 (n, d) with labels y (n,).

    Equal, bit for bit, to `ranker.learn_many(np.subtract(phi1, phi2, dtype=np.float64),
    y)` for each ranker in turn, but the linear rankers share one compiled pass: each
    row's x is formed once (in float64, from float32 or float64 phi, no (n, d)
    temporaries) and scaled once per distinct scaler. AROW rankers learn on their own.

    Rankers are independent: returns, per ranker, None or the ValueError its
    `learn_many` would have raised (that ranker unchanged, the others updated).
    Shapes that fit no ranker raise ValueError at once.
    """
    rankers = list(rankers)
    if len({id(r) for r in rankers}) != len(rankers):
        raise ValueError("each ranker may appear only once")
    widths = {r.dim for r in rankers} - {None}
    if len(widths) > 1:
        raise ValueError(f"rankers have different widths {sorted(widths)}")
    dim = next(iter(widths), None)
    A, B = _as_phi(phi1, "phi1", dim), _as_phi(phi2, "phi2", dim)
    if A.shape != B.shape:
        raise ValueError(f"phi1 {A.shape} and phi2 {B.shape} must have the same shape")
    if A.dtype != B.dtype:
        A, B = A.astype(np.float64), B.astype(np.float64)
    labels = _labels(y, A.shape[0])
    for ranker in rankers:
        if ranker.dim is None:
            ranker._init_state(A.shape[1])
    errors: dict[int, ValueError | None] = {}
    linear = [m for m, r in enumerate(rankers) if r.algo != "arow"]
    if linear:
        found = _learn_linear_models([rankers[m] for m in linear], A, B, labels)
        errors.update(zip(linear, found, strict=True))
    for m, ranker in enumerate(rankers):
        if m not in errors:
            try:
                ranker.learn_many(np.subtract(A, B, dtype=np.float64), labels)
                errors[m] = None
            except ValueError as exc:
                errors[m] = exc
    return [errors[m] for m in range(len(rankers))]


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
        labels = _labels(y, X.shape[0])
        if self._dim is None:
            self._init_state(X.shape[1])
        if self.algo != "arow":
            error = _learn_linear_models([self], X, None, labels)[0]
            if error is not None:
                raise error
            return self
        if self.scaler is not None:
            X = self.scaler.transform_differences(X, check_finite=False)
        w, sigma = self._w.copy(), self._sigma.copy()
        n_updates, bad_row, status = _learn_arow(w, sigma, X, labels, self.r)
        error = _batch_error(status, bad_row, labels)
        if error is None and not (np.isfinite(w).all() and np.isfinite(sigma).all()):
            error = ValueError(_NONFINITE_WEIGHTS)
        if error is not None:
            raise error
        self._commit(w, sigma, int(n_updates), X.shape[0])
        return self

    def _commit(self, w: np.ndarray, sigma: np.ndarray | None, n_updates: int, n: int) -> None:
        self._w, self._sigma = w, sigma
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
