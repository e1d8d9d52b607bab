"""Triangulation of a keyframe's new landmarks: linear (DLT) over all their rays, outliers dropped.

One compiled call (numba) per keyframe for all candidate landmarks: a keyframe creates many, and
a per-candidate NumPy version (a few dozen small-array operations each, an SVD per outlier round)
would be a large part of the keyframe's time.

Per candidate (its observations flat, in the order they were made):

* mono: the angle between the first and the last ray must reach ``min_parallax_deg``;
  stereo: at least one observation must have a right ray (``m_r``);
* DLT: every kept left ray gives two rows ``x P[2] - P[0]``, ``y P[2] - P[1]`` of the 3x4 world ->
  cam0 projection ``P``, every kept right ray two rows of ``T_c1c0 P``, each row scaled to a unit
  normal; the point is the null vector of the rows: the eigenvector of the smallest eigenvalue of
  A^T A (4x4; the right singular vector of A's smallest singular value, which the reference takes
  from an SVD: the same point to rounding, in less time);
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
def triangulate_candidates(P_tab, view, xy, xr, m_r, gate, start, stereo, T_c1c0, min_depth, max_depth,
                           min_parallax_deg, X_out, keep, drops):
    """Candidates' observations flat, candidate ``c`` owning ``start[c]:start[c + 1]``:
    ``P_tab`` (V, 3, 4) world -> cam0 projections of the views (keyframes), ``view`` (M,) each
    observation's row of ``P_tab``, ``xy`` / ``xr`` (M, 2) left / right normalised coordinates,
    ``m_r`` (M,) has a right ray, ``gate`` (M,) bound on the squared error. Writes ``X_out`` (C, 3)
    the points, ``keep`` (M,) the inliers (in: all True), ``drops`` (C,) observations dropped;
    returns ``ok`` (C,) bool."""
    C = start.shape[0] - 1
    V = P_tab.shape[0]
    ok = np.zeros(C, np.bool_)
    Pr_tab = np.empty((V, 3, 4))                # world -> cam1 of every view
    for w in range(V):
        for r in range(3):
            for q in range(4):
                s = 0.0
                for m in range(3):
                    s += T_c1c0[r, m] * P_tab[w, m, q]
                Pr_tab[w, r, q] = s + (T_c1c0[r, 3] if q == 3 else 0.0)
    nmax = 0
    for c in range(C):
        nmax = max(nmax, start[c + 1] - start[c])
    A = np.empty((4 * nmax, 4))
    ratio = np.empty(nmax)
    for c in range(C):
        o0, n = start[c], start[c + 1] - start[c]
        if not stereo:
            # world bearings R^T [x, y, 1] of the first and the last ray
            fa = np.zeros(3)
            fb = np.zeros(3)
            Pa, Pb = P_tab[view[o0]], P_tab[view[o0 + n - 1]]
            for i in range(3):
                fa[i] = Pa[0, i] * xy[o0, 0] + Pa[1, i] * xy[o0, 1] + Pa[2, i]
                fb[i] = Pb[0, i] * xy[o0 + n - 1, 0] + Pb[1, i] * xy[o0 + n - 1, 1] + Pb[2, i]
            cs = (fa[0] * fb[0] + fa[1] * fb[1] + fa[2] * fb[2]) / (
                math.sqrt(fa[0] ** 2 + fa[1] ** 2 + fa[2] ** 2) * math.sqrt(fb[0] ** 2 + fb[1] ** 2 + fb[2] ** 2))
            if math.degrees(math.acos(min(1.0, max(-1.0, cs)))) < min_parallax_deg:
                continue
        for _ in range(n):
            nk = 0
            nr = 0
            for j in range(o0, o0 + n):
                if keep[j]:
                    nk += 1
                    if stereo and m_r[j]:
                        nr += 1
            if nk < 2 or (stereo and nr == 0):
                break
            rows = 0
            for j in range(o0, o0 + n):             # left rows, then right rows
                if keep[j]:
                    P = P_tab[view[j]]
                    for a in range(2):
                        for q in range(4):
                            A[rows, q] = xy[j, a] * P[2, q] - P[a, q]
                        rows += 1
            if stereo:
                for j in range(o0, o0 + n):
                    if keep[j] and m_r[j]:
                        P = Pr_tab[view[j]]
                        for a in range(2):
                            for q in range(4):
                                A[rows, q] = xr[j, a] * P[2, q] - P[a, q]
                            rows += 1
            M = np.zeros((4, 4))                    # A^T A of the unit-normal rows
            for r in range(rows):
                nrm = math.sqrt(A[r, 0] ** 2 + A[r, 1] ** 2 + A[r, 2] ** 2) + 1e-12
                for q in range(4):
                    A[r, q] /= nrm
                for q in range(4):
                    for q2 in range(q, 4):
                        M[q, q2] += A[r, q] * A[r, q2]
            for q in range(4):
                for q2 in range(q):
                    M[q, q2] = M[q2, q]
            h = np.linalg.eigh(M)[1][:, 0]
            if abs(h[3]) < 1e-12:
                break
            X0, X1, X2 = h[0] / h[3], h[1] / h[3], h[2] / h[3]
            worst = -1
            wr = -np.inf
            for i in range(n):
                j = o0 + i
                if not keep[j]:
                    ratio[i] = -1.0
                else:
                    P = P_tab[view[j]]
                    z = P[2, 0] * X0 + P[2, 1] * X1 + P[2, 2] * X2 + P[2, 3]
                    u = (P[0, 0] * X0 + P[0, 1] * X1 + P[0, 2] * X2 + P[0, 3]) / z
                    v = (P[1, 0] * X0 + P[1, 1] * X1 + P[1, 2] * X2 + P[1, 3]) / z
                    e2 = (u - xy[j, 0]) ** 2 + (v - xy[j, 1]) ** 2
                    if stereo and m_r[j]:
                        Q = Pr_tab[view[j]]
                        zr = Q[2, 0] * X0 + Q[2, 1] * X1 + Q[2, 2] * X2 + Q[2, 3]
                        if zr > 0:
                            ur = (Q[0, 0] * X0 + Q[0, 1] * X1 + Q[0, 2] * X2 + Q[0, 3]) / zr
                            vr = (Q[1, 0] * X0 + Q[1, 1] * X1 + Q[1, 2] * X2 + Q[1, 3]) / zr
                            e2 += (ur - xr[j, 0]) ** 2 + (vr - xr[j, 1]) ** 2
                        else:
                            e2 = np.inf
                    ratio[i] = np.inf if (z < min_depth or z > max_depth) else e2 / gate[j]
                # the largest ratio; a NaN is the largest (NumPy's argmax)
                if worst < 0 or (not math.isnan(wr) and (math.isnan(ratio[i]) or ratio[i] > wr)):
                    worst = i
                    wr = ratio[i]
            if wr <= 1.0:
                X_out[c, 0], X_out[c, 1], X_out[c, 2] = X0, X1, X2
                ok[c] = True
                break
            keep[o0 + worst] = False
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
    compilation of a cold cache."""
    z = np.zeros
    triangulate_candidates(z((0, 3, 4)), z(0, np.int64), z((0, 2)), z((0, 2)), z(0, np.bool_), z(0),
                           z(1, np.int64), True, np.eye(4), 0.3, 25.0, 1.5, z((0, 3)), z(0, np.bool_),
                           z(0, np.int64))
