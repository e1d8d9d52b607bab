"""Triangulation of a keyframe's new landmarks: linear (DLT) over all their rays, outliers dropped.

One compiled call (numba) per keyframe for all candidate landmarks: a keyframe creates ~20-30,
and the per-candidate NumPy version (a few dozen small-array operations each, an SVD per outlier
round) cost 0.4-0.7 ms of a 3.5 ms stereo keyframe on the 2-core machine; this costs ~0.1 ms.

Per candidate ``c`` (its ``lens[c]`` observations in slots ``0 .. lens[c] - 1``):

* mono: the angle between the first and the last ray must reach ``min_parallax_deg``;
  stereo: at least one observation must have a right ray (``m_r``);
* DLT: every kept left ray gives two rows ``x P[2] - P[0]``, ``y P[2] - P[1]`` of the 3x4 world ->
  cam0 projection ``P``, every kept right ray two rows of ``T_c1c0 P``, each row scaled to a unit
  normal; the point is the right singular vector of the smallest singular value;
* gate: an observation whose squared reprojection error (normalised coordinates; left + right
  where it has a right ray) exceeds its chi2 bound (``gate``: chi2 x sigma^2, x4 for the current
  keyframe, whose pose is only IMU-predicted) or whose depth lies outside [min_depth, max_depth]
  (a right ray behind camera 1 counts as failing) is an outlier: the one with the largest
  error / bound is dropped and the candidate triangulated again, while at least two observations
  (stereo: one with a right ray) are left.

:func:`triangulate_reference` is the same algorithm per candidate in plain NumPy (the
conformance reference of the tests).
"""
from __future__ import annotations

import math

import numba
import numpy as np


@numba.njit(cache=True, nogil=True, error_model="numpy")
def triangulate_candidates(Pl, xy, xr, m_r, gate, lens, stereo, T_c1c0, min_depth, max_depth, min_parallax_deg,
                           X_out, keep, drops):
    """Candidates in parallel arrays (C candidates, up to N observations each):
    ``Pl`` (C, N, 3, 4) world -> cam0 projections, ``xy`` / ``xr`` (C, N, 2) left / right
    normalised coordinates, ``m_r`` (C, N) has a right ray, ``gate`` (C, N) bound on the squared
    error, ``lens`` (C,). Writes ``X_out`` (C, 3) the points, ``keep`` (C, N) the inliers (in: True
    for every observation), ``drops`` (C,) observations dropped; returns ``ok`` (C,) bool."""
    C, N = Pl.shape[0], Pl.shape[1]
    ok = np.zeros(C, np.bool_)
    Pr = np.empty((N, 3, 4))
    A = np.empty((4 * N, 4))
    ratio = np.empty(N)
    for c in range(C):
        n = lens[c]
        if not stereo:
            # world bearings R^T [x, y, 1] of the first and the last ray
            fa = np.zeros(3)
            fb = np.zeros(3)
            for i in range(3):
                fa[i] = Pl[c, 0, 0, i] * xy[c, 0, 0] + Pl[c, 0, 1, i] * xy[c, 0, 1] + Pl[c, 0, 2, i]
                fb[i] = Pl[c, n - 1, 0, i] * xy[c, n - 1, 0] + Pl[c, n - 1, 1, i] * xy[c, n - 1, 1] + Pl[c, n - 1, 2, i]
            cs = (fa[0] * fb[0] + fa[1] * fb[1] + fa[2] * fb[2]) / (
                math.sqrt(fa[0] ** 2 + fa[1] ** 2 + fa[2] ** 2) * math.sqrt(fb[0] ** 2 + fb[1] ** 2 + fb[2] ** 2))
            if math.degrees(math.acos(min(1.0, max(-1.0, cs)))) < min_parallax_deg:
                continue
        else:
            for j in range(n):
                for r in range(3):
                    for q in range(4):
                        s = 0.0
                        for m in range(3):
                            s += T_c1c0[r, m] * Pl[c, j, m, q]
                        Pr[j, r, q] = s + (T_c1c0[r, 3] if q == 3 else 0.0)
        for _ in range(n):
            nk = 0
            nr = 0
            for j in range(n):
                if keep[c, j]:
                    nk += 1
                    if stereo and m_r[c, j]:
                        nr += 1
            if nk < 2 or (stereo and nr == 0):
                break
            rows = 0
            for j in range(n):                      # left rows, then right rows
                if keep[c, j]:
                    for a in range(2):
                        for q in range(4):
                            A[rows, q] = xy[c, j, a] * Pl[c, j, 2, q] - Pl[c, j, a, q]
                        rows += 1
            if stereo:
                for j in range(n):
                    if keep[c, j] and m_r[c, j]:
                        for a in range(2):
                            for q in range(4):
                                A[rows, q] = xr[c, j, a] * Pr[j, 2, q] - Pr[j, a, q]
                            rows += 1
            for r in range(rows):
                nrm = math.sqrt(A[r, 0] ** 2 + A[r, 1] ** 2 + A[r, 2] ** 2) + 1e-12
                for q in range(4):
                    A[r, q] /= nrm
            vt = np.linalg.svd(A[:rows].copy(), full_matrices=False)[2]
            h = vt[vt.shape[0] - 1]
            if abs(h[3]) < 1e-12:
                break
            X0, X1, X2 = h[0] / h[3], h[1] / h[3], h[2] / h[3]
            worst = -1
            wr = -np.inf
            for j in range(n):
                if not keep[c, j]:
                    ratio[j] = -1.0
                else:
                    P = Pl[c, j]
                    z = P[2, 0] * X0 + P[2, 1] * X1 + P[2, 2] * X2 + P[2, 3]
                    u = (P[0, 0] * X0 + P[0, 1] * X1 + P[0, 2] * X2 + P[0, 3]) / z
                    v = (P[1, 0] * X0 + P[1, 1] * X1 + P[1, 2] * X2 + P[1, 3]) / z
                    e2 = (u - xy[c, j, 0]) ** 2 + (v - xy[c, j, 1]) ** 2
                    if stereo and m_r[c, j]:
                        zr = Pr[j, 2, 0] * X0 + Pr[j, 2, 1] * X1 + Pr[j, 2, 2] * X2 + Pr[j, 2, 3]
                        if zr > 0:
                            ur = (Pr[j, 0, 0] * X0 + Pr[j, 0, 1] * X1 + Pr[j, 0, 2] * X2 + Pr[j, 0, 3]) / zr
                            vr = (Pr[j, 1, 0] * X0 + Pr[j, 1, 1] * X1 + Pr[j, 1, 2] * X2 + Pr[j, 1, 3]) / zr
                            e2 += (ur - xr[c, j, 0]) ** 2 + (vr - xr[c, j, 1]) ** 2
                        else:
                            e2 = np.inf
                    ratio[j] = np.inf if (z < min_depth or z > max_depth) else e2 / gate[c, j]
                # the largest ratio; a NaN is the largest (NumPy's argmax)
                if worst < 0 or (not math.isnan(wr) and (math.isnan(ratio[j]) or ratio[j] > wr)):
                    worst = j
                    wr = ratio[j]
            if wr <= 1.0:
                X_out[c, 0], X_out[c, 1], X_out[c, 2] = X0, X1, X2
                ok[c] = True
                break
            keep[c, worst] = False
            drops[c] += 1
    return ok


