"""Compiled (numba) pyramidal inverse-compositional LK with affine illumination: the
algorithm of ``kernels/lk.cu`` and of :func:`vilib_ros.frontend.tracker.track_cpu` (the
reference it mirrors step by step, in float64), with every status the reference sets.

Loop mapping: features in strided chunks, one chunk per thread (``prange``), each chunk with its
scratch allocated once; one feature at a time, coarse to fine over the levels. Per level: the
template patch (values and central-difference gradients, bilinear at one sub-pixel fraction for
the whole patch, as the kernel does) and the Hessian of
U = [g gx, g gy, (T), (1)] with the gain g at the level's start, then up to ``max_iterations``
Gauss-Newton steps on the residual ``I(x + t) - (1 + alpha) T - beta`` with the oscillation
stop. Patch rows are read through row slices indexed by the loop counter, so the compiler
vectorises the inner loops (the sums are reassociated: results agree with the reference to
float rounding, not bit for bit).

:class:`NumbaLKTracker` has the interface of :class:`vilib_ros.frontend.tracker.CpuLKTracker`.
"""
from __future__ import annotations

import math

import numba
import numpy as np

from vilib_ros.frontend.cpu_backend import cpu_threads
from vilib_ros.frontend.tracker import _MODE_INFO, CpuLKTracker, TrackResult, TrackStatus

MAX_LEVELS = 8
_TRACKED, _LEFT, _DIVERGED, _NOT_CONVERGED, _INACTIVE = (int(s) for s in (
    TrackStatus.TRACKED, TrackStatus.LEFT_IMAGE, TrackStatus.DIVERGED, TrackStatus.NOT_CONVERGED,
    TrackStatus.INACTIVE))
# per-level codes, as in lk.cu / track_cpu
_LVL_CONVERGED, _LVL_MAXITER, _LVL_SKIPPED, _LVL_LEFT, _LVL_SINGULAR = 0, 1, 2, 3, 4
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


@numba.njit(cache=True, nogil=True, boundscheck=False)
def _track_level(T, I, P, tcx, tcy, st, gslot, oslot, npar, max_iterations, eps, min_eigen, osc_eps, osc_growth,
                 work, H, Hi):
    """One level for one feature; ``st`` = [x, y, alpha, beta, residual, iterations] (updated).
    Returns the level code (converged / max. iterations / left / singular)."""
    h, w = T.shape
    half = 0.5 * (P - 1)
    if not _fits(tcx, tcy, half + 1.0, w, h):
        return _LVL_LEFT
    PP = P * P
    tv = work[0:PP]
    gx = work[256:256 + PP]
    gy = work[512:512 + PP]
    _template(T, P, tcx, tcy, tv, gx, gy)
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


@numba.njit(cache=True, nogil=True, parallel=True, boundscheck=False)
def lk_track(tp, ip, n_levels, patch_sizes, tmpl_pos, pred, active, gslot, oslot, npar, max_iterations, eps,
             min_eigen, max_residual, osc_eps, osc_growth, out_pos, out_status, out_residual, out_gain, out_offset,
             out_iters, n_chunks):
    """Track every feature (``tp`` / ``ip``: tuples of MAX_LEVELS uint8 level arrays, the first
    ``n_levels`` used; ``active``: uint8, 0 = inactive; ``n_chunks``: the threads). Outputs as
    :class:`TrackResult`."""
    n = tmpl_pos.shape[0]
    top = 1.0 / (1 << (n_levels - 1))
    # strided chunks (one per thread), each with its scratch allocated once: patch values and
    # gradients + solver vectors, Hessian and inverse, state
    for ch in numba.prange(n_chunks):
        work = np.empty(776)
        H = np.zeros((4, 4))
        Hi = np.zeros((4, 4))
        st = np.empty(6)
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
                continue
            tx = np.float64(tmpl_pos[f, 0])
            ty = np.float64(tmpl_pos[f, 1])
            st[:] = 0.0
            st[0] = (p0x + 0.5) * top - 0.5
            st[1] = (p0y + 0.5) * top - 0.5
            status = _NOT_CONVERGED
            if not (math.isfinite(p0x) and math.isfinite(p0y) and math.isfinite(tx) and math.isfinite(ty)):
                status = _DIVERGED
                for lvl in range(n_levels - 1):
                    st[0] = 2.0 * st[0] + 0.5
                    st[1] = 2.0 * st[1] + 0.5
            else:
                for lvl in range(n_levels - 1, -1, -1):
                    s = 1.0 / (1 << lvl)
                    code = _track_level(tp[lvl], ip[lvl], patch_sizes[lvl], (tx + 0.5) * s - 0.5,
                                        (ty + 0.5) * s - 0.5, st, gslot, oslot, npar, max_iterations, eps, min_eigen,
                                        osc_eps, osc_growth, work, H, Hi)
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
                if not (math.isfinite(st[0]) and math.isfinite(st[1]) and math.isfinite(st[2])
                        and math.isfinite(st[3]) and ga > 0.2 and ga < 5.0):
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


