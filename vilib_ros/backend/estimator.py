"""Sliding-window visual-inertial estimator on gtsam 4.3.

Graph (one set of variables per keyframe k): pose X(k) (body in world), velocity V(k),
IMU bias B(k), linked by ``CombinedImuFactor`` (preintegrated between keyframes); landmarks
L(n) in world coordinates with ``GenericStereoFactor3D`` (stereo, normalised calibration
``Cal3_S2Stereo(1, 1, 0, 0, 0, baseline)`` and sigma = pixel_sigma / fx) or
``GenericProjectionFactorCal3_S2`` (mono, or stereo tracks without a right match), all with
Huber costs. An ``IncrementalFixedLagSmoother`` keeps ``window_s`` seconds (mono:
``mono_window_s`` when larger: the metric scale needs a longer window). The IMU is
preintegrated between keyframes with gtsam's noise model from the dataset's imu0 sensor.yaml
values (``imu_noise``), each accelerometer sample rotated to the middle of its integration step.

Keyframes: a frame becomes a keyframe when ``kf_max_interval_s`` has passed, when fewer than
``kf_min_tracks`` tracks or fewer than ``kf_track_fraction`` of the last keyframe's tracks
remain, or when the rotation-compensated median parallax reaches ``kf_parallax_px`` (never
sooner than ``kf_min_interval_s``). Other frames get the IMU prediction from the last keyframe.

Landmarks: a track becomes a landmark on its second keyframe observation (stereo: at least one
with a right match; mono: once the ray angle exceeds ``mono_min_parallax_deg``), triangulated by
linear DLT over all its left (and right) rays in the window, observations failing the chi2 gate
dropped one by one. Per keyframe at most ``max_landmarks_per_kf`` observations of existing
landmarks are added (longest tracks first), plus as many new landmarks. Each new landmark gets
a weak prior (``landmark_prior_sigma``) so that a landmark whose factors all lose their
Jacobian (point behind a camera) cannot make the system indeterminate.

Smoother timestamps: every time is kept as integer nanoseconds; the smoother receives
``(t_ns - t0_ns) * 1e-9`` (seconds since the first frame), so that float rounding never
reorders or merges keys. A landmark's timestamp is refreshed to the keyframe time on every
observation; once it has not been observed for a window it is marginalised with the old
poses, and a re-observed track gets a new landmark key (never a factor on a marginalised key).

At rest (median parallax since the last keyframe below ``still_parallax_px`` and a static IMU
window) a zero-velocity prior and a no-motion pose factor are added (``zero_velocity_updates``):
without them a monocular estimator drifts while a vehicle waits on the ground (EuRoC V1_01's
first 5 s: 38 cm in 4.7 s without, 2.5 cm with).

Outliers: before a factor is added, its whitened residual at the predicted pose is gated
against chi2 (99 %), with the threshold scaled up by the median residual of the keyframe
(so that an IMU prediction error does not reject every track). A track rejected
``max_outlier_count`` times is blacklisted. Factors are never removed from the smoother (removing
factors while it marginalises is a known gtsam failure, borglab/gtsam#2479).

Failure handling: any exception from the smoother (IndeterminantLinearSystemException and
other RuntimeErrors) or a diverged state (speed, bias bounds, NaN) resets the smoother from
the last good state propagated with the IMU; ``stats['resets']`` counts it. Bad IMU samples
(NaN, non-monotonic) and bad frames are skipped and counted.

IMU holes and absurd samples: a sample beyond the sensor's range (``imu_max_gyro``,
``imu_max_acc``; e.g. 1e30 from a corrupted message) is rejected and counted
(``imu_out_of_range``). A hole between two samples longer than ``imu_max_gap_s`` is counted
(``imu_gaps``) and never integrated across: a frame whose stamp lies beyond the IMU by more than
the gap gets no state (``frames_without_imu``), and the first frame after the hole starts a
re-initialisation (``imu_gap_resets``, also counted in ``resets``, with a warning): the same
static or moving-start initialisation as at start-up, on IMU and frames after the hole only,
anchored at the last keyframe's position and heading (gravity direction, velocity and gyro bias
are estimated afresh). The vehicle moved by an unknown amount during the hole: the trajectory
continues from where it was last known, with a fresh velocity, instead of from an integration
of nothing. Frames during the re-initialisation get their states once it succeeds.
"""
from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..camera import CameraModel
from ..types import TrackFrame
from .config import BackendConfig, VioState
from .imu import ImuBuffer, effective_noise_scale, make_preintegration_params, normalise_imu_noise
from .initialisation import (accel_init, dynamic_init_mono, dynamic_init_stereo, is_static, static_init,
                             stereo_triangulate)

log = logging.getLogger(__name__)


def _rot_to_quat_xyzw(R: np.ndarray) -> np.ndarray:
    """Rotation matrix -> unit quaternion [x, y, z, w] with w >= 0 (Shepperd's method)."""
    m = R
    tr = m[0, 0] + m[1, 1] + m[2, 2]
    if tr > 0:
        s = 2.0 * np.sqrt(tr + 1.0)
        q = np.array([(m[2, 1] - m[1, 2]) / s, (m[0, 2] - m[2, 0]) / s, (m[1, 0] - m[0, 1]) / s, 0.25 * s])
    elif m[0, 0] > m[1, 1] and m[0, 0] > m[2, 2]:
        s = 2.0 * np.sqrt(1.0 + m[0, 0] - m[1, 1] - m[2, 2])
        q = np.array([0.25 * s, (m[0, 1] + m[1, 0]) / s, (m[0, 2] + m[2, 0]) / s, (m[2, 1] - m[1, 2]) / s])
    elif m[1, 1] > m[2, 2]:
        s = 2.0 * np.sqrt(1.0 + m[1, 1] - m[0, 0] - m[2, 2])
        q = np.array([(m[0, 1] + m[1, 0]) / s, 0.25 * s, (m[1, 2] + m[2, 1]) / s, (m[0, 2] - m[2, 0]) / s])
    else:
        s = 2.0 * np.sqrt(1.0 + m[2, 2] - m[0, 0] - m[1, 1])
        q = np.array([(m[0, 2] + m[2, 0]) / s, (m[1, 2] + m[2, 1]) / s, 0.25 * s, (m[1, 0] - m[0, 1]) / s])
    q /= np.linalg.norm(q)
    return -q if q[3] < 0 else q


