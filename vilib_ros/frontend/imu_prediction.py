"""IMU-aided feature prediction: gyro integration + rotation-only homography.

Between two frames the body rotation ``R_b0_b1`` is integrated from gyro samples (body frame,
rad/s), turned into the camera rotation with the extrinsics ``T_BS`` (camera -> body):
``R_c0_c1 = R_BS^T R_b0_b1 R_BS``. A point seen along ``x0`` (undistorted, normalised) in frame
0 is predicted, ignoring translation (far scene), along ``R_c0_c1^T x0`` in frame 1, i.e. the
rotation-only homography ``K R K^-1`` applied on undistorted points, then distorted again.
"""
from __future__ import annotations

import bisect
import math

import numpy as np


class ImuGapError(ValueError):
    """The gyro samples do not cover the frame interval well enough."""


def so3_exp(w: np.ndarray) -> np.ndarray:
    """Rodrigues: rotation vector (3,) -> 3x3."""
    w = np.asarray(w, np.float64).reshape(3)
    th = float(np.linalg.norm(w))
    K = np.array([[0, -w[2], w[1]], [w[2], 0, -w[0]], [-w[1], w[0], 0]])
    if th < 1e-12:
        return np.eye(3) + K
    return np.eye(3) + np.sin(th) / th * K + (1 - np.cos(th)) / th ** 2 * (K @ K)


def integrate_gyro(gyro: np.ndarray, t0_ns: int, t1_ns: int, max_gap_ns: int = 50_000_000) -> np.ndarray:
    """Body rotation R_b0_b1 over [t0, t1] from gyro rows (t_ns, wx, wy, wz).

    The rate is linearly interpolated between samples (held constant beyond the first/last
    one) and integrated with the midpoint rule on every sub-interval. Raises
    :class:`ImuGapError` for NaN samples, no samples, or a gap longer than ``max_gap_ns``
    inside (or at the ends of) the interval.

    Plain Python floats over the handful of samples of a frame interval, the sub-interval
    rotations chained as quaternions: it runs inside the frontend's ``process()`` on every frame,
    where NumPy's per-call cost would dominate the few dozen small array operations of a
    vectorised version (and of a loop of 3x3 products per sample).
    """
    g = np.asarray(gyro, np.float64)
    if g.ndim != 2 or g.shape[1] != 4:
        raise ValueError(f"gyro must be (K, 4) rows of t_ns, wx, wy, wz; got shape {g.shape}")
    if t1_ns < t0_ns:
        raise ValueError(f"frame interval is reversed: t0={t0_ns} > t1={t1_ns}")
    if g.shape[0] == 0:
        raise ImuGapError("no gyro samples between the frames")
    rows = g.tolist()
    isfinite = math.isfinite
    for r in rows:
        if not (isfinite(r[0]) and isfinite(r[1]) and isfinite(r[2]) and isfinite(r[3])):
            raise ImuGapError("gyro samples contain NaN/inf")
    t = [r[0] for r in rows]
    if any(b <= a for a, b in zip(t, t[1:])):
        rows.sort(key=lambda r: r[0])                   # stable; the first of equal stamps is kept
        rows = [r for k, r in enumerate(rows) if k == 0 or r[0] > rows[k - 1][0]]
        t = [r[0] for r in rows]
    t0, t1 = float(t0_ns), float(t1_ns)                 # compared as NumPy compares them
    inside = [x for x in t if t0 < x < t1]
    before = [x for x in t if x <= t0]
    after = [x for x in t if x >= t1]
    if not (before or after or inside):
        raise ImuGapError("no gyro samples around the frame interval")
    # gap check on the samples that bracket and fill [t0, t1] (a frame stamp stands in where
    # there is no sample beyond it)
    chain = [before[-1] if before else t0] + inside + [after[0] if after else t1]
    gap = max(b - a for a, b in zip(chain, chain[1:]))
    if gap > max_gap_ns:
        raise ImuGapError(f"gyro gap of {gap * 1e-6:.1f} ms around the frame interval")
    knots = [t0] + inside + [t1]
    n = len(t)
    qw, qx, qy, qz = 1.0, 0.0, 0.0, 0.0
    for a, b in zip(knots, knots[1:]):
        dt = (b - a) * 1e-9
        if dt <= 0:
            continue
        m = 0.5 * (a + b)
        j = bisect.bisect_right(t, m) - 1               # np.interp: held beyond the ends, linear inside
        if j < 0:
            wx, wy, wz = rows[0][1], rows[0][2], rows[0][3]
        elif j >= n - 1:
            wx, wy, wz = rows[-1][1], rows[-1][2], rows[-1][3]
        else:
            r0, r1 = rows[j], rows[j + 1]
            f = (m - r0[0]) / (r1[0] - r0[0])
            wx, wy, wz = r0[1] + f * (r1[1] - r0[1]), r0[2] + f * (r1[2] - r0[2]), r0[3] + f * (r1[3] - r0[3])
        vx, vy, vz = wx * dt, wy * dt, wz * dt
        th = math.sqrt(vx * vx + vy * vy + vz * vz)
        if th < 1e-12:
            c, s = 1.0, 0.5
        else:
            c, s = math.cos(0.5 * th), math.sin(0.5 * th) / th
        bw, bx, by, bz = c, s * vx, s * vy, s * vz      # q <- q * exp(v / 2): R <- R exp([v]x)
        qw, qx, qy, qz = (qw * bw - qx * bx - qy * by - qz * bz, qw * bx + qx * bw + qy * bz - qz * by,
                          qw * by - qx * bz + qy * bw + qz * bx, qw * bz + qx * by - qy * bx + qz * bw)
    nq = math.sqrt(qw * qw + qx * qx + qy * qy + qz * qz)
    qw, qx, qy, qz = qw / nq, qx / nq, qy / nq, qz / nq
    return np.array([[1 - 2 * (qy * qy + qz * qz), 2 * (qx * qy - qw * qz), 2 * (qx * qz + qw * qy)],
                     [2 * (qx * qy + qw * qz), 1 - 2 * (qx * qx + qz * qz), 2 * (qy * qz - qw * qx)],
                     [2 * (qx * qz - qw * qy), 2 * (qy * qz + qw * qx), 1 - 2 * (qx * qx + qy * qy)]])


