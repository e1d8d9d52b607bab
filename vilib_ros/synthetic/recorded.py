"""A recorded trajectory (and optionally its recorded IMU) as the generator's motion source.

:class:`RecordedTrajectory` has the interface of :class:`.trajectory.Trajectory`
(``sample(t) -> TrajectorySample``, ``rotation(t)``), built from ground-truth poses such as
EuRoC's ``V101_groundtruth_tum.txt``: positions through a C2 cubic spline (so velocity and
acceleration are defined), orientations through scipy's ``RotationSpline`` (angular rate).
At the recorded stamps the poses are the recorded ones exactly; times are clipped to the
recorded span. With ``offset`` the positions are shifted (the generator centres the
trajectory's bounding box in its room).

:func:`read_recorded_imu` reads an ASL ``imu0/data.csv``: with it the generator's IMU is the
real sensor's (real noise, bias and bias drift, and whatever the real trajectory did that the
ground truth does not show), so an estimator meets real inertial data while the images and
their geometry are exact.

:func:`recorded_motion` makes of a sequence's configuration what the generator needs: the spline,
the frame stamps, a room around the trajectory and the recorded IMU.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from .scene import Scene, build_room
from .trajectory import TrajectorySample


class RecordedTrajectory:
    """Spline through recorded body poses ``T_WB`` (``t_s`` seconds since the sequence start)."""

    def __init__(self, t_s: np.ndarray, p: np.ndarray, q_xyzw: np.ndarray, offset=(0.0, 0.0, 0.0)):
        from scipy.interpolate import CubicSpline
        from scipy.spatial.transform import Rotation, RotationSpline

        t_s = np.asarray(t_s, float)
        if t_s.ndim != 1 or len(t_s) < 4 or np.any(np.diff(t_s) <= 0):
            raise ValueError("a recorded trajectory needs >= 4 poses with strictly increasing stamps")
        p = np.asarray(p, float) + np.asarray(offset, float)
        q = np.asarray(q_xyzw, float)
        if not (np.all(np.isfinite(p)) and np.all(np.isfinite(q))):
            raise ValueError("recorded trajectory has non-finite poses")
        self.t_s = t_s
        self._pos = CubicSpline(t_s, p, axis=0)
        self._rot = RotationSpline(t_s, Rotation.from_quat(q))
        self.bbox = (p.min(0), p.max(0))

    def _clip(self, t) -> np.ndarray:
        return np.clip(np.atleast_1d(np.asarray(t, float)), self.t_s[0], self.t_s[-1])

    def rotation(self, t) -> np.ndarray:
        return self._rot(self._clip(t)).as_matrix()

    def sample(self, t) -> TrajectorySample:
        t = self._clip(t)
        R = self._rot(t).as_matrix()
        # RotationSpline's first derivative is the angular rate in the rotating (body) frame
        w_b = np.atleast_2d(self._rot(t, 1))
        return TrajectorySample(self._pos(t), self._pos(t, 1), self._pos(t, 2), R, w_b)


def read_recorded_imu(path: str | Path) -> tuple[np.ndarray, np.ndarray]:
    """(stamps_ns (M,), data (M,6) [wx wy wz ax ay az]) from an ASL ``imu0`` folder or its data.csv."""
    from ..datasets.common import monotonic_mask, read_csv_stamped

    p = Path(path)
    csv = p / "data.csv" if p.is_dir() else p
    t, d = read_csv_stamped(csv, 6)
    keep = monotonic_mask(t)
    return t[keep], d[keep]


@dataclass
class RecordedMotion:
    """What a sequence of recorded motion is made of (:func:`recorded_motion`)."""

    start_ns: int                   # the first selected pose's stamp
    frame_stamps_ns: np.ndarray     # every frame-period's recorded stamp
    trajectory: RecordedTrajectory
    room_size: tuple                # (L, W, H) metres, around the trajectory
    scene: Scene
    imu: tuple | None               # (stamps ns, data (M, 6)) of the recorded IMU, or None


def recorded_motion(cfg, frame_period_ns: int) -> RecordedMotion:
    """Recorded motion of a :class:`~.sequence.SequenceConfig` (``recorded_groundtruth``, ``recorded_imu``,
    ``recorded_start_s``, ``duration_s``, ``recorded_margin_m``): the trajectory spline, the frame stamps
    (the recorded stamps every ``frame_period_ns``), a room around the trajectory, the real IMU."""
    from ..datasets import read_tum

    gt = read_tum(cfg.recorded_groundtruth)
    if len(gt) < 4:
        raise ValueError(f"{cfg.recorded_groundtruth}: fewer than 4 poses")
    t0 = int(gt.t_ns[0]) + int(round(cfg.recorded_start_s * 1e9))
    t1 = t0 + int(round(cfg.duration_s * 1e9))
    sel = np.flatnonzero((gt.t_ns >= t0) & (gt.t_ns <= t1))
    if len(sel) < 4:
        raise ValueError(f"{cfg.recorded_groundtruth}: no poses in [{cfg.recorded_start_s}, "
                         f"{cfg.recorded_start_s + cfg.duration_s}] s of the recording")
    period = float(np.median(np.diff(gt.t_ns[sel])))
    step = max(1, int(round(frame_period_ns / period)))
    start_ns = int(gt.t_ns[sel[0]])
    frame_stamps_ns = gt.t_ns[sel[::step]].astype(np.int64)
    # spline over the selection plus a few poses either side (no end effects inside it)
    lo, hi = max(0, sel[0] - 5), min(len(gt), sel[-1] + 6)
    p = gt.p[lo:hi]
    centre = 0.5 * (p[sel - lo].min(0) + p[sel - lo].max(0))
    offset = np.array([-centre[0], -centre[1], 0.0])
    t_s = (np.asarray(gt.t_ns[lo:hi], dtype=np.int64) - start_ns).astype(np.float64) * 1e-9
    trajectory = RecordedTrajectory(t_s, p, gt.q_xyzw[lo:hi], offset)
    bb_lo, bb_hi = p[sel - lo].min(0) + offset, p[sel - lo].max(0) + offset
    half = np.maximum(np.abs(bb_lo[:2]), np.abs(bb_hi[:2]))
    m = cfg.recorded_margin_m
    L, W = 2 * (half[0] + m), 2 * (half[1] + m)
    H = max(cfg.room_size[2], float(bb_hi[2]) + 1.2)
    if bb_lo[2] < 0.3:
        raise ValueError(f"{cfg.recorded_groundtruth}: the trajectory goes below 0.3 m (floor at z = 0)")
    room_size = (float(L), float(W), float(H))
    scene = build_room(np.random.default_rng([cfg.seed, 1]), room_size, cfg.n_boxes,
                       use_skimage=cfg.textures == "skimage", keep_out=(float(half[0]) + 0.7, float(half[1]) + 0.7))
    imu = None
    if cfg.recorded_imu is not None:
        it, d = read_recorded_imu(cfg.recorded_imu)
        keep = (it >= frame_stamps_ns[0] - int(1e9)) & (it <= frame_stamps_ns[-1])
        if keep.sum() < 10:
            raise ValueError(f"{cfg.recorded_imu}: no IMU samples during the recorded sequence")
        imu = (it[keep], d[keep])
    return RecordedMotion(start_ns, frame_stamps_ns, trajectory, room_size, scene, imu)
