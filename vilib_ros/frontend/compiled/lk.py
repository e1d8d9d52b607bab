"""Compiled (numba) pyramidal inverse-compositional LK with affine illumination: the
algorithm of ``kernels/lk.cu`` and of :func:`vilib_ros.frontend.reference.lk.track_cpu` (the
reference it mirrors step by step, in float64), with every status the reference sets; and
against stored templates, of :mod:`vilib_ros.frontend.reference.templates`.

Loop mapping: features in strided chunks, one chunk per thread (``prange``), each chunk with its
scratch allocated once; one feature at a time, coarse to fine over the levels. Per level: the
template patch (values and central-difference gradients, bilinear at one sub-pixel fraction for
the whole patch, as the kernel does) and the Hessian of
U = [g gx, g gy, (T), (1)] with the gain g at the level's start, then up to ``max_iterations``
Gauss-Newton steps on the residual ``I(x + t) - (1 + alpha) T - beta`` with the oscillation
stop. Patch rows are read through row slices indexed by the loop counter, so the compiler
vectorises the inner loops (the sums are reassociated: results agree with the reference to
float rounding, not bit for bit).

The tracker object on these functions is :class:`vilib_ros.frontend.compiled.tracker.NumbaLKTracker`.
"""
from __future__ import annotations

import math

import numba
import numpy as np

from vilib_ros.frontend.config import AFFINE_DET_RANGE, AFFINE_PATCH
from vilib_ros.types import TrackStatus

MAX_LEVELS = 8
_TRACKED, _LEFT, _DIVERGED, _NOT_CONVERGED, _INACTIVE = (int(s) for s in (
    TrackStatus.TRACKED, TrackStatus.LEFT_IMAGE, TrackStatus.DIVERGED, TrackStatus.NOT_CONVERGED,
    TrackStatus.INACTIVE))
# per-level codes, as in lk.cu / track_cpu
_LVL_CONVERGED, _LVL_MAXITER, _LVL_SKIPPED, _LVL_LEFT, _LVL_SINGULAR = 0, 1, 2, 3, 4
_DET_MIN, _DET_MAX = AFFINE_DET_RANGE
_AFFINE_PATCH = AFFINE_PATCH
# reassociation lets the patch sums vectorise; no finite-math flags (the NaN/inf tests must hold)
_FM = {"reassoc", "nsz", "contract"}


@numba.njit(cache=True, nogil=True, inline="always")
def _fits(x, y, half, w, h):
    return (x - half >= 0) and (y - half >= 0) and (x + half < w - 1) and (y + half < h - 1)


@numba.njit(cache=True, nogil=True, inline="always")
def _patch_origin(x, y, P):
    """Top-left pixel of the P x P patch centred at (x, y) and its bilinear weights: every sample
    of the patch has the same sub-pixel fraction (ax, ay), bx = 1 - ax, by = 1 - ay."""
    half = 0.5 * (P - 1)
    qx = x - half
    qy = y - half
    fx = math.floor(qx)
    fy = math.floor(qy)
    ax = qx - fx
    ay = qy - fy
    return int(fx), int(fy), ax, ay, 1.0 - ax, 1.0 - ay


@numba.njit(cache=True, nogil=True)
def _invert(A, Ai, m):
    """Ai = inverse of the m x m matrix A (Gauss-Jordan, partial pivoting); returns det(A)
    (0 where a pivot is exactly 0). A is overwritten."""
    for i in range(m):
        for j in range(m):
            Ai[i, j] = 1.0 if i == j else 0.0
    det = 1.0
    for col in range(m):
        piv = col
        for r in range(col + 1, m):
            if abs(A[r, col]) > abs(A[piv, col]):
                piv = r
        p = A[piv, col]
        if p == 0.0:
            return 0.0
        if piv != col:
            det = -det
            for j in range(m):
                A[col, j], A[piv, j] = A[piv, j], A[col, j]
                Ai[col, j], Ai[piv, j] = Ai[piv, j], Ai[col, j]
        det *= p
        for j in range(m):
            A[col, j] /= p
            Ai[col, j] /= p
        for r in range(m):
            if r != col:
                f = A[r, col]
                if f != 0.0:
                    for j in range(m):
                        A[r, j] -= f * A[col, j]
                        Ai[r, j] -= f * Ai[col, j]
    return det


