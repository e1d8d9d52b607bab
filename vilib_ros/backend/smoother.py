"""Initialisation, smoother life cycle and resets of :class:`vilib_ros.backend.VioEstimator`:
the first (or post-IMU-hole) initialisation, starting the IncrementalFixedLagSmoother with its
priors, resets from the last good state, the preintegration noise per keyframe interval."""
from __future__ import annotations

import logging

import numpy as np

from ..types import TrackFrame
from .fixed_lag import RootedFixedLagSmoother
from .schur_smoother import SchurSmoother
from .imu import make_preintegration_params, measured_noise_scales, preintegrate
from .initialisation import accel_init, dynamic_init_mono, dynamic_init_stereo, is_static, static_init
from .keyframes import _Keyframe
from .landmarks import _Landmark

log = logging.getLogger("vilib_ros.backend.estimator")   # one logger for the estimator's parts


class SmootherMixin:
    """Initialisation and the smoother's life cycle (a part of VioEstimator; uses its state)."""

    #: failed initialisation attempts before the estimator says so (a normal start takes a few)
    INIT_ATTEMPTS_BEFORE_WARNING = 20

    def _init_not_yet(self, win: np.ndarray) -> None:
        """Say (throttled) that the initialisation keeps failing, and where the accelerometer's mean
        disagrees with the configured gravity, that too (regression: gravity 0, inside its declared
        range, left the backend without an estimate and without a word for the whole run)."""
        n = self.stats["init_attempts"]
        if n < self.INIT_ATTEMPTS_BEFORE_WARNING:
            return
        g = self.config.gravity
        a = float(np.linalg.norm(win[:, 3:].mean(axis=0))) if len(win) else float("nan")
        hint = ""
        if np.isfinite(a) and abs(a - g) > 0.2 * max(g, 1.0):
            hint = (f"; the accelerometer's mean |a| over the window is {a:.2f} m/s^2 against gravity = {g:g}: "
                    "check the gravity parameter and the IMU's units")
        self._warn("init", "not initialised yet after %d attempts (%s): no solution from the first frames%s",
                   n, self.mode, hint)

    def _try_initialise(self) -> bool:
        cfg = self.config
        f0 = self._pending_frames[0]
        t0 = f0.stamp_ns
        W = int(cfg.init_window_s * 1e9)
        first_imu = self._imu.t[0]
        last_imu = self._imu.last_t
        before_ok = first_imu <= t0 - W and self._imu.max_gap(t0 - W, t0) <= cfg.imu_max_gap_s * 1e9
        if before_ok:
            _, win = self._imu.window(t0 - W, t0)
        elif last_imu >= t0 + W or self._pending_frames[-1].stamp_ns >= t0 + W:
            _, win = self._imu.window(first_imu if self._reinit_anchor is None else t0, t0 + W)
        else:
            return False
        if is_static(win, cfg, cfg.gravity):
            res = static_init(win)
        elif self.mode == "stereo":
            if len(self._pending_frames) < cfg.dynamic_init_frames:
                return False
            self.stats["init_attempts"] += 1
            res = dynamic_init_stereo(self._pending_frames, self._imu, self.cam0, self.cam1, self._params,
                                      cfg.gravity)
            if res is None:
                if len(self._pending_frames) > 4 * cfg.dynamic_init_frames:
                    res = accel_init(win)
                else:
                    self._pending_frames.pop(0)      # slide the window and try again
                    self.stats["frames_skipped"] += 1
                    self._init_not_yet(win)
                    return False
        else:
            span = (self._pending_frames[-1].stamp_ns - t0) * 1e-9
            if span < cfg.mono_init_window_s:
                return False
            self.stats["init_attempts"] += 1
            res = dynamic_init_mono(self._pending_frames, self._imu, self.cam0, self._params, cfg.gravity)
            if res is None:
                if span > 4 * cfg.mono_init_window_s:
                    res = accel_init(win)
                else:
                    self._pending_frames.pop(0)
                    self.stats["frames_skipped"] += 1
                    self._init_not_yet(win)
                    return False
        self.stats["init_kind"] = res.kind
        log.info("initialised (%s) at %d: v=%s bg=%s", res.kind, t0, np.round(res.v_w, 3), np.round(res.bg, 4))
        T = np.eye(4)
        T[:3, :3] = res.R_wb
        v_w = res.v_w
        anchor, self._reinit_anchor = self._reinit_anchor, None
        if anchor is None:
            self._t0_ns = t0
        else:   # re-initialisation after an IMU hole: continue from the last known position and heading
            M = anchor[:3, :3] @ res.R_wb.T
            psi = np.arctan2(M[1, 0] - M[0, 1], M[0, 0] + M[1, 1])
            Rz = np.array([[np.cos(psi), -np.sin(psi), 0], [np.sin(psi), np.cos(psi), 0], [0, 0, 1.0]])
            T[:3, :3] = Rz @ res.R_wb
            T[:3, 3] = anchor[:3, 3]
            v_w = Rz @ v_w
        self._start_smoother(t0, T, v_w, np.concatenate([res.ba, res.bg]),
                             rot_sigma=res.rot_sigma, pos_sigma=1e-3, v_sigma=res.v_sigma,
                             ba_sigma=0.1, bg_sigma=0.003 if res.kind == "static" else 0.01, first=anchor is None)
        self._initialised = True
        return True

    def _reset_bookkeeping(self):
        self._lm: dict[int, _Landmark] = {}
        self._pending: dict[int, list] = {}
        self._outliers: dict[int, int] = {}
        self._blacklist: set[int] = set()
        self._kfs: dict[int, _Keyframe] = {}

    def _ts(self, t_ns: int) -> float:
        return (int(t_ns) - self._t0_ns) * 1e-9

    def _start_smoother(self, t_ns, T, v, bias6, rot_sigma, pos_sigma, v_sigma, ba_sigma, bg_sigma, first=False):
        gtsam = self._g
        if self.solver == "schur":
            self._smoother = SchurSmoother(self.window_s, self._sigma_n, self.config.huber_k, self._T_BS0,
                                           getattr(self, "_baseline", 0.0),
                                           self.cam1.T_BS if self.cam1 is not None else None,
                                           relinearize_threshold=self.config.relinearize_threshold,
                                           keep_landmarks=self.config.schur_keep_landmarks)
        elif self.config.rooted_smoother:
            self._smoother = RootedFixedLagSmoother(self.window_s, self._isam2_params())
        else:
            self._smoother = gtsam.IncrementalFixedLagSmoother(self.window_s, self._isam2_params())
        if first:
            self._kf_idx = 0
        else:
            self._kf_idx += 1
        self._reset_bookkeeping()
        k = self._kf_idx
        X, V, B = gtsam.symbol("x", k), gtsam.symbol("v", k), gtsam.symbol("b", k)
        graph = gtsam.NonlinearFactorGraph()
        vals = gtsam.Values()
        pose = gtsam.Pose3(T)
        bias = gtsam.imuBias.ConstantBias(bias6[:3], bias6[3:])
        # yaw and position are unobservable: a tight prior anchors the gauge
        graph.add(gtsam.PriorFactorPose3(X, pose, gtsam.noiseModel.Diagonal.Sigmas(
            np.array([rot_sigma, rot_sigma, 1e-3, pos_sigma, pos_sigma, pos_sigma]))))
        graph.add(gtsam.PriorFactorVector(V, v, gtsam.noiseModel.Isotropic.Sigma(3, v_sigma)))
        graph.add(gtsam.PriorFactorConstantBias(B, bias, gtsam.noiseModel.Diagonal.Sigmas(
            np.array([ba_sigma] * 3 + [bg_sigma] * 3))))
        vals.insert(X, pose)
        vals.insert(V, np.asarray(v, float))
        vals.insert(B, bias)
        ts = self._ts(t_ns)
        self._marg_ts = ts                  # last batch marginalisation (KeyframeMixin._set_lag)
        self._smoother_update(graph, vals, {X: ts, V: ts, B: ts}, (X, V, B))
        self._kfs[k] = _Keyframe(k, int(t_ns), T.copy(), np.asarray(v, float).copy(), np.asarray(bias6, float).copy())
        self._kf_final[k] = T.copy()
        self._last_kf = self._kfs[k]
        self._new_pim(t_ns, bias)
        self.stats["keyframes"] += 1

    def _new_pim(self, t_ns: int, bias) -> None:
        """A new preintegration from ``t_ns`` with ``bias`` (a gtsam ``ConstantBias``): gtsam's, for the next
        keyframe's ``CombinedImuFactor``, and its mean, compiled (:func:`.imu.preintegrate`), that the frames in
        between are predicted from. The frames' IMU steps go into the compiled mean at once and are kept
        (``_pim_steps``); gtsam's integrates them, the same steps in the same order, only when a keyframe needs
        it (:meth:`KeyframeMixin._predict`): ~10 calls into gtsam per frame were a third of a non-keyframe."""
        self._pim = self._g.PreintegratedCombinedMeasurements(self._pim_params(t_ns), bias)
        self._pim_t = int(t_ns)
        self._pim_bias = np.asarray(bias.vector(), np.float64)       # accelerometer, gyroscope
        self._pim_delta = np.zeros(10)
        self._pim_steps = []

    def _integrate_to(self, t_ns: int) -> None:
        """The IMU steps from the end of the preintegration to ``t_ns`` into its compiled mean (and kept for
        gtsam's)."""
        a, w, dt = self._imu.steps(self._pim_t, t_ns, self._pim_bias[3:])
        if len(dt):
            preintegrate(self._pim_delta, a, w, dt, self._pim_bias)
            self._pim_steps.append((a, w, dt))
        self._pim_t = int(t_ns)

    def _smoother_update(self, graph, vals, stamps, newest) -> None:
        """One smoother update; ``newest``: the new state's keys (the root clique of
        :class:`RootedFixedLagSmoother`, where its marginal covariance is cheap)."""
        if self.config.rooted_smoother or self.solver == "schur":
            self._smoother.update(graph, vals, stamps, newest)
        else:
            self._smoother.update(graph, vals, stamps)

    def _isam2_params(self):
        cfg = self.config
        p = self._g.ISAM2Params()
        # per variable type (the key's character): landmarks have their own threshold
        th = self._g.ISAM2ThresholdMap()
        for c, dim in (("x", 6), ("v", 3), ("b", 6)):
            th.insert((c, np.full(dim, cfg.relinearize_threshold)))
        th.insert(("l", np.full(3, cfg.relinearize_threshold_landmarks)))
        p.setRelinearizeThreshold(th)
        p.relinearizeSkip = cfg.relinearize_skip
        p.enablePartialRelinearizationCheck = cfg.partial_relinearization_check
        # the smoother removes the marginalised factors every keyframe: reuse their slots instead of
        # growing the factor list with empty ones (gtsam's advice for fixed-lag smoothing; same
        # results, 8 % less update time, bench/results/backend_changes.md)
        p.findUnusedFactorSlots = True
        return p

    def _reset(self, reason: str, t_ns: int, T, v, bias6):
        self.stats["resets"] += 1
        log.warning("backend reset #%d at %d: %s", self.stats["resets"], t_ns, reason)
        bias6 = np.asarray(bias6, float).copy()
        if not np.all(np.isfinite(bias6)) or np.abs(bias6[:3]).max() > self.config.max_acc_bias \
                or np.abs(bias6[3:]).max() > self.config.max_gyro_bias:
            bias6[:] = 0.0
        v = np.asarray(v, float)
        if not np.all(np.isfinite(v)) or np.linalg.norm(v) > self.config.max_speed:
            v = np.zeros(3)
        self._start_smoother(t_ns, T, v, bias6, rot_sigma=0.01, pos_sigma=0.01, v_sigma=0.2,
                             ba_sigma=0.1, bg_sigma=0.01)

    def _pim_params(self, t_ns: int):
        """Preintegration noise for the interval starting at ``t_ns``: measured from the last
        ``imu_noise_window_s`` of samples (``imu_noise_measured``) or fixed (``imu_noise_scale``)."""
        cfg = self.config
        if not cfg.imu_noise_measured:
            return self._params
        st, d = self._imu.window(int(t_ns) - int(cfg.imu_noise_window_s * 1e9), int(t_ns))
        if len(st) < 20:
            return self._params
        n = self.imu_noise                  # normalised at construction
        g, a = measured_noise_scales(st, d, n["gyroscope_noise_density"], n["accelerometer_noise_density"])
        g, a = min(g, cfg.imu_noise_scale_max), min(a, cfg.imu_noise_scale_max)
        self.imu_noise_scales = (g, a)
        return make_preintegration_params(self.imu_noise, cfg.gravity, g, cfg.imu_walk_scale, acc_scale=a)

    def _imu_gap_reset(self, fr: TrackFrame):
        """After an IMU hole: re-initialise, anchored at the last keyframe pose (module docstring)."""
        kf = self._last_kf
        gap_s = self._imu.max_gap(self._pim_t, fr.stamp_ns) * 1e-9
        self.stats["imu_gap_resets"] += 1
        self.stats["resets"] += 1
        log.warning("backend reset #%d at %d: IMU hole of %.3f s before this frame; re-initialising from the "
                    "IMU and frames after it, continuing from the last keyframe pose (%.2f s old)",
                    self.stats["resets"], fr.stamp_ns, gap_s, (fr.stamp_ns - kf.t_ns) * 1e-9)
        self._reinit_anchor = kf.T.copy()
        self._initialised = False
        self._pending_frames = [fr]
