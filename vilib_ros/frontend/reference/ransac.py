"""The NumPy reference of the fundamental-matrix RANSAC (the algorithm and its fixed choices:
:mod:`vilib_ros.frontend.ransac`): vectorised over the hypotheses, ``eigh`` for the null vectors;
the test oracle of the compiled twin and the kernels, and the CPU path without numba.
"""
from __future__ import annotations

import numpy as np

from vilib_ros.frontend.ransac import LO_ITERATIONS, SAMPLE, SQRT2, TABLE, adaptive_best, sample_indices



def epipolar_error(F, x1, x2) -> np.ndarray:
    """OpenCV FM_RANSAC's error of F (..., 9) at (n, 2) pairs: max squared point-line distance."""
    F = np.asarray(F, np.float64)[..., None, :]
    X1, Y1, X2, Y2 = x1[:, 0], x1[:, 1], x2[:, 0], x2[:, 1]
    a = F[..., 0] * X1 + F[..., 1] * Y1 + F[..., 2]
    b = F[..., 3] * X1 + F[..., 4] * Y1 + F[..., 5]
    c = F[..., 6] * X1 + F[..., 7] * Y1 + F[..., 8]
    with np.errstate(divide="ignore", invalid="ignore"):
        d2 = X2 * a + Y2 * b + c
        e2 = d2 * d2 / (a * a + b * b)
        a = F[..., 0] * X2 + F[..., 3] * Y2 + F[..., 6]
        b = F[..., 1] * X2 + F[..., 4] * Y2 + F[..., 7]
        c = F[..., 2] * X2 + F[..., 5] * Y2 + F[..., 8]
        d1 = X1 * a + Y1 * b + c
        e1 = d1 * d1 / (a * a + b * b)
    return np.maximum(e1, e2)


def _normalise(p):
    """Hartley: (s, tx, ty) with p' = s p + t; s NaN where the points have no spread."""
    c = p.mean(axis=-2)
    d = np.sqrt(((p - c[..., None, :]) ** 2).sum(-1)).mean(-1)
    with np.errstate(divide="ignore", invalid="ignore"):
        s = np.where(d > 1e-300, SQRT2 / d, np.nan)
    return s, -s * c[..., 0], -s * c[..., 1]


def fundamental_8pt(x1, x2) -> np.ndarray:
    """Linear (least-squares) 8-point F (row-major 9, x2^T F x1 = 0) of point sets (..., m, 2),
    m >= 8; NaN where degenerate."""
    s1, tx1, ty1 = _normalise(x1)
    s2, tx2, ty2 = _normalise(x2)
    u1, v1 = s1[..., None] * x1[..., 0] + tx1[..., None], s1[..., None] * x1[..., 1] + ty1[..., None]
    u2, v2 = s2[..., None] * x2[..., 0] + tx2[..., None], s2[..., None] * x2[..., 1] + ty2[..., None]
    one = np.ones_like(u1)
    A = np.stack([u2 * u1, u2 * v1, u2, v2 * u1, v2 * v1, v2, u1, v1, one], -1)
    ATA = np.einsum("...ki,...kj->...ij", A, A)
    ok = np.isfinite(ATA).all((-1, -2))
    ATA[~ok] = np.eye(9)
    _, V = np.linalg.eigh(ATA)
    f = V[..., :, 0].reshape(x1.shape[:-2] + (3, 3))
    T1 = np.zeros(x1.shape[:-2] + (3, 3))
    T2 = np.zeros_like(T1)
    for T, s, tx, ty in ((T1, s1, tx1, ty1), (T2, s2, tx2, ty2)):
        T[..., 0, 0] = T[..., 1, 1] = s
        T[..., 0, 2], T[..., 1, 2], T[..., 2, 2] = tx, ty, 1.0
    F = np.swapaxes(T2, -1, -2) @ f @ T1
    F[~ok] = np.nan
    return F.reshape(x1.shape[:-2] + (9,))


def refine(p1, p2, inlier, thr2: float, lo_iterations: int = LO_ITERATIONS):
    """The LO step: (inlier mask, count) after up to ``lo_iterations`` least-squares refits."""
    count = int(np.count_nonzero(inlier))
    for _ in range(lo_iterations):
        F = fundamental_8pt(p1[inlier][None], p2[inlier][None])[0]
        new = epipolar_error(F[None], p1, p2)[0] <= thr2
        c = int(np.count_nonzero(new))
        if c < count:
            break
        inlier, count = new, c
    return inlier, count


def ransac_reference(xy_old, xy_new, threshold: float, confidence: float, lo_iterations: int = LO_ITERATIONS):
    """The NumPy reference: (outlier mask over the rows or None, best hypothesis, its inliers)."""
    x1 = np.asarray(xy_old, np.float64).reshape(-1, 2)
    x2 = np.asarray(xy_new, np.float64).reshape(-1, 2)
    fin = np.isfinite(x1).all(1) & np.isfinite(x2).all(1)
    cand = np.flatnonzero(fin)
    n = cand.size
    if n < SAMPLE:
        return None, -1, 0
    p1, p2 = x1[cand], x2[cand]
    idx = np.stack([sample_indices(r, n) for r in TABLE])
    F = fundamental_8pt(p1[idx], p2[idx])
    err = epipolar_error(F, p1, p2)
    thr2 = float(threshold) ** 2
    counts = np.count_nonzero(err <= thr2, axis=1)
    best, _, _ = adaptive_best(counts, n, confidence)
    if best < 0:
        return None, -1, 0
    inlier, count = refine(p1, p2, err[best] <= thr2, thr2, lo_iterations)
    out = np.ones(len(x1), bool)
    out[cand] = ~inlier
    return out, best, count
