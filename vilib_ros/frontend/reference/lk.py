"""Pyramidal inverse-compositional Lucas-Kanade tracker with affine illumination.

The algorithm of vilib / "Faster than FAST" (IROS 2020): parameters q = [tx, ty, alpha, beta]
with I(x + t) = (1 + alpha) T(x) + beta, the Hessian built once per feature and level from the
template and the gain at the start of the level ("approximated simultaneous inverse
compositional"), PxP patches (16 on fine levels, 8 on coarse ones), bilinear sampling, up to
``max_iterations`` per level, stop when the squared translation update < ``eps``, or when the
translation update jumps back and forth (``osc_eps``, OpenCV's test, and ``osc_growth``: a
reversal that does not shrink): then half of the last update is taken back and the level ends.

* :func:`track_cpu` - the NumPy reference (vectorised over features), mirror of
  ``kernels/lk.cu`` step by step; test reference and CPU fallback.
* :class:`CpuLKTracker` / :class:`GpuLKTracker` - same interface, made by :func:`make_tracker`.
* :class:`TrackStatus` - the int8 status enum shared with the kernel.

Conventions: level-0 pixel centres at integer coordinates; level l coordinate
``x_l = (x_0 + 0.5) / 2**l - 0.5`` (2x2-mean pyramid of :mod:`vilib_ros.frontend.pyramid`).
"""
from __future__ import annotations

import dataclasses
import enum
import logging
from dataclasses import dataclass, field

import numpy as np

from vilib_ros._cuda import Layout, launch

log = logging.getLogger("vilib_ros.frontend.tracker")

MODES = ("translation", "offset", "gain", "gain_offset")
TEMPLATES = ("previous", "reference")
WARPS = ("translation", "affine")
#: A stored template level: the (P + 2) x (P + 2) bilinear samples around the template position
#: (the patch and its one-pixel gradient ring), row stride P + 2, in the first (P + 2)^2 entries
#: of a slot of PATCH_AREA floats (0..255 units); see vilib_ros.frontend.templates.
MAX_PATCH = 16
PATCH_AREA = (MAX_PATCH + 2) ** 2
#: The GPU bank (kernels/lk.cu TPL_STRIDE) keeps after each level's samples the level's solver
#: (flat-patch measure, the inverses of the Gauss-Newton matrices at gain 1: lk_extract_<mode>
#: makes it once per template instead of every frame's LK building it); SOLVER_AREA floats.
SOLVER_AREA = 84
BANK_STRIDE = PATCH_AREA + SOLVER_AREA
_MODE_INFO = {  # n params, gain slot, offset slot (as in ModeInfo<> of lk.cu)
    "translation": (2, -1, -1),
    "offset": (3, -1, 2),
    "gain": (3, 2, -1),
    "gain_offset": (4, 2, 3),
}
LK_WARPS = 4
#: Warps per feature in the stored-template kernels (``lk_template_*``, kernels/lk.cu
#: ``LK_FEATURE_WARPS``: 1, 2 or 4, dividing the warps per block): on the 16x16 levels each warp
#: of a feature samples its share of the patch and the sums are exchanged through shared memory,
#: which shortens the sample loops on each feature's serial chain. Two warps: LK + FB check 41.8
#: -> 37.5 us per frame on the H100 (bench/profile_frame_kernels.py --quick, 2026-11-24).
LK_FEATURE_WARPS = 2
#: NVRTC options of ``kernels/lk.cu``: approximate fp32 division and square root, denormals
#: flushed. The solver's divisions and square roots (the Cholesky inverse of the Hessian per level,
#: the composition with the inverse step per iteration) are on each feature's serial chain: with
#: IEEE division and square root the default tracker took 54.8 us per frame on the H100, with
#: these 37.2 us (bench/profile_frame_kernels.py, 2026-11-24). The converged position is where
#: sum U r = 0, which the accuracy of H^-1 does not move; the GPU and CPU trackers agree within
#: the tolerances of test_tracker_gpu / test_frontend.TestGpuMatchesCpu.
LK_OPTIONS = ("--ftz=true", "--prec-div=false", "--prec-sqrt=false")


class TrackStatus(enum.IntEnum):
    """Per-feature outcome (int8), the same codes as ``LK_*`` in ``kernels/lk.cu``."""

    TRACKED = 0
    LEFT_IMAGE = 1
    DIVERGED = 2
    NOT_CONVERGED = 3
    INACTIVE = 4


