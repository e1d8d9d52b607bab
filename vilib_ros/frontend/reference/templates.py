"""Reference templates and the affine warp, the NumPy reference: each track is tracked against
the patch of the frame where it was detected (``tracker.template: reference``), with the patch's
deformation since then estimated (``tracker.warp: affine``).

Tracked frame to frame (``template: previous``, ``warp: translation``), each frame's LK template
is the previous frame's patch at the previous result, so every step's sub-pixel error stays in
the next template and a track's error is a random walk over its age. A translation also cannot
follow the patch's deformation (perspective, rotation, scale), and the best translation of a
deformed patch is not where its centre went. With an affine warp A (x_image = x + A u for the
template offset u) against the reference template, the template's error does not accumulate
and its deformation is modelled, so a track's error stays at the level of one step. A reference
template without the warp gains nothing.

The paper's own code tracks against the first observation (uzh-rpg/vilib
``FeatureTrackerGPU``, ``klt_template_is_first_observation = true``: the reference patch and its
inverse Hessian computed once per track, in ``update_tracks``), translation and affine
illumination only.

Where the patch no longer looks like its template, the track ends (LK diverges, or
``tracker.max_residual``), or the template is taken again at the tracked position
(``tracker.template_refresh_residual``, or every ``tracker.template_max_age`` frames; the warp
and illumination restart at identity). ``template: previous`` with ``warp: affine`` is the
reference tracker with its templates taken again every frame.

Storage (:class:`vilib_ros.frontend.track_table.TemplateBank`), fixed-size slots as on the GPU:

* ``patch``: float32 (S, levels, PATCH_AREA): per track slot and tracked pyramid level, the
  (P + 2) x (P + 2) bilinear samples (0..255) around the template position at that level
  (``x_l = (x_0 + 0.5) / 2**l - 0.5``), row stride P + 2 (P = the level's patch size, 16 or 8;
  PATCH_AREA = 18 * 18 = 324). The inner P x P samples are the template values; the ring gives
  the central-difference gradients, exactly the values ``lk.cu`` computes from a template image
  (same bilinear fraction for every sample), so LK on a stored template of the previous frame
  equals LK from the previous frame's pyramid.
* ``valid``: uint8 (S, levels): 1 where the patch and its ring fit in the level (else the level
  is skipped; at level 0 the track ends as LEFT_IMAGE).
* per track in the table (moved when the table compacts, the bank rows stay put: an
  indirection, as vilib's ``d_indir_data``): ``tslot`` (bank row), ``gain`` / ``offset`` (the
  last frame's illumination relative to the template), ``affine`` (a11 a12 a21 a22, the last
  frame's warp): LK's start in the next frame, since both accumulate along a track;
  ``tmpl_age`` (frames since the template was taken), ``residual`` (the last LK mean
  |residual|, 0..255).

LK against a stored template (:func:`track_templates_cpu`): translation warp, the iteration of
``track_cpu``; affine warp (:func:`_track_affine`): parameters [d11, d12, d21, d22, dtx, dty,
(dalpha), (dbeta)], inverse compositional (the Hessian of U = [g gx ux, g gx uy, g gy ux,
g gy uy, g gx, g gy, (T), (1)] once per level, the warp composed with the inverse step), each
level first a translation phase (the sub-block of [dtx, dty, (dalpha), (dbeta)], A held), then
on 16 x 16 levels an affine phase (8 x 8 patches: A held). The Hessian is not stored: with the
"approximated simultaneous" gain it depends on the gain at each level's start; the CPU rebuilds
it from the stored patch per frame (32 patch sums, one pass).

On the GPU (``kernels/lk.cu``, ``kernels/frontend.cu``, :mod:`vilib_ros.frontend.gpu.frame`;
every template / warp on both devices, reference + affine the default):

1. The template bank is its own device buffer (``FrameKernels.bank`` float32 [S][levels][BANK_STRIDE],
   ``bank_valid`` uint8 [S][levels], allocated once), not part of the device table (the table is
   copied to the host per frame for RANSAC). The table holds per slot ``tslot`` int32, ``gain``,
   ``offset``, ``affine`` float32[4], ``residual``, ``tmpl_age`` int32 and ``refresh`` uint8,
   compacted by ``table_update`` with the other columns (``tslot`` moves, the bank rows do not).
   On the GPU each level of a bank row also holds the level's solver
   (``config.SOLVER_AREA`` floats after the samples, ``config.BANK_STRIDE`` in all): the
   flat-patch measure and the inverses of the Gauss-Newton matrices at gain 1, from which LK
   scales the inverse at the level's gain (H(g) = D H(1) D); this reference and the compiled
   twin rebuild the matrices per level and frame (the same values up to rounding).
2. ``lk_extract_<mode>`` (one warp per slot, lane l filling samples l, l + 32, ... of each level's
   (P + 2)^2 patch, with the one bilinear fraction per patch of ``lk.cu``'s template loads, then
   the level's solver from the samples), in the frame's graph after ``finalize`` on the slots
   flagged ``refresh``: the new tracks (``new_tracks``, which also gives them the lowest free bank
   rows, as :meth:`TrackTable.add`: a bitmap of the rows ``tslot[0..count)`` names, ranked by a
   block scan) and the templates due (``table_update``).
3. ``lk_template_<warp>_<mode>``: ``solve_level`` (translation) or ``solve_level_affine`` on the
   template values and gradients loaded from ``bank[tslot]`` (``template_from_bank``: lane l owns
   column l % P and rows l / P + k * 32 / P, the stored sample and its 4 neighbours), alpha /
   beta starting from the slot's ``gain - 1`` / ``offset / 255``. Affine: each lane samples the
   image at x + A u with its own bilinear weights, the 8 sums of U r by butterfly, the inverses of
   H 8 x 8 and its 4 x 4 translation sub-block from the level's stored solver, phase switch and
   composition with the inverse step as per-warp scalars; ``LK_FEATURE_WARPS`` warps per
   track, each sampling its share of the 16 x 16 levels. The previous frame's
   pyramid is read only by the forward-backward check, which ``lk_template_fb_<warp>_<mode>`` runs
   in the same warp right after the forward track (one launch for both).
4. ``table_update`` writes ``gain``, ``offset``, ``affine`` (identity for the translation warp),
   ``residual``, ``tmpl_age + 1`` and flags refreshes (``residual > template_refresh_residual``
   or ``tmpl_age >= template_max_age``, every track for ``template: previous``; the flagged
   slot's age, illumination and warp restart), counted as ``templates_refreshed``.

Tests: the kernels on the host through a SIMT shim (``test_tracker_gpu.TestTemplateKernelsOnHost``)
and on the GPU (``test_tracker_gpu.TestTemplateKernels``) against this module's functions; the
whole GPU pipeline against the CPU pipeline (``test_frontend.TestGpuMatchesCpu``).

The oracle is :func:`track_templates_cpu` / :func:`extract_templates_cpu`, the compiled twin
:class:`vilib_ros.frontend.compiled.tracker.NumbaLKTracker` (``track_templates`` /
``extract_templates``, bit-identical to the oracle on the tests' pairs).
"""
from __future__ import annotations

