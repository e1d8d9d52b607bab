"""Rotation matrix -> quaternion, with ``math`` and NumPy alone: the estimator's every output and the
backend node's static transforms (which run without the backend's dependencies, ``estimator: none``)."""
from __future__ import annotations

import math

import numpy as np


def rot_to_quat_xyzw(R: np.ndarray) -> np.ndarray:
    """Rotation matrix -> unit quaternion [x, y, z, w] with w >= 0 (Shepperd's method), on plain
    floats (every frame's output, where NumPy's per-call overhead on small arrays would dominate)."""
    (m00, m01, m02), (m10, m11, m12), (m20, m21, m22) = R.tolist()
    tr = m00 + m11 + m22
    if tr > 0:
        s = 2.0 * math.sqrt(tr + 1.0)
        q = ((m21 - m12) / s, (m02 - m20) / s, (m10 - m01) / s, 0.25 * s)
    elif m00 > m11 and m00 > m22:
        s = 2.0 * math.sqrt(1.0 + m00 - m11 - m22)
        q = (0.25 * s, (m01 + m10) / s, (m02 + m20) / s, (m21 - m12) / s)
    elif m11 > m22:
        s = 2.0 * math.sqrt(1.0 + m11 - m00 - m22)
        q = ((m01 + m10) / s, 0.25 * s, (m12 + m21) / s, (m02 - m20) / s)
    else:
        s = 2.0 * math.sqrt(1.0 + m22 - m00 - m11)
        q = ((m02 + m20) / s, (m12 + m21) / s, 0.25 * s, (m10 - m01) / s)
    n = math.sqrt(q[0] * q[0] + q[1] * q[1] + q[2] * q[2] + q[3] * q[3])
    if q[3] < 0:
        n = -n
    return np.array((q[0] / n, q[1] / n, q[2] / n, q[3] / n))
