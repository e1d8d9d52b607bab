"""The estimator's smoother (:class:`Smoother`): the states' factors of the window and the fixed-lag
solver they go to, one of two behind one interface.

Graph, one set of variables per keyframe k: pose X(k) (body in world), velocity V(k), IMU bias B(k),
linked by ``CombinedImuFactor`` (preintegrated between keyframes, :mod:`.preintegration`); landmarks
L(n) in world coordinates with their visual factors (:mod:`.landmarks`). :class:`Smoother` builds the
state factors: the priors that start the window (yaw and position are unobservable: a tight prior
anchors the gauge), each keyframe's IMU factor and, at rest, its zero-velocity prior and no-motion
pose factor; it batches the marginalisation and reads the new state back.

The solver (``solver``, mono: ``mono_solver``) keeps ``window_s`` seconds (mono: the longer
``mono_window_s``: the metric scale needs it):

* ``'schur'``, stereo's default: :class:`~.schur_smoother.SchurSmoother`, our own (one Gauss-Newton
  step per keyframe with the landmarks eliminated in closed form, the states dense; a landmark leaves
  the window with the first state that observed it, and the landmark map then ends its track's
  landmark, the track seen on starting a new one; ``schur_keep_landmarks``: VINS-Mono's depth shift
  instead);
* ``'isam2'``, mono's default: :class:`~.isam2_smoother.Isam2Smoother`, gtsam's iSAM2 (with
  ``rooted_smoother``: landmarks eliminated first, the newest state last, in the root clique, so that
  its covariance is cheap).

Both take the same input and give the same output (the solver interface): ``add_landmark(key, p,
prior_sigma)`` and ``obs_adder()`` (``add_obs(X, L, xy, xr_rect, xr_raw)``) for the visual input, which
joins the next update (an adder serves that update only); ``update(graph, values, stamps, newest)``
with the state factors (gtsam factors on state keys) and their stamps [s] (without arguments: one more
iteration); ``estimate()`` (``exists``, ``atPose3``,
``atVector``, ``atConstantBias``, ``points(keys)``), ``setSmootherLag``, ``marginalCovariance``,
``timestamps`` and ``removed_landmarks`` (the landmarks the last update marginalised).

With ``marginalise_every_s`` (mono: ``mono_marginalise_every_s``) the states older than the window
leave it in batches, so that only one update per batch pays for the marginalisation (the window then
spans ``window_s`` to ``window_s + marginalise_every_s``).

Any exception from an update (gtsam's IndeterminantLinearSystemException, the own smoother's
IndeterminantSystem, other RuntimeErrors) and a diverged state (:func:`diverged`: speed, bias bounds,
NaN) make the estimator restart the smoother from the last good state propagated with the IMU
(:func:`restart_state`).
"""
from __future__ import annotations

import math

import numpy as np

from ._gtsam import load as load_gtsam
from .config import BackendConfig, ModeSettings
from .isam2_smoother import Isam2Smoother
from .rig import CameraRig
from .schur_smoother import SchurSmoother
from .window import B0, V0, X0, Keyframe


class KeyframeFactors:
    """The state factors (``graph``), values and stamps of one keyframe update: keyframe ``k`` at ``ts``
    [s], its keys ``X``, ``V``, ``B``."""

    __slots__ = ("k", "ts", "X", "V", "B", "graph", "values", "stamps")

    def __init__(self, k: int, ts: float, graph, values):
        self.k, self.ts = k, ts
        self.X, self.V, self.B = X0 | k, V0 | k, B0 | k
        self.graph, self.values = graph, values
        self.stamps = {self.X: ts, self.V: ts, self.B: ts}