@dataclass
class TrackerConfig:
    mode: str = "gain_offset"                 # translation | offset | gain | gain_offset
    levels: int = 5                           # pyramid levels used (0..levels-1)
    patch_sizes: tuple = (16, 16, 16, 8, 8)   # per level, 16 or 8
    max_iterations: int = 30                  # per level
    eps: float = 5e-4                         # stop when dtx^2 + dty^2 < eps (level pixels)
    min_eigen: float = 1e-5                   # flat-patch test: min eigenvalue of the gradient matrix / P^2 (intensities in [0,1])
    max_residual: float = 0.0                 # mean |residual| (0..255) above which -> DIVERGED; 0 = off
    # oscillation stop (both: take back half of the last update, the level ends as converged; 0 = off):
    osc_eps: float = 0.01                     # OpenCV's 'jumping back and forth': |dq_k + dq_k-1| < osc_eps in x and y (level px)
    osc_growth: float = 1.0                   # a reversal that does not shrink: dq_k . dq_k-1 < 0 and |dq_k|^2 >= osc_growth |dq_k-1|^2
    cpu_backend: str = "numpy"                # numpy | opencv (translation only)
    # what a track is tracked against (see vilib_ros.frontend.templates; bench/results/tracks_quality.md):
    template: str = "reference"               # previous: the last frame's patch | reference: the patch of the frame where the track was detected
    template_refresh_residual: float = 0.0    # reference: take a new template where the residual (0..255) exceeds this; 0 = never
    template_max_age: int = 0                 # reference: take a new template after this many frames; 0 = never
    warp: str = "affine"                      # translation | affine: the patch's deformation since the template (2x2 matrix, per track)

    def validate(self) -> "TrackerConfig":
        if self.mode not in MODES:
            raise ValueError(f"TrackerConfig.mode must be one of {MODES}, got {self.mode!r}")
        if int(self.levels) != self.levels or not 1 <= self.levels <= 8:
            raise ValueError(f"TrackerConfig.levels must be in 1..8, got {self.levels!r}")
        ps = tuple(int(p) for p in self.patch_sizes)
        if len(ps) < self.levels or any(p not in (8, 16) for p in ps[: self.levels]):
            raise ValueError(f"TrackerConfig.patch_sizes needs one of 8/16 per level (levels={self.levels}), got {self.patch_sizes!r}")
        if not 1 <= int(self.max_iterations) <= 1000:
            raise ValueError(f"TrackerConfig.max_iterations must be in 1..1000, got {self.max_iterations!r}")
        if not self.eps > 0:
            raise ValueError(f"TrackerConfig.eps must be > 0, got {self.eps!r}")
        if not (self.osc_eps >= 0 and self.osc_growth >= 0):
            raise ValueError(f"TrackerConfig.osc_eps and osc_growth must be >= 0, got {self.osc_eps!r}, {self.osc_growth!r}")
        if not self.min_eigen >= 0 or not self.max_residual >= 0:
            raise ValueError("TrackerConfig.min_eigen and max_residual must be >= 0")
        if self.cpu_backend not in ("numpy", "opencv"):
            raise ValueError(f"TrackerConfig.cpu_backend must be numpy|opencv, got {self.cpu_backend!r}")
        if self.cpu_backend == "opencv" and self.mode != "translation":
            raise ValueError("TrackerConfig.cpu_backend='opencv' supports mode='translation' only")
        if self.template not in TEMPLATES:
            raise ValueError(f"TrackerConfig.template must be one of {TEMPLATES}, got {self.template!r}")
        if self.warp not in WARPS:
            raise ValueError(f"TrackerConfig.warp must be one of {WARPS}, got {self.warp!r}")
        if self.cpu_backend == "opencv" and (self.template, self.warp) != ("previous", "translation"):
            raise ValueError("TrackerConfig.cpu_backend='opencv' tracks frame to frame with a translation only "
                             "(template='previous', warp='translation')")
        if not self.template_refresh_residual >= 0:
            raise ValueError(f"TrackerConfig.template_refresh_residual must be >= 0, got {self.template_refresh_residual!r}")
        if int(self.template_max_age) != self.template_max_age or self.template_max_age < 0:
            raise ValueError(f"TrackerConfig.template_max_age must be an integer >= 0, got {self.template_max_age!r}")
        return self

    @property
    def patch16_mask(self) -> int:
        return sum(1 << l for l in range(self.levels) if int(self.patch_sizes[l]) == 16)