@dataclass
class _Landmark:
    key: int
    p: np.ndarray
    last_t: int
    n_obs: int = 0
    t0: int = 0                  # creation time (ns)


@dataclass
class _Keyframe:
    idx: int
    t_ns: int
    T: np.ndarray                 # 4x4 body->world, latest estimate
    v: np.ndarray
    bias: np.ndarray              # (6,) [ba, bg] like gtsam ConstantBias.vector()
    obs: tuple = (np.zeros(0, np.int64), np.zeros((0, 2)))   # (track ids, xy) for keyframe selection


class VioEstimator:
    """See module docstring. Interface: add_imu, add_frame, propagate, write_tum, landmarks, stats."""

    def __init__(self, config: BackendConfig | None = None, cam0: CameraModel | None = None,
                 cam1: CameraModel | None = None, imu_noise: dict | None = None):
        import gtsam

        self._g = gtsam
        self.config = cfg = (config or BackendConfig()).validate()
        if cam0 is None:
            raise ValueError("cam0 (CameraModel) is required")
        self.cam0, self.cam1 = cam0, cam1
        mode = cfg.mode
        if mode == "auto":
            mode = "stereo" if cam1 is not None else "mono"
        if mode == "stereo" and cam1 is None:
            raise ValueError("mode='stereo' needs cam1")
        self.mode = mode
        self.window_s = max(cfg.window_s, cfg.mono_window_s) if mode == "mono" else cfg.window_s
        self.imu_noise = normalise_imu_noise(imu_noise)
        self._params = make_preintegration_params(self.imu_noise, cfg.gravity, cfg.imu_noise_scale,
                                                  cfg.imu_walk_scale)
        self.imu_noise_scales = (cfg.imu_noise_scale,) * 2     # (gyro, acc) in use, see _pim_params
        self._T_BS0 = cam0.T_BS.copy()
        self._pose_bs0 = gtsam.Pose3(self._T_BS0)
        self._sigma_n = cfg.pixel_sigma / cam0.fx           # normalised-coordinate sigma
        huber = gtsam.noiseModel.mEstimator.Huber.Create(cfg.huber_k)
        self._noise_mono = gtsam.noiseModel.Robust.Create(huber, gtsam.noiseModel.Isotropic.Sigma(2, self._sigma_n))
        self._noise_stereo = gtsam.noiseModel.Robust.Create(huber, gtsam.noiseModel.Isotropic.Sigma(3, self._sigma_n))
        self._K_mono = gtsam.Cal3_S2(1.0, 1.0, 0.0, 0.0, 0.0)
        self._noise_lm_prior = gtsam.noiseModel.Isotropic.Sigma(3, max(cfg.landmark_prior_sigma, 1e-9))
        self._rectified = True
        if cam1 is not None:
            T_c0_c1 = np.linalg.inv(cam0.T_BS) @ cam1.T_BS
            self._T_c0_c1 = T_c0_c1
            self._R_c0_c1 = T_c0_c1[:3, :3]
            t = T_c0_c1[:3, 3]
            self._baseline = float(np.linalg.norm(t))
            self._T_c1c0 = np.linalg.inv(T_c0_c1)
            ang = np.degrees(np.arccos(np.clip((np.trace(self._R_c0_c1) - 1) / 2, -1, 1)))
            self._rectified = bool(t[0] > 0 and np.hypot(t[1], t[2]) < 0.05 * self._baseline and ang < 3.0)
            self._K_stereo = gtsam.Cal3_S2Stereo(1.0, 1.0, 0.0, 0.0, 0.0, self._baseline)
            self._pose_bs1 = gtsam.Pose3(cam1.T_BS)
            if not self._rectified:
                log.info("stereo pair not rectified (offset %s, %.2f deg): right observations use "
                         "projection factors", t, ang)
        self.stats = {"frames": 0, "keyframes": 0, "resets": 0, "imu_samples": 0, "imu_skipped": 0,
                      "frames_skipped": 0, "frames_without_tracks": 0, "outliers_rejected": 0,
                      "landmarks_created": 0, "landmarks_active": 0, "blacklisted": 0, "init_kind": "",
                      "init_attempts": 0, "imu_late": 0, "imu_out_of_range": 0, "imu_gaps": 0,
                      "imu_gap_resets": 0, "frames_without_imu": 0, "tracking_lost": 0, "landmarks_split": 0,
                      "kf_time": 0, "kf_parallax": 0, "kf_tracks": 0, "zero_velocity_updates": 0}
        self.kf_timings: list[dict] = []    # per keyframe: total_s, smoother_s, python_s
        self._imu = ImuBuffer()
        self._traj: list[tuple[int, int, np.ndarray, np.ndarray]] = []   # (t_ns, kf idx, T_rel, T_online)
        self._kf_final: dict[int, np.ndarray] = {}
        self._pending_frames: list[TrackFrame] = []
        self._parallax_cache = (None, None)
        self._initialised = False
        self._last_state: VioState | None = None
        self._last_frame_t: int | None = None
        self._reinit_anchor: np.ndarray | None = None    # last known pose before an IMU hole
        self._lost_since: int | None = None
        self._reset_bookkeeping()

    # ------------------------------------------------------------------ inputs
    def add_imu(self, t_ns: int, gyro, acc) -> None:
        g = np.asarray(gyro, dtype=np.float64).reshape(-1)
        a = np.asarray(acc, dtype=np.float64).reshape(-1)
        if g.shape != (3,) or a.shape != (3,):
            raise ValueError(f"gyro and acc must have 3 elements, got {g.shape} and {a.shape}")
        s = np.concatenate([g, a])
        cfg = self.config
        if not np.all(np.isfinite(s)):
            self.stats["imu_skipped"] += 1
            log.warning("skipping non-finite IMU sample at %d", t_ns)
            return
        if np.abs(g).max() > cfg.imu_max_gyro or np.abs(a).max() > cfg.imu_max_acc:
            self.stats["imu_skipped"] += 1
            self.stats["imu_out_of_range"] += 1
            log.warning("skipping IMU sample at %d beyond the sensor range (|gyro| <= %g rad/s, |acc| <= %g m/s^2): "
                        "max |gyro| %.3g, max |acc| %.3g", t_ns, cfg.imu_max_gyro, cfg.imu_max_acc,
                        np.abs(g).max(), np.abs(a).max())
            return
        last = self._imu.last_t
        if not self._imu.add(int(t_ns), s):
            self.stats["imu_skipped"] += 1
            log.warning("skipping non-monotonic IMU sample at %d", t_ns)
            return
        if last is not None and int(t_ns) - last > cfg.imu_max_gap_s * 1e9:
            self.stats["imu_gaps"] += 1
            log.warning("IMU gap of %.3f s (%d -> %d) is longer than imu_max_gap_s = %g: not integrated across",
                        (int(t_ns) - last) * 1e-9, last, t_ns, cfg.imu_max_gap_s)
        self.stats["imu_samples"] += 1

    def add_frame(self, frame: TrackFrame) -> VioState | None:
        t = int(frame.stamp_ns)
        if self._last_frame_t is not None and t <= self._last_frame_t:
            self.stats["frames_skipped"] += 1
            log.warning("skipping non-monotonic frame at %d", t)
            return None
        if not len(self._imu):
            self.stats["frames_skipped"] += 1
            return None
        frame = self._clean_frame(frame)
        self._last_frame_t = t
        self.stats["frames"] += 1
        if len(frame) == 0:
            self.stats["frames_without_tracks"] += 1
        if not self._initialised:
            self._pending_frames.append(frame)
            if not self._try_initialise():
                return None
            out = None
            frames, self._pending_frames = self._pending_frames, []
            for fr in frames:
                out = self._process(fr)
            return out
        return self._process(frame)

    def _clean_frame(self, f: TrackFrame) -> TrackFrame:
        xy = np.asarray(f.xy, dtype=np.float64).reshape(-1, 2)
        ids = np.asarray(f.ids, dtype=np.int64).reshape(-1)
        if len(ids) != len(xy):
            raise ValueError(f"TrackFrame ids ({len(ids)}) and xy ({len(xy)}) differ in length")
        ok = np.isfinite(xy).all(axis=1)
        xr = None
        if f.xy_right is not None and self.mode == "stereo":
            xr = np.asarray(f.xy_right, dtype=np.float64).reshape(-1, 2)
            if len(xr) != len(ids):
                raise ValueError("TrackFrame xy_right length differs from ids")
            xr = xr[ok]
        return TrackFrame(stamp_ns=int(f.stamp_ns), ids=ids[ok], uv=np.zeros((int(ok.sum()), 2), np.float32),
                          xy=xy[ok], velocity=np.zeros((int(ok.sum()), 2)), score=np.zeros(0, np.float32),
                          level=np.zeros(0, np.int32), age=np.zeros(0, np.int32), xy_right=xr)

    # ------------------------------------------------------------------ initialisation
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

    # ------------------------------------------------------------------ smoother life cycle
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
        cfg = self.config
        p = gtsam.ISAM2Params()
        p.setRelinearizeThreshold(cfg.relinearize_threshold)
        p.relinearizeSkip = cfg.relinearize_skip
        p.enablePartialRelinearizationCheck = cfg.partial_relinearization_check
        self._smoother = gtsam.IncrementalFixedLagSmoother(self.window_s, p)
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
        self._smoother.update(graph, vals, {X: ts, V: ts, B: ts})
        self._kfs[k] = _Keyframe(k, int(t_ns), T.copy(), np.asarray(v, float).copy(), np.asarray(bias6, float).copy())
        self._kf_final[k] = T.copy()
        self._last_kf = self._kfs[k]
        self._pim = gtsam.PreintegratedCombinedMeasurements(self._pim_params(t_ns), bias)
        self._pim_t = int(t_ns)
        self.stats["keyframes"] += 1

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
        g, a = effective_noise_scale(st, d, self.imu_noise)
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

    # ------------------------------------------------------------------ per frame
    def _predict(self):
        """NavState at the end of the current preintegration from the last keyframe estimate."""
        gtsam = self._g
        kf = self._last_kf
        bias = gtsam.imuBias.ConstantBias(kf.bias[:3], kf.bias[3:])
        ns = self._pim.predict(gtsam.NavState(gtsam.Pose3(kf.T), kf.v), bias)
        T = ns.pose().matrix()
        return T, np.asarray(ns.velocity())

    def _process(self, fr: TrackFrame) -> VioState | None:
        t = fr.stamp_ns
        max_gap = int(self.config.imu_max_gap_s * 1e9)
        if self._imu.last_t < t:
            self.stats["imu_late"] += 1
            if t - self._imu.last_t > max_gap:      # inside an IMU hole: nothing to estimate with
                self.stats["frames_without_imu"] += 1
                return None
        if t > self._pim_t and self._imu.max_gap(self._pim_t, t) > max_gap:
            self._imu_gap_reset(fr)
            return None
        if t > self._pim_t:
            self._imu.integrate(self._pim, self._pim_t, t)
            self._pim_t = t
        T_pred, v_pred = self._predict()
        kf = self._last_kf
        if t == kf.t_ns:      # first frame after (re)initialisation is the keyframe itself
            kf.obs = (fr.ids.copy(), fr.xy.copy())
            self._record_pending(fr, kf.idx)
            state = self._state_of(kf, True)
            self._emit(t, kf.idx, np.eye(4), kf.T, state)
            return state
        if self._is_keyframe(fr, T_pred):
            state = self._add_keyframe(fr, T_pred, v_pred)
        else:
            bias = self._last_kf.bias
            state = VioState(t, T_pred[:3, 3].copy(), _rot_to_quat_xyzw(T_pred[:3, :3]), v_pred,
                             bias[3:].copy(), bias[:3].copy(), False)
            self._emit(t, self._last_kf.idx, np.linalg.inv(self._last_kf.T) @ T_pred, T_pred, state)
        self._imu.trim_before(self._last_kf.t_ns - int(2e9))
        return state

    def _emit(self, t, kf_idx, T_rel, T_online, state: VioState):
        self._traj.append((t, kf_idx, T_rel, T_online.copy()))
        self._last_R = T_online[:3, :3].copy()
        self._last_state = state

    def _state_of(self, kf: _Keyframe, is_kf: bool) -> VioState:
        return VioState(kf.t_ns, kf.T[:3, 3].copy(), _rot_to_quat_xyzw(kf.T[:3, :3]), kf.v.copy(),
                        kf.bias[3:].copy(), kf.bias[:3].copy(), is_kf)

    def _is_keyframe(self, fr: TrackFrame, T_pred) -> bool:
        cfg = self.config
        kf = self._last_kf
        dt = (fr.stamp_ns - kf.t_ns) * 1e-9
        if dt < cfg.kf_min_interval_s:
            return False
        if dt >= cfg.kf_max_interval_s:
            self.stats["kf_time"] += 1
            return True
        if len(fr) < cfg.kf_min_tracks:
            self.stats["kf_tracks"] += 1
            return True
        n_common, par = self._parallax(fr, T_pred)
        if n_common == 0 or n_common < cfg.kf_track_fraction * max(len(kf.obs[0]), 1):
            self.stats["kf_tracks"] += 1
            return True
        if par >= cfg.kf_parallax_px:
            self.stats["kf_parallax"] += 1
            return True
        return False

    def _parallax(self, fr: TrackFrame, T_pred):
        """(tracks shared with the last keyframe, their rotation-compensated median parallax, px)."""
        kf = self._last_kf
        ck = (fr.stamp_ns, kf.idx)
        if self._parallax_cache[0] == ck:
            return self._parallax_cache[1]
        res = self._parallax_uncached(fr, T_pred, kf)
        self._parallax_cache = (ck, res)
        return res

    def _parallax_uncached(self, fr, T_pred, kf):
        kf_ids, kf_xy = kf.obs
        _, ia, ib = np.intersect1d(kf_ids, fr.ids, assume_unique=True, return_indices=True)
        if len(ia) == 0:
            return 0, np.inf
        a = kf_xy[ia]
        b = fr.xy[ib]
        # rotate current bearings into the keyframe camera
        R_bb = kf.T[:3, :3].T @ T_pred[:3, :3]
        R_cc = self._T_BS0[:3, :3].T @ R_bb @ self._T_BS0[:3, :3]
        f = np.column_stack([b, np.ones(len(b))]) @ R_cc.T
        bp = f[:, :2] / f[:, 2:3]
        return len(ia), float(np.median(np.linalg.norm(bp - a, axis=1)) * self.cam0.fx)

    def _is_still(self, fr: TrackFrame, T_pred) -> bool:
        """No motion since the last keyframe: the tracks show no parallax and the IMU window
        passes the rest test (both needed: parallax alone is blind to motion along the rays)."""
        cfg = self.config
        if not cfg.zero_velocity_updates:
            return False
        n, par = self._parallax(fr, T_pred)
        if n < cfg.kf_min_tracks or par > cfg.still_parallax_px:
            return False
        _, win = self._imu.window(self._last_kf.t_ns, fr.stamp_ns)
        return is_static(win, cfg, cfg.gravity, tolerance=1.5)

    def _record_pending(self, fr: TrackFrame, kf_idx: int):
        """Remember this keyframe's observation of every track without a landmark:
        (kf idx, xy, raw right xy | None, rectified right xy | None, stereo point in cam0 | None)."""
        cfg = self.config
        n = len(fr)
        xr = fr.xy_right
        xrr = Pc = okP = None
        if xr is not None and n:
            has = np.isfinite(xr).all(axis=1)
            xrr = np.full((n, 2), np.nan)
            Pc = np.full((n, 3), np.nan)
            okP = np.zeros(n, bool)
            if has.any():
                if self._rectified:
                    xrr[has] = self._rectify_right(xr[has])
                P, ok = stereo_triangulate(fr.xy[has], xr[has], self._T_c0_c1)
                z = P[:, 2]
                with np.errstate(invalid="ignore", divide="ignore"):
                    disp = self._baseline / z * self.cam0.fx
                ok &= (z > cfg.min_depth) & (z < cfg.max_depth) & (disp >= cfg.min_disparity_px)
                Pc[has] = P
                okP[has] = ok
        else:
            has = np.zeros(n, bool)
        for j, i in enumerate(fr.ids.tolist()):
            if i in self._blacklist or i in self._lm:
                continue
            if has[j]:
                o = (kf_idx, fr.xy[j], xr[j], xrr[j] if self._rectified else None, Pc[j] if okP[j] else None)
            else:
                o = (kf_idx, fr.xy[j], None, None, None)
            self._pending.setdefault(i, []).append(o)

    # ------------------------------------------------------------------ keyframe update
    def _cam_T_cw(self, T_wb: np.ndarray, T_BS: np.ndarray):
        T_wc = T_wb @ T_BS
        R = T_wc[:3, :3].T
        return R, -R @ T_wc[:3, 3]

    def _add_keyframe(self, fr: TrackFrame, T_pred, v_pred) -> VioState:
        gtsam = self._g
        cfg = self.config
        t_start = time.perf_counter()
        prev = self._last_kf
        k = self._kf_idx + 1
        X, V, B = gtsam.symbol("x", k), gtsam.symbol("v", k), gtsam.symbol("b", k)
        Xp, Vp, Bp = gtsam.symbol("x", prev.idx), gtsam.symbol("v", prev.idx), gtsam.symbol("b", prev.idx)
        ts = self._ts(fr.stamp_ns)
        graph = gtsam.NonlinearFactorGraph()
        vals = gtsam.Values()
        stamps = {X: ts, V: ts, B: ts}
        graph.add(gtsam.CombinedImuFactor(Xp, Vp, X, V, Bp, B, self._pim))
        vals.insert(X, gtsam.Pose3(T_pred))
        vals.insert(V, v_pred)
        vals.insert(B, gtsam.imuBias.ConstantBias(prev.bias[:3], prev.bias[3:]))

        # ---- zero-velocity update at rest (no parallax and a static IMU window)
        if self._is_still(fr, T_pred):
            dt = (fr.stamp_ns - prev.t_ns) * 1e-9
            graph.add(gtsam.PriorFactorVector(V, np.zeros(3),
                                              gtsam.noiseModel.Isotropic.Sigma(3, cfg.still_velocity_sigma)))
            graph.add(gtsam.BetweenFactorPose3(Xp, X, gtsam.Pose3(), gtsam.noiseModel.Diagonal.Sigmas(
                np.array([1e-3] * 3 + [cfg.still_velocity_sigma * dt + 1e-4] * 3))))
            self.stats["zero_velocity_updates"] += 1

        # ---- visual factors
        self._proj_cache = {}
        horizon = fr.stamp_ns - int(0.85 * self.window_s * 1e9)
        n_added = self._add_visual(fr, k, X, T_pred, graph, vals, stamps, horizon)
        self._note_tracking(fr.stamp_ns, n_added)

        # ---- smoother update
        t_py = time.perf_counter()
        try:
            self._smoother.update(graph, vals, stamps)
            for _ in range(cfg.extra_updates):
                self._smoother.update()
            est = self._smoother.calculateEstimate()
            T_new = est.atPose3(X).matrix()
            v_new = np.asarray(est.atVector(V))
            b_new = np.asarray(est.atConstantBias(B).vector())
        except Exception as exc:  # IndeterminantLinearSystemException, ValueError, RuntimeError...
            log.debug("smoother exception", exc_info=True)
            t_sm = time.perf_counter() - t_py
            msg = " ".join(ln.strip() for ln in str(exc).splitlines() if ln.strip())[:200]
            self._reset(f"smoother failed: {type(exc).__name__}: {msg}",
                        fr.stamp_ns, T_pred, v_pred, prev.bias)
            return self._after_reset(fr, t_start, t_sm)
        t_sm = time.perf_counter() - t_py
        bad = self._diverged(T_new, v_new, b_new)
        if bad:
            self._reset(bad, fr.stamp_ns, T_pred, v_pred, prev.bias)
            return self._after_reset(fr, t_start, t_sm)

        # ---- book-keeping from the new estimate
        t_py2 = time.perf_counter()
        self._kf_idx = k
        kf = _Keyframe(k, fr.stamp_ns, T_new, v_new, b_new, (fr.ids.copy(), fr.xy.copy()))
        self._kfs[k] = kf
        self._last_kf = kf
        old = [i for i, f in self._kfs.items() if f.t_ns < horizon and i != k]
        for i in old:
            del self._kfs[i]
        for i, f in self._kfs.items():
            xi = gtsam.symbol("x", i)
            if i != k and est.exists(xi):
                f.T = est.atPose3(xi).matrix()
            self._kf_final[i] = f.T
        for tid, lm in list(self._lm.items()):
            if lm.last_t < horizon:
                del self._lm[tid]
            elif lm.last_t == fr.stamp_ns:
                lm.p = np.asarray(est.atPoint3(lm.key))
        self._pim = gtsam.PreintegratedCombinedMeasurements(
            self._pim_params(fr.stamp_ns), gtsam.imuBias.ConstantBias(b_new[:3], b_new[3:]))
        self._pim_t = fr.stamp_ns
        self.stats["keyframes"] += 1
        self.stats["landmarks_active"] = len(self._lm)
        state = self._state_of(kf, True)
        self._emit(fr.stamp_ns, k, np.eye(4), kf.T, state)
        t_end = time.perf_counter()
        self.kf_timings.append({"total_s": t_end - t_start, "smoother_s": t_sm,
                                "python_s": (t_py - t_start) + (t_end - t_py2), "factors": n_added})
        return state

    def _note_tracking(self, t_ns: int, n_visual: int) -> None:
        """Count and log a tracking loss (a keyframe without visual observations: the state is then
        propagated by the IMU alone, continuously, without a jump) and its recovery."""
        if n_visual == 0 and self._lost_since is None:
            self._lost_since = t_ns
            self.stats["tracking_lost"] += 1
            log.warning("tracking lost at %d (#%d): no visual observation on this keyframe, IMU only until tracks "
                        "return", t_ns, self.stats["tracking_lost"])
        elif n_visual > 0 and self._lost_since is not None:
            log.info("tracking recovered at %d after %.2f s", t_ns, (t_ns - self._lost_since) * 1e-9)
            self._lost_since = None

    def _after_reset(self, fr, t_start, t_sm) -> VioState:
        kf = self._last_kf
        kf.obs = (fr.ids.copy(), fr.xy.copy())
        self._record_pending(fr, kf.idx)
        state = self._state_of(kf, True)
        self._emit(fr.stamp_ns, kf.idx, np.eye(4), kf.T, state)
        t = time.perf_counter() - t_start
        self.kf_timings.append({"total_s": t, "smoother_s": t_sm, "python_s": t - t_sm, "factors": 0,
                                "reset": True})
        return state

    def _diverged(self, T, v, b) -> str:
        cfg = self.config
        if not (np.all(np.isfinite(T)) and np.all(np.isfinite(v)) and np.all(np.isfinite(b))):
            return "non-finite state"
        if np.linalg.norm(v) > cfg.max_speed:
            return f"speed {np.linalg.norm(v):.1f} m/s > {cfg.max_speed}"
        if np.abs(b[3:]).max() > cfg.max_gyro_bias:
            return f"gyro bias {np.abs(b[3:]).max():.3f} rad/s > {cfg.max_gyro_bias}"
        if np.abs(b[:3]).max() > cfg.max_acc_bias:
            return f"accelerometer bias {np.abs(b[:3]).max():.3f} m/s^2 > {cfg.max_acc_bias}"
        return ""

    def _add_visual(self, fr, k, X, T_pred, graph, vals, stamps, horizon) -> int:
        gtsam = self._g
        cfg = self.config
        stereo = self.mode == "stereo"
        ids = fr.ids
        xy = fr.xy
        xr = fr.xy_right if stereo else None
        R_cw, t_cw = self._cam_T_cw(T_pred, self._T_BS0)
        # --- observations of existing landmarks, gated
        if cfg.landmark_max_span_s > 0:
            # frame-to-frame tracks drift: a landmark older than the span is ended, its track starts anew
            old = fr.stamp_ns - int(cfg.landmark_max_span_s * 1e9)
            for j, i in enumerate(ids.tolist()):
                lm = self._lm.get(i)
                if lm is not None and lm.t0 < old:
                    del self._lm[i]
                    self.stats["landmarks_split"] += 1
        ex = [j for j, i in enumerate(ids) if int(i) in self._lm]
        ex.sort(key=lambda j: -self._lm[int(ids[j])].n_obs)
        ex = ex[:cfg.max_landmarks_per_kf]
        n_added = 0
        accepted = []
        if ex:
            P = np.array([self._lm[int(ids[j])].p for j in ex])
            pc = P @ R_cw.T + t_cw
            z = pc[:, 2]
            with np.errstate(divide="ignore", invalid="ignore"):
                pred = pc[:, :2] / z[:, None]
                r = (xy[ex] - pred) / self._sigma_n
                e2 = (r ** 2).sum(axis=1)
                has_r = np.zeros(len(ex), bool)
                if xr is not None and self._rectified:
                    xrr = self._rectify_right(xr[ex])
                    has_r = np.isfinite(xrr[:, 0])
                    pr = (pc[:, 0] - self._baseline) / z
                    er = np.where(has_r, ((xrr[:, 0] - pr) / self._sigma_n) ** 2, 0.0)
                    e2 = e2 + er
            chi = np.where(has_r, cfg.chi2_stereo, cfg.chi2_mono)
            med = np.nanmedian(e2 / np.where(has_r, 2.37, 1.39)) if len(e2) else 1.0
            scale = max(1.0, float(med)) if np.isfinite(med) else 1.0
            good = np.isfinite(e2) & (z > cfg.min_depth) & (e2 <= chi * scale)
            for n, j in enumerate(ex):
                tid = int(ids[j])
                lm = self._lm[tid]
                if not good[n]:
                    self.stats["outliers_rejected"] += 1
                    c = self._outliers.get(tid, 0) + 1
                    self._outliers[tid] = c
                    if c >= cfg.max_outlier_count:
                        self._blacklist.add(tid)
                        self.stats["blacklisted"] += 1
                        del self._lm[tid]
                    elif cfg.retriangulate_outliers:
                        # a drifting track (frame-to-frame LK accumulates error) no longer fits its
                        # landmark: end the landmark here; the track starts a new one from this keyframe
                        del self._lm[tid]
                        self.stats["landmarks_split"] += 1
                    continue
                self._add_obs(graph, X, lm.key, xy[j], xrr[n] if has_r[n] else None,
                              xr[j] if (xr is not None and not self._rectified) else None)
                lm.last_t = fr.stamp_ns
                lm.n_obs += 1
                stamps[lm.key] = self._ts(fr.stamp_ns)
                n_added += 1
                accepted.append(tid)
        # --- new tracks: record, then create landmarks from pending observations
        self._record_pending(fr, k)
        budget = cfg.max_landmarks_per_kf - n_added
        if budget <= 0:
            return n_added
        cands = [int(i) for i in ids if int(i) in self._pending]
        # prefer tracks with more keyframe observations
        cands.sort(key=lambda i: -len(self._pending[i]))
        created = 0
        live = []
        for tid in cands:
            obs = [o for o in self._pending[tid] if o[0] == k or (o[0] in self._kfs and self._kfs[o[0]].t_ns >= horizon)]
            self._pending[tid] = obs
            if len(obs) >= 2:
                live.append(tid)
        live = live[:2 * budget + 8]
        fast = self._triangulate_batch([self._pending[t] for t in live], k, T_pred)
        for tid, P in zip(live, fast):
            if created >= budget:
                break
            obs = self._pending[tid]
            if P is None:       # some observation failed the gate: iterative path
                P, obs = self._init_landmark(obs, k, T_pred)
                if P is None:
                    continue
            key = gtsam.symbol("l", self.stats["landmarks_created"])
            self.stats["landmarks_created"] += 1
            vals.insert(key, gtsam.Point3(*P))
            if cfg.landmark_prior_sigma > 0:
                # weak prior: keeps a landmark whose factors all drop out (behind a camera ->
                # zero Jacobian) from making the system indeterminate
                graph.add(gtsam.PriorFactorPoint3(key, gtsam.Point3(*P), self._noise_lm_prior))
            for (ki, o_xy, o_xr, o_xrr, _) in obs:
                self._add_obs(graph, gtsam.symbol("x", ki), key, o_xy, o_xrr,
                              o_xr if not self._rectified else None)
                n_added += 1
            self._lm[tid] = _Landmark(key, P, fr.stamp_ns, len(obs), fr.stamp_ns)
            stamps[key] = self._ts(fr.stamp_ns)
            del self._pending[tid]
            created += 1
        # prune pending tracks not seen in this keyframe
        seen = {int(i) for i in ids}
        for tid in [t for t in self._pending if t not in seen]:
            del self._pending[tid]
        return n_added

    def _rectify_right(self, xr: np.ndarray) -> np.ndarray:
        """Right normalised coordinates re-expressed in a camera with cam0's orientation."""
        f = np.column_stack([xr, np.ones(len(xr))]) @ self._R_c0_c1.T
        with np.errstate(divide="ignore", invalid="ignore"):
            return f[:, :2] / f[:, 2:3]

    def _add_obs(self, graph, X, L, xy, xr_rect, xr_raw):
        gtsam = self._g
        if xr_rect is not None and np.isfinite(xr_rect[0]):
            graph.add(gtsam.GenericStereoFactor3D(gtsam.StereoPoint2(float(xy[0]), float(xr_rect[0]), float(xy[1])),
                                                  self._noise_stereo, X, L, self._K_stereo, self._pose_bs0))
            return
        graph.add(gtsam.GenericProjectionFactorCal3_S2(np.asarray(xy, float), self._noise_mono, X, L,
                                                       self._K_mono, self._pose_bs0))
        if xr_raw is not None and np.isfinite(xr_raw[0]):
            graph.add(gtsam.GenericProjectionFactorCal3_S2(np.asarray(xr_raw, float), self._noise_mono, X, L,
                                                           self._K_mono, self._pose_bs1))

    def _kf_pose(self, ki, k, T_pred):
        return T_pred if ki == k else self._kfs[ki].T

    def _proj(self, ki, k, T_pred):
        """3x4 [R|t] world -> cam0 of keyframe ki (cached per keyframe update)."""
        P = self._proj_cache.get(ki)
        if P is None:
            R, t = self._cam_T_cw(self._kf_pose(ki, k, T_pred), self._T_BS0)
            P = self._proj_cache[ki] = np.hstack([R, t[:, None]])
        return P

    def _triangulate_batch(self, cands, k, T_pred):
        """Vectorised DLT for many candidate landmarks at once (zero-padded rows do not change
        the SVD null vector). Returns, per candidate, the world point if every observation
        passes the gate (as in :meth:`_init_landmark`), else None."""
        cfg = self.config
        if not cands:
            return []
        stereo = self.mode == "stereo"
        C = len(cands)
        N = max(len(c) for c in cands)
        Pl = np.zeros((C, N, 3, 4))
        xy = np.zeros((C, N, 2))
        xr = np.zeros((C, N, 2))
        m_l = np.zeros((C, N), bool)
        m_r = np.zeros((C, N), bool)
        cur = np.zeros((C, N), bool)
        for ci, obs in enumerate(cands):
            for j, o in enumerate(obs):
                Pl[ci, j] = self._proj(o[0], k, T_pred)
                xy[ci, j] = o[1]
                m_l[ci, j] = True
                cur[ci, j] = o[0] == k
                if stereo and o[2] is not None:
                    xr[ci, j] = o[2]
                    m_r[ci, j] = True
        rows = [xy[..., 0:1] * Pl[:, :, 2] - Pl[:, :, 0], xy[..., 1:2] * Pl[:, :, 2] - Pl[:, :, 1]]
        rows = [r * m_l[..., None] for r in rows]
        if stereo:
            Pr = np.einsum("ij,cnjk->cnik", self._T_c1c0[:3, :3], Pl)
            Pr[..., 3] += self._T_c1c0[:3, 3]
            rr = [xr[..., 0:1] * Pr[:, :, 2] - Pr[:, :, 0], xr[..., 1:2] * Pr[:, :, 2] - Pr[:, :, 1]]
            rows += [r * m_r[..., None] for r in rr]
        A = np.concatenate(rows, axis=1)                                   # (C, rows, 4)
        A /= np.linalg.norm(A[..., :3], axis=2, keepdims=True) + 1e-12
        h = np.linalg.svd(A)[2][:, -1, :]                                  # (C, 4)
        ok = np.abs(h[:, 3]) > 1e-12
        X = np.concatenate([h[:, :3] / np.where(ok, h[:, 3], 1.0)[:, None], np.ones((C, 1))], axis=1)
        pc = np.einsum("cnij,cj->cni", Pl, X)
        with np.errstate(divide="ignore", invalid="ignore"):
            e2 = np.sum((pc[..., :2] / pc[..., 2:3] - xy) ** 2, axis=2)
            gate = np.where(m_r, cfg.chi2_stereo, cfg.chi2_mono) * np.where(cur, 4.0, 1.0) * self._sigma_n ** 2
            if stereo:
                pr = np.einsum("cnij,cj->cni", Pr, X)
                er = np.sum((pr[..., :2] / pr[..., 2:3] - xr) ** 2, axis=2)
                e2 = e2 + np.where(m_r, np.where(pr[..., 2] > 0, er, np.inf), 0.0)
            good = (e2 <= gate) & (pc[..., 2] >= cfg.min_depth) & (pc[..., 2] <= cfg.max_depth)
        good |= ~m_l
        allgood = ok & good.all(axis=1) & np.isfinite(X).all(axis=1)
        if stereo:
            allgood &= m_r.any(axis=1)
        else:
            # mono: triangulation angle between the first and the last ray
            out = []
            for ci, obs in enumerate(cands):
                if not allgood[ci]:
                    out.append(None)
                    continue
                n = len(obs)
                fa = Pl[ci, 0, :, :3].T @ np.array([xy[ci, 0, 0], xy[ci, 0, 1], 1.0])
                fb = Pl[ci, n - 1, :, :3].T @ np.array([xy[ci, n - 1, 0], xy[ci, n - 1, 1], 1.0])
                c = fa @ fb / (np.linalg.norm(fa) * np.linalg.norm(fb))
                out.append(X[ci, :3] if np.degrees(np.arccos(np.clip(c, -1, 1))) >= cfg.mono_min_parallax_deg else None)
            return out
        return [X[ci, :3] if allgood[ci] else None for ci in range(C)]

    def _init_landmark(self, obs, k, T_pred):
        """(world position, inlier observations) for a new landmark, or (None, []).

        Linear (DLT) triangulation over every left ray and, in stereo mode, every right ray of
        the pending observations; then the observation with the largest chi2 is dropped while
        it fails the gate (x4 for the current keyframe, whose pose is only IMU-predicted)."""
        cfg = self.config
        stereo = self.mode == "stereo"
        obs = list(obs)
        Pl = np.array([self._proj(o[0], k, T_pred) for o in obs])          # (n,3,4)
        xy = np.array([o[1] for o in obs])
        if not stereo:
            # mono: wait for enough triangulation angle between first and last ray
            fa = Pl[0, :, :3].T @ np.array([xy[0, 0], xy[0, 1], 1.0])
            fb = Pl[-1, :, :3].T @ np.array([xy[-1, 0], xy[-1, 1], 1.0])
            c = fa @ fb / (np.linalg.norm(fa) * np.linalg.norm(fb))
            if np.degrees(np.arccos(np.clip(c, -1, 1))) < cfg.mono_min_parallax_deg:
                return None, []
            has_r = np.zeros(len(obs), bool)
        else:
            has_r = np.array([o[2] is not None for o in obs])
            if not has_r.any():
                return None, []
            xr = np.array([o[2] if o[2] is not None else (0.0, 0.0) for o in obs])
            Pr = np.einsum("ij,njk->nik", self._T_c1c0[:3, :3], Pl)
            Pr[:, :, 3] += self._T_c1c0[:3, 3]
        keep = np.ones(len(obs), bool)
        gate = np.where(has_r, cfg.chi2_stereo, cfg.chi2_mono) * np.array([4.0 if o[0] == k else 1.0 for o in obs])
        gate = gate * self._sigma_n ** 2
        for _ in range(len(obs)):
            if keep.sum() < 2 or (stereo and not (has_r & keep).any()):
                return None, []
            rows = [xy[keep, 0:1] * Pl[keep, 2] - Pl[keep, 0], xy[keep, 1:2] * Pl[keep, 2] - Pl[keep, 1]]
            m = keep & has_r
            if m.any():
                rows += [xr[m, 0:1] * Pr[m, 2] - Pr[m, 0], xr[m, 1:2] * Pr[m, 2] - Pr[m, 1]]
            A = np.vstack(rows)
            A /= np.linalg.norm(A[:, :3], axis=1, keepdims=True) + 1e-12
            h = np.linalg.svd(A)[2][-1]
            if abs(h[3]) < 1e-12:
                return None, []
            X = np.append(h[:3] / h[3], 1.0)
            pc = Pl @ X                                                        # (n,3)
            with np.errstate(divide="ignore", invalid="ignore"):
                e2 = np.sum((pc[:, :2] / pc[:, 2:3] - xy) ** 2, axis=1)
                if stereo:
                    pr = Pr @ X
                    er = np.sum((pr[:, :2] / pr[:, 2:3] - xr) ** 2, axis=1)
                    e2 = e2 + np.where(has_r, np.where(pr[:, 2] > 0, er, np.inf), 0.0)
            bad_depth = (pc[:, 2] < cfg.min_depth) | (pc[:, 2] > cfg.max_depth)
            ratio = np.where(bad_depth, np.inf, e2 / gate)
            ratio[~keep] = -1.0
            worst = int(np.argmax(ratio))
            if ratio[worst] <= 1.0:
                return X[:3], [o for o, kk in zip(obs, keep) if kk]
            keep[worst] = False
            self.stats["outliers_rejected"] += 1
        return None, []

    # ------------------------------------------------------------------ outputs
    @property
    def initialised(self) -> bool:
        return self._initialised

    def propagate(self, t_ns: int) -> VioState | None:
        """IMU-rate state: the last frame state integrated with the buffered IMU up to t_ns."""
        s = self._last_state
        if s is None or t_ns < s.stamp_ns or self._imu.max_gap(s.stamp_ns, int(t_ns)) > self.config.imu_max_gap_s * 1e9:
            return None
        R = self._last_R.copy()
        p = s.p.copy()
        v = s.v.copy()
        g = np.array([0, 0, -self.config.gravity])
        for m, dt in self._imu.segments(s.stamp_ns, int(t_ns)):
            w = m[:3] - s.bg
            a = m[3:] - s.ba
            acc_w = R @ a + g
            p = p + v * dt + 0.5 * acc_w * dt * dt
            v = v + acc_w * dt
            th = np.linalg.norm(w) * dt
            if th > 1e-12:
                kx = w / np.linalg.norm(w)
                K = np.array([[0, -kx[2], kx[1]], [kx[2], 0, -kx[0]], [-kx[1], kx[0], 0]])
                R = R @ (np.eye(3) + np.sin(th) * K + (1 - np.cos(th)) * K @ K)
        return VioState(int(t_ns), p, _rot_to_quat_xyzw(R), v, s.bg.copy(), s.ba.copy(), False)

    def landmarks(self) -> np.ndarray:
        """(M, 3) world positions of the landmarks currently in the window."""
        if not self._lm:
            return np.zeros((0, 3))
        return np.array([lm.p for lm in self._lm.values()])

    def landmark_keys(self) -> dict:
        """{track id: gtsam key} of the landmarks in the window (a re-created landmark has a new key)."""
        return {tid: lm.key for tid, lm in self._lm.items()}

    def landmark_ids(self) -> np.ndarray:
        """Track ids in the order of :meth:`landmarks`."""
        return np.array(list(self._lm.keys()), np.int64)

    def trajectory(self, smoothed: bool = True):
        """(t_ns (N,), p (N,3), q_xyzw (N,4)) for every processed frame. ``smoothed``: each frame
        is expressed relative to its keyframe, and the keyframe's last estimate in the window is
        used; otherwise the online (causal) output."""
        from scipy.spatial.transform import Rotation

        if not self._traj:
            return np.zeros(0, np.int64), np.zeros((0, 3)), np.zeros((0, 4))
        Ts = []
        for t, ki, T_rel, T_on in self._traj:
            Ts.append(self._kf_final[ki] @ T_rel if smoothed and ki in self._kf_final else T_on)
        Ts = np.array(Ts)
        t = np.array([r[0] for r in self._traj], np.int64)
        return t, Ts[:, :3, 3].copy(), Rotation.from_matrix(Ts[:, :3, :3]).as_quat()

    def write_tum(self, path, smoothed: bool = True) -> Path:
        """TUM trajectory file: ``t[s] x y z qx qy qz qw`` per processed frame."""
        t, p, q = self.trajectory(smoothed)
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(path, "w") as f:
            for ti, pi, qi in zip(t, p, q):
                f.write(f"{ti // 1_000_000_000}.{ti % 1_000_000_000:09d} " + " ".join(f"{x:.9f}" for x in (*pi, *qi)) + "\n")
        return path
