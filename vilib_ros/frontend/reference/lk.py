"""The NumPy reference of the pyramidal inverse-compositional Lucas-Kanade tracker with affine
illumination.

The algorithm of vilib / "Faster than FAST" (IROS 2020): parameters q = [tx, ty, alpha, beta]
with I(x + t) = (1 + alpha) T(x) + beta, the Hessian built once per feature and level from the
template and the gain at the start of the level ("approximated simultaneous inverse
compositional"), PxP patches (16 on fine levels, 8 on coarse ones), bilinear sampling, up to
``max_iterations`` per level, stop when the squared translation update < ``eps``, or when the
translation update jumps back and forth (``osc_eps``, OpenCV's test, and ``osc_growth``: a
reversal that does not shrink): then half of the last update is taken back and the level ends.

:func:`track_cpu` is the reference (vectorised over features), mirror of ``kernels/lk.cu`` step
by step: the test oracle of the compiled twin (:mod:`vilib_ros.frontend.compiled.lk`) and of the
kernels, and the CPU path without numba. Its iteration (:func:`_track`) also tracks against
stored templates (:mod:`vilib_ros.frontend.reference.templates`). The tracker objects with one
interface are :class:`~vilib_ros.frontend.reference.tracker.CpuLKTracker` and its twins; the
statuses are :class:`vilib_ros.types.TrackStatus`, shared with the kernel.

Conventions: level-0 pixel centres at integer coordinates; level l coordinate
``x_l = (x_0 + 0.5) / 2**l - 0.5`` (2x2-mean pyramid of :mod:`vilib_ros.frontend.reference.pyramid`).
"""
from __future__ import annotations

import numpy as np

from vilib_ros.frontend.config import MODE_INFO, TrackerConfig
from vilib_ros.frontend.reference.pyramid import build_pyramid_cpu
from vilib_ros.types import TrackResult, TrackStatus


