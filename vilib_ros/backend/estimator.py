"""Sliding-window visual-inertial estimator on gtsam 4.3.

Graph (one set of variables per keyframe k): pose X(k) (body in world), velocity V(k),
IMU bias B(k), linked by ``CombinedImuFactor`` (preintegrated between keyframes); landmarks
L(n) in world coordinates with ``GenericStereoFactor3D`` (stereo, normalised calibration
``Cal3_S2Stereo(1, 1, 0, 0, 0, baseline)`` and sigma = pixel_sigma / fx) or
``GenericProjectionFactorCal3_S2`` (mono, or stereo tracks without a right match), all with
Huber costs. A fixed-lag smoother keeps ``window_s`` seconds (mono: ``mono_window_s`` when larger: the
metric scale needs a longer window). ``solver`` (stereo; mono: ``mono_solver``) picks it:
``'schur'``, the default in stereo, is our own (:class:`~vilib_ros.backend.schur_smoother.SchurSmoother`:
one Gauss-Newton step per keyframe with the landmarks eliminated in closed form, the states dense;
the same factors, taken without gtsam objects for the visual ones; a landmark leaves the window with
the first state that observed it, and the estimator then ends its track's landmark, the track seen
on starting a new one; ``schur_keep_landmarks``, off: VINS-Mono's depth shift instead, tried and not
adopted, ``bench/results/backend_changes_2026-11-28.md``); ``'isam2'``, mono's default, is gtsam's iSAM2
(:class:`~vilib_ros.backend.fixed_lag.RootedFixedLagSmoother`: landmarks eliminated first, the newest
state last, in the root clique, so that its covariance is cheap; ``rooted_smoother`` false: gtsam's
``IncrementalFixedLagSmoother``). With
``marginalise_every_s`` (mono: ``mono_marginalise_every_s``) the states older than the window leave it in batches, so that only
one update per batch pays for the marginalisation (the window then spans ``window_s`` to
``window_s + marginalise_every_s``). iSAM2 reuses the slots of marginalised factors. The IMU is
preintegrated between keyframes with gtsam's noise model from the dataset's imu0 sensor.yaml
values (``imu_noise``), each accelerometer sample rotated to the middle of its integration step;
the white-noise densities are scaled per keyframe interval by what the last
``imu_noise_window_s`` of samples show (``imu_noise_measured``: a vibrating multicopter IMU is
20-60x noisier than its datasheet) and the bias random walks by ``imu_walk_scale``. Every frame's
prediction comes from a compiled copy of gtsam's preintegration mean (:func:`.imu.preintegrate`, equal to
rounding); gtsam integrates the same steps only when a keyframe needs its factor.

Keyframes: a frame becomes a keyframe when ``kf_max_interval_s`` has passed, when fewer than
``kf_min_tracks`` tracks or fewer than ``kf_track_fraction`` of the last keyframe's tracks
remain, or when the rotation-compensated median parallax reaches ``kf_parallax_px`` (never
sooner than ``kf_min_interval_s``). Other frames get the IMU prediction from the last keyframe.

Landmarks: a track becomes a landmark on its second keyframe observation (stereo: at least one
with a right match; mono: once the ray angle exceeds ``mono_min_parallax_deg``), triangulated by
linear DLT over all its left (and right) rays in the window, observations failing the chi2 gate
dropped one by one. Per keyframe at most ``max_landmarks_per_kf`` (mono:
``mono_max_landmarks_per_kf``) observations are added: of existing landmarks (longest tracks
first), then of new ones (tracks with the most keyframe observations first); with
``landmark_grid`` (mono: ``mono_landmark_grid``) > 0 the preference is dealt out over a grid of
image cells, each cell's best first, so that the observations spread over the image. In mono mode each new
landmark gets a weak prior (``landmark_prior_sigma``) so that a landmark whose factors all lose
their Jacobian (point behind a camera) cannot make the system indeterminate; in stereo mode a
stereo observation fixes the point by itself and the prior (``landmark_prior_stereo``) would
only cost update time.

Smoother timestamps: every time is kept as integer nanoseconds; the smoother receives
``(t_ns - t0_ns) * 1e-9`` (seconds since the first frame), so that float rounding never
reorders or merges keys. A landmark's timestamp is refreshed to the keyframe time on every
observation; once it has not been observed for a window it is marginalised with the old
poses (the own smoother: also once the first state that observed it leaves), and a re-observed
track gets a new landmark key (never a factor on a marginalised key).

At rest (median parallax since the last keyframe below ``still_parallax_px`` and a static IMU
window) a zero-velocity prior and a no-motion pose factor are added (``zero_velocity_updates``):
without them a monocular estimator drifts while a vehicle waits on the ground (EuRoC V1_01's
first 5 s: 38 cm in 4.7 s without, 2.5 cm with).

Outliers: before a factor is added, its whitened residual at the predicted pose is gated
against chi2 (99 %), with the threshold scaled up by the median residual of the keyframe
(so that an IMU prediction error does not reject every track). A rejected observation ends its
landmark (``retriangulate_outliers``): the track, whose frame-to-frame error has drifted away
from where it was triangulated, starts a new landmark from this keyframe; a track rejected
``max_outlier_count`` times is blacklisted. Optionally (``landmark_max_span_s``) landmarks are
ended by age. A keyframe without any visual observation is a tracking loss: counted
(``tracking_lost``) and warned once; the IMU carries the state until tracks return, without a
jump. Factors are never removed from the smoother (removing
factors while it marginalises is a known gtsam failure, borglab/gtsam#2479).

Failure handling: any exception from the smoother (gtsam's IndeterminantLinearSystemException,
the own smoother's IndeterminantSystem, and other RuntimeErrors) or a diverged state (speed, bias bounds, NaN) resets the smoother from
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
import math
import os
from pathlib import Path

import numpy as np

from ..camera import CameraModel
from ..log_throttle import ThrottledWarnings
from ..types import TrackFrame
from . import _gtsam, schur, triangulation
from .config import BackendConfig, StateCovariance, VioState
from .imu import ImuBuffer, batch_ok, gaps_over, make_preintegration_params, normalise_imu_noise, propagate_imu
from .imu import warm_up as imu_warm_up
from .keyframes import KeyframeMixin, _Keyframe
from .keyframes import warm_up as keyframes_warm_up
from .landmarks import LandmarkMixin
from .rotation import rot_to_quat_xyzw
from .smoother import SmootherMixin

log = logging.getLogger(__name__)

_blas_hint_given = False


def blas_threads_hint() -> str | None:
    """Once per process: a hint where NumPy's OpenBLAS may run a pool of threads here (none of
    ``OPENBLAS_NUM_THREADS``, ``GOTO_NUM_THREADS``, ``OMP_NUM_THREADS`` says 1 and the machine has more than one
    core). The backend's matrices are small: on the 2-core machine the own smoother's stereo keyframe took 6-7 ms
    median with the pool against 2.8-3.7 with one thread (2026-11-28), and idle pool threads spin beside it on a
    larger host. ``vilib-ros`` commands and the nodes set one thread before NumPy loads
    (:mod:`vilib_ros.nodes._single_blas`); a Python program of the user's own does not. Returns the hint (logged as a
    warning) or None."""
    global _blas_hint_given
    if _blas_hint_given:
        return None
    _blas_hint_given = True
    cores = os.cpu_count() or 1
    threads = cores
    for var in ("OPENBLAS_NUM_THREADS", "GOTO_NUM_THREADS", "OMP_NUM_THREADS"):
        v = os.environ.get(var, "").strip()
        if v:
            try:
                threads = int(v)
            except ValueError:
                continue
            break
    if threads <= 1 or cores <= 1:
        return None
    msg = (f"VioEstimator: NumPy's BLAS may run {threads} threads in this process; the backend's small matrices are "
           "faster with one (its keyframes took twice as long with a pool on a 2-core machine): set "
           "OPENBLAS_NUM_THREADS=1 before NumPy is imported")
    log.warning(msg)
    return msg


class _Frame:
    """The estimator's record of a frame: what it uses of a :class:`TrackFrame` (finite tracks only)."""

    __slots__ = ("stamp_ns", "ids", "xy", "xy_right")

    def __init__(self, stamp_ns: int, ids: np.ndarray, xy: np.ndarray, xy_right: np.ndarray | None):
        self.stamp_ns, self.ids, self.xy, self.xy_right = stamp_ns, ids, xy, xy_right

    def __len__(self) -> int:
        return len(self.ids)


