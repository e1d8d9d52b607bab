"""Compiled (numba) fundamental-matrix RANSAC: the algorithm of :mod:`vilib_ros.frontend.ransac`
(its NumPy reference: :mod:`vilib_ros.frontend.reference.ransac`), written operation for
operation as ``kernels/ransac.cu`` (float64, no fast-math, no contraction: the kernels are
compiled with ``-fmad=false``), so that CPU and GPU choose the same hypothesis and give the same
mask on the same input.

Loop mapping: the hypotheses in order, one at a time (the adaptive rule stops early); per
hypothesis its 8-point model (elimination with full pivoting), then the inlier count over the
candidates; then the LO refits, each sum as LANES lane partials and a butterfly (as the warp of
the select kernel adds them).
"""
from __future__ import annotations

import math

import numba
import numpy as np

from vilib_ros.frontend.ransac import (HYPOTHESES, INVERSE_ITERATIONS, LANES, LO_ITERATIONS, MIN_INLIERS, SAMPLE, SQRT2,
                                       TABLE, update_hypotheses)

_update = numba.njit(cache=True, nogil=True, error_model="numpy")(update_hypotheses)


@numba.njit(cache=True, nogil=True, error_model="numpy")
def _sample(table, h, n, idx) -> None:
    """Row ``h`` of the sample table onto ``n`` candidates (ransac.sample_indices)."""
    for j in range(SAMPLE):
        v = np.int64(table[h, j]) % n
        again = True
        while again:
            again = False
            for i in range(j):
                if idx[i] == v:
                    v = (v + 1) % n
                    again = True
                    break
        idx[j] = v


@numba.njit(cache=True, nogil=True, error_model="numpy", inline="always")
def _similarity(cx, cy, d):
    """Hartley's normalisation p' = s p + t of points with centroid (cx, cy), mean distance d."""
    s = SQRT2 / d
    return s, -s * cx, -s * cy


@numba.njit(cache=True, nogil=True, error_model="numpy")
def _denormalise(f, s1, tx1, ty1, s2, tx2, ty2, g, F) -> None:
    """F = T2^T f T1 (f: row-major 3x3 in normalised coordinates; g: (9,) scratch)."""
    for row in range(3):
        g[row * 3] = f[row * 3] * s1
        g[row * 3 + 1] = f[row * 3 + 1] * s1
        g[row * 3 + 2] = f[row * 3] * tx1 + f[row * 3 + 1] * ty1 + f[row * 3 + 2]
    for j in range(3):
        F[j] = s2 * g[j]
        F[3 + j] = s2 * g[3 + j]
        F[6 + j] = tx2 * g[j] + ty2 * g[3 + j] + g[6 + j]


@numba.njit(cache=True, nogil=True, error_model="numpy", inline="always")
def _design_row(u1, v1, u2, v2, r, o) -> None:
    """Row of the design matrix of one normalised pair into r[o:o + 9]."""
    r[o] = u2 * u1
    r[o + 1] = u2 * v1
    r[o + 2] = u2
    r[o + 3] = v2 * u1
    r[o + 4] = v2 * v1
    r[o + 5] = v2
    r[o + 6] = u1
    r[o + 7] = v1
    r[o + 8] = 1.0


@numba.njit(cache=True, nogil=True, error_model="numpy")
def hypothesis(x1, x2, idx, a, f, g, F) -> bool:
    """The normalised 8-point F of the candidates ``idx`` into ``F`` (9); False without a model
    (no spread, rank < 8). ``a``: (72,) scratch (the 8x9 design matrix), ``f``, ``g``: (9,)."""
    cx1 = 0.0
    cy1 = 0.0
    cx2 = 0.0
    cy2 = 0.0
    for j in range(SAMPLE):
        k = idx[j]
        cx1 += x1[k, 0]
        cy1 += x1[k, 1]
        cx2 += x2[k, 0]
        cy2 += x2[k, 1]
    cx1 = cx1 / 8.0
    cy1 = cy1 / 8.0
    cx2 = cx2 / 8.0
    cy2 = cy2 / 8.0
    d1 = 0.0
    d2 = 0.0
    for j in range(SAMPLE):
        k = idx[j]
        dx = x1[k, 0] - cx1
        dy = x1[k, 1] - cy1
        d1 += math.sqrt(dx * dx + dy * dy)
        dx = x2[k, 0] - cx2
        dy = x2[k, 1] - cy2
        d2 += math.sqrt(dx * dx + dy * dy)
    d1 = d1 / 8.0
    d2 = d2 / 8.0
    if not (d1 > 1e-300 and d2 > 1e-300):
        return False
    s1, tx1, ty1 = _similarity(cx1, cy1, d1)
    s2, tx2, ty2 = _similarity(cx2, cy2, d2)
    for j in range(SAMPLE):
        k = idx[j]
        _design_row(s1 * x1[k, 0] + tx1, s1 * x1[k, 1] + ty1, s2 * x2[k, 0] + tx2, s2 * x2[k, 1] + ty2, a, j * 9)
    # null vector of the 8x9 matrix: elimination with full pivoting (columns permuted in perm)
    perm = np.empty(9, np.int64)
    for c in range(9):
        perm[c] = c
    for i in range(8):
        br = i
        bc = i
        big = -1.0
        for r in range(i, 8):
            for c in range(i, 9):
                x = abs(a[r * 9 + perm[c]])
                if x > big:
                    big = x
                    br = r
                    bc = c
        if not (big > 1e-12):
            return False
        if br != i:
            for c in range(9):
                t = a[i * 9 + c]
                a[i * 9 + c] = a[br * 9 + c]
                a[br * 9 + c] = t
        t = perm[i]
        perm[i] = perm[bc]
        perm[bc] = t
        piv = a[i * 9 + perm[i]]
        for r in range(i + 1, 8):
            m = a[r * 9 + perm[i]] / piv
            for c in range(i, 9):
                a[r * 9 + perm[c]] = a[r * 9 + perm[c]] - m * a[i * 9 + perm[c]]
    f[perm[8]] = 1.0
    for i in range(7, -1, -1):
        acc = 0.0
        for c in range(i + 1, 9):
            acc += a[i * 9 + perm[c]] * f[perm[c]]
        f[perm[i]] = -acc / a[i * 9 + perm[i]]
    _denormalise(f, s1, tx1, ty1, s2, tx2, ty2, g, F)
    return True