@numba.njit(cache=True, nogil=True, boundscheck=False, fastmath=_FM)
def _template(T, P, tcx, tcy, tv, gx, gy):
    """Template values and gradients (0..1 units) of the P x P patch centred at (tcx, tcy)."""
    x0, y0, ax, ay, bx, by = _patch_origin(tcx, tcy, P)
    for r in range(P):
        y = y0 + r
        ru = T[y - 1, x0 - 1:x0 + P + 2]
        r0 = T[y, x0 - 1:x0 + P + 2]
        r1 = T[y + 1, x0 - 1:x0 + P + 2]
        rd = T[y + 2, x0 - 1:x0 + P + 2]
        for c in range(P):
            i00 = np.float64(r0[c + 1])
            i10 = np.float64(r0[c + 2])
            i01 = np.float64(r1[c + 1])
            i11 = np.float64(r1[c + 2])
            centre = by * (bx * i00 + ax * i10) + ay * (bx * i01 + ax * i11)
            left = by * (bx * np.float64(r0[c]) + ax * i00) + ay * (bx * np.float64(r1[c]) + ax * i01)
            right = by * (bx * i10 + ax * np.float64(r0[c + 3])) + ay * (bx * i11 + ax * np.float64(r1[c + 3]))
            up = by * (bx * np.float64(ru[c + 1]) + ax * np.float64(ru[c + 2])) + ay * (bx * i00 + ax * i10)
            down = by * (bx * i01 + ax * i11) + ay * (bx * np.float64(rd[c + 1]) + ax * np.float64(rd[c + 2]))
            k = r * P + c
            tv[k] = centre / 255.0
            gx[k] = 0.5 * (right - left) / 255.0
            gy[k] = 0.5 * (down - up) / 255.0


@numba.njit(cache=True, nogil=True, boundscheck=False, fastmath=_FM)
def _moments(tv, gx, gy, PP, g):
    """Patch sums: gradient matrix (unscaled) and the Hessian entries of U = [g gx, g gy, T, 1]."""
    sxx = sxy = syy = 0.0
    uxx = uxy = uyy = uxt = uyt = tt = ux1 = uy1 = t1 = 0.0
    for k in range(PP):
        a = gx[k]
        b = gy[k]
        t = tv[k]
        ua = g * a
        ub = g * b
        sxx += a * a
        sxy += a * b
        syy += b * b
        uxx += ua * ua
        uxy += ua * ub
        uyy += ub * ub
        uxt += ua * t
        uyt += ub * t
        tt += t * t
        ux1 += ua
        uy1 += ub
        t1 += t
    return sxx, sxy, syy, uxx, uxy, uyy, uxt, uyt, tt, ux1, uy1, t1


@numba.njit(cache=True, nogil=True, boundscheck=False, fastmath=_FM)
def _residual_sums(I, P, x, y, ga, beta, g, tv, gx, gy):
    """sum U r (4 entries: x, y, T, 1) and sum |r| of r = I(patch at x, y) - ga T - beta."""
    x0, y0, ax, ay, bx, by = _patch_origin(x, y, P)
    sx = sy = st = s1 = sa = 0.0
    for r in range(P):
        r0 = I[y0 + r, x0:x0 + P + 1]
        r1 = I[y0 + r + 1, x0:x0 + P + 1]
        o = r * P
        for c in range(P):
            iv = (by * (bx * np.float64(r0[c]) + ax * np.float64(r0[c + 1]))
                  + ay * (bx * np.float64(r1[c]) + ax * np.float64(r1[c + 1]))) / 255.0
            t = tv[o + c]
            res = iv - ga * t - beta
            sx += gx[o + c] * res
            sy += gy[o + c] * res
            st += t * res
            s1 += res
            sa += abs(res)
    return g * sx, g * sy, st, s1, sa


