"""IMU-aided feature prediction: gyro integration + rotation-only homography.

Between two frames the body rotation ``R_b0_b1`` is integrated from gyro samples (body frame,
rad/s), turned into the camera rotation with the extrinsics ``T_BS`` (camera -> body):
``R_c0_c1 = R_BS^T R_b0_b1 R_BS``. A point seen along ``x0`` (undistorted, normalised) in frame
0 is predicted, ignoring translation (far scene), along ``R_c0_c1^T x0`` in frame 1, i.e. the
rotation-only homography ``K R K^-1`` applied on undistorted points, then distorted again.
"""
from __future__ import annotations

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
    """
    g = np.asarray(gyro, np.float64)
    if g.ndim != 2 or g.shape[1] != 4:
        raise ValueError(f"gyro must be (K, 4) rows of t_ns, wx, wy, wz; got shape {g.shape}")
    if t1_ns < t0_ns:
        raise ValueError(f"frame interval is reversed: t0={t0_ns} > t1={t1_ns}")
    if g.shape[0] == 0:
        raise ImuGapError("no gyro samples between the frames")
    if not np.all(np.isfinite(g)):
        raise ImuGapError("gyro samples contain NaN/inf")
    t = g[:, 0]
    if np.any(np.diff(t) <= 0):
        order = np.argsort(t, kind="stable")
        g = g[order]
        t = g[:, 0]
        keep = np.concatenate([[True], np.diff(t) > 0])
        g, t = g[keep], t[keep]
    inside = t[(t > t0_ns) & (t < t1_ns)]
    knots = np.concatenate([[float(t0_ns)], inside, [float(t1_ns)]])
    # gap check on the samples that bracket and fill [t0, t1] (a frame stamp stands in where
    # there is no sample beyond it)
    before, after = t[t <= t0_ns], t[t >= t1_ns]
    chain = np.concatenate([before[-1:] if before.size else [float(t0_ns)], inside,
                            after[:1] if after.size else [float(t1_ns)]])
    if not (before.size or after.size or inside.size):
        raise ImuGapError("no gyro samples around the frame interval")
    d = np.diff(chain)
    if d.size and d.max() > max_gap_ns:
        raise ImuGapError(f"gyro gap of {d.max() * 1e-6:.1f} ms around the frame interval")
    mids = 0.5 * (knots[:-1] + knots[1:])
    dts = np.diff(knots) * 1e-9
    w = np.stack([np.interp(mids, t, g[:, i]) for i in (1, 2, 3)], axis=1)
    return chain_product(so3_exp_batch(w * dts[:, None]))


def so3_exp_batch(v: np.ndarray) -> np.ndarray:
    """Rodrigues of every row of ``v`` (M, 3) at once -> (M, 3, 3) (:func:`so3_exp` per row)."""
    v = np.asarray(v, np.float64).reshape(-1, 3)
    th = np.sqrt(np.einsum("ij,ij->i", v, v))
    K = np.zeros((v.shape[0], 3, 3))
    K[:, 0, 1], K[:, 0, 2], K[:, 1, 2] = -v[:, 2], v[:, 1], -v[:, 0]
    K[:, 1, 0], K[:, 2, 0], K[:, 2, 1] = v[:, 2], -v[:, 1], v[:, 0]
    small = th < 1e-12
    ths = np.where(small, 1.0, th)
    a = np.where(small, 1.0, np.sin(ths) / ths)
    b = np.where(small, 0.0, (1.0 - np.cos(ths)) / ths ** 2)
    return np.eye(3) + a[:, None, None] * K + b[:, None, None] * (K @ K)


def chain_product(Rs: np.ndarray) -> np.ndarray:
    """R_0 R_1 ... R_{M-1} of (M, 3, 3) matrices, in pairs (log2 M batched products instead of a
    Python loop of M: the per-sub-interval loop cost ~120 us a frame, the node's IMU path)."""
    Rs = np.asarray(Rs, np.float64)
    if Rs.shape[0] == 0:
        return np.eye(3)
    while Rs.shape[0] > 1:
        if Rs.shape[0] % 2:
            Rs = np.concatenate([Rs, np.eye(3)[None]], axis=0)
        Rs = Rs[0::2] @ Rs[1::2]
    return Rs[0]


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