@numba.njit(cache=True, nogil=True, error_model="numpy")
def _butterfly(p, q) -> None:
    """Each row of the (m, LANES) lane partials ``p`` summed as a warp's xor-shuffle butterfly adds
    them (lane l: its own plus lane l ^ o, o = 16 .. 1); the sums in column 0. ``q``: scratch."""
    for e in range(p.shape[0]):
        o = LANES // 2
        while o > 0:
            for lane in range(LANES):
                q[lane] = p[e, lane] + p[e, lane ^ o]
            for lane in range(LANES):
                p[e, lane] = q[lane]
            o //= 2


@numba.njit(cache=True, nogil=True, error_model="numpy")
def refit(x1, x2, inl, count, a, f, g, F) -> bool:
    """Least-squares normalised 8-point F over the ``count`` inliers into ``F`` (the LO step);
    False where it fails. Every sum as kernels/ransac.cu's warp forms it: lane l adds the inliers
    among rows l, l + LANES, ... in order, a butterfly adds the lanes. ``a``: (81,) scratch."""
    n = x1.shape[0]
    p = np.zeros((45, LANES))
    q = np.empty(LANES)
    r = np.empty(9)
    m = float(count)
    for k in range(n):
        if inl[k]:
            lane = k % LANES
            p[0, lane] += x1[k, 0]
            p[1, lane] += x1[k, 1]
            p[2, lane] += x2[k, 0]
            p[3, lane] += x2[k, 1]
    _butterfly(p[:4], q)
    cx1 = p[0, 0] / m
    cy1 = p[1, 0] / m
    cx2 = p[2, 0] / m
    cy2 = p[3, 0] / m
    p[:2] = 0.0
    for k in range(n):
        if inl[k]:
            lane = k % LANES
            dx = x1[k, 0] - cx1
            dy = x1[k, 1] - cy1
            p[0, lane] += math.sqrt(dx * dx + dy * dy)
            dx = x2[k, 0] - cx2
            dy = x2[k, 1] - cy2
            p[1, lane] += math.sqrt(dx * dx + dy * dy)
    _butterfly(p[:2], q)
    d1 = p[0, 0] / m
    d2 = p[1, 0] / m
    if not (d1 > 1e-300 and d2 > 1e-300):
        return False
    s1, tx1, ty1 = _similarity(cx1, cy1, d1)
    s2, tx2, ty2 = _similarity(cx2, cy2, d2)
    p[:] = 0.0
    for k in range(n):
        if inl[k]:
            lane = k % LANES
            _design_row(s1 * x1[k, 0] + tx1, s1 * x1[k, 1] + ty1, s2 * x2[k, 0] + tx2, s2 * x2[k, 1] + ty2, r, 0)
            e = 0
            for pi in range(9):
                for qi in range(pi, 9):
                    p[e, lane] += r[pi] * r[qi]
                    e += 1
    _butterfly(p, q)
    e = 0
    for pi in range(9):
        for qi in range(pi, 9):
            a[pi * 9 + qi] = p[e, 0]
            a[qi * 9 + pi] = p[e, 0]
            e += 1
    if not smallest_eigenvector(a, f):
        return False
    _denormalise(f, s1, tx1, ty1, s2, tx2, ty2, g, F)
    return True