class Smoother:
    """See the module docstring. ``solver``: the current solver (a new one on every :meth:`start`)."""

    def __init__(self, config: BackendConfig, settings: ModeSettings, rig: CameraRig):
        gtsam = load_gtsam()

        self._g = gtsam
        self.config = config
        self.settings = settings
        self.rig = rig
        self.solver = None
        self._marg_ts = 0.0         # stamp of the last batch marginalisation

    def _new_solver(self):
        cfg, s, rig = self.config, self.settings, self.rig
        if s.solver == "schur":
            return SchurSmoother(s.window_s, rig.sigma, cfg.huber_k, rig.T_BS0, rig.baseline, rig.T_BS1,
                                 relinearize_threshold=cfg.relinearize_threshold,
                                 keep_landmarks=cfg.schur_keep_landmarks)
        return Isam2Smoother(s.window_s, cfg, rig)

    def start(self, k: int, ts: float, T, v, bias6, rot_sigma, pos_sigma, v_sigma, ba_sigma, bg_sigma) -> None:
        """A new solver whose window holds keyframe ``k``'s state at ``ts`` [s] (pose ``T``, velocity ``v``,
        bias ``bias6`` [acc, gyro]) under priors of the given sigmas."""
        gtsam = self._g
        self.solver = self._new_solver()
        batch = KeyframeFactors(k, ts, gtsam.NonlinearFactorGraph(), gtsam.Values())
        X, V, B = batch.X, batch.V, batch.B
        graph, vals = batch.graph, batch.values
        pose = gtsam.Pose3(T)
        bias = gtsam.imuBias.ConstantBias(bias6[:3], bias6[3:])
        # the gauge: yaw (rotation about the world's vertical) and position are unobservable, roll and pitch
        # are not (gravity). A tight prior on yaw and the position, rot_sigma on roll and pitch, written in
        # gtsam's Pose3 tangent (rotation in the body frame): R^T C R, so that it is the world's vertical
        # however the IMU is mounted (EuRoC's has x up: a diagonal body-frame prior pinned a tilt instead)
        R = np.asarray(T, float)[:3, :3]
        cov = np.zeros((6, 6))
        cov[:3, :3] = R.T @ np.diag([rot_sigma ** 2, rot_sigma ** 2, 1e-6]) @ R
        cov[3:, 3:] = np.eye(3) * pos_sigma ** 2
        graph.add(gtsam.PriorFactorPose3(X, pose, gtsam.noiseModel.Gaussian.Covariance(0.5 * (cov + cov.T))))
        graph.add(gtsam.PriorFactorVector(V, v, gtsam.noiseModel.Isotropic.Sigma(3, v_sigma)))
        graph.add(gtsam.PriorFactorConstantBias(B, bias, gtsam.noiseModel.Diagonal.Sigmas(
            np.array([ba_sigma] * 3 + [bg_sigma] * 3))))
        vals.insert(X, pose)
        vals.insert(V, np.asarray(v, float))
        vals.insert(B, bias)
        self._marg_ts = ts
        self.solver.update(graph, vals, batch.stamps, (X, V, B))

    def keyframe(self, prev: Keyframe, k: int, ts: float, T_pred, v_pred, pim) -> KeyframeFactors:
        """Keyframe ``k``'s state at ``ts`` [s], predicted (``T_pred``, ``v_pred``), linked to the previous
        keyframe ``prev`` by the IMU factor of gtsam's preintegration ``pim``."""
        gtsam = self._g
        batch = KeyframeFactors(k, ts, gtsam.NonlinearFactorGraph(), gtsam.Values())
        Xp, Vp, Bp = X0 | prev.idx, V0 | prev.idx, B0 | prev.idx
        batch.graph.add(gtsam.CombinedImuFactor(Xp, Vp, batch.X, batch.V, Bp, batch.B, pim))
        batch.values.insert(batch.X, gtsam.Pose3(T_pred))
        batch.values.insert(batch.V, v_pred)
        batch.values.insert(batch.B, gtsam.imuBias.ConstantBias(prev.bias[:3], prev.bias[3:]))
        return batch

    def add_rest(self, batch: KeyframeFactors, prev: Keyframe, dt: float) -> None:
        """At rest since ``prev`` (``dt`` s ago): a zero-velocity prior and a no-motion pose factor."""
        gtsam = self._g
        sigma = self.config.still_velocity_sigma
        batch.graph.add(gtsam.PriorFactorVector(batch.V, np.zeros(3), gtsam.noiseModel.Isotropic.Sigma(3, sigma)))
        batch.graph.add(gtsam.BetweenFactorPose3(X0 | prev.idx, batch.X, gtsam.Pose3(),
                                                 gtsam.noiseModel.Diagonal.Sigmas(
                                                     np.array([1e-3] * 3 + [sigma * dt + 1e-4] * 3))))

    def ends_first_seen_landmarks(self, ts: float) -> bool:
        """Whether the update at ``ts`` [s] marginalises in the own smoother, which then takes a landmark
        first seen by a leaving state with it (``schur_keep_landmarks`` 0)."""
        every = self.settings.marginalise_every_s
        return self.settings.solver == "schur" and self.config.schur_keep_landmarks == 0 and (
            every <= 0 or ts - self._marg_ts >= every)

    def set_lag(self, ts: float) -> None:
        """Batch marginalisation (``marginalise_every_s``, mono: ``mono_marginalise_every_s``): the solver's
        lag is window_s + the batch period, except on the update where a batch is due. An update that
        marginalises re-eliminates the leaving states' part of the window, so doing it for several
        keyframes at once makes most updates cheaper."""
        every = self.settings.marginalise_every_s
        if every <= 0:
            return
        due = ts - self._marg_ts >= every
        self.solver.setSmootherLag(self.settings.window_s if due else self.settings.window_s + every)
        if due:
            self._marg_ts = ts

    def update(self, batch: KeyframeFactors) -> None:
        """The keyframe's update (and ``extra_updates`` more iterations)."""
        self.solver.update(batch.graph, batch.values, batch.stamps, (batch.X, batch.V, batch.B))
        for _ in range(self.config.extra_updates):
            self.solver.update()

    def estimate(self):
        return self.solver.estimate()

    @property
    def removed_landmarks(self):
        """The landmark keys the last update marginalised (the own smoother's; none in iSAM2's)."""
        return self.solver.removed_landmarks

    def covariance(self, k: int):
        """(pose, velocity) marginal covariance of keyframe ``k`` (raises where the solver cannot give it)."""
        gtsam = self._g
        S_pose = np.asarray(self.solver.marginalCovariance(gtsam.symbol("x", k)))
        S_vel = np.asarray(self.solver.marginalCovariance(gtsam.symbol("v", k)))
        return S_pose, S_vel


