"""What the backend node publishes and writes, built from estimator states (no rclpy).

* :func:`odometry_msg` - ``nav_msgs/Odometry`` in REP 105 frames (``header.frame_id`` the
  odometry frame, ``child_frame_id`` the body), twist in the body frame, covariances from
  :func:`vilib_ros.backend.covariance.odometry_covariance` (zeros when none is known yet).
* :func:`transform` / :func:`static_transforms` - ``geometry_msgs/TransformStamped`` for
  ``odom -> base_link`` (``/tf``) and ``base_link -> camera / imu`` from ``T_BS`` (``/tf_static``).
* :class:`TrajectoryLog` - the TUM trajectory file, appended as poses are published and
  flushed every ``flush_s`` (a killed backend keeps what it had), rewritten with the smoothed
  trajectory at a clean shutdown.
"""
from __future__ import annotations

import time
from pathlib import Path

import numpy as np

from vilib_ros.nodes.conversions import ns_to_stamp


def _quat_xyzw(R: np.ndarray) -> np.ndarray:
    from scipy.spatial.transform import Rotation

    return Rotation.from_matrix(np.asarray(R, dtype=np.float64)).as_quat()


def odometry_msg(state, odom_frame: str, base_frame: str, covariance=None):
    from nav_msgs.msg import Odometry

    o = Odometry()
    o.header.stamp = ns_to_stamp(state.stamp_ns)
    o.header.frame_id = odom_frame
    o.child_frame_id = base_frame
    p = o.pose.pose.position
    p.x, p.y, p.z = (float(v) for v in state.p)
    q = o.pose.pose.orientation
    q.x, q.y, q.z, q.w = (float(v) for v in state.q_xyzw)
    v_body = state.R.T @ np.asarray(state.v, dtype=np.float64)
    t = o.twist.twist.linear
    t.x, t.y, t.z = (float(v) for v in v_body)
    if covariance is not None:
        o.pose.covariance = np.asarray(covariance[0], dtype=np.float64).reshape(36)
        o.twist.covariance = np.asarray(covariance[1], dtype=np.float64).reshape(36)
    return o


def transform(stamp_ns: int, parent: str, child: str, T: np.ndarray):
    """TransformStamped of the 4x4 pose ``T`` of ``child`` in ``parent``."""
    from geometry_msgs.msg import TransformStamped

    T = np.asarray(T, dtype=np.float64).reshape(4, 4)
    m = TransformStamped()
    m.header.stamp = ns_to_stamp(stamp_ns)
    m.header.frame_id = parent
    m.child_frame_id = child
    tr = m.transform.translation
    tr.x, tr.y, tr.z = (float(v) for v in T[:3, 3])
    r = m.transform.rotation
    r.x, r.y, r.z, r.w = (float(v) for v in _quat_xyzw(T[:3, :3]))
    return m


def odom_transform(state, odom_frame: str, base_frame: str):
    T = np.eye(4)
    T[:3, :3], T[:3, 3] = state.R, state.p
    return transform(state.stamp_ns, odom_frame, base_frame, T)


def static_transforms(stamp_ns: int, base_frame: str, sensors: dict) -> list:
    """``base_frame -> sensor`` for ``{frame id: T_BS (sensor -> body, 4x4)}``."""
    return [transform(stamp_ns, base_frame, child, T) for child, T in sensors.items()]


class TrajectoryLog:
    """TUM lines (``t x y z qx qy qz qw``) appended per published pose, flushed every ``flush_s``."""

    def __init__(self, path: str | Path, flush_s: float = 1.0):
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._f = open(self.path, "w")
        self.flush_s = float(flush_s)
        self._last_flush = time.monotonic()
        self.lines = 0

    def append(self, state) -> None:
        t = int(state.stamp_ns)
        vals = (*np.asarray(state.p, float), *np.asarray(state.q_xyzw, float))
        self._f.write(f"{t // 1_000_000_000}.{t % 1_000_000_000:09d} " + " ".join(f"{x:.9f}" for x in vals) + "\n")
        self.lines += 1
        if time.monotonic() - self._last_flush >= self.flush_s:
            self.flush()

    def flush(self) -> None:
        self._f.flush()
        self._last_flush = time.monotonic()

    def close(self) -> None:
        if not self._f.closed:
            self._f.close()
