"""Fundamental-matrix RANSAC on undistorted, normalised correspondences: one algorithm for the
CPU pipeline (:mod:`vilib_ros.frontend.cpu_ransac`, numba), the GPU pipeline
(``kernels/ransac.cu``, inside the frame's CUDA graph) and this NumPy reference.

The algorithm (all three make the same choices; the numba twin and the kernels bit for bit):

* **candidates**: the rows with finite coordinates; fewer than :data:`SAMPLE` of them: no RANSAC.
* **hypotheses**: :data:`HYPOTHESES` fixed samples. Row ``h`` of :func:`sample_table` (uint32,
  a seeded integer hash) is mapped onto ``n`` candidates by :func:`sample_indices`:
  ``i_j = u_j mod n``, moved on by one (mod ``n``) while it equals an earlier index of the sample.
* **model**: the linear 8-point fundamental matrix of the sample, Hartley-normalised per image
  (centroid to the origin, mean distance sqrt 2): the null vector of the 8x9 design matrix
  (Gaussian elimination with full pivoting in the twins, in float64; ``eigh`` of A^T A here),
  mapped back to the input coordinates. No rank-2 step: only the scores matter. A sample
  without spread (all points at one place) or of rank < 8 gives no model.
* **score**: OpenCV FM_RANSAC's error, the larger squared distance of a point to its epipolar
  line in either image; an inlier where it is ``<= threshold**2`` (``threshold`` in normalised
  units: ``ransac_threshold`` px / fx).
* **choice**: :func:`adaptive_best`, OpenCV's adaptive termination read over the hypothesis
  index: the hypothesis count ``K`` starts at :data:`HYPOTHESES` and, at each hypothesis with
  more inliers than every earlier one, becomes ``round(log(1 - confidence) / log(1 - w**8))``
  (``w``: its inlier ratio) where that is smaller; the scan stops at ``K``. Ties go to the lower
  index. The CPU evaluates hypotheses in order and stops at ``K``; the GPU evaluates all of them
  in parallel and one thread applies the same rule to the counts, so both pick the same model.
  A best model with fewer than :data:`MIN_INLIERS` inliers is no model.
* **local optimisation** (LO-RANSAC's simple form, ``lo_iterations`` times, default
  :data:`LO_ITERATIONS` = 0, i.e. off, as OpenCV's FM_RANSAC: the refit keeps the noisiest inliers,
  and the stereo trajectory on V1_01 came out worse with it, ``bench/results/ransac_device.md``): F refitted by
  least squares (normalised 8-point over every inlier: the smallest eigenvector of A^T A; in the
  twins by inverse iteration on its pivoted LU, every sum in :data:`LANES` lane partials
  combined by a butterfly, as a warp does), taken where it has at least as many inliers. A
  minimal sample's F is noisy: with 0.3 px noise and a 1 px threshold it keeps 80-90 % of the
  inliers (as OpenCV's FM_RANSAC), the refit about 97 %.
* **result**: the rows that are not inliers of the chosen model (non-finite rows included).
"""
from __future__ import annotations

import math

import numpy as np

HYPOTHESES = 256        # the most hypotheses a frame evaluates (the GPU evaluates all of them)
SAMPLE = 8              # points per hypothesis (linear 8-point)
MIN_INLIERS = 8         # a model needs at least this many inliers
SEED = 0x5EED_F00D      # of the sample table
LO_ITERATIONS = 0       # least-squares refits of the chosen model: off (bench/results/ransac_device.md)
LANES = 32              # lane partials of the refit's sums (a warp)
INVERSE_ITERATIONS = 3  # of the refit's smallest eigenvector
SQRT2 = 1.4142135623730951


STATE = ("n", "best", "count", "evaluated")   # the device state slots (RS_N, ...): candidates, choice, final inliers, read


def kernel_defines() -> dict[str, int | str]:
    """The ``RS_*`` compile-time constants of ``kernels/ransac.cu`` (one name for one thing)."""
    from vilib_ros.frontend.track_table import kernel_defines as table_defines

    d = {"RS_HYPOTHESES": HYPOTHESES, "RS_SAMPLE": SAMPLE, "RS_MIN_INLIERS": MIN_INLIERS,
         "RS_LO_ITERATIONS": LO_ITERATIONS, "RS_INVERSE_ITERATIONS": INVERSE_ITERATIONS, "RS_LANES": LANES,
         "RS_SQRT2": repr(SQRT2)}
    d.update({f"RS_{n.upper()}": i for i, n in enumerate(STATE)})
    d["H_COUNT"] = table_defines()["H_COUNT"]
    return d


def sample_table(hypotheses: int = HYPOTHESES, seed: int = SEED) -> np.ndarray:
    """(hypotheses, SAMPLE) uint32: the fixed sample table (splitmix64 of seed, row, column)."""
    with np.errstate(over="ignore"):
        z = (np.uint64(seed) + np.arange(hypotheses * SAMPLE, dtype=np.uint64) * np.uint64(0x9E3779B97F4A7C15))
        z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        z = z ^ (z >> np.uint64(31))
    return (z >> np.uint64(32)).astype(np.uint32).reshape(hypotheses, SAMPLE)


TABLE = sample_table()


def sample_indices(row, n: int) -> np.ndarray:
    """The SAMPLE distinct candidate indices (of ``n`` >= SAMPLE) that table row ``row`` picks."""
    out = np.zeros(SAMPLE, np.int64)
    for j in range(SAMPLE):
        v = int(row[j]) % n
        while v in out[:j]:
            v = (v + 1) % n
        out[j] = v
    return out


def update_hypotheses(confidence: float, inliers: int, n: int, current: int) -> int:
    """OpenCV's RANSACUpdateNumIters for SAMPLE-point models: the hypothesis count that finds an
    all-inlier sample with ``confidence`` at inlier ratio ``inliers / n``, never more than ``current``."""
    w = inliers / n
    w2 = w * w
    w4 = w2 * w2
    denom = 1.0 - w4 * w4
    num = 1.0 - confidence
    if denom <= 0.0:                       # every candidate an inlier
        return 0
    num, denom = math.log(num), math.log(denom)
    if denom >= 0.0 or -num >= current * -denom:
        return current
    return int(num / denom + 0.5)


def adaptive_best(counts, n: int, confidence: float) -> tuple[int, int, int]:
    """(best hypothesis or -1, its inliers, hypotheses read) from the inlier counts in order."""
    best, best_count, k, h = -1, MIN_INLIERS - 1, len(counts), 0
    while h < k:
        c = int(counts[h])
        if c > best_count:
            best, best_count = h, c
            k = update_hypotheses(confidence, c, n, k)
        h += 1
    return best, (best_count if best >= 0 else 0), h


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