@dataclass
class TrackResult:
    pos: np.ndarray        # float32 (N, 2) level-0 positions
    status: np.ndarray     # int8 (N,) TrackStatus
    residual: np.ndarray   # float32 (N,) final mean |I - (1+a)T - b| on level 0, 0..255 units
    gain: np.ndarray       # float32 (N,) 1 + alpha
    offset: np.ndarray     # float32 (N,) beta, 0..255 units
    iterations: np.ndarray  # int32 (N,) total iterations over all levels
    timings: dict = field(default_factory=dict)
    affine: np.ndarray | None = None   # float32 (N, 4) a11 a12 a21 a22 of the affine warp (warp='affine' only)

    @property
    def tracked(self) -> np.ndarray:
        return self.status == TrackStatus.TRACKED


# ---------------------------------------------------------------------------------------------
# NumPy reference


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
    from vilib_ros.frontend.pyramid import build_pyramid_cpu

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

    ``tmpl_pyr`` / ``img_pyr``: uint8 images or lists of pyramid levels.
    """
    cfg = (config or TrackerConfig()).validate()
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
    npar, gslot, oslot = _MODE_INFO[cfg.mode]
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


def track_opencv(tmpl_img, img, tmpl_pos, pred=None, window: int = 21, levels: int = 3,
                 max_iterations: int = 30, eps: float = 0.01) -> TrackResult:
    """OpenCV ``calcOpticalFlowPyrLK`` (translation only) in the same result format."""
    import cv2

    p0 = np.ascontiguousarray(np.asarray(tmpl_pos, np.float32).reshape(-1, 1, 2))
    n = p0.shape[0]
    if n == 0:
        z = np.zeros(0, np.float32)
        return TrackResult(np.zeros((0, 2), np.float32), np.zeros(0, np.int8), z, z, z, np.zeros(0, np.int32))
    flags = 0
    p1 = None
    if pred is not None:
        p1 = np.ascontiguousarray(np.asarray(pred, np.float32).reshape(-1, 1, 2)).copy()
        flags = cv2.OPTFLOW_USE_INITIAL_FLOW
    p1, st, err = cv2.calcOpticalFlowPyrLK(
        tmpl_img, img, p0, p1, winSize=(window, window), maxLevel=levels - 1,
        criteria=(cv2.TERM_CRITERIA_COUNT | cv2.TERM_CRITERIA_EPS, max_iterations, eps), flags=flags)
    status = np.where(st.ravel() == 1, TrackStatus.TRACKED, TrackStatus.DIVERGED).astype(np.int8)
    return TrackResult(p1.reshape(-1, 2).astype(np.float32), status, err.ravel().astype(np.float32),
                       np.ones(n, np.float32), np.zeros(n, np.float32), np.zeros(n, np.int32))


# ---------------------------------------------------------------------------------------------
# Trackers with one interface


OUTPUT_FIELDS = (("pos", np.float32, 2), ("status", np.int8, 0), ("residual", np.float32, 0), ("gain", np.float32, 0),
                 ("offset", np.float32, 0), ("iterations", np.int32, 0))


def output_fields(m: int, prefix: str = "") -> list:
    return [(prefix + n, dt, (m, k) if k else (m,)) for n, dt, k in OUTPUT_FIELDS]


class CpuLKTracker:
    """CPU twin of :class:`GpuLKTracker` (NumPy reference, or OpenCV for translation)."""

    device = "cpu"

    def __init__(self, width: int, height: int, config: TrackerConfig | None = None, max_features: int = 1024):
        self.config = (config or TrackerConfig()).validate()
        self.width, self.height, self.max_features = int(width), int(height), int(max_features)

    def _check(self, img):
        if isinstance(img, (list, tuple)):
            img = img[0]
        img = np.asarray(img)
        if img.dtype != np.uint8 or img.shape != (self.height, self.width):
            raise ValueError(f"tracker built for uint8 {self.height}x{self.width} images, got {img.dtype} {img.shape}")

    def _levels_used(self, levels: int | None) -> int:
        """The levels a track uses: ``levels`` (the finest ones), else the config's."""
        if levels is None:
            return int(self.config.levels)
        if not 1 <= levels <= self.config.levels:
            raise ValueError(f"levels must be in 1..{self.config.levels}, got {levels!r}")
        return int(levels)

    def track(self, tmpl, img, tmpl_pos, pred=None, active=None, levels: int | None = None) -> TrackResult:
        """Track ``tmpl_pos`` from ``tmpl`` into ``img`` (uint8 images or pyramid lists); ``levels``:
        on the finest levels only (the forward-backward check's backward track), else the config's."""
        L = self._levels_used(levels)
        cfg = self.config if L == self.config.levels else dataclasses.replace(self.config, levels=L)
        self._check(tmpl)
        self._check(img)
        tmpl_pos = np.asarray(tmpl_pos, np.float32).reshape(-1, 2)
        if tmpl_pos.shape[0] > self.max_features:
            raise ValueError(f"{tmpl_pos.shape[0]} features exceed max_features={self.max_features}")
        if self.config.cpu_backend == "opencv":
            t0 = tmpl[0] if isinstance(tmpl, (list, tuple)) else tmpl
            i0 = img[0] if isinstance(img, (list, tuple)) else img
            res = track_opencv(t0, i0, tmpl_pos, pred, window=int(cfg.patch_sizes[0]) + 1,
                               levels=cfg.levels, max_iterations=cfg.max_iterations)
            if active is not None:
                a = np.asarray(active, bool)
                res.status[~a] = TrackStatus.INACTIVE
            return res
        return track_cpu(tmpl, img, tmpl_pos, pred, cfg, active)

    def extract_templates(self, pyr, pos, patch, valid, slots) -> None:
        """Store the templates of the features at ``pos`` (N, 2) in pyramid ``pyr`` in rows
        ``slots`` of the template bank ``patch`` / ``valid`` (see :mod:`vilib_ros.frontend.templates`)."""
        from vilib_ros.frontend.templates import extract_templates_cpu   # templates builds on this module

        self._check(pyr)
        slots = np.asarray(slots, np.int64).reshape(-1)
        if slots.size:
            patch[slots], valid[slots] = extract_templates_cpu(pyr, pos, self.config)

    def track_templates(self, patch, valid, slots, img, pred, gain=None, offset=None, affine=None,
                        active=None) -> TrackResult:
        """Track the features whose templates are rows ``slots`` of the template bank into
        ``img`` (uint8 image or pyramid list), from ``pred``, the illumination ``gain`` /
        ``offset`` and (warp='affine') the warp ``affine`` (:func:`~vilib_ros.frontend.templates.track_templates_cpu`)."""
        from vilib_ros.frontend.templates import track_templates_cpu

        self._check(img)
        n = np.asarray(slots).reshape(-1).shape[0]
        if n > self.max_features:
            raise ValueError(f"{n} features exceed max_features={self.max_features}")
        return track_templates_cpu(patch, valid, slots, img, pred, self.config, gain, offset, affine, active)