def _bilinear(img: np.ndarray, x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Bilinear samples of a uint8 image at float coordinates (all in bounds), float64."""
    fx, fy = np.floor(x), np.floor(y)
    x0, y0 = fx.astype(np.intp), fy.astype(np.intp)
    ax, ay = x - fx, y - fy
    w = img.shape[1]
    flat = img.reshape(-1)
    i = y0 * w + x0
    i00 = flat[i].astype(np.float64)
    i10 = flat[i + 1]
    i01 = flat[i + w]
    i11 = flat[i + w + 1]
    return (1 - ay) * ((1 - ax) * i00 + ax * i10) + ay * ((1 - ax) * i01 + ax * i11)


def _fits(x, y, half, w, h):
    return (x - half >= 0) & (y - half >= 0) & (x + half < w - 1) & (y + half < h - 1)


def _as_pyramid(img_or_pyr, levels: int) -> list[np.ndarray]:
    if isinstance(img_or_pyr, (list, tuple)):
        if len(img_or_pyr) < levels:
            raise ValueError(f"pyramid has {len(img_or_pyr)} levels, the tracker needs {levels}")
        return list(img_or_pyr)
    return build_pyramid_cpu(img_or_pyr, levels)


def _template_level(T, tcx, tcy, P):
    """Template values and central-difference gradients (0..1 units, (m, P*P) float64) of the
    P x P patches centred at (tcx, tcy), bilinear, as ``lk.cu`` computes them."""
    half = 0.5 * (P - 1)
    o = np.arange(P, dtype=np.float64) - half
    OX, OY = np.meshgrid(o, o)          # (P, P): row = y offset
    px = tcx[:, None] + OX.ravel()[None]
    py = tcy[:, None] + OY.ravel()[None]
    tv = _bilinear(T, px, py) / 255.0
    gx = 0.5 * (_bilinear(T, px + 1, py) - _bilinear(T, px - 1, py)) / 255.0
    gy = 0.5 * (_bilinear(T, px, py + 1) - _bilinear(T, px, py - 1)) / 255.0
    return tv, gx, gy


def track_cpu(tmpl_pyr, img_pyr, tmpl_pos, pred=None, config: TrackerConfig | None = None,
              active=None) -> TrackResult:
    """NumPy reference of ``lk_track_<mode>``: track ``tmpl_pos`` (N, 2) from the template
    pyramid into the image pyramid starting at ``pred`` (default: ``tmpl_pos``).

    ``tmpl_pyr`` / ``img_pyr``: uint8 images or lists of pyramid levels; ``config``: a validated
    TrackerConfig (default: the defaults).
    """
    cfg = config or TrackerConfig()
    L = int(cfg.levels)
    tp = _as_pyramid(tmpl_pyr, L)
    ip = _as_pyramid(img_pyr, L)
    if tp[0].shape != ip[0].shape:
        raise ValueError(f"template and image sizes differ: {tp[0].shape} vs {ip[0].shape}")
    tmpl_pos = np.asarray(tmpl_pos, dtype=np.float32).reshape(-1, 2)
    pred = tmpl_pos if pred is None else np.asarray(pred, dtype=np.float32).reshape(-1, 2)
    if pred.shape != tmpl_pos.shape:
        raise ValueError(f"pred shape {pred.shape} differs from tmpl_pos shape {tmpl_pos.shape}")
    for lvl in range(L):
        if tp[lvl].shape != ip[lvl].shape:
            raise ValueError(f"pyramid level {lvl} has shape {tp[lvl].shape}/{ip[lvl].shape}")
    tpd = tmpl_pos.astype(np.float64)

    def template(lvl, P, half, cand):
        """(features whose template fits, their template values and gradients) at ``lvl``."""
        T = tp[lvl]
        h, w = T.shape
        s = 1.0 / (1 << lvl)
        tcx = (tpd[cand, 0] + 0.5) * s - 0.5
        tcy = (tpd[cand, 1] + 0.5) * s - 0.5
        ok = _fits(tcx, tcy, half + 1.0, w, h)
        return (cand[ok],) + _template_level(T, tcx[ok], tcy[ok], P)

    return _track(template, ip, pred, np.isfinite(tmpl_pos).all(1), cfg, active, None, None)


def _track(template, ip, pred, finite_tmpl, cfg: TrackerConfig, active, alpha0, beta0) -> TrackResult:
    """The LK iteration of :func:`track_cpu` / :func:`track_templates_cpu`; ``template(lvl, P,
    half, cand)`` gives (the candidates whose template is usable at ``lvl``, their values,
    x and y gradients)."""
    L = int(cfg.levels)
    h0, w0 = ip[0].shape
    n = pred.shape[0]
    npar, gslot, oslot = MODE_INFO[cfg.mode]
    act = np.ones(n, bool) if active is None else np.asarray(active, bool).reshape(n)

    top = 1.0 / (1 << (L - 1))
    x = (pred[:, 0].astype(np.float64) + 0.5) * top - 0.5
    y = (pred[:, 1].astype(np.float64) + 0.5) * top - 0.5
    alpha = np.zeros(n) if alpha0 is None or gslot < 0 else alpha0.copy()
    beta = np.zeros(n) if beta0 is None or oslot < 0 else beta0.copy()
    residual = np.zeros(n)
    iters = np.zeros(n, np.int32)
    status = np.full(n, TrackStatus.NOT_CONVERGED, np.int8)
    finite = np.isfinite(pred).all(1) & finite_tmpl & np.isfinite(alpha) & np.isfinite(beta)
    run = act & finite
    status[act & ~finite] = TrackStatus.DIVERGED

    for lvl in range(L - 1, -1, -1):
        P = int(cfg.patch_sizes[lvl])
        half = 0.5 * (P - 1)
        I = ip[lvl]
        h, w = h0 >> lvl, w0 >> lvl
        if I.shape != (h, w):
            raise ValueError(f"pyramid level {lvl} has shape {I.shape}, expected {(h, w)}")
        code = np.full(n, 2, np.int8)  # LVL_SKIPPED by default
        code[run] = 3  # LVL_LEFT where the template does not fit
        idx, tv, gx, gy = template(lvl, P, half, np.flatnonzero(run))
        if idx.size:
            o = np.arange(P, dtype=np.float64) - half
            OX, OY = np.meshgrid(o, o)          # (P, P): row = y offset
            px0, py0 = OX.ravel()[None], OY.ravel()[None]
            g = np.ones(idx.size) if gslot < 0 else 1.0 + alpha[idx]
            # flat-patch test
            a = (gx * gx).sum(1) / (P * P)
            b = (gx * gy).sum(1) / (P * P)
            c = (gy * gy).sum(1) / (P * P)
            lmin = 0.5 * (a + c - np.sqrt((a - c) ** 2 + 4 * b * b))
            U = [g[:, None] * gx, g[:, None] * gy]
            if gslot >= 0:
                U.append(tv)
            if oslot >= 0:
                U.append(np.ones_like(tv))
            U = np.stack(U, axis=2)                           # (m, PP, npar)
            H = np.einsum("mpi,mpj->mij", U, U)
            ok = lmin >= cfg.min_eigen
            det = np.linalg.det(H)
            ok &= np.isfinite(det) & (np.abs(det) > 1e-300)
            code[idx[~ok]] = 4  # LVL_SINGULAR
            keep = np.flatnonzero(ok)
            idx, U, tv = idx[keep], U[keep], tv[keep]
            Hi = np.linalg.inv(H[keep]) if keep.size else np.zeros((0, npar, npar))
            xs, ys = x[idx].copy(), y[idx].copy()
            live = np.ones(idx.size, bool)
            prev = np.full((idx.size, 2), np.nan)   # previous translation update (NaN: none yet)
            for _ in range(int(cfg.max_iterations)):
                li = np.flatnonzero(live)
                if li.size == 0:
                    break
                f = idx[li]
                out = ~_fits(x[f], y[f], half, w, h)
                if out.any():
                    fo = f[out]
                    x[fo], y[fo] = xs[li[out]], ys[li[out]]
                    code[fo] = 3
                    live[li[out]] = False
                    li, f = li[~out], f[~out]
                    if li.size == 0:
                        break
                iv = _bilinear(I, x[f, None] + px0, y[f, None] + py0) / 255.0
                r = iv - (1.0 + alpha[f, None]) * tv[li] - beta[f, None]
                bvec = np.einsum("mpi,mp->mi", U[li], r)
                dq = np.einsum("mij,mj->mi", Hi[li], bvec)
                x[f] -= dq[:, 0]
                y[f] -= dq[:, 1]
                if gslot >= 0:
                    alpha[f] += dq[:, gslot]
                if oslot >= 0:
                    beta[f] += dq[:, oslot]
                residual[f] = np.abs(r).mean(1) * 255.0
                iters[f] += 1
                conv = dq[:, 0] ** 2 + dq[:, 1] ** 2 < cfg.eps
                # oscillation stop (see TrackerConfig): checked from the 2nd iteration (prev NaN before)
                px_, py_ = prev[li, 0], prev[li, 1]
                osc = np.zeros(li.size, bool)
                if cfg.osc_eps > 0:
                    osc |= (np.abs(dq[:, 0] + px_) < cfg.osc_eps) & (np.abs(dq[:, 1] + py_) < cfg.osc_eps)
                if cfg.osc_growth > 0:
                    osc |= ((dq[:, 0] * px_ + dq[:, 1] * py_ < 0)
                            & (dq[:, 0] ** 2 + dq[:, 1] ** 2 >= cfg.osc_growth * (px_ ** 2 + py_ ** 2)))
                osc &= ~conv
                if osc.any():
                    fo, half_dq = f[osc], 0.5 * dq[osc]
                    x[fo] += half_dq[:, 0]
                    y[fo] += half_dq[:, 1]
                    if gslot >= 0:
                        alpha[fo] -= half_dq[:, gslot]
                    if oslot >= 0:
                        beta[fo] -= half_dq[:, oslot]
                    conv = conv | osc
                prev[li] = dq[:, :2]
                code[f[conv]] = 0
                live[li[conv]] = False
            code[idx[live]] = 1  # LVL_MAXITER
        if lvl == 0:
            level0_status(status, run, code)
        else:
            x = 2.0 * x + 0.5
            y = 2.0 * y + 0.5
    return finish(cfg, pred, act, run, x, y, alpha, beta, residual, status, iters)


def level0_status(status, run, code) -> None:
    """The features' statuses from their level-0 codes (converged / max. iterations / left /
    singular or skipped)."""
    status[run & (code == 0)] = TrackStatus.TRACKED
    status[run & (code == 1)] = TrackStatus.NOT_CONVERGED
    status[run & (code == 3)] = TrackStatus.LEFT_IMAGE
    status[run & ((code == 4) | (code == 2))] = TrackStatus.DIVERGED


def finish(cfg: TrackerConfig, pred, act, run, x, y, alpha, beta, residual, status, iters, bad=None) -> TrackResult:
    """The final checks (non-finite state, gain outside (0.2, 5), ``bad``, residual above
    ``max_residual``: DIVERGED; inactive: INACTIVE at the prediction) and the TrackResult."""
    bad = run & ~(np.isfinite(x) & np.isfinite(y) & np.isfinite(alpha) & np.isfinite(beta)
                  & (1 + alpha > 0.2) & (1 + alpha < 5.0)) | (run & bad if bad is not None else False)
    status[bad] = TrackStatus.DIVERGED
    if cfg.max_residual > 0:
        ok_st = (status == TrackStatus.TRACKED) | (status == TrackStatus.NOT_CONVERGED)
        status[run & ok_st & (residual > cfg.max_residual)] = TrackStatus.DIVERGED
    pos = np.stack([x, y], 1).astype(np.float32)
    pos[~act] = pred[~act]
    status[~act] = TrackStatus.INACTIVE
    gain = (1.0 + alpha).astype(np.float32)
    gain[~act] = 1.0
    off = (beta * 255.0).astype(np.float32)
    off[~act] = 0.0
    residual[~act] = 0.0
    return TrackResult(pos, status, residual.astype(np.float32), gain, off, iters)