@numba.njit(cache=True, nogil=True, boundscheck=False, fastmath=_FM)
def _stored_template(patch, P, tv, gx, gy):
    """Template values and gradients (0..1 units) from a stored template level: ``patch`` holds
    the (P + 2) x (P + 2) bilinear samples (0..255, row stride P + 2; tracker.PATCH_AREA)."""
    S = P + 2
    for r in range(P):
        ru = patch[r * S:(r + 1) * S]
        r0 = patch[(r + 1) * S:(r + 2) * S]
        rd = patch[(r + 2) * S:(r + 3) * S]
        for c in range(P):
            k = r * P + c
            tv[k] = np.float64(r0[c + 1]) / 255.0
            gx[k] = 0.5 * (np.float64(r0[c + 2]) - np.float64(r0[c])) / 255.0
            gy[k] = 0.5 * (np.float64(rd[c + 1]) - np.float64(ru[c + 1])) / 255.0


@numba.njit(cache=True, nogil=True, boundscheck=False)
def _track_level(T, I, P, tcx, tcy, st, gslot, oslot, npar, max_iterations, eps, min_eigen, osc_eps, osc_growth,
                 work, H, Hi):
    """One level for one feature, the template taken from ``T`` at (tcx, tcy); ``st`` = [x, y,
    alpha, beta, residual, iterations] (updated). Returns the level code (converged / max.
    iterations / left / singular)."""
    h, w = T.shape
    half = 0.5 * (P - 1)
    if not _fits(tcx, tcy, half + 1.0, w, h):
        return _LVL_LEFT
    PP = P * P
    _template(T, P, tcx, tcy, work[0:PP], work[256:256 + PP], work[512:512 + PP])
    return _solve_level(I, P, st, gslot, oslot, npar, max_iterations, eps, min_eigen, osc_eps, osc_growth, work, H, Hi)


@numba.njit(cache=True, nogil=True, boundscheck=False)
def _solve_level(I, P, st, gslot, oslot, npar, max_iterations, eps, min_eigen, osc_eps, osc_growth, work, H, Hi):
    """The Gauss-Newton iterations of one level on the template in ``work`` (values, x and y
    gradients at 0, 256, 512); ``st`` as in :func:`_track_level`."""
    h, w = I.shape
    half = 0.5 * (P - 1)
    PP = P * P
    tv = work[0:PP]
    gx = work[256:256 + PP]
    gy = work[512:512 + PP]
    g = 1.0 if gslot < 0 else 1.0 + st[2]
    sxx, sxy, syy, uxx, uxy, uyy, uxt, uyt, tt, ux1, uy1, t1 = _moments(tv, gx, gy, PP, g)
    a = sxx / PP
    b = sxy / PP
    c = syy / PP
    lmin = 0.5 * (a + c - math.sqrt((a - c) ** 2 + 4 * b * b))
    H[0, 0] = uxx
    H[0, 1] = H[1, 0] = uxy
    H[1, 1] = uyy
    if gslot >= 0:
        H[0, gslot] = H[gslot, 0] = uxt
        H[1, gslot] = H[gslot, 1] = uyt
        H[gslot, gslot] = tt
    if oslot >= 0:
        H[0, oslot] = H[oslot, 0] = ux1
        H[1, oslot] = H[oslot, 1] = uy1
        H[oslot, oslot] = PP
    if gslot >= 0 and oslot >= 0:
        H[gslot, oslot] = H[oslot, gslot] = t1
    if not lmin >= min_eigen:
        return _LVL_SINGULAR
    det = _invert(H, Hi, npar)
    if not (math.isfinite(det) and abs(det) > 1e-300):
        return _LVL_SINGULAR
    x, y, alpha, beta = st[0], st[1], st[2], st[3]
    xs, ys = x, y
    bv = work[768:772]
    dq = work[772:776]
    px = py = 0.0
    code = _LVL_MAXITER
    for it in range(max_iterations):
        if not _fits(x, y, half, w, h):
            x, y = xs, ys
            code = _LVL_LEFT
            break
        bv[0], bv[1], bt, b1, sa = _residual_sums(I, P, x, y, 1.0 + alpha, beta, g, tv, gx, gy)
        if gslot >= 0:
            bv[gslot] = bt
        if oslot >= 0:
            bv[oslot] = b1
        for i in range(npar):
            s = 0.0
            for j in range(npar):
                s += Hi[i, j] * bv[j]
            dq[i] = s
        x -= dq[0]
        y -= dq[1]
        if gslot >= 0:
            alpha += dq[gslot]
        if oslot >= 0:
            beta += dq[oslot]
        st[4] = sa / PP * 255.0
        st[5] += 1
        d2 = dq[0] ** 2 + dq[1] ** 2
        conv = d2 < eps
        if it > 0 and not conv:   # oscillation stop (TrackerConfig.osc_eps / osc_growth)
            osc = osc_eps > 0 and abs(dq[0] + px) < osc_eps and abs(dq[1] + py) < osc_eps
            if osc_growth > 0 and dq[0] * px + dq[1] * py < 0 and d2 >= osc_growth * (px ** 2 + py ** 2):
                osc = True
            if osc:
                x += 0.5 * dq[0]
                y += 0.5 * dq[1]
                if gslot >= 0:
                    alpha -= 0.5 * dq[gslot]
                if oslot >= 0:
                    beta -= 0.5 * dq[oslot]
                conv = True
        px = dq[0]
        py = dq[1]
        if conv:
            code = _LVL_CONVERGED
            break
    st[0], st[1], st[2], st[3] = x, y, alpha, beta
    return code


