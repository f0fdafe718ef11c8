"""The compiled sequential loops of the online learners (numba, cache=True).

`learn_linear` runs the four linear rules of Gao et al. (IJCAI 2015; see
`ranking.online` for the rules and `ranking.learners` for which learner uses which
step-size code) for several models in one pass; `learn_arow` is AROW's second-order
update. Both work on copies the caller commits only when the whole batch passed, and
report the first bad row through a status code (`OK`, `NONFINITE`, `BAD_LABEL`).

The compile is paid once per machine (numba's on-disk cache); `bench learners` times
the first call apart from the passes it measures.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from rankstream.ranking.rules import OGDR_RULE, OPAR1_RULE, OPAR2_RULE, OPR_RULE

# Kernel status codes: which check stopped the loop at `bad_row`.
OK, NONFINITE, BAD_LABEL = 0, 1, 2
_OK, _NONFINITE, _BAD_LABEL = OK, NONFINITE, BAD_LABEL

# Linear rule codes. The rules differ only in their step size lambda_t; numba's
# on-disk cache cannot key a kernel that takes a compiled function as an argument
# (each process would compile and store a new copy), so each linear learner's spec
# (`ranking.learners`) names a code that `_step_size` switches on, in this one place.
_OPR, _OPAR1, _OPAR2, _OGDR = OPR_RULE, OPAR1_RULE, OPAR2_RULE, OGDR_RULE


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
def learn_linear(
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
def learn_arow(w, sigma_out, X, y, r):  # pragma: no cover - compiled
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