def camera_rotation(R_b0_b1: np.ndarray, T_BS: np.ndarray) -> np.ndarray:
    """Camera rotation R_c0_c1 from the body rotation and the camera->body extrinsics."""
    R_bs = np.asarray(T_BS, np.float64)[:3, :3]
    return R_bs.T @ R_b0_b1 @ R_bs


def predict_points(camera, R_c0_c1: np.ndarray, uv: np.ndarray, xy: np.ndarray | None = None) -> np.ndarray:
    """Predicted pixels in frame 1 of pixels ``uv`` (N, 2) in frame 0 under rotation only.

    ``xy``: the undistorted normalised coordinates of ``uv`` if already known.
    Points that would land behind the camera keep their old position.
    """
    uv = np.asarray(uv, np.float64).reshape(-1, 2)
    if uv.shape[0] == 0:
        return np.zeros((0, 2), np.float32)
    if xy is None:
        xy = camera.undistort(uv)
    X = np.concatenate([np.asarray(xy, np.float64).reshape(-1, 2), np.ones((uv.shape[0], 1))], axis=1)
    X1 = X @ np.asarray(R_c0_c1, np.float64)  # rows: (R^T x)^T = x^T R
    ok = X1[:, 2] > 1e-6
    out = uv.copy()
    if np.any(ok):
        out[ok] = camera.distort_normalised(X1[ok, :2] / X1[ok, 2:3])
    return out.astype(np.float32)


class GyroPredictor:
    """Stateless helper bound to one camera: gyro samples -> predicted feature positions."""

    def __init__(self, camera, max_gap_ns: int = 50_000_000):
        self.camera = camera
        self.max_gap_ns = int(max_gap_ns)

    def rotation(self, gyro: np.ndarray, t0_ns: int, t1_ns: int) -> np.ndarray:
        """R_c0_c1 (raises ImuGapError on gaps / NaN)."""
        return camera_rotation(integrate_gyro(gyro, t0_ns, t1_ns, self.max_gap_ns), self.camera.T_BS)

    def predict(self, gyro, t0_ns, t1_ns, uv, xy=None) -> np.ndarray:
        return predict_points(self.camera, self.rotation(gyro, t0_ns, t1_ns), uv, xy)