@numba.njit(cache=True, nogil=True, error_model="numpy")
def smallest_eigenvector(a, x) -> bool:
    """Inverse iteration on the pivoted LU of the 9x9 ``a`` (overwritten) from all-ones, each step
    scaled by its largest |entry| (the first); False where it does not give a finite vector."""
    piv = np.empty(9, np.int64)
    for i in range(9):
        p = i
        big = abs(a[i * 9 + i])
        for r in range(i + 1, 9):
            v = abs(a[r * 9 + i])
            if v > big:
                big = v
                p = r
        piv[i] = p
        if p != i:
            for c in range(9):
                t = a[i * 9 + c]
                a[i * 9 + c] = a[p * 9 + c]
                a[p * 9 + c] = t
        d = a[i * 9 + i]
        for r in range(i + 1, 9):
            m = a[r * 9 + i] / d
            a[r * 9 + i] = m
            for c in range(i + 1, 9):
                a[r * 9 + c] = a[r * 9 + c] - m * a[i * 9 + c]
    for i in range(9):
        x[i] = 1.0
    for it in range(INVERSE_ITERATIONS):
        for i in range(9):
            t = x[i]
            x[i] = x[piv[i]]
            x[piv[i]] = t
        for i in range(9):
            for j in range(i):
                x[i] = x[i] - a[i * 9 + j] * x[j]
        for i in range(8, -1, -1):
            for j in range(i + 1, 9):
                x[i] = x[i] - a[i * 9 + j] * x[j]
            x[i] = x[i] / a[i * 9 + i]
        mx = 0.0
        for i in range(9):
            if abs(x[i]) > abs(mx):
                mx = x[i]
        if not (abs(mx) > 0.0 and math.isfinite(mx)):
            return False
        for i in range(9):
            x[i] = x[i] / mx
    return True


@numba.njit(cache=True, nogil=True, error_model="numpy", inline="always")
def is_inlier(F, X1, Y1, X2, Y2, thr2) -> bool:
    """OpenCV FM_RANSAC's error of one pair within ``thr2`` (reference.ransac.epipolar_error)."""
    a = F[0] * X1 + F[1] * Y1 + F[2]
    b = F[3] * X1 + F[4] * Y1 + F[5]
    c = F[6] * X1 + F[7] * Y1 + F[8]
    d = X2 * a + Y2 * b + c
    e2 = d * d / (a * a + b * b)
    a = F[0] * X2 + F[3] * Y2 + F[6]
    b = F[1] * X2 + F[4] * Y2 + F[7]
    c = F[2] * X2 + F[5] * Y2 + F[8]
    d = X1 * a + Y1 * b + c
    e1 = d * d / (a * a + b * b)
    return e1 <= thr2 and e2 <= thr2


@numba.njit(cache=True, nogil=True, error_model="numpy")
def _mark(F, x1, x2, thr2, inl) -> int:
    n = x1.shape[0]
    cnt = 0
    for i in range(n):
        inl[i] = is_inlier(F, x1[i, 0], x1[i, 1], x2[i, 0], x2[i, 1], thr2)
        cnt += inl[i]
    return cnt


@numba.njit(cache=True, nogil=True, error_model="numpy")
def ransac_fm(x1, x2, thr2, confidence, table, inlier, lo_iterations):
    """RANSAC over the (n, 2) float64 candidates; ``inlier`` (n,) bool is written where a model is
    found; ``lo_iterations`` refits. Returns (best hypothesis or -1, final inliers, hypotheses
    evaluated)."""
    n = x1.shape[0]
    if n < SAMPLE:
        return -1, 0, 0
    idx = np.empty(SAMPLE, np.int64)
    a = np.empty(81)
    f = np.empty(9)
    g = np.empty(9)
    F = np.empty(9)
    bestF = np.empty(9)
    best = -1
    best_count = MIN_INLIERS - 1
    k = table.shape[0]
    h = 0
    while h < k:
        _sample(table, h, n, idx)
        cnt = 0
        if hypothesis(x1, x2, idx, a, f, g, F):
            for i in range(n):
                cnt += is_inlier(F, x1[i, 0], x1[i, 1], x2[i, 0], x2[i, 1], thr2)
        if cnt > best_count:
            best = h
            best_count = cnt
            bestF[:] = F
            k = _update(confidence, cnt, n, k)
        h += 1
    if best < 0:
        return -1, 0, h
    count = _mark(bestF, x1, x2, thr2, inlier)
    trial = np.empty(n, np.bool_)
    for it in range(lo_iterations):
        if not refit(x1, x2, inlier, count, a, f, g, F):
            break
        c = _mark(F, x1, x2, thr2, trial)
        if c < count:
            break
        inlier[:] = trial
        count = c
    return best, count, h


def ransac_numba(xy_old, xy_new, threshold: float, confidence: float, lo_iterations: int = LO_ITERATIONS):
    """(outlier mask over the rows or None, best hypothesis, its inliers): as
    :func:`vilib_ros.frontend.reference.ransac.ransac_reference`, compiled."""
    x1 = np.asarray(xy_old, np.float64).reshape(-1, 2)
    x2 = np.asarray(xy_new, np.float64).reshape(-1, 2)
    fin = np.isfinite(x1).all(1) & np.isfinite(x2).all(1)
    cand = np.flatnonzero(fin)
    inl = np.zeros(cand.size, np.bool_)
    best, count, _ = ransac_fm(np.ascontiguousarray(x1[cand]), np.ascontiguousarray(x2[cand]),
                               float(threshold) ** 2, float(confidence), TABLE[:HYPOTHESES], inl,
                               int(lo_iterations))
    if best < 0:
        return None, -1, 0
    out = np.ones(len(x1), bool)
    out[cand] = ~inl
    return out, int(best), int(count)