def _pyramid(img_or_pyr, levels: int, what: str) -> list[np.ndarray]:
    if isinstance(img_or_pyr, (list, tuple)):
        if len(img_or_pyr) < levels:
            raise ValueError(f"pyramid has {len(img_or_pyr)} levels, the tracker needs {levels}")
        return [np.ascontiguousarray(lv) for lv in img_or_pyr[:levels]]
    from vilib_ros.frontend.cpu_pyramid import build_pyramid_compiled

    return build_pyramid_compiled(np.ascontiguousarray(img_or_pyr), levels)


def _readonly(a: np.ndarray) -> np.ndarray:
    """A read-only view: the levels handed to ``lk_track`` are all read-only, so its tuples have
    one type whether a level is a caller's read-only buffer (a ROS message's bytes, viewed
    without a copy) or an array of ours; a mixed tuple cannot be indexed in nopython mode."""
    v = a.view()
    v.flags.writeable = False
    return v


_DUMMY_LEVEL = _readonly(np.zeros((1, 1), np.uint8))


class NumbaLKTracker(CpuLKTracker):
    """Compiled twin of :class:`CpuLKTracker` (``track_cpu`` results within float rounding)."""

    implementation = "numba"

    def __init__(self, width: int, height: int, config=None, max_features: int = 1024):
        super().__init__(width, height, config, max_features)
        self.threads = cpu_threads()
        c = self.config
        self._patch = np.array([int(p) for p in c.patch_sizes[: c.levels]] + [8] * (MAX_LEVELS - c.levels), np.int64)
        # JIT load / compile now, not on frame 1 (one inactive feature on dummy levels)
        one = np.zeros((1, 2), np.float32)
        out = [np.empty((1, 2), np.float32), np.empty(1, np.int8)] + [np.empty(1, np.float32) for _ in range(3)]
        lk_track((_DUMMY_LEVEL,) * MAX_LEVELS, (_DUMMY_LEVEL,) * MAX_LEVELS, 1, self._patch, one, one,
                 np.zeros(1, np.uint8), *self._params, *out, np.empty(1, np.int32), 1)

    @property
    def _params(self) -> tuple:
        """The kernel scalars, read from the config at every call (FeatureTracker.apply_config
        changes them live)."""
        c = self.config
        npar, gslot, oslot = _MODE_INFO[c.mode]
        return (int(gslot), int(oslot), int(npar), int(c.max_iterations), float(c.eps), float(c.min_eigen),
                float(c.max_residual), float(c.osc_eps), float(c.osc_growth))

    def _levels(self, pyr, what):
        L = int(self.config.levels)
        levels = _pyramid(pyr, L, what)
        for k, lv in enumerate(levels):
            want = (self.height >> k, self.width >> k)
            if lv.dtype != np.uint8 or lv.ndim != 2 or lv.shape != want:
                raise ValueError(f"{what} pyramid level {k} is {lv.dtype} {lv.shape}, expected uint8 {want}")
        return tuple(_readonly(lv) for lv in levels) + (_DUMMY_LEVEL,) * (MAX_LEVELS - L)

    def track(self, tmpl, img, tmpl_pos, pred=None, active=None) -> TrackResult:
        """Track ``tmpl_pos`` from ``tmpl`` into ``img`` (uint8 images or pyramid lists)."""
        if self.config.cpu_backend == "opencv":
            return super().track(tmpl, img, tmpl_pos, pred, active)
        self._check(tmpl)
        self._check(img)
        tmpl_pos = np.ascontiguousarray(np.asarray(tmpl_pos, np.float32).reshape(-1, 2))
        n = tmpl_pos.shape[0]
        if n > self.max_features:
            raise ValueError(f"{n} features exceed max_features={self.max_features}")
        pred = tmpl_pos if pred is None else np.ascontiguousarray(np.asarray(pred, np.float32).reshape(-1, 2))
        if pred.shape != tmpl_pos.shape:
            raise ValueError(f"pred shape {pred.shape} differs from tmpl_pos shape {tmpl_pos.shape}")
        act = np.ones(n, np.uint8) if active is None else np.asarray(active, bool).reshape(n).view(np.uint8)
        tp, ip = self._levels(tmpl, "template"), self._levels(img, "image")
        pos = np.empty((n, 2), np.float32)
        status = np.empty(n, np.int8)
        residual, gain, offset = np.empty(n, np.float32), np.empty(n, np.float32), np.empty(n, np.float32)
        iters = np.empty(n, np.int32)
        if n:
            numba.set_num_threads(self.threads)    # thread-local in numba: set for whichever thread calls
            lk_track(tp, ip, int(self.config.levels), self._patch, tmpl_pos, pred, np.ascontiguousarray(act),
                     *self._params, pos, status, residual, gain, offset, iters, self.threads)
        return TrackResult(pos, status, residual, gain, offset, iters)