@numba.njit(cache=True, nogil=True, boundscheck=False, fastmath=_FM, inline="always")
def _warped_sample(I, x, y, a11, a12, a21, a22, ux, uy):
    """Bilinear sample (0..1) of I at x + A u."""
    X = x + a11 * ux + a12 * uy
    Y = y + a21 * ux + a22 * uy
    fx = math.floor(X)
    fy = math.floor(Y)
    ax = X - fx
    ay = Y - fy
    x0 = int(fx)
    y0 = int(fy)
    return ((1 - ay) * ((1 - ax) * np.float64(I[y0, x0]) + ax * np.float64(I[y0, x0 + 1]))
            + ay * ((1 - ax) * np.float64(I[y0 + 1, x0]) + ax * np.float64(I[y0 + 1, x0 + 1]))) / 255.0


@numba.njit(cache=True, nogil=True, boundscheck=False, fastmath=_FM)
def _affine_sums(I, P, x, y, a11, a12, a21, a22, ga, beta, g, tv, gx, gy, bv, full):
    """bv[0:8] = sum U r (U = [g gx ux, g gx uy, g gy ux, g gy uy, g gx, g gy, T, 1]) of
    r = I(x + A u) - ga T - beta over the patch (u: offsets from the centre; ``full`` False: the
    translation phase, bv[0:4] not computed); returns sum |r|."""
    half = 0.5 * (P - 1)
    s0 = s1 = s2 = s3 = s4 = s5 = s6 = s7 = sa = 0.0
    for r in range(P):
        uy = r - half
        bxr = 0.0
        byr = 0.0
        if full:
            for c in range(P):
                ux = c - half
                k = r * P + c
                t = tv[k]
                res = _warped_sample(I, x, y, a11, a12, a21, a22, ux, uy) - ga * t - beta
                a = gx[k] * res
                b = gy[k] * res
                s0 += a * ux
                s2 += b * ux
                bxr += a
                byr += b
                s6 += t * res
                s7 += res
                sa += abs(res)
        else:
            for c in range(P):
                k = r * P + c
                t = tv[k]
                res = _warped_sample(I, x, y, a11, a12, a21, a22, c - half, uy) - ga * t - beta
                bxr += gx[k] * res
                byr += gy[k] * res
                s6 += t * res
                s7 += res
                sa += abs(res)
        s1 += bxr * uy
        s3 += byr * uy
        s4 += bxr
        s5 += byr
    bv[0] = g * s0
    bv[1] = g * s1
    bv[2] = g * s2
    bv[3] = g * s3
    bv[4] = g * s4
    bv[5] = g * s5
    bv[6] = s6
    bv[7] = s7
    return sa