import numpy as np

from vilib_ros.frontend.config import AFFINE_DET_RANGE, AFFINE_PATCH, MODE_INFO, PATCH_AREA, TrackerConfig
from vilib_ros.frontend.reference.lk import _as_pyramid, _bilinear, _fits, _track, finish, level0_status
from vilib_ros.types import TrackResult, TrackStatus


# ---------------------------------------------------------------------------------------------
# NumPy reference (the test oracle; the compiled twin is vilib_ros.frontend.compiled.lk)


def extract_templates_cpu(tmpl_pyr, pos, config: TrackerConfig | None = None):
    """Templates of the features at ``pos`` (N, 2, level-0 pixels) in one pyramid:
    (patch (N, levels, PATCH_AREA) float32, valid (N, levels) uint8), the bank's layout."""
    cfg = config or TrackerConfig()
    L = int(cfg.levels)
    tp = _as_pyramid(tmpl_pyr, L)
    pos = np.asarray(pos, np.float32).reshape(-1, 2).astype(np.float64)
    n = pos.shape[0]
    patch = np.zeros((n, L, PATCH_AREA), np.float32)
    valid = np.zeros((n, L), np.uint8)
    for lvl in range(L):
        P = int(cfg.patch_sizes[lvl])
        half = 0.5 * (P - 1)
        T = tp[lvl]
        h, w = T.shape
        s = 1.0 / (1 << lvl)
        tcx = (pos[:, 0] + 0.5) * s - 0.5
        tcy = (pos[:, 1] + 0.5) * s - 0.5
        ok = np.isfinite(tcx) & np.isfinite(tcy)
        ok[ok] = _fits(tcx[ok], tcy[ok], half + 1.0, w, h)
        valid[:, lvl] = ok
        o = np.arange(P + 2, dtype=np.float64) - half - 1.0
        OX, OY = np.meshgrid(o, o)
        if ok.any():
            px = tcx[ok, None] + OX.ravel()[None]
            py = tcy[ok, None] + OY.ravel()[None]
            patch[ok, lvl, : (P + 2) ** 2] = _bilinear(T, px, py)
    return patch, valid


