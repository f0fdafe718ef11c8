"""The compiled sequential loops of the online learners (numba, cache=True).

`learn_linear` runs the four linear rules of Gao et al. (IJCAI 2015; see
`ranking.online` for the rules and `ranking.learners` for which learner uses which
step-size code) for several models in one pass; `learn_arow` is AROW's second-order
update. Both work on copies the caller commits only when the whole batch passed, and
report the first bad row through a status code (`OK`, `NONFINITE`, `BAD_LABEL`).

Both read the triplets' normalized form directly: row i is
x = (phi[p1[i]] - phi[p2[i]]) / scale, gathered inside the loop into a small buffer
(no (n, d) differences or gathered copies), or x = phi[i] / scale when p1 and p2 are
None (a matrix of ready differences, `OnlineRanker.learn_many`); scale None means 1.

Precision: phi is stored as it comes, float32 from the wire (or float64); each entry is
widened to float64 before the subtraction, so x is exactly
`np.subtract(phi1, phi2, dtype=np.float64)` (then divided by the scaler's std in
float64, exactly as `Standardizer.transform_differences`). Everything after that is
float64: x, the weights, AROW's covariance, every dot product and its accumulators.

Summation order, fixed so every run is bit-identical (no fast-math) while the dot
products still vectorise: every float64 row the kernels keep (x, the weights, AROW's
covariance) is padded with zeros to a multiple of `LANES` = 8 (adding a padded 0
changes no sum), and every dot product is `ranking.lanes.dot_rows`: sixteen partial
sums in two vector accumulators, added in an order fixed by the code, not by the
compiler or the machine (see `ranking.lanes`). The kernels' buffers start on a 64-byte
boundary, so each padded row is whole cache lines.

The loops never divide by zero (|x|^2 > 0 where it divides, C > 0), so they compile
with `error_model="numpy"`: no Python zero-division checks in the hot loop. The
compile is paid once per machine (numba's on-disk cache); `bench learners` times the
first call apart from the passes it measures.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from rankstream.ranking.lanes import LANES, add_scaled_row, dot_rows, gather_row
from rankstream.ranking.rules import (
    BAD_LABEL,
    NONFINITE,
    OGDR_RULE,
    OK,
    OPAR1_RULE,
    OPAR2_RULE,
    OPR_RULE,
)

_OK, _NONFINITE, _BAD_LABEL = OK, NONFINITE, BAD_LABEL

# Linear rule codes. The rules differ only in their step size lambda_t; numba's
# on-disk cache cannot key a kernel that takes a compiled function as an argument
# (each process would compile and store a new copy), so each linear learner's spec
# (`ranking.learners`) names a code that `_step_size` switches on, in this one place.
_OPR, _OPAR1, _OPAR2, _OGDR = OPR_RULE, OPAR1_RULE, OPAR2_RULE, OGDR_RULE


@njit(inline="always", fastmath=False, error_model="numpy")
def _step_size(rule: int, margin: float, sqnorm: float, param: float, weight: float) -> float:
    """lambda_t of w += lambda_t y x; param is C (OPAR-I/II) or eta (OGDR).

    `weight` s > 0 is the row's importance weight, in each rule's importance-weighted
    form (`ranking.online` says which); s = 1 multiplies by 1.0, exactly the unweighted
    rule, and an unweighted pass passes the constant 1.0."""
    if rule == _OPR:  # eq. (1): a full step on a mistake, a zero margin included; param is
        return weight * param if margin <= 0.0 else 0.0  # 1.0 on judged rows (bit for bit)
    loss = 1.0 - margin
    if loss <= 0.0:
        return 0.0
    if rule == _OPAR1:  # eq. (5): min(C, l / |x|^2), C weighted
        return min(weight * param, loss / sqnorm)
    if rule == _OPAR2:  # the lambda_t after eq. (5): l / (|x|^2 + 1/(2C)), C weighted
        return loss / (sqnorm + 1.0 / (2.0 * (weight * param)))
    return weight * param  # OGDR, eq. (7): eta while the hinge loss is positive, weighted


@njit(cache=True)
def _zeros_aligned(n):  # pragma: no cover - compiled
    """n float64 zeros starting on a 64-byte (cache line, AVX-512 vector) boundary.

    numba's allocator aligns to 16 bytes only; with rows padded to 8 doubles, an
    aligned start keeps every vector load inside one cache line (AROW measured 4.7-5.5
    M rows/s from process to process without it, 5.7-5.9 with it).
    """
    buf = np.zeros(n + 7)
    start = (-buf.ctypes.data % 64) // 8
    return buf[start : start + n]


@njit(cache=True, fastmath=False, nogil=True, error_model="numpy")
def learn_linear(
    rules,
    params,
    W,
    scales,
    group,
    phi,
    p1,
    p2,
    y,
    weights,
    shrink,
    anchors,
    n_updates,
    status,
    bad_row,
):  # pragma: no cover - compiled
    """Sequential w_m += lambda_t y x_m for several linear models m at once, in place.

    W (k, d) holds copies of the weights; the loop works on them padded with zero
    columns to a multiple of `LANES` (the pads stay 0: they only ever gain lambda_t y
    times a padded 0 of x) and writes them back at the end. Model m learns
    x / scales[group[m]] (its scaler's std), or x itself when scales is None (no model
    has a scaler: one group). Each distinct scaler's x is gathered once per row, |x|^2
    and the margin of that scaler's first model summed in the same pass; every other
    model's margin and every update then work on it. Per
    model the arithmetic and its order are those of one model alone, so the weights
    are bit-identical to separate calls.

    weights (n,) are the rows' importance weights (finite, >= 0, checked by the caller;
    a row of weight 0 is skipped), or None: every row weight 1, the constant 1.0 in
    `_step_size` (no load, and bit-identical to weights of 1).

    shrink (k,) and anchors (k, d): the regularized reading of click rows
    (`ranking.online`, "Click triplets"). After model m's step on a row of weight s,
    when shrink[m] > 0, w_m <- a_m + (1 - rho)(w_m - a_m) with a_m = anchors[m] and
    rho = min(1, s |x|^2 shrink[m]); shrink[m] = 0 (judged rows) leaves the rule as it was,
    bit for bit.

    n_updates, status and bad_row (k,) are outputs: a label not +1/-1 stops every
    model at that row, a non-finite |x|^2 the models of that scaler, and callers keep
    only models left OK.
    """
    n = y.shape[0]
    k, d = W.shape
    dp = (d + LANES - 1) // LANES * LANES
    n_groups = 1 if scales is None else scales.shape[0]
    buf = _zeros_aligned((2 * k + n_groups) * dp)
    Wp = buf[: k * dp].reshape((k, dp))  # the weights, padded: the pads stay 0
    Wp[:, :d] = W
    Ap = buf[k * dp : 2 * k * dp].reshape((k, dp))  # the anchors, padded with 0
    Ap[:, :d] = anchors
    xs = buf[2 * k * dp :].reshape((n_groups, dp))  # x of each scaler, padded with 0
    sqnorms = np.empty(n_groups)
    lead = np.full(n_groups, -1)  # each scaler's first model: its margin comes with x
    lead_dots = np.empty(n_groups)
    for m in range(k):
        if lead[group[m]] < 0:
            lead[group[m]] = m
    for i in range(n):
        yi = y[i]
        if yi != 1.0 and yi != -1.0:
            for m in range(k):
                if status[m] == _OK:
                    status[m], bad_row[m] = _BAD_LABEL, i
            break
        if weights is None:
            si = 1.0
        else:
            si = weights[i]
            if si == 0.0:
                continue
        for g in range(n_groups):
            if p1 is None:
                sqnorms[g], lead_dots[g] = gather_row(xs, g, phi, i, None, scales, g, Wp, lead[g])
            else:
                sqnorms[g], lead_dots[g] = gather_row(
                    xs, g, phi, p1[i], p2[i], scales, g, Wp, lead[g]
                )
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
            dot = lead_dots[g] if m == lead[g] else dot_rows(Wp, m, xs, g)
            lam = _step_size(rules[m], yi * dot, sqnorm, params[m], si)
            if lam != 0.0:
                add_scaled_row(Wp, m, lam * yi, xs, g)
                n_updates[m] += 1
            if shrink[m] > 0.0:  # towards the anchor: w = a + (1 - rho)(w - a)
                rho = min(1.0, si * sqnorm * shrink[m])
                for j in range(dp):
                    Wp[m, j] = Ap[m, j] + (1.0 - rho) * (Wp[m, j] - Ap[m, j])
    W[:, :] = Wp[:, :d]


@njit(cache=True, fastmath=False, nogil=True, error_model="numpy")
def learn_arow(w, sigma_out, phi, p1, p2, scales, y, weights, r):  # pragma: no cover - compiled
    """Sequential AROW over the rows (see the module docstring), w and sigma_out in place.

    scales is None or (1, d): the model's scaler's std. weights (n,) are the rows'
    importance weights s (finite, >= 0; 0 skips the row) or None (all 1): a row of
    weight s is learned with r / s in place of r (`ranking.online` says why).

    Written for speed; equal to the textbook update up to rounding, in a fixed order,
    so runs are bit-for-bit repeatable. Three layout choices:

    * The rank-one update Sigma -= beta v v' is kept as u = sqrt(beta) v and applied
      lazily, fused into the next update's sweep that computes v = Sigma x (one sweep
      over Sigma per update instead of two, four rows at a time so v is loaded and
      stored once per four rows), and flushed before returning. Entries are reduced
      by u_j u_k, so Sigma stays exactly symmetric and Sigma x can be accumulated row
      of Sigma by row (contiguous, vectorisable).
    * Sigma, w, x, u and v are worked on in a cache-line-aligned scratch buffer whose
      rows are padded with zero columns to a multiple of `LANES` (the pads stay exactly
      0), so every sweep vectorises without a scalar tail.
    * w.x, |x|^2 and x'Sigma x are `dot_rows`: eight lanes of partial sums, fixed order.

    Returns (n_updates, status, bad_row) with `learn_linear`'s status codes; on a bad
    row w and sigma_out are left as they were.
    """
    n = y.shape[0]
    d = sigma_out.shape[0]
    dp = (d + LANES - 1) // LANES * LANES
    S = _zeros_aligned((d + 4) * dp).reshape((d + 4, dp))  # rows: Sigma, then x, w, v, u
    S[:d, :d] = sigma_out
    X_, W_, V_, U_ = d, d + 1, d + 2, d + 3  # u: the pending update, Sigma = S[:d] - u u'
    S[W_, :d] = w
    n_updates = 0
    for i in range(n):
        yi = y[i]
        if yi != 1.0 and yi != -1.0:
            return n_updates, _BAD_LABEL, i
        if weights is None:
            ri = r
        else:
            if weights[i] == 0.0:
                continue
            ri = r / weights[i]
        if p1 is None:
            sqnorm, dot = gather_row(S, X_, phi, i, None, scales, 0, S, W_)
        else:
            sqnorm, dot = gather_row(S, X_, phi, p1[i], p2[i], scales, 0, S, W_)
        if not sqnorm < np.inf:
            return n_updates, _NONFINITE, i
        loss = 1.0 - yi * dot
        if sqnorm == 0.0 or loss <= 0.0:
            continue
        for k in range(dp):
            S[V_, k] = 0.0
        j = 0
        while j + 4 <= d:  # four rows of sigma per sweep: v is loaded/stored once
            x0, x1, x2, x3 = S[X_, j], S[X_, j + 1], S[X_, j + 2], S[X_, j + 3]
            u0, u1, u2, u3 = S[U_, j], S[U_, j + 1], S[U_, j + 2], S[U_, j + 3]
            for k in range(dp):
                uk = S[U_, k]
                s0 = S[j, k] - u0 * uk
                s1 = S[j + 1, k] - u1 * uk
                s2 = S[j + 2, k] - u2 * uk
                s3 = S[j + 3, k] - u3 * uk
                S[j, k] = s0
                S[j + 1, k] = s1
                S[j + 2, k] = s2
                S[j + 3, k] = s3
                S[V_, k] = (((S[V_, k] + s0 * x0) + s1 * x1) + s2 * x2) + s3 * x3  # row order
            j += 4
        while j < d:
            xj = S[X_, j]
            uj = S[U_, j]
            for k in range(dp):
                s = S[j, k] - uj * S[U_, k]
                S[j, k] = s
                S[V_, k] += s * xj
            j += 1
        beta = 1.0 / (dot_rows(S, X_, S, V_) + ri)
        c = loss * beta * yi
        root_beta = np.sqrt(beta)
        for k in range(dp):
            S[W_, k] += c * S[V_, k]
        for k in range(dp):
            S[U_, k] = root_beta * S[V_, k]
        n_updates += 1
    for j in range(d):
        uj = S[U_, j]
        for k in range(d):
            sigma_out[j, k] = S[j, k] - uj * S[U_, k]
    w[:] = S[W_, :d]
    return n_updates, _OK, -1


@njit(inline="always", fastmath=False, error_model="numpy")
def _log1p_exp(x: float) -> float:
    """log(1 + e^x) without overflow (numpy's logaddexp(0, x))."""
    return max(x, 0.0) + np.log1p(np.exp(-abs(x)))


@njit(cache=True, fastmath=False, nogil=True, error_model="numpy")
def pdgd_document_weights(f, ranking, clicks, documents, coefficients):  # pragma: no cover
    """PDGD's gradient coefficients (`ranking.pdgd`'s docstring, eqs. 8-13 of the paper)
    for one impression, written into `documents`/`coefficients` (room for 2 per pair):
    per pair of a clicked position k and an unclicked one l above the last click or right
    below it, +w at ranking[k] and -w at ranking[l], w = rho * sigma(d) sigma(-d) with d
    the score difference. Returns how many entries it wrote.

    D_t, the mass of the documents not placed above position t, is summed from the bottom
    up (unshown candidates first), each exp f shifted by the top score of all candidates;
    a mass that underflowed is floored at the smallest positive float, out of log(0)."""
    k = ranking.shape[0]
    last = -1
    for t in range(k):
        if clicks[t]:
            last = t
    if last < 0:
        return 0
    tiny = np.finfo(np.float64).tiny
    top = f.max()
    total = 0.0
    for i in range(f.shape[0]):
        total += np.exp(f[i] - top)
    placed = np.empty(k)
    shown = 0.0
    for t in range(k):
        placed[t] = np.exp(f[ranking[t]] - top)
        shown += placed[t]
    remaining = np.empty(k)
    mass = max(total - shown, 0.0)
    for t in range(k - 1, -1, -1):
        mass += placed[t]
        remaining[t] = max(mass, tiny)
    below = min(last + 1, k - 1)  # the lowest unclicked position a pair may take
    n = 0
    for p in range(k):
        if not clicks[p]:
            continue
        for q in range(below + 1):
            if clicks[q]:
                continue
            high, low = min(p, q), max(p, q)
            # log P(R) / P(R*): the ranks between the two see the swapped masses
            log_ratio = 0.0
            for t in range(high + 1, low + 1):
                swapped = max(max(remaining[t] - placed[low], 0.0) + placed[high], tiny)
                log_ratio += np.log(swapped) - np.log(remaining[t])
            rho = np.exp(-_log1p_exp(log_ratio))  # P(R*) / (P(R) + P(R*))
            delta = abs(f[ranking[p]] - f[ranking[q]])
            weight = rho * np.exp(-delta - 2.0 * _log1p_exp(-delta))
            documents[n], coefficients[n] = ranking[p], weight
            documents[n + 1], coefficients[n + 1] = ranking[q], -weight
            n += 2
    return n