@numba.njit(cache=True, nogil=True, boundscheck=False, fastmath=_FM)
def _affine_hessian(P, tv, gx, gy, g, gslot, oslot, npar, H):
    """H (npar x npar) = sum U U^T of U = [g gx ux, g gx uy, g gy ux, g gy uy, g gx, g gy, (T), (1)]
    over the patch (u = offsets from the centre), from 32 patch sums."""
    half = 0.5 * (P - 1)
    aaXX = aaXY = aaYY = abXX = abXY = abYY = bbXX = bbXY = bbYY = 0.0
    aaX = aaY = abX = abY = bbX = bbY = atX = atY = btX = btY = aX = aY = bX = bY = 0.0
    aa = ab = bb = at = bt = sa = sb = tt = st_ = 0.0
    for r in range(P):
        Y = r - half
        for c in range(P):
            X = c - half
            k = r * P + c
            a = gx[k]
            b = gy[k]
            t = tv[k]
            qaa = a * a
            qab = a * b
            qbb = b * b
            qat = a * t
            qbt = b * t
            aaXX += qaa * X * X
            aaXY += qaa * X * Y
            aaYY += qaa * Y * Y
            abXX += qab * X * X
            abXY += qab * X * Y
            abYY += qab * Y * Y
            bbXX += qbb * X * X
            bbXY += qbb * X * Y
            bbYY += qbb * Y * Y
            aaX += qaa * X
            aaY += qaa * Y
            abX += qab * X
            abY += qab * Y
            bbX += qbb * X
            bbY += qbb * Y
            atX += qat * X
            atY += qat * Y
            btX += qbt * X
            btY += qbt * Y
            aX += a * X
            aY += a * Y
            bX += b * X
            bY += b * Y
            aa += qaa
            ab += qab
            bb += qbb
            at += qat
            bt += qbt
            sa += a
            sb += b
            tt += t * t
            st_ += t
    g2 = g * g
    geo = ((aaXX, aaXY, abXX, abXY, aaX, abX), (aaXY, aaYY, abXY, abYY, aaY, abY),
           (abXX, abXY, bbXX, bbXY, abX, bbX), (abXY, abYY, bbXY, bbYY, abY, bbY),
           (aaX, aaY, abX, abY, aa, ab), (abX, abY, bbX, bbY, ab, bb))
    for i in range(6):
        for j in range(6):
            H[i, j] = g2 * geo[i][j]
    if gslot >= 0:
        gt = (atX, atY, btX, btY, at, bt)
        for i in range(6):
            H[i, gslot] = H[gslot, i] = g * gt[i]
        H[gslot, gslot] = tt
    if oslot >= 0:
        g1 = (aX, aY, bX, bY, sa, sb)
        for i in range(6):
            H[i, oslot] = H[oslot, i] = g * g1[i]
        H[oslot, oslot] = P * P
    if gslot >= 0 and oslot >= 0:
        H[gslot, oslot] = H[oslot, gslot] = st_
    return aa, ab, bb