def stored_level(patch, P):
    """Template values and central-difference gradients (0..1 units, (m, P*P) float64) from
    stored template levels ``patch`` ((m, PATCH_AREA))."""
    S = np.asarray(patch)[:, : (P + 2) ** 2].astype(np.float64).reshape(-1, P + 2, P + 2)
    m = S.shape[0]              # (may be 0: no usable template on this level; hence P * P, not -1)
    tv = S[:, 1:-1, 1:-1].reshape(m, P * P) / 255.0
    gx = 0.5 * (S[:, 1:-1, 2:] - S[:, 1:-1, :-2]).reshape(m, P * P) / 255.0
    gy = 0.5 * (S[:, 2:, 1:-1] - S[:, :-2, 1:-1]).reshape(m, P * P) / 255.0
    return tv, gx, gy


def track_templates_cpu(patch, valid, slots, img_pyr, pred, config: TrackerConfig | None = None, gain=None,
                        offset=None, affine=None, active=None) -> TrackResult:
    """NumPy reference of LK against stored templates: the features' templates are rows
    ``slots`` of the bank ``patch`` / ``valid`` (:func:`extract_templates_cpu`); LK starts at
    ``pred`` (N, 2) with the illumination ``gain`` / ``offset`` (default 1 / 0) and, for
    ``warp='affine'``, the warp ``affine`` ((N, 4) a11 a12 a21 a22, default identity): the last
    frame's estimates relative to the template. ``warp='translation'`` runs the iteration of
    :func:`~vilib_ros.frontend.reference.lk.track_cpu` (which is this with templates taken from one
    pyramid); ``'affine'`` the same with the patch mapped by x = t + A u (:func:`_track_affine`)."""
    cfg = config or TrackerConfig()
    L = int(cfg.levels)
    ip = _as_pyramid(img_pyr, L)
    slots = np.asarray(slots, np.int64).reshape(-1)
    n = slots.shape[0]
    pred = np.asarray(pred, dtype=np.float32).reshape(-1, 2)
    if pred.shape[0] != n:
        raise ValueError(f"pred shape {pred.shape} does not match {n} template slots")
    if patch.ndim != 3 or patch.shape[1] < L or patch.shape[2] != PATCH_AREA or valid.shape[:2] != patch.shape[:2]:
        raise ValueError(f"template bank has shape {patch.shape} / {valid.shape}, expected (S, >={L}, {PATCH_AREA})")
    if n and not (0 <= slots.min() and slots.max() < patch.shape[0]):
        raise ValueError(f"template slots outside 0..{patch.shape[0] - 1}")

    def template(lvl, P, half, cand):
        cand = cand[valid[slots[cand], lvl] != 0]
        return (cand,) + stored_level(patch[slots[cand], lvl], P)

    g0 = None if gain is None else np.asarray(gain, np.float64).reshape(n) - 1.0
    b0 = None if offset is None else np.asarray(offset, np.float64).reshape(n) / 255.0
    if cfg.warp == "affine":
        A0 = np.tile(np.eye(2), (n, 1, 1)) if affine is None else np.asarray(affine, np.float64).reshape(n, 2, 2)
        return _track_affine(template, ip, pred, A0, cfg, active, g0, b0)
    return _track(template, ip, pred, np.ones(n, bool), cfg, active, g0, b0)