def read_state(est, k: int):
    """(pose 4x4, velocity, bias [acc, gyro]) of keyframe ``k`` from a solver's estimate."""
    return (est.atPose3(X0 | k).matrix(), np.asarray(est.atVector(V0 | k)),
            np.asarray(est.atConstantBias(B0 | k).vector()))


def diverged(T, v, b, config: BackendConfig) -> str:
    """Why a new estimate is unusable ('' if it is not): non-finite, faster than ``max_speed``, a bias
    beyond ``max_gyro_bias`` / ``max_acc_bias``. On plain floats (once per keyframe)."""
    vl, bl = v.tolist(), b.tolist()
    if not (math.isfinite(float(T.sum())) and math.isfinite(sum(vl)) and math.isfinite(sum(bl))):
        return "non-finite state"
    speed = math.sqrt(vl[0] * vl[0] + vl[1] * vl[1] + vl[2] * vl[2])
    if speed > config.max_speed:
        return f"speed {speed:.1f} m/s > {config.max_speed}"
    bg, ba = max(map(abs, bl[3:])), max(map(abs, bl[:3]))
    if bg > config.max_gyro_bias:
        return f"gyro bias {bg:.3f} rad/s > {config.max_gyro_bias}"
    if ba > config.max_acc_bias:
        return f"accelerometer bias {ba:.3f} m/s^2 > {config.max_acc_bias}"
    return ""


def restart_state(v, bias6, config: BackendConfig):
    """(velocity, bias) to restart from: each as given where it is finite and within the bounds
    (``max_speed``; ``max_acc_bias``, ``max_gyro_bias``), else zero."""
    bias6 = np.asarray(bias6, float).copy()
    if not np.all(np.isfinite(bias6)) or np.abs(bias6[:3]).max() > config.max_acc_bias \
            or np.abs(bias6[3:]).max() > config.max_gyro_bias:
        bias6[:] = 0.0
    v = np.asarray(v, float)
    if not np.all(np.isfinite(v)) or np.linalg.norm(v) > config.max_speed:
        v = np.zeros(3)
    return v, bias6