@numba.njit(cache=True, nogil=True, boundscheck=False)
def _solve_level_affine(I, P, st, gslot, oslot, npar, max_iterations, eps, min_eigen, osc_eps, osc_growth, work, H,
                        Hi, Hs, Hsi):
    """The affine twin of :func:`_solve_level` (templates._track_affine, warp='affine'):
    ``st`` = [x, y, alpha, beta, residual, iterations, a11, a12, a21, a22] (updated); template in
    ``work`` as there; parameters [d11, d12, d21, d22, dtx, dty, (dalpha), (dbeta)]; a
    translation phase (the sub-block of [dtx, dty, (dalpha), (dbeta)]), then on AFFINE_PATCH
    levels an affine phase."""
    h, w = I.shape
    half = 0.5 * (P - 1)
    PP = P * P
    tv = work[0:PP]
    gx = work[256:256 + PP]
    gy = work[512:512 + PP]
    g = 1.0 if gslot < 0 else 1.0 + st[2]
    sxx, sxy, syy = _affine_hessian(P, tv, gx, gy, g, gslot, oslot, npar, H)
    a = sxx / PP
    b = sxy / PP
    c = syy / PP
    lmin = 0.5 * (a + c - math.sqrt((a - c) ** 2 + 4 * b * b))
    if not lmin >= min_eigen:
        return _LVL_SINGULAR
    # the translation (+ illumination) sub-problem: parameters 4, 5 and the photometric slots
    nsub = npar - 4
    sub = work[808:812]
    for i in range(nsub):
        sub[i] = 4 + i
    for i in range(nsub):
        for j in range(nsub):
            Hs[i, j] = H[int(sub[i]), int(sub[j])]
    aff_lvl = P == _AFFINE_PATCH
    if aff_lvl:
        det = _invert(H, Hi, npar)
        _invert(Hs, Hsi, nsub)
    else:
        det = _invert(Hs, Hsi, nsub)
    if not (math.isfinite(det) and abs(det) > 1e-300):
        return _LVL_SINGULAR
    x, y, alpha, beta = st[0], st[1], st[2], st[3]
    a11, a12, a21, a22 = st[6], st[7], st[8], st[9]
    xs, ys, s11, s12, s21, s22 = x, y, a11, a12, a21, a22
    bv = work[776:784]
    b8 = work[784:792]
    dq = work[800:808]
    phase = 0
    px = py = 0.0
    code = _LVL_MAXITER
    fresh = True           # no previous step for the oscillation test
    for it in range(max_iterations):
        ex = (abs(a11) + abs(a12)) * half
        ey = (abs(a21) + abs(a22)) * half
        if not (x - ex >= 0 and y - ey >= 0 and x + ex < w - 1 and y + ey < h - 1):
            x, y, a11, a12, a21, a22 = xs, ys, s11, s12, s21, s22
            code = _LVL_LEFT
            break
        sa = _affine_sums(I, P, x, y, a11, a12, a21, a22, 1.0 + alpha, beta, g, tv, gx, gy, b8, phase == 1)
        for i in range(6):
            bv[i] = b8[i]
        if gslot >= 0:
            bv[gslot] = b8[6]
        if oslot >= 0:
            bv[oslot] = b8[7]
        if phase == 0:
            for i in range(4):
                dq[i] = 0.0
            for i in range(nsub):
                s = 0.0
                for j in range(nsub):
                    s += Hsi[i, j] * bv[4 + j]
                dq[4 + i] = s
        else:
            for i in range(npar):
                s = 0.0
                for j in range(npar):
                    s += Hi[i, j] * bv[j]
                b8[i] = s
            for i in range(npar):
                dq[i] = b8[i]
        # compose with the inverse step (templates._track_affine)
        d11 = 1.0 + dq[0]
        d12 = dq[1]
        d21 = dq[2]
        d22 = 1.0 + dq[3]
        dd = d11 * d22 - d12 * d21
        i11 = d22 / dd
        i12 = -d12 / dd
        i21 = -d21 / dd
        i22 = d11 / dd
        tix = -(i11 * dq[4] + i12 * dq[5])
        tiy = -(i21 * dq[4] + i22 * dq[5])
        sx = a11 * tix + a12 * tiy
        sy = a21 * tix + a22 * tiy
        xo, yo, o11, o12, o21, o22, alo, beo = x, y, a11, a12, a21, a22, alpha, beta
        x = xo + sx
        y = yo + sy
        a11 = o11 * i11 + o12 * i21
        a12 = o11 * i12 + o12 * i22
        a21 = o21 * i11 + o22 * i21
        a22 = o21 * i12 + o22 * i22
        if gslot >= 0:
            alpha += dq[gslot]
        if oslot >= 0:
            beta += dq[oslot]
        st[4] = sa / PP * 255.0
        st[5] += 1
        d2 = sx ** 2 + sy ** 2
        conv = d2 < eps
        if not fresh and not conv:
            osc = osc_eps > 0 and abs(sx + px) < osc_eps and abs(sy + py) < osc_eps
            if osc_growth > 0 and sx * px + sy * py < 0 and d2 >= osc_growth * (px ** 2 + py ** 2):
                osc = True
            if osc:     # the middle of the jump
                x = 0.5 * (xo + x)
                y = 0.5 * (yo + y)
                a11 = 0.5 * (o11 + a11)
                a12 = 0.5 * (o12 + a12)
                a21 = 0.5 * (o21 + a21)
                a22 = 0.5 * (o22 + a22)
                alpha = 0.5 * (alo + alpha)
                beta = 0.5 * (beo + beta)
                conv = True
        px = sx
        py = sy
        fresh = False
        if conv and phase == 0 and aff_lvl:
            phase = 1
            fresh = True
        elif conv:
            code = _LVL_CONVERGED
            break
    st[0], st[1], st[2], st[3] = x, y, alpha, beta
    st[6], st[7], st[8], st[9] = a11, a12, a21, a22
    return code