class VioEstimator(SmootherMixin, KeyframeMixin, LandmarkMixin):
    """See module docstring. Interface: add_imu, add_frame, propagate, write_tum, landmarks, stats."""

    def __init__(self, config: BackendConfig | None = None, cam0: CameraModel | None = None,
                 cam1: CameraModel | None = None, imu_noise: dict | None = None):
        gtsam = _gtsam.load()
        self._g = gtsam
        self.config = cfg = (config or BackendConfig()).validate()
        blas_threads_hint()
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
        # observations per keyframe and their grid in this mode (mono has its own: LandmarkMixin)
        self.max_obs_per_kf = cfg.mono_max_landmarks_per_kf if mode == "mono" else cfg.max_landmarks_per_kf
        self.landmark_grid = cfg.mono_landmark_grid if mode == "mono" else cfg.landmark_grid
        self.marginalise_every_s = cfg.mono_marginalise_every_s if mode == "mono" else cfg.marginalise_every_s
        self.solver = cfg.mono_solver if mode == "mono" else cfg.solver
        if self.solver == "isam2" and not cfg.rooted_smoother and self.marginalise_every_s > 0 \
                and not _gtsam.has_set_smoother_lag():
            every = "mono_marginalise_every_s" if mode == "mono" else "marginalise_every_s"
            raise ValueError(f"rooted_smoother=False with {every} > 0 (batch marginalisation) needs gtsam's "
                             "IncrementalFixedLagSmoother.setSmootherLag, which this gtsam (4.3a1) does not bind: "
                             f"keep rooted_smoother, set {every} to 0, or install gtsam>=4.3")
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
        self._warn = ThrottledWarnings(log)     # per-sample / per-frame warnings: once, then every 10 s
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
        self._pending_frames: list[_Frame] = []
        self._parallax_cache = (None, None)
        self._initialised = False
        self._last_state: VioState | None = None
        self._last_frame_t: int | None = None
        self._reinit_anchor: np.ndarray | None = None    # last known pose before an IMU hole
        self._lost_since: int | None = None
        self._reset_bookkeeping()
        triangulation.warm_up()
        imu_warm_up()
        keyframes_warm_up()
        if self.solver == "schur":
            schur.warm_up()
        # what the first initialisation imports, before any frame is timed (scipy.spatial: ~0.2 s
        # at the first keyframe of the offline runner's child, 15 % of a 60 s replay)
        import cv2  # noqa: F401
        import scipy.spatial.transform  # noqa: F401

    # ------------------------------------------------------------------ inputs
    def add_imu(self, t_ns: int, gyro, acc) -> None:
        try:
            g0, g1, g2 = gyro
            a0, a1, a2 = acc
            s = (float(g0), float(g1), float(g2), float(a0), float(a1), float(a2))
        except (TypeError, ValueError):
            g = np.asarray(gyro, dtype=np.float64).reshape(-1)
            a = np.asarray(acc, dtype=np.float64).reshape(-1)
            if g.shape != (3,) or a.shape != (3,):
                raise ValueError(f"gyro and acc must have 3 elements, got {g.shape} and {a.shape}") from None
            s = tuple(float(x) for x in (*g, *a))
        t_ns = int(t_ns)
        cfg = self.config
        if not all(map(math.isfinite, s)):
            self.stats["imu_skipped"] += 1
            self._warn("imu_nan", "skipping non-finite IMU sample at %d", t_ns)
            return
        mg, ma = max(map(abs, s[:3])), max(map(abs, s[3:]))
        if mg > cfg.imu_max_gyro or ma > cfg.imu_max_acc:
            self.stats["imu_skipped"] += 1
            self.stats["imu_out_of_range"] += 1
            self._warn("imu_range", "skipping IMU sample at %d beyond the sensor range (|gyro| <= %g rad/s, |acc| <= %g m/s^2): "
                        "max |gyro| %.3g, max |acc| %.3g", t_ns, cfg.imu_max_gyro, cfg.imu_max_acc, mg, ma)
            return
        last = self._imu.last_t
        if not self._imu.add(t_ns, s):
            self.stats["imu_skipped"] += 1
            self._warn("imu_order", "skipping non-monotonic IMU sample at %d", t_ns)
            return
        if last is not None and t_ns - last > cfg.imu_max_gap_s * 1e9:
            self._note_imu_gap(last, t_ns)
        self.stats["imu_samples"] += 1

    def add_imu_batch(self, t_ns, data) -> None:
        """Many IMU samples at once (stamps (N,), [gyro, acc] (N, 6)): the same checks, counts and
        warnings as :meth:`add_imu` per sample, vectorised where every sample is good."""
        t = np.ascontiguousarray(t_ns, np.int64).reshape(-1)
        d = np.ascontiguousarray(data, np.float64).reshape(len(t), 6)
        if not len(t):
            return
        cfg = self.config
        last = self._imu.last_t
        lst = -1 if last is None else last
        if not batch_ok(t, d, lst, cfg.imu_max_gyro, cfg.imu_max_acc):
            for ti, di in zip(t.tolist(), d):
                self.add_imu(ti, di[:3], di[3:])
            return
        self._imu.extend(t, d)
        for k in gaps_over(t, lst, int(cfg.imu_max_gap_s * 1e9)):
            self._note_imu_gap(int(t[k - 1]) if k else lst, int(t[k]))
        self.stats["imu_samples"] += len(t)

    def _note_imu_gap(self, last: int, t_ns: int) -> None:
        self.stats["imu_gaps"] += 1
        log.warning("IMU gap of %.3f s (%d -> %d) is longer than imu_max_gap_s = %g: not integrated across",
                    (t_ns - last) * 1e-9, last, t_ns, self.config.imu_max_gap_s)

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

    def _clean_frame(self, f: TrackFrame) -> "_Frame":
        xy = np.asarray(f.xy, dtype=np.float64).reshape(-1, 2)
        ids = np.asarray(f.ids, dtype=np.int64).reshape(-1)
        if len(ids) != len(xy):
            raise ValueError(f"TrackFrame ids ({len(ids)}) and xy ({len(xy)}) differ in length")
        ok = np.isfinite(xy).all(axis=1)
        all_ok = bool(ok.all())
        xr = None
        if f.xy_right is not None and self.mode == "stereo":
            xr = np.asarray(f.xy_right, dtype=np.float64).reshape(-1, 2)
            if len(xr) != len(ids):
                raise ValueError("TrackFrame xy_right length differs from ids")
            xr = xr.copy() if all_ok else xr[ok]
        # copies: a frontend may reuse the arrays of the frame it handed out (GPU result slots)
        ids, xy = (ids.copy(), xy.copy()) if all_ok else (ids[ok], xy[ok])
        return _Frame(int(f.stamp_ns), ids, xy, xr)

    # ------------------------------------------------------------------ per frame

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
            self._integrate_to(t)
        T_pred, v_pred = self._predict_frame()
        kf = self._last_kf
        if t == kf.t_ns:      # first frame after (re)initialisation is the keyframe itself
            kf.obs = (fr.ids.copy(), fr.xy.copy())
            self._record_pending(fr, kf.idx)
            state = self._state_of(kf, True)
            self._emit(t, kf.idx, np.eye(4), kf.T, state)
            return state
        if self._is_keyframe(fr, T_pred):
            T_pred, v_pred = self._predict()       # gtsam's: its preintegration makes the keyframe's factor
            state = self._add_keyframe(fr, T_pred, v_pred)
        else:
            bias = self._last_kf.bias
            state = VioState(t, T_pred[:3, 3].copy(), rot_to_quat_xyzw(T_pred[:3, :3]), v_pred,
                             bias[3:].copy(), bias[:3].copy(), False)
            self._emit(t, self._last_kf.idx, self._last_kf.T_inv() @ T_pred, T_pred, state)
        self._imu.trim_before(self._last_kf.t_ns - int(2e9))
        return state

    def _emit(self, t, kf_idx, T_rel, T_online, state: VioState):
        self._traj.append((t, kf_idx, T_rel, T_online.copy()))
        self._last_R = T_online[:3, :3].copy()
        self._last_state = state

    def _state_of(self, kf: _Keyframe, is_kf: bool) -> VioState:
        return VioState(kf.t_ns, kf.T[:3, 3].copy(), rot_to_quat_xyzw(kf.T[:3, :3]), kf.v.copy(),
                        kf.bias[3:].copy(), kf.bias[:3].copy(), is_kf)

    # ------------------------------------------------------------------ outputs
    @property
    def initialised(self) -> bool:
        return self._initialised

    def propagate(self, t_ns: int) -> VioState | None:
        """IMU-rate state: the last frame state integrated with the buffered IMU up to t_ns."""
        s = self._last_state
        if s is None or t_ns < s.stamp_ns or self._imu.max_gap(s.stamp_ns, int(t_ns)) > self.config.imu_max_gap_s * 1e9:
            return None
        m, dt = self._imu.pieces(s.stamp_ns, int(t_ns))
        R, p, v = propagate_imu(self._last_R, s.p, s.v, s.bg, s.ba, m, dt, float(self.config.gravity))
        return VioState(int(t_ns), p, rot_to_quat_xyzw(R), v, s.bg.copy(), s.ba.copy(), False)

    def state_covariance(self) -> StateCovariance | None:
        """Marginal covariance of the newest keyframe's pose (body frame) and velocity (world),
        from the smoother; None before initialisation or where the smoother cannot give one."""
        if not self._initialised:
            return None
        kf = self._last_kf
        gtsam = self._g
        try:
            S_pose = np.asarray(self._smoother.marginalCovariance(gtsam.symbol("x", kf.idx)))
            S_vel = np.asarray(self._smoother.marginalCovariance(gtsam.symbol("v", kf.idx)))
        except Exception:  # noqa: BLE001 - variable marginalised out / indeterminant system
            return None
        return StateCovariance(kf.t_ns, kf.T[:3, :3].copy(), S_pose, S_vel)

    #: the estimator's counters (:meth:`counters`); every other ``stats`` entry is a description
    COUNTERS = ("frames", "keyframes", "resets", "imu_samples", "imu_skipped", "frames_skipped",
                "frames_without_tracks", "outliers_rejected", "landmarks_created", "landmarks_active", "blacklisted",
                "init_attempts", "imu_late", "imu_out_of_range", "imu_gaps", "imu_gap_resets", "frames_without_imu",
                "tracking_lost", "landmarks_split", "kf_time", "kf_parallax", "kf_tracks", "zero_velocity_updates")

    def counters(self) -> dict:
        """Every counter of the estimator (a copy: ints by name, see :attr:`COUNTERS`) and
        ``init_kind``, how it initialised ('' before): what the node's diagnostics report."""
        out = {k: int(self.stats[k]) for k in self.COUNTERS}
        out["init_kind"] = str(self.stats["init_kind"])
        return out

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
