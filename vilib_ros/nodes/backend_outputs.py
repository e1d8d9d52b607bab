"""What the backend node publishes and writes, built from estimator states (no rclpy).

* :func:`odometry_msg` - ``nav_msgs/Odometry`` in REP 105 frames (``header.frame_id`` the
  odometry frame, ``child_frame_id`` the body), twist in the body frame, covariances from
  :func:`vilib_ros.backend.covariance.odometry_covariance` (zeros when none is known yet).
* :func:`transform` / :func:`static_transforms` - ``geometry_msgs/TransformStamped`` for
  ``odom -> base_link`` (``/tf``) and ``base_link -> camera / imu`` from ``T_BS`` (``/tf_static``).
* :class:`PathBuffer` - the published path as arrays (bounded, oldest dropped), serialized
  without a Python object per pose (:func:`vilib_ros.nodes.cdr.encode_path`).
* :class:`TrajectoryLog` - the TUM trajectory file, appended as poses are published and
  flushed every ``flush_s`` (a killed backend keeps what it had), rewritten with the smoothed
  trajectory at a clean shutdown.
"""
from __future__ import annotations

import math
import time
from pathlib import Path

import numpy as np

from vilib_ros.backend.rotation import rot_to_quat_xyzw
from vilib_ros.nodes.cdr import encode_odometry, encode_path, encode_tf
from vilib_ros.nodes.conversions import ns_to_stamp


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


def _pose7(state) -> np.ndarray:
    """x y z qx qy qz qw of ``state``."""
    return np.concatenate([np.asarray(state.p, np.float64).reshape(3), np.asarray(state.q_xyzw, np.float64).reshape(4)])


def to_body(q_xyzw, v) -> tuple[float, float, float]:
    """``R(q)^T v``: world vector ``v`` in the body frame of orientation ``q`` (x, y, z, w; normalised
    here as scipy's Rotation does), in plain floats: a fraction of the cost of ``state.R`` (a scipy
    Rotation per call), per odometry message."""
    x, y, z, w = (float(c) for c in np.asarray(q_xyzw, dtype=np.float64).reshape(4))
    n = math.sqrt(x * x + y * y + z * z + w * w)
    x, y, z, w = -x / n, -y / n, -z / n, w / n          # the conjugate: R(q)^T = R(q*)
    vx, vy, vz = (float(c) for c in np.asarray(v, dtype=np.float64).reshape(3))
    tx, ty, tz = 2.0 * (y * vz - z * vy), 2.0 * (z * vx - x * vz), 2.0 * (x * vy - y * vx)   # t = 2 u x v
    return (vx + w * tx + y * tz - z * ty, vy + w * ty + z * tx - x * tz, vz + w * tz + x * ty - y * tx)


def odometry_bytes(state, odom_frame: str, base_frame: str, covariance=None) -> bytes:
    """:func:`odometry_msg` serialized directly (:func:`vilib_ros.nodes.cdr.encode_odometry`: no
    message object: rclpy's conversion and serialization of one would cost far more, every frame)."""
    cov = (None, None) if covariance is None else covariance
    return encode_odometry(state.stamp_ns, odom_frame, base_frame, _pose7(state),
                           to_body(state.q_xyzw, state.v) + (0.0, 0.0, 0.0), *cov)


def odom_tf_bytes(state, odom_frame: str, base_frame: str) -> bytes:
    """A ``tf2_msgs/TFMessage`` of :func:`odom_transform`, serialized directly."""
    return encode_tf(state.stamp_ns, odom_frame, base_frame, _pose7(state))


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
    r.x, r.y, r.z, r.w = (float(v) for v in rot_to_quat_xyzw(T[:3, :3]))
    return m


def odom_transform(state, odom_frame: str, base_frame: str):
    """``odom_frame -> base_frame`` from the state's position and quaternion (the odometry's own
    numbers; no rotation-matrix round trip per frame)."""
    from geometry_msgs.msg import TransformStamped

    m = TransformStamped()
    m.header.stamp = ns_to_stamp(state.stamp_ns)
    m.header.frame_id = odom_frame
    m.child_frame_id = base_frame
    tr = m.transform.translation
    tr.x, tr.y, tr.z = (float(v) for v in state.p)
    r = m.transform.rotation
    r.x, r.y, r.z, r.w = (float(v) for v in state.q_xyzw)
    return m


def static_transforms(stamp_ns: int, base_frame: str, sensors: dict) -> list:
    """``base_frame -> sensor`` for ``{frame id: T_BS (sensor -> body, 4x4)}``."""
    return [transform(stamp_ns, base_frame, child, T) for child, T in sensors.items()]


class PathBuffer:
    """The last ``capacity`` poses (stamp, x y z qx qy qz qw) in arrays that grow by doubling up
    to ``capacity``; :meth:`encode` is the serialized ``nav_msgs/Path``, oldest pose first."""

    def __init__(self, capacity: int):
        self.capacity = int(capacity)
        self._t = np.zeros(min(self.capacity, 1024), np.int64)
        self._p = np.zeros((len(self._t), 7), np.float64)
        self._n = 0                     # poses appended so far (the ring holds the last capacity)

    def __len__(self) -> int:
        return min(self._n, self.capacity)

    def append(self, stamp_ns: int, p, q_xyzw) -> None:
        if self._n == len(self._t) and len(self._t) < self.capacity:
            size = min(self.capacity, 2 * len(self._t))
            self._t = np.resize(self._t, size)
            self._p = np.resize(self._p, (size, 7))
        i = self._n % len(self._t)
        self._t[i] = stamp_ns
        self._p[i, :3], self._p[i, 3:] = p, q_xyzw
        self._n += 1

    def arrays(self) -> tuple[np.ndarray, np.ndarray]:
        """(stamps (N,), poses (N, 7)), oldest first."""
        n = len(self)
        if self._n <= len(self._t):
            return self._t[:n], self._p[:n]
        k = self._n % len(self._t)
        return np.concatenate([self._t[k:], self._t[:k]]), np.concatenate([self._p[k:], self._p[:k]])

    def encode(self, stamp_ns: int, frame_id: str) -> bytes:
        t, p = self.arrays()
        return encode_path(stamp_ns, frame_id, t, p)


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
