"""Fundamental-matrix RANSAC on undistorted, normalised correspondences: the algorithm's fixed
choices, shared by its three implementations: the NumPy reference
(:mod:`vilib_ros.frontend.reference.ransac`), the compiled CPU twin
(:mod:`vilib_ros.frontend.compiled.ransac`, numba) and the kernels (``kernels/ransac.cu``,
:mod:`vilib_ros.frontend.gpu.ransac`, inside the frame's CUDA graph).

The algorithm (all three make the same choices; the numba twin and the kernels bit for bit):

* **candidates**: the rows with finite coordinates; fewer than :data:`SAMPLE` of them: no RANSAC.
* **hypotheses**: :data:`HYPOTHESES` fixed samples. Row ``h`` of :func:`sample_table` (uint32,
  a seeded integer hash) is mapped onto ``n`` candidates by :func:`sample_indices`:
  ``i_j = u_j mod n``, moved on by one (mod ``n``) while it equals an earlier index of the sample.
* **model**: the linear 8-point fundamental matrix of the sample, Hartley-normalised per image
  (centroid to the origin, mean distance sqrt 2): the null vector of the 8x9 design matrix
  (Gaussian elimination with full pivoting in the twins, in float64; ``eigh`` of A^T A in the
  reference), mapped back to the input coordinates. No rank-2 step: only the scores matter. A
  sample without spread (all points at one place) or of rank < 8 gives no model.
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
  :data:`LO_ITERATIONS` = 0, i.e. off, as OpenCV's FM_RANSAC: the refit keeps the noisiest
  inliers): F refitted by least squares (normalised 8-point over every inlier: the smallest
  eigenvector of A^T A; in the twins by inverse iteration on its pivoted LU, every sum in
  :data:`LANES` lane partials combined by a butterfly, as a warp does), taken where it has at
  least as many inliers. A minimal sample's F is noisier than the refit over all inliers, so it
  keeps fewer of them.
* **result**: the rows that are not inliers of the chosen model (non-finite rows included).

The kernel's ``RS_*`` defines come from these constants: :func:`vilib_ros.frontend.config.ransac_defines`.
"""
from __future__ import annotations

import math

import numpy as np

HYPOTHESES = 256        # the most hypotheses a frame evaluates (the GPU evaluates all of them)
SAMPLE = 8              # points per hypothesis (linear 8-point)
MIN_INLIERS = 8         # a model needs at least this many inliers
SEED = 0x5EED_F00D      # of the sample table
LO_ITERATIONS = 0       # least-squares refits of the chosen model: off
LANES = 32              # lane partials of the refit's sums (a warp)
INVERSE_ITERATIONS = 3  # of the refit's smallest eigenvector
SQRT2 = 1.4142135623730951


STATE = ("n", "best", "count", "evaluated")   # the device state slots (RS_N, ...): candidates, choice, final inliers, read


def sample_table(hypotheses: int = HYPOTHESES, seed: int = SEED) -> np.ndarray:
    """(hypotheses, SAMPLE) uint32: the fixed sample table (splitmix64 of seed, row, column)."""
    with np.errstate(over="ignore"):
        z = (np.uint64(seed) + np.arange(hypotheses * SAMPLE, dtype=np.uint64) * np.uint64(0x9E3779B97F4A7C15))
        z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        z = z ^ (z >> np.uint64(31))
    return (z >> np.uint64(32)).astype(np.uint32).reshape(hypotheses, SAMPLE)


TABLE = sample_table()


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