@numba.njit(cache=True, nogil=True, parallel=True, boundscheck=False)
def lk_track(tp, ip, n_levels, patch_sizes, tmpl_pos, pred, active, patch, valid, slots, gain0, offset0, stored,
             affine, affine0, gslot, oslot, npar, max_iterations, eps, min_eigen, max_residual, osc_eps, osc_growth,
             out_pos, out_status, out_residual, out_gain, out_offset, out_iters, out_affine, n_chunks):
    """Track every feature (``tp`` / ``ip``: tuples of MAX_LEVELS uint8 level arrays, the first
    ``n_levels`` used; ``active``: uint8, 0 = inactive; ``n_chunks``: the threads). Outputs as
    :class:`TrackResult`.

    Templates: from ``tp`` at ``tmpl_pos`` (``stored`` False), or (``stored`` True) the stored
    template levels ``patch[slots[f], level]`` where ``valid[slots[f], level]``, starting from the
    illumination ``gain0`` / ``offset0`` (0..255) of each feature (tmpl_pos and tp unused);
    ``affine`` (stored templates only): the affine warp, starting from ``affine0`` (N, 4), the
    result in ``out_affine`` (gslot / oslot / npar then in the affine parameter vector)."""
    n = pred.shape[0]
    top = 1.0 / (1 << (n_levels - 1))
    # strided chunks (one per thread), each with its scratch allocated once: patch values and
    # gradients + solver vectors, Hessian and inverse, state
    for ch in numba.prange(n_chunks):
        work = np.empty(816)
        H = np.zeros((8, 8))
        Hi = np.zeros((8, 8))
        Hs = np.zeros((4, 4))
        Hsi = np.zeros((4, 4))
        st = np.empty(10)
        for f in range(ch, n, n_chunks):
            p0x = np.float64(pred[f, 0])
            p0y = np.float64(pred[f, 1])
            if active[f] == 0:
                out_pos[f, 0] = pred[f, 0]
                out_pos[f, 1] = pred[f, 1]
                out_status[f] = _INACTIVE
                out_residual[f] = 0.0
                out_gain[f] = 1.0
                out_offset[f] = 0.0
                out_iters[f] = 0
                if affine:
                    out_affine[f, :] = affine0[f, :]
                continue
            st[:] = 0.0
            st[0] = (p0x + 0.5) * top - 0.5
            st[1] = (p0y + 0.5) * top - 0.5
            if stored:
                tx = ty = 0.0
                if gslot >= 0:
                    st[2] = np.float64(gain0[f]) - 1.0
                if oslot >= 0:
                    st[3] = np.float64(offset0[f]) / 255.0
                ok_in = math.isfinite(st[2]) and math.isfinite(st[3])
                if affine:
                    for q in range(4):
                        st[6 + q] = np.float64(affine0[f, q])
                        ok_in = ok_in and math.isfinite(st[6 + q])
            else:
                tx = np.float64(tmpl_pos[f, 0])
                ty = np.float64(tmpl_pos[f, 1])
                ok_in = math.isfinite(tx) and math.isfinite(ty)
            status = _NOT_CONVERGED
            if not (math.isfinite(p0x) and math.isfinite(p0y) and ok_in):
                status = _DIVERGED
                for lvl in range(n_levels - 1):
                    st[0] = 2.0 * st[0] + 0.5
                    st[1] = 2.0 * st[1] + 0.5
            else:
                for lvl in range(n_levels - 1, -1, -1):
                    P = patch_sizes[lvl]
                    if stored:
                        if valid[slots[f], lvl] == 0:
                            code = _LVL_LEFT
                        else:
                            PP = P * P
                            _stored_template(patch[slots[f], lvl], P, work[0:PP], work[256:256 + PP],
                                             work[512:512 + PP])
                            if affine:
                                code = _solve_level_affine(ip[lvl], P, st, gslot, oslot, npar, max_iterations, eps,
                                                           min_eigen, osc_eps, osc_growth, work, H, Hi, Hs, Hsi)
                            else:
                                code = _solve_level(ip[lvl], P, st, gslot, oslot, npar, max_iterations, eps,
                                                    min_eigen, osc_eps, osc_growth, work, H, Hi)
                    else:
                        s = 1.0 / (1 << lvl)
                        code = _track_level(tp[lvl], ip[lvl], P, (tx + 0.5) * s - 0.5, (ty + 0.5) * s - 0.5, st,
                                            gslot, oslot, npar, max_iterations, eps, min_eigen, osc_eps, osc_growth,
                                            work, H, Hi)
                    if lvl == 0:
                        if code == _LVL_CONVERGED:
                            status = _TRACKED
                        elif code == _LVL_MAXITER:
                            status = _NOT_CONVERGED
                        elif code == _LVL_LEFT:
                            status = _LEFT
                        else:
                            status = _DIVERGED
                    else:
                        st[0] = 2.0 * st[0] + 0.5
                        st[1] = 2.0 * st[1] + 0.5
                ga = 1.0 + st[2]
                det_ok = True
                if affine:
                    dA = st[6] * st[9] - st[7] * st[8]
                    det_ok = math.isfinite(dA) and dA > _DET_MIN and dA < _DET_MAX
                if not (math.isfinite(st[0]) and math.isfinite(st[1]) and math.isfinite(st[2])
                        and math.isfinite(st[3]) and ga > 0.2 and ga < 5.0 and det_ok):
                    status = _DIVERGED
                elif max_residual > 0 and (status == _TRACKED or status == _NOT_CONVERGED) and st[4] > max_residual:
                    status = _DIVERGED
            out_pos[f, 0] = np.float32(st[0])
            out_pos[f, 1] = np.float32(st[1])
            out_status[f] = status
            out_residual[f] = np.float32(st[4])
            out_gain[f] = np.float32(1.0 + st[2])
            out_offset[f] = np.float32(st[3] * 255.0)
            out_iters[f] = np.int32(st[5])
            if affine:
                for q in range(4):
                    out_affine[f, q] = np.float32(st[6 + q])


