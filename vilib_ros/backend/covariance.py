"""Pose and velocity covariance of the estimator's newest keyframe, for ``nav_msgs/Odometry``.

:func:`odometry_covariance` takes the marginal covariance of the newest keyframe's pose and
velocity (:meth:`vilib_ros.backend.VioEstimator.state_covariance`, a
:class:`~vilib_ros.backend.config.StateCovariance`) and expresses it as ROS consumers
(``robot_localization``, PX4's bridge) read it:

* pose: 6x6, row-major order (x, y, z, rotation about x, y, z), position and rotation
  perturbations in the odometry (world) frame. gtsam's ``Pose3`` marginal is in the body's
  tangent space, (rotation, translation) with ``T = T_hat * Exp(xi)``; to first order the
  world-frame perturbations are ``R d_rot`` and ``R d_trans``, so ``C = J Sigma J^T`` with
  ``J = [[0, R], [R, 0]]`` (the blocks also swap the order).
* twist: 6x6 (linear x, y, z, angular x, y, z) in the body frame (the message's child
  frame): the velocity marginal (world) rotated by ``R^T``; the angular part is not
  estimated and is reported as ``angular_variance`` (large: unknown) on the diagonal.

Returns None for None (before initialisation, or when the smoother cannot give a marginal).
Frames between keyframes carry their keyframe's covariance.
"""
from __future__ import annotations

import numpy as np

from .config import StateCovariance


def odometry_covariance(cov: StateCovariance | None, angular_variance: float = 1e3):
    """(pose_cov (6, 6), twist_cov (6, 6)) in the ROS conventions above, or None."""
    if cov is None:
        return None
    R = np.asarray(cov.R_wb, float)
    J = np.zeros((6, 6))
    J[:3, 3:] = R      # world translation <- body translation (gtsam's second block)
    J[3:, :3] = R      # world rotation <- body rotation (gtsam's first block)
    pose = J @ np.asarray(cov.pose, float) @ J.T
    twist = np.zeros((6, 6))
    twist[:3, :3] = R.T @ np.asarray(cov.velocity, float) @ R
    twist[3:, 3:] = np.eye(3) * float(angular_variance)
    return 0.5 * (pose + pose.T), 0.5 * (twist + twist.T)