def triangulate_reference(Pl, xy, xr, has_r, gate, stereo, T_c1c0, min_depth, max_depth, min_parallax_deg):
    """One candidate (``Pl`` (n, 3, 4), ``xy`` / ``xr`` (n, 2), ``has_r`` (n,), ``gate`` (n,)) in
    plain NumPy, the module docstring's algorithm: (point or None, inlier mask, drops)."""
    n = len(Pl)
    keep = np.ones(n, bool)
    if not stereo:
        fa = Pl[0, :, :3].T @ np.array([xy[0, 0], xy[0, 1], 1.0])
        fb = Pl[-1, :, :3].T @ np.array([xy[-1, 0], xy[-1, 1], 1.0])
        c = fa @ fb / (np.linalg.norm(fa) * np.linalg.norm(fb))
        if np.degrees(np.arccos(np.clip(c, -1, 1))) < min_parallax_deg:
            return None, keep, 0
        has_r = np.zeros(n, bool)
    elif not has_r.any():
        return None, keep, 0
    Pr = np.einsum("ij,njk->nik", T_c1c0[:3, :3], Pl)
    Pr[:, :, 3] += T_c1c0[:3, 3]
    drops = 0
    for _ in range(n):
        if keep.sum() < 2 or (stereo and not (has_r & keep).any()):
            return None, keep, drops
        rows = [xy[keep, 0:1] * Pl[keep, 2] - Pl[keep, 0], xy[keep, 1:2] * Pl[keep, 2] - Pl[keep, 1]]
        m = keep & has_r
        if m.any():
            rows += [xr[m, 0:1] * Pr[m, 2] - Pr[m, 0], xr[m, 1:2] * Pr[m, 2] - Pr[m, 1]]
        A = np.vstack(rows)
        A /= np.linalg.norm(A[:, :3], axis=1, keepdims=True) + 1e-12
        h = np.linalg.svd(A, full_matrices=False)[2][-1]
        if abs(h[3]) < 1e-12:
            return None, keep, drops
        X = np.append(h[:3] / h[3], 1.0)
        pc = Pl @ X
        with np.errstate(divide="ignore", invalid="ignore"):
            e2 = np.sum((pc[:, :2] / pc[:, 2:3] - xy) ** 2, axis=1)
            if stereo:
                pr = Pr @ X
                er = np.sum((pr[:, :2] / pr[:, 2:3] - xr) ** 2, axis=1)
                e2 = e2 + np.where(has_r, np.where(pr[:, 2] > 0, er, np.inf), 0.0)
            bad_depth = (pc[:, 2] < min_depth) | (pc[:, 2] > max_depth)
            ratio = np.where(bad_depth, np.inf, e2 / gate)
        ratio[~keep] = -1.0
        worst = int(np.argmax(ratio))
        if ratio[worst] <= 1.0:
            return X[:3], keep, drops
        keep[worst] = False
        drops += 1
    return None, keep, drops


def warm_up() -> None:
    """Compile (or load from numba's cache) :func:`triangulate_candidates` now: the estimator
    calls it at construction, so that the first keyframe with new landmarks does not pay the
    ~2 s compilation of a cold cache."""
    z = np.zeros
    triangulate_candidates(z((0, 1, 3, 4)), z((0, 1, 2)), z((0, 1, 2)), z((0, 1), np.bool_), z((0, 1)),
                           z(0, np.int64), True, np.eye(4), 0.3, 25.0, 1.5, z((0, 3)), z((0, 1), np.bool_),
                           z(0, np.int64))