def _track_affine(template, ip, pred, A0, cfg: TrackerConfig, active, alpha0, beta0) -> TrackResult:
    """Pyramidal inverse-compositional LK with an affine warp and affine illumination: the
    template sample at offset u (level pixels from the template point) is compared with the
    image at x + A u, I(x + A u) = (1 + alpha) T(u) + beta. Parameters per step
    [da11, da12, da21, da22, dtx, dty, (dalpha), (dbeta)]; the Hessian of
    U = [g gx ux, g gx uy, g gy ux, g gy uy, g gx, g gy, (T), (1)] once per level (g = 1 + alpha
    at the level's start); the warp composed with the inverse of the step. A is the same on
    every level; x moves between levels as in the translation tracker.

    Per level, first a translation phase (steps of [dtx, dty, (dalpha), (dbeta)] only, with the
    sub-block of H, A held): the affine parameters have a smaller basin than the translation,
    and a start a few pixels off made them diverge. When it converges, on levels with
    AFFINE_PATCH patches an affine phase with all parameters follows (the iteration cap counts
    both); on the other levels the level ends. Stops, oscillation test, statuses and outputs as
    :func:`~vilib_ros.frontend.reference.lk.track_cpu`, on the step of the position (the oscillation
    test restarts with the affine phase); a warp whose determinant leaves AFFINE_DET_RANGE is
    DIVERGED."""
    L = int(cfg.levels)
    h0, w0 = ip[0].shape
    n = pred.shape[0]
    _, g_t, o_t = MODE_INFO[cfg.mode]
    gslot = 6 if g_t >= 0 else -1
    oslot = (6 + (g_t >= 0)) if o_t >= 0 else -1
    npar = 6 + (g_t >= 0) + (o_t >= 0)
    act = np.ones(n, bool) if active is None else np.asarray(active, bool).reshape(n)
    top = 1.0 / (1 << (L - 1))
    x = (pred[:, 0].astype(np.float64) + 0.5) * top - 0.5
    y = (pred[:, 1].astype(np.float64) + 0.5) * top - 0.5
    A = A0.copy()
    alpha = np.zeros(n) if alpha0 is None or gslot < 0 else alpha0.copy()
    beta = np.zeros(n) if beta0 is None or oslot < 0 else beta0.copy()
    residual = np.zeros(n)
    iters = np.zeros(n, np.int32)
    status = np.full(n, TrackStatus.NOT_CONVERGED, np.int8)
    finite = np.isfinite(pred).all(1) & np.isfinite(A).all((1, 2)) & np.isfinite(alpha) & np.isfinite(beta)
    run = act & finite
    status[act & ~finite] = TrackStatus.DIVERGED

    for lvl in range(L - 1, -1, -1):
        P = int(cfg.patch_sizes[lvl])
        half = 0.5 * (P - 1)
        I = ip[lvl]
        h, w = h0 >> lvl, w0 >> lvl
        if I.shape != (h, w):
            raise ValueError(f"pyramid level {lvl} has shape {I.shape}, expected {(h, w)}")
        code = np.full(n, 2, np.int8)   # LVL_SKIPPED by default
        code[run] = 3                   # LVL_LEFT where the template is not usable
        idx, tv, gx, gy = template(lvl, P, half, np.flatnonzero(run))
        if idx.size:
            o = np.arange(P, dtype=np.float64) - half
            OX, OY = np.meshgrid(o, o)
            ux, uy = OX.ravel()[None], OY.ravel()[None]
            g = (np.ones(idx.size) if gslot < 0 else 1.0 + alpha[idx])[:, None]
            a = (gx * gx).sum(1) / (P * P)
            b = (gx * gy).sum(1) / (P * P)
            c = (gy * gy).sum(1) / (P * P)
            lmin = 0.5 * (a + c - np.sqrt((a - c) ** 2 + 4 * b * b))
            U = [g * gx * ux, g * gx * uy, g * gy * ux, g * gy * uy, g * gx, g * gy]
            if gslot >= 0:
                U.append(tv)
            if oslot >= 0:
                U.append(np.ones_like(tv))
            U = np.stack(U, axis=2)
            H = np.einsum("mpi,mpj->mij", U, U)
            aff_lvl = P == AFFINE_PATCH
            sub = [4, 5] + ([gslot] if gslot >= 0 else []) + ([oslot] if oslot >= 0 else [])
            Hs = H[:, sub][:, :, sub]
            det = np.linalg.det(H if aff_lvl else Hs)
            ok = (lmin >= cfg.min_eigen) & np.isfinite(det) & (np.abs(det) > 1e-300)
            code[idx[~ok]] = 4
            keep = np.flatnonzero(ok)
            idx, U, tv = idx[keep], U[keep], tv[keep]
            Hi = np.linalg.inv(H[keep]) if (keep.size and aff_lvl) else np.zeros((keep.size, npar, npar))
            Hsi = np.linalg.inv(Hs[keep]) if keep.size else np.zeros((0, len(sub), len(sub)))
            phase = np.zeros(idx.size, np.int8)     # 0: translation (+ illumination), 1: affine
            xs, ys, As = x[idx].copy(), y[idx].copy(), A[idx].copy()
            live = np.ones(idx.size, bool)
            prev = np.full((idx.size, 2), np.nan)
            for _ in range(int(cfg.max_iterations)):
                li = np.flatnonzero(live)
                if li.size == 0:
                    break
                f = idx[li]
                ex = (np.abs(A[f, 0, 0]) + np.abs(A[f, 0, 1])) * half    # half-extent of the warped patch
                ey = (np.abs(A[f, 1, 0]) + np.abs(A[f, 1, 1])) * half
                out = ~((x[f] - ex >= 0) & (y[f] - ey >= 0) & (x[f] + ex < w - 1) & (y[f] + ey < h - 1))
                if out.any():
                    fo = f[out]
                    x[fo], y[fo], A[fo] = xs[li[out]], ys[li[out]], As[li[out]]
                    code[fo] = 3
                    live[li[out]] = False
                    li, f = li[~out], f[~out]
                    if li.size == 0:
                        break
                X = x[f, None] + A[f, 0, 0, None] * ux + A[f, 0, 1, None] * uy
                Y = y[f, None] + A[f, 1, 0, None] * ux + A[f, 1, 1, None] * uy
                r = _bilinear(I, X, Y) / 255.0 - (1.0 + alpha[f, None]) * tv[li] - beta[f, None]
                bv = np.einsum("mpi,mp->mi", U[li], r)
                dq = np.einsum("mij,mj->mi", Hi[li], bv)
                p0 = phase[li] == 0
                if p0.any():
                    dq[p0] = 0.0
                    dq[np.ix_(p0, sub)] = np.einsum("mij,mj->mi", Hsi[li[p0]], bv[p0][:, sub])
                # compose with the inverse step: x + A u  <-  x + A D^-1 u, D = [[1 + d11, d12, dtx], [d21, 1 + d22, dty]]
                d11, d12, d21, d22 = 1.0 + dq[:, 0], dq[:, 1], dq[:, 2], 1.0 + dq[:, 3]
                dd = d11 * d22 - d12 * d21
                Di = np.stack([np.stack([d22, -d12], 1), np.stack([-d21, d11], 1)], 1) / dd[:, None, None]
                ti = -np.einsum("mij,mj->mi", Di, dq[:, 4:6])
                Af = A[f]
                step = np.einsum("mij,mj->mi", Af, ti)
                x_old, y_old, a_old, al_old, be_old = x[f], y[f], Af, alpha[f], beta[f]
                x[f] = x_old + step[:, 0]
                y[f] = y_old + step[:, 1]
                A[f] = Af @ Di
                if gslot >= 0:
                    alpha[f] += dq[:, gslot]
                if oslot >= 0:
                    beta[f] += dq[:, oslot]
                residual[f] = np.abs(r).mean(1) * 255.0
                iters[f] += 1
                conv = step[:, 0] ** 2 + step[:, 1] ** 2 < cfg.eps
                px_, py_ = prev[li, 0], prev[li, 1]
                osc = np.zeros(li.size, bool)
                if cfg.osc_eps > 0:
                    osc |= (np.abs(step[:, 0] + px_) < cfg.osc_eps) & (np.abs(step[:, 1] + py_) < cfg.osc_eps)
                if cfg.osc_growth > 0:
                    osc |= ((step[:, 0] * px_ + step[:, 1] * py_ < 0)
                            & (step[:, 0] ** 2 + step[:, 1] ** 2 >= cfg.osc_growth * (px_ ** 2 + py_ ** 2)))
                osc &= ~conv
                if osc.any():       # the middle of the jump
                    fo = f[osc]
                    x[fo] = 0.5 * (x_old[osc] + x[fo])
                    y[fo] = 0.5 * (y_old[osc] + y[fo])
                    A[fo] = 0.5 * (a_old[osc] + A[fo])
                    alpha[fo] = 0.5 * (al_old[osc] + alpha[fo])
                    beta[fo] = 0.5 * (be_old[osc] + beta[fo])
                    conv = conv | osc
                prev[li] = step
                sw = conv & p0 & aff_lvl
                phase[li[sw]] = 1
                prev[li[sw]] = np.nan
                conv &= ~sw
                code[f[conv]] = 0
                live[li[conv]] = False
            code[idx[live]] = 1
        if lvl == 0:
            level0_status(status, run, code)
        else:
            x = 2.0 * x + 0.5
            y = 2.0 * y + 0.5

    detA = A[:, 0, 0] * A[:, 1, 1] - A[:, 0, 1] * A[:, 1, 0]
    bad = ~(np.isfinite(detA) & (detA > AFFINE_DET_RANGE[0]) & (detA < AFFINE_DET_RANGE[1]))
    res = finish(cfg, pred, act, run, x, y, alpha, beta, residual, status, iters, bad)
    res.affine = A.reshape(n, 4).astype(np.float32)
    res.affine[~act] = A0.reshape(n, 4)[~act]
    return res
