"""Pose and velocity covariance of the estimator's state, for ``nav_msgs/Odometry``.

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

A frame after its keyframe is the keyframe's state predicted by the IMU alone, and so is every state
while tracking is lost: its covariance is the keyframe's propagated through the IMU's error dynamics
(:func:`propagate`), so that it grows with the time since the last visual update instead of repeating
the last small one. The error state is ``e = (rotation, position, velocity)``, world frame, with
``R = Exp(e_rot) R_hat``, ``p = p_hat + e_pos``, ``v = v_hat + e_vel`` (:func:`world_covariance` makes it of a
marginal, :func:`ros_covariance` the two ROS matrices of it).
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


def world_covariance(cov: StateCovariance) -> np.ndarray:
    """The 9x9 covariance of the world-frame error state (rotation, position, velocity) of a keyframe's
    marginal (pose and velocity marginals: no cross term between them)."""
    R = np.asarray(cov.R_wb, float)
    P = np.zeros((9, 9))
    S = np.asarray(cov.pose, float)
    P[:3, :3] = R @ S[:3, :3] @ R.T
    P[:3, 3:6] = R @ S[:3, 3:] @ R.T
    P[3:6, :3] = P[:3, 3:6].T
    P[3:6, 3:6] = R @ S[3:, 3:] @ R.T
    P[6:, 6:] = np.asarray(cov.velocity, float)
    return 0.5 * (P + P.T)


def _skew(w) -> np.ndarray:
    return np.array([[0.0, -w[2], w[1]], [w[2], 0.0, -w[0]], [-w[1], w[0], 0.0]])


def propagate(P: np.ndarray, dt: float, f_w, sigma_gyro: float, sigma_acc: float) -> np.ndarray:
    """``P`` (9x9, :func:`world_covariance`'s error state) after ``dt`` seconds of IMU-only dead reckoning: the
    error dynamics ``d e_rot = n_g``, ``d e_vel = -[f_w]x e_rot + n_a``, ``d e_pos = e_vel`` with the world-frame
    specific force ``f_w`` (m/s^2, constant: its mean over the interval) and white noise of the densities
    ``sigma_gyro`` (rad/s/sqrt(Hz)) and ``sigma_acc`` (m/s^2/sqrt(Hz)). Exact for that linear system: the
    transition ``Phi(dt)`` and the noise ``integral_0^dt Phi(s) G Q G^T Phi(s)^T ds`` in closed form (the
    rotation error's leak into velocity and position included)."""
    P = np.asarray(P, float)
    if dt <= 0:
        return P.copy()
    h = float(dt)
    Fx = _skew(np.asarray(f_w, float))
    I3 = np.eye(3)
    F = np.eye(9)
    F[3:6, :3] = -0.5 * Fx * h * h
    F[3:6, 6:] = I3 * h
    F[6:, :3] = -Fx * h
    qa, qg = sigma_acc * sigma_acc, sigma_gyro * sigma_gyro
    FF = Fx @ Fx.T
    Q = np.zeros((9, 9))
    Q[:3, :3] = I3 * qg * h
    Q[:3, 3:6] = -qg * h ** 3 / 6 * Fx.T
    Q[:3, 6:] = -qg * h ** 2 / 2 * Fx.T
    Q[3:6, 3:6] = I3 * qa * h ** 3 / 3 + FF * qg * h ** 5 / 20
    Q[3:6, 6:] = I3 * qa * h ** 2 / 2 + FF * qg * h ** 4 / 8
    Q[6:, 6:] = I3 * qa * h + FF * qg * h ** 3 / 3
    Q[3:6, :3], Q[6:, :3], Q[6:, 3:6] = Q[:3, 3:6].T, Q[:3, 6:].T, Q[3:6, 6:].T
    out = F @ P @ F.T + Q
    return 0.5 * (out + out.T)


def ros_covariance(P: np.ndarray, R_wb, angular_variance: float = 1e3):
    """(pose_cov (6, 6), twist_cov (6, 6)) of the world error state ``P`` (9x9) in the ROS conventions of
    :func:`odometry_covariance` (pose: x, y, z, rotation x, y, z in the world frame; twist: the velocity
    in the body frame of orientation ``R_wb``, the angular part ``angular_variance``)."""
    R = np.asarray(R_wb, float)
    pose = np.empty((6, 6))
    pose[:3, :3], pose[:3, 3:] = P[3:6, 3:6], P[3:6, :3]
    pose[3:, :3], pose[3:, 3:] = P[:3, 3:6], P[:3, :3]
    twist = np.zeros((6, 6))
    twist[:3, :3] = R.T @ P[6:, 6:] @ R
    twist[3:, 3:] = np.eye(3) * float(angular_variance)
    return 0.5 * (pose + pose.T), 0.5 * (twist + twist.T)