@numba.njit(cache=True, nogil=True, parallel=True, boundscheck=False)
def lk_extract(tp, n_levels, patch_sizes, pos, slots, patch, valid, n_chunks):
    """Store the templates of the features at ``pos`` (level-0 pixels) in rows ``slots`` of
    ``patch`` / ``valid`` (tracker.extract_templates_cpu's layout): per level the
    (P + 2) x (P + 2) bilinear samples around the level position, where the patch and its
    gradient ring fit (``valid`` 1), else ``valid`` 0."""
    n = pos.shape[0]
    for ch in numba.prange(n_chunks):
        for f in range(ch, n, n_chunks):
            px = np.float64(pos[f, 0])
            py = np.float64(pos[f, 1])
            row = slots[f]
            for lvl in range(n_levels):
                P = patch_sizes[lvl]
                T = tp[lvl]
                h, w = T.shape
                s = 1.0 / (1 << lvl)
                tcx = (px + 0.5) * s - 0.5
                tcy = (py + 0.5) * s - 0.5
                half = 0.5 * (P - 1)
                if not (math.isfinite(tcx) and math.isfinite(tcy) and _fits(tcx, tcy, half + 1.0, w, h)):
                    valid[row, lvl] = 0
                    continue
                valid[row, lvl] = 1
                S = P + 2
                out = patch[row, lvl]
                for r in range(S):
                    sy = tcy - half - 1.0 + r
                    fy = math.floor(sy)
                    ay = sy - fy
                    y0 = int(fy)
                    for c in range(S):
                        sx = tcx - half - 1.0 + c
                        fx = math.floor(sx)
                        ax = sx - fx
                        x0 = int(fx)
                        i00 = np.float64(T[y0, x0])
                        i10 = np.float64(T[y0, x0 + 1])
                        i01 = np.float64(T[y0 + 1, x0])
                        i11 = np.float64(T[y0 + 1, x0 + 1])
                        out[r * S + c] = np.float32((1 - ay) * ((1 - ax) * i00 + ax * i10)
                                                    + ay * ((1 - ax) * i01 + ax * i11))
