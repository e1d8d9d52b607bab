"""Pose and velocity covariance of the estimator's newest keyframe, for ``nav_msgs/Odometry``.

:func:`odometry_covariance` asks the fixed-lag smoother for the marginal covariance of the
newest keyframe's pose ``x_k`` and velocity ``v_k`` and expresses them as ROS consumers
(``robot_localization``, PX4's bridge) read them:

* pose: 6x6, row-major order (x, y, z, rotation about x, y, z), position and rotation
  perturbations in the odometry (world) frame. gtsam's ``Pose3`` marginal is in the body's
  tangent space, (rotation, translation) with ``T = T_hat * Exp(xi)``; to first order the
  world-frame perturbations are ``R d_rot`` and ``R d_trans``, so ``C = J Sigma J^T`` with
  ``J = [[0, R], [R, 0]]`` (the blocks also swap the order).
* twist: 6x6 (linear x, y, z, angular x, y, z) in the body frame (the message's child
  frame): the velocity marginal (world) rotated by ``R^T``; the angular part is not
  estimated and is reported as ``angular_variance`` (large: unknown) on the diagonal.

Returns None before initialisation or when the smoother cannot give a marginal. Frames
between keyframes carry their keyframe's covariance.
"""
from __future__ import annotations

import numpy as np


def odometry_covariance(estimator, angular_variance: float = 1e3):
    """(pose_cov (6, 6), twist_cov (6, 6)) of the newest keyframe, or None."""
    smoother = getattr(estimator, "_smoother", None)
    kf = getattr(estimator, "_last_kf", None)
    if smoother is None or kf is None or not getattr(estimator, "initialised", False):
        return None
    gtsam = estimator._g
    try:
        S_pose = np.asarray(smoother.marginalCovariance(gtsam.symbol("x", kf.idx)))
        S_vel = np.asarray(smoother.marginalCovariance(gtsam.symbol("v", kf.idx)))
    except Exception:  # noqa: BLE001 - variable marginalised out / indeterminant system
        return None
    R = np.asarray(kf.T)[:3, :3]
    J = np.zeros((6, 6))
    J[:3, 3:] = R      # world translation <- body translation (gtsam's second block)
    J[3:, :3] = R      # world rotation <- body rotation (gtsam's first block)
    pose = J @ S_pose @ J.T
    twist = np.zeros((6, 6))
    twist[:3, :3] = R.T @ S_vel @ R
    twist[3:, 3:] = np.eye(3) * float(angular_variance)
    return 0.5 * (pose + pose.T), 0.5 * (twist + twist.T)
