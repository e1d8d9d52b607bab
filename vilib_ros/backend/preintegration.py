"""The IMU preintegration from the newest keyframe on: what predicts every frame's state and what
becomes the next keyframe's ``CombinedImuFactor``.

:class:`ImuPreintegrator` keeps two integrations of the same IMU steps from the newest keyframe: its
compiled mean (:func:`.imu.preintegrate`, equal to gtsam's to rounding), into which each frame's steps
go at once and from which each frame is predicted (:func:`.imu.predict_nav`), and gtsam's
``PreintegratedCombinedMeasurements``, which integrates the kept steps, the same ones in the same
order, only when a keyframe needs its factor (:meth:`ImuPreintegrator.predict`). Each accelerometer
sample is rotated to the middle of its integration step (:meth:`.imu.ImuBuffer.steps`).

Noise: gtsam's model from the dataset's imu0 sensor.yaml values; with ``imu_noise_measured`` the
white-noise densities are scaled per keyframe interval by what the last ``imu_noise_window_s`` of
samples show (a vibrating multicopter IMU is far noisier than its datasheet), bounded by
``imu_noise_scale_max``; else by ``imu_noise_scale``. ``imu_walk_scale`` multiplies the bias random
walks.
"""
from __future__ import annotations

import numpy as np

from ._gtsam import load as load_gtsam
from .config import BackendConfig
from .imu import ImuBuffer, integrate_steps, make_preintegration_params, measured_noise_scales, predict_nav, \
    preintegrate
from .window import Keyframe


class ImuPreintegrator:
    """See the module docstring. ``noise``: the IMU noise under its four EuRoC names
    (:func:`.imu.normalise_imu_noise`); ``imu``: the estimator's IMU buffer (read only).
    ``params``: gtsam's preintegration parameters with the fixed scale (what the initialisation
    integrates with); ``noise_scales``: the (gyroscope, accelerometer) scale of the current interval."""

    def __init__(self, config: BackendConfig, noise: dict, imu: ImuBuffer):
        gtsam = load_gtsam()

        self._g = gtsam
        self.config = config
        self.noise = noise
        self.imu = imu
        self.params = make_preintegration_params(noise, config.gravity, config.imu_noise_scale,
                                                 config.imu_walk_scale)
        self.noise_scales = (config.imu_noise_scale,) * 2
        self.pim = None                 # gtsam's preintegration, for the next keyframe's factor
        self.t_ns: int | None = None    # where the integration ends
        self._bias = np.zeros(6)        # the bias it integrates with: accelerometer, gyroscope
        self._delta = np.zeros(10)      # the compiled mean (theta, position, velocity, elapsed time)
        self._steps: list = []          # the steps not yet in gtsam's

    def start(self, t_ns: int, bias6: np.ndarray) -> None:
        """A new preintegration from ``t_ns`` (a keyframe) with the bias ``bias6`` ([acc, gyro])."""
        bias = self._g.imuBias.ConstantBias(bias6[:3], bias6[3:])
        self.pim = self._g.PreintegratedCombinedMeasurements(self._params_at(t_ns), bias)
        self.t_ns = int(t_ns)
        self._bias = np.asarray(bias.vector(), np.float64)
        self._delta = np.zeros(10)
        self._steps = []

    def integrate_to(self, t_ns: int) -> None:
        """The IMU steps from the end of the preintegration to ``t_ns`` into its compiled mean (and kept
        for gtsam's)."""
        a, w, dt = self.imu.steps(self.t_ns, t_ns, self._bias[3:])
        if len(dt):
            preintegrate(self._delta, a, w, dt, self._bias)
            self._steps.append((a, w, dt))
        self.t_ns = int(t_ns)

    def predict_frame(self, kf: Keyframe):
        """(pose 4x4, velocity) at the end of the preintegration from the keyframe ``kf``'s estimate, by the
        compiled mean (gtsam's arithmetic, equal to rounding): every frame's prediction."""
        T, v = np.empty((4, 4)), np.empty(3)
        predict_nav(self._delta, kf.T, kf.v, float(self.config.gravity), T, v)
        return T, v

    def predict(self, kf: Keyframe):
        """:meth:`predict_frame` by gtsam, whose preintegration first takes the steps kept since ``kf``
        (what the keyframe's ``CombinedImuFactor`` is made of)."""
        for a, w, dt in self._steps:
            integrate_steps(self.pim, a, w, dt)
        self._steps = []
        nav, bias = kf.nav(self._g)
        ns = self.pim.predict(nav, bias)
        return ns.pose().matrix(), np.asarray(ns.velocity())

    def _params_at(self, t_ns: int):
        """Preintegration noise for the interval starting at ``t_ns``: measured from the last
        ``imu_noise_window_s`` of samples (``imu_noise_measured``) or fixed (``imu_noise_scale``)."""
        cfg = self.config
        if not cfg.imu_noise_measured:
            return self.params
        st, d = self.imu.window(int(t_ns) - int(cfg.imu_noise_window_s * 1e9), int(t_ns))
        if len(st) < 20:
            return self.params
        n = self.noise
        g, a = measured_noise_scales(st, d, n["gyroscope_noise_density"], n["accelerometer_noise_density"])
        g, a = min(g, cfg.imu_noise_scale_max), min(a, cfg.imu_noise_scale_max)
        self.noise_scales = (g, a)
        return make_preintegration_params(self.noise, cfg.gravity, g, cfg.imu_walk_scale, acc_scale=a)