def _ptr_table(cp, pyramid_levels):
    return cp.asarray(np.array([lv.data.ptr for lv in pyramid_levels], dtype=np.uint64))


class GpuLKTracker:
    """One warp per feature LK on device pyramids (``kernels/lk.cu``).

    Device buffers for ``max_features`` features are allocated here; :meth:`track_device`
    enqueues the kernel on given device pyramids without synchronising or allocating;
    :meth:`track` is the host convenience twin of :meth:`CpuLKTracker.track`.
    """

    device = "cuda"

    def __init__(self, width: int, height: int, config: TrackerConfig | None = None, max_features: int = 1024,
                 warps: int | None = None, defines: dict | None = None, feature_warps: int | None = None):
        import cupy as cp

        from vilib_ros._cuda import get_module

        self.config = (config or TrackerConfig()).validate()
        self.width, self.height, self.max_features = int(width), int(height), int(max_features)
        self.warps = int(warps if warps is not None else LK_WARPS)
        if not 1 <= self.warps <= 32:
            raise ValueError(f"warps must be in 1..32, got {warps!r}")
        #: warps per feature in lk_template_* (LK_FEATURE_WARPS; must divide the warps per block)
        self.feature_warps = int(LK_FEATURE_WARPS if feature_warps is None else feature_warps)
        if self.feature_warps not in (1, 2, 4) or self.warps % self.feature_warps:
            raise ValueError(f"feature_warps must be 1, 2 or 4 and divide warps={self.warps}, "
                             f"got {self.feature_warps!r}")
        c = self.config
        mod = get_module("lk", {"LK_WARPS": self.warps, "LK_OSC_EPS": f"{float(c.osc_eps)!r}f",
                                "LK_OSC_GROWTH": f"{float(c.osc_growth)!r}f", "LK_FEATURE_WARPS": self.feature_warps, "TPL_SOLVER": SOLVER_AREA,
                                **(defines or {})}, LK_OPTIONS)
        self.kernel = mod.get_function(f"lk_track_{self.config.mode}")
        # the frontend's variant on the device-side track table (same compile-time settings)
        self.frontend_kernel = mod.get_function(f"lk_frontend_{self.config.mode}")
        # stored templates (vilib_ros.frontend.templates): LK from the template bank, and its extraction
        self.template_kernel = mod.get_function(f"lk_template_{self.config.warp}_{self.config.mode}")
        # the same with the forward-backward check fused (the frontend's default)
        self.template_fb_kernel = mod.get_function(f"lk_template_fb_{self.config.warp}_{self.config.mode}")
        self.extract_kernel = mod.get_function(f"lk_extract_{self.config.mode}")
        self._tables: dict[int, object] = {}
        self._arg_cache: dict = {}   # launch arguments per set of buffers (built once: ~10 us of Python)
        m = self.max_features
        # inputs and outputs each in one buffer: one upload, one download per call
        self.in_layout = Layout([("tmpl_pos", np.float32, (m, 2)), ("pred", np.float32, (m, 2)),
                                 ("active", np.int8, (m,))])
        self.out_layout = Layout(output_fields(m))
        self.d_in_buf = cp.zeros(self.in_layout.nbytes, cp.uint8)
        self.d_out_buf = cp.zeros(self.out_layout.nbytes, cp.uint8)
        d_in = self.in_layout.views(self.d_in_buf)
        self.d_tmpl_pos, self.d_pred, self.d_active = d_in["tmpl_pos"], d_in["pred"], d_in["active"]
        self.d_out = self.out_layout.views(self.d_out_buf)
        self._pyrs = None
        self._events = (cp.cuda.Event(), cp.cuda.Event())

    def template_launch(self, n: int) -> tuple:
        """(grid, block) of ``template_kernel`` / ``template_fb_kernel`` for ``n`` slots:
        :attr:`feature_warps` warps per slot."""
        per_block = self.warps // self.feature_warps
        return ((n + per_block - 1) // per_block, 1, 1), (32, self.warps, 1)

    def level_table(self, pyramid):
        """Device table of level pointers for a GpuPyramid (made once per pyramid)."""
        key = id(pyramid)
        t = self._tables.get(key)
        if t is None:
            import cupy as cp

            if pyramid.n_levels < self.config.levels:
                raise ValueError(f"pyramid has {pyramid.n_levels} levels, the tracker needs {self.config.levels}")
            if pyramid.shapes[0] != (self.height, self.width):
                raise ValueError(f"pyramid is {pyramid.shapes[0]}, tracker built for {(self.height, self.width)}")
            t = (_ptr_table(cp, pyramid.levels), pyramid)  # keep the pyramid alive with its table
            self._tables[key] = t
        return t[0]

    def launch_args(self, tmpl_table, img_table, tmpl_pos, pred, active, active_value, n, out):
        c = self.config
        return (tmpl_table, img_table, np.int32(self.width), np.int32(self.height), np.int32(c.levels),
                np.int32(c.patch16_mask), tmpl_pos, pred, active, np.int32(active_value), np.int32(n),
                np.int32(c.max_iterations), np.float32(c.eps), np.float32(c.min_eigen), np.float32(c.max_residual),
                out["pos"], out["status"], out["residual"], out["gain"], out["offset"], out["iterations"])

    def track_device(self, tmpl_pyramid, img_pyramid, tmpl_pos, pred, active, n: int, out: dict | None = None,
                     stream=None, active_value: int = 1, checked: bool = True) -> None:
        """Enqueue tracking of ``n`` slots (device arrays) on ``stream``; no sync, no allocation."""
        if n <= 0:
            return
        out = self.d_out if out is None else out
        # the cached tuple holds every object whose id is in the key, so no id is reused while cached
        key = (id(tmpl_pyramid), id(img_pyramid), id(tmpl_pos), id(pred), id(active), active_value, n,
               id(out["pos"]), id(out["status"]), id(out["residual"]), id(out["gain"]), id(out["offset"]),
               id(out["iterations"]))
        hit = self._arg_cache.get(key)
        if hit is None:
            args = self.launch_args(self.level_table(tmpl_pyramid), self.level_table(img_pyramid), tmpl_pos, pred,
                                    active, active_value, n, out)
            if len(self._arg_cache) >= 256:
                self._arg_cache.clear()
            grid = ((n + self.warps - 1) // self.warps, 1, 1)
            hit = self._arg_cache[key] = (grid, (32, self.warps, 1), args, (tmpl_pyramid, img_pyramid))
        launch(self.kernel, hit[0], hit[1], hit[2], stream=stream, checked=checked)

    def track(self, tmpl, img, tmpl_pos, pred=None, active=None) -> TrackResult:
        """Host convenience: upload two images, build pyramids, track, download (synchronous)."""
        import cupy as cp

        from vilib_ros.frontend.pyramid import GpuPyramid

        for im in (tmpl, img):
            a = np.asarray(im[0] if isinstance(im, (list, tuple)) else im)
            if a.dtype != np.uint8 or a.shape != (self.height, self.width):
                raise ValueError(f"tracker built for uint8 {self.height}x{self.width} images, got {a.dtype} {a.shape}")
        tmpl_pos = np.asarray(tmpl_pos, np.float32).reshape(-1, 2)
        n = tmpl_pos.shape[0]
        if n > self.max_features:
            raise ValueError(f"{n} features exceed max_features={self.max_features}")
        pred = tmpl_pos if pred is None else np.asarray(pred, np.float32).reshape(n, 2)
        if self._pyrs is None:
            self._pyrs = [GpuPyramid(self.width, self.height, self.config.levels) for _ in range(2)]
        for pyr, im in zip(self._pyrs, (tmpl, img)):
            im0 = im[0] if isinstance(im, (list, tuple)) else im
            pyr.upload(np.asarray(im0))
            pyr.build()
        if n == 0:
            z = np.zeros(0, np.float32)
            return TrackResult(np.zeros((0, 2), np.float32), np.zeros(0, np.int8), z, z, z, np.zeros(0, np.int32))
        self.d_tmpl_pos[:n].set(tmpl_pos)
        self.d_pred[:n].set(pred)
        self.d_active[:n].set(np.ones(n, np.int8) if active is None else np.asarray(active, np.int8).reshape(n))
        e0, e1 = self._events
        stream = cp.cuda.get_current_stream()
        e0.record(stream)
        self.track_device(self._pyrs[0], self._pyrs[1], self.d_tmpl_pos, self.d_pred, self.d_active, n, stream=stream)
        e1.record(stream)
        e1.synchronize()
        o = {k: v[:n].get() for k, v in self.d_out.items()}
        return TrackResult(o["pos"], o["status"], o["residual"], o["gain"], o["offset"], o["iterations"],
                           timings={"gpu_s": cp.cuda.get_elapsed_time(e0, e1) * 1e-3})


def make_tracker(width: int, height: int, config: TrackerConfig | None = None, device: str = "auto",
                 max_features: int = 1024):
    """GpuLKTracker where CUDA is available (``device='auto'|'cuda'``), else the CPU tracker
    (compiled, or the NumPy CpuLKTracker: :mod:`vilib_ros.frontend.cpu_backend`)."""
    from vilib_ros._cuda import CudaUnavailable, resolve_device

    dev = resolve_device(device)
    if dev == "cuda":
        try:
            return GpuLKTracker(width, height, config, max_features)
        except CudaUnavailable:
            if device == "cuda":
                raise
            log.warning("LK kernel unavailable, using the CPU tracker", exc_info=True)
    from vilib_ros.frontend.cpu_backend import make_cpu_tracker

    return make_cpu_tracker(width, height, config, max_features)
