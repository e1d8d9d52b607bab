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
"""
from __future__ import annotations

from pathlib import Path

import numpy as np

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
