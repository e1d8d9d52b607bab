"""Sliding-window visual-inertial estimator on gtsam 4.3: :class:`VioEstimator`.

The estimator orchestrates members that own their state (after OpenVINS's ``VioManager``):

* :class:`~.imu.ImuInput`: every IMU sample checked and buffered;
* :class:`~.initialisation.Initialiser`: the first state (at rest or moving), and again after an IMU hole;
* :class:`~.preintegration.ImuPreintegrator`: the IMU between keyframes, every frame's prediction and the
  next keyframe's IMU factor;
* :class:`~.keyframes.KeyframePolicy`: which frame becomes a keyframe, rest, tracking loss;
* :class:`~.landmarks.LandmarkMap`: the landmarks and each keyframe's visual observations;
* :class:`~.smoother.Smoother`: the state factors and the fixed-lag solver (own Schur-complement smoother
  or gtsam's iSAM2, one interface);
* :class:`~.trajectory.TrajectoryRecord`: the output, causal and smoothed;
* :class:`~.health.TrackingHealth` and :class:`~.health.OdometryCovariance`: tracking losses and
  recoveries, and the covariance the odometry reports (:meth:`VioEstimator.odometry_covariance`: the newest
  keyframe's marginal propagated by the IMU to each frame, carried across smoother restarts).

No member holds the estimator or another member; each is given what it reads at construction: the
:class:`~.rig.CameraRig` (fixed), the :class:`~.window.KeyframeWindow` (the keyframe states in the
window, which the estimator alone writes), the IMU buffer (which :class:`~.imu.ImuInput` alone
writes) and the ``stats`` counters; the landmark map gets the smoother's solver with each keyframe.
The configuration is validated once here; what differs between stereo and mono is resolved once
(:meth:`~.config.BackendConfig.for_mode`).

Per frame: a frame before the initialisation is kept by the initialiser; after it, the frame's state is
predicted from the last keyframe with the IMU; a keyframe (the policy's decision) gets gtsam's IMU factor,
a zero-velocity update at rest, its visual observations, and one smoother update, from whose estimate
the window's keyframes and the observed landmarks are refreshed; another frame gets the prediction,
expressed relative to its keyframe so that the smoothed trajectory follows the keyframe's later
estimates.

Failure handling: any exception from the smoother's update (gtsam's IndeterminantLinearSystemException,
the own smoother's IndeterminantSystem, other RuntimeErrors) or a diverged state (speed, bias bounds,
NaN) restarts the smoother from the last good state propagated with the IMU; ``stats['resets']`` counts
it (warned about, throttled). A keyframe with fewer than ``tracking_min_tracks`` tracks is a tracking loss
(``tracking_lost``, ``tracking_recovered``, ``tracking_lost_ms``; :meth:`VioEstimator.health` says whether
it lasts; :mod:`.health`). Bad IMU samples (NaN, non-monotonic, beyond the
sensor's range ``imu_max_gyro`` / ``imu_max_acc``) and bad frames are skipped and counted.

IMU holes: a hole between two samples longer than ``imu_max_gap_s`` is counted (``imu_gaps``) and never
integrated across: a frame whose stamp lies beyond the IMU by more than the gap gets no state
(``frames_without_imu``), and the first frame after the hole starts a re-initialisation
(``imu_gap_resets``, also counted in ``resets``, with a warning), anchored at the last keyframe's
position and heading. Frames during the re-initialisation get their states once it succeeds.
"""
from __future__ import annotations

import logging
import os
import time
from pathlib import Path

import numpy as np

from ..camera import CameraModel
from ..log_throttle import ThrottledWarnings
from ..types import TrackFrame
from ._gtsam import has_set_smoother_lag, load as load_gtsam
from .config import BackendConfig, StateCovariance, VioState
from .health import OdometryCovariance, TrackingHealth
from .imu import ImuInput, normalise_imu_noise, propagate_imu
from .imu import warm_up as imu_warm_up
from .initialisation import Initialiser
from .keyframes import KeyframePolicy
from .keyframes import warm_up as keyframes_warm_up
from .landmarks import LandmarkMap
from .preintegration import ImuPreintegrator
from .rig import CameraRig
from .rotation import rot_to_quat_xyzw
from .schur_kernels import warm_up as schur_warm_up
from .smoother import Smoother, diverged, read_state, restart_state
from .trajectory import TrajectoryRecord
from .triangulation import warm_up as triangulation_warm_up
from .window import Keyframe, KeyframeWindow

log = logging.getLogger(__name__)

_blas_hint_given = False


def blas_threads_hint() -> str | None:
    """Once per process: a hint where NumPy's OpenBLAS may run a pool of threads here (none of
    ``OPENBLAS_NUM_THREADS``, ``GOTO_NUM_THREADS``, ``OMP_NUM_THREADS`` says 1 and the machine has more than one
    core). The backend's matrices are small: a thread pool makes its keyframes slower, and idle pool threads
    spin beside it on a larger host. ``vilib-ros`` commands and the nodes set one thread before NumPy loads
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
           "faster with one (a pool of threads makes its keyframes slower): set "
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


def clean_frame(f: TrackFrame, stereo: bool) -> _Frame:
    """The estimator's copy of a frame: its finite tracks (right points only in stereo)."""
    xy = np.asarray(f.xy, dtype=np.float64).reshape(-1, 2)
    ids = np.asarray(f.ids, dtype=np.int64).reshape(-1)
    if len(ids) != len(xy):
        raise ValueError(f"TrackFrame ids ({len(ids)}) and xy ({len(xy)}) differ in length")
    ok = np.isfinite(xy).all(axis=1)
    all_ok = bool(ok.all())
    xr = None
    if f.xy_right is not None and stereo:
        xr = np.asarray(f.xy_right, dtype=np.float64).reshape(-1, 2)
        if len(xr) != len(ids):
            raise ValueError("TrackFrame xy_right length differs from ids")
        xr = xr.copy() if all_ok else xr[ok]
    # copies: a frontend may reuse the arrays of the frame it handed out (GPU result slots)
    ids, xy = (ids.copy(), xy.copy()) if all_ok else (ids[ok], xy[ok])
    return _Frame(int(f.stamp_ns), ids, xy, xr)


def warm_up(schur: bool = True) -> None:
    """Compile (or load from numba's cache) the estimator's compiled functions: the triangulation,
    the IMU preintegration mean, the keyframe decision and, with ``schur``, the own smoother's kernels."""
    triangulation_warm_up()
    imu_warm_up()
    keyframes_warm_up()
    if schur:
        schur_warm_up()


class VioEstimator:
    """See the module docstring. Interface: add_imu, add_imu_batch, add_frame, propagate, state_covariance,
    odometry_covariance, health, trajectory, write_tum, landmarks, counters, stats."""

    #: the estimator's counters (:meth:`counters`); every other ``stats`` entry is a description
    COUNTERS = ("frames", "keyframes", "resets", "imu_samples", "imu_skipped", "frames_skipped",
                "frames_without_tracks", "outliers_rejected", "landmarks_created", "landmarks_active", "blacklisted",
                "init_attempts", "imu_late", "imu_out_of_range", "imu_gaps", "imu_gap_resets", "frames_without_imu",
                "tracking_lost", "tracking_recovered", "tracking_lost_ms", "landmarks_split", "kf_time", "kf_parallax",
                "kf_tracks", "zero_velocity_updates")

    def __init__(self, config: BackendConfig | None = None, cam0: CameraModel | None = None,
                 cam1: CameraModel | None = None, imu_noise: dict | None = None):
        load_gtsam()     # the backend needs it: a one-line refusal here, not at the first keyframe

        self.config = cfg = (config or BackendConfig()).validate()
        blas_threads_hint()
        if cam0 is None:
            raise ValueError("cam0 (CameraModel) is required")
        self.settings = cfg.for_mode(cam1 is not None)
        if self.settings.solver == "isam2" and not cfg.rooted_smoother and self.settings.marginalise_every_s > 0 \
                and not has_set_smoother_lag():
            every = "mono_marginalise_every_s" if self.settings.mode == "mono" else "marginalise_every_s"
            raise ValueError(f"rooted_smoother=False with {every} > 0 (batch marginalisation) needs gtsam's "
                             "IncrementalFixedLagSmoother.setSmootherLag, which this gtsam (4.3a1) does not bind: "
                             f"keep rooted_smoother, set {every} to 0, or install gtsam>=4.3")
        noise = normalise_imu_noise(imu_noise)
        self.rig = CameraRig(cam0, cam1, cfg.pixel_sigma)
        self._warn = ThrottledWarnings(log)     # per-sample / per-frame warnings: once, then every 10 s
        self.stats = {**dict.fromkeys(self.COUNTERS, 0), "init_kind": ""}
        self.kf_timings: list[dict] = []    # per keyframe: total_s, smoother_s, python_s
        self.imu = ImuInput(cfg, self.stats, self._warn)
        self.preintegrator = ImuPreintegrator(cfg, noise, self.imu.buffer)
        self.window = KeyframeWindow()
        self.initialiser = Initialiser(cfg, self.settings.mode, self.rig, self.imu.buffer, self.preintegrator.params,
                                       self.stats, self._warn)
        self.keyframes = KeyframePolicy(cfg, self.rig, self.window, self.imu.buffer, self.stats)
        self.landmark_map = LandmarkMap(cfg, self.settings, self.rig, self.window, self.stats)
        self.smoother = Smoother(cfg, self.settings, self.rig)
        self.trajectory_record = TrajectoryRecord()
        self.tracking = TrackingHealth(cfg, self.stats, self._warn)
        self.covariance = OdometryCovariance(cfg.gravity)
        self._initialised = False
        self._last_frame_t: int | None = None
        warm_up(schur=self.settings.solver == "schur")
        # what the first initialisation imports, before any frame is timed
        import cv2  # noqa: F401
        import scipy.spatial.transform  # noqa: F401

    @property
    def mode(self) -> str:
        """'stereo' | 'mono' (``mode`` 'auto' resolved)."""
        return self.settings.mode

    @property
    def imu_noise_scales(self) -> tuple:
        """(gyroscope, accelerometer) scale of the IMU's white noise in the current keyframe interval."""
        return self.preintegrator.noise_scales

    @property
    def initialised(self) -> bool:
        return self._initialised

    # ------------------------------------------------------------------ inputs
    def add_imu(self, t_ns: int, gyro, acc) -> None:
        """One IMU sample (gyro rad/s, acc m/s^2, body frame); a bad one is skipped and counted."""
        self.imu.add(t_ns, gyro, acc)

    def add_imu_batch(self, t_ns, data) -> None:
        """Many IMU samples at once (stamps (N,), [gyro, acc] (N, 6)): as :meth:`add_imu` per sample."""
        self.imu.add_batch(t_ns, data)

    def add_frame(self, frame: TrackFrame) -> VioState | None:
        """A frame of tracks; its state (None before the initialisation, or where the frame is skipped)."""
        t = int(frame.stamp_ns)
        if self._last_frame_t is not None and t <= self._last_frame_t:
            self.stats["frames_skipped"] += 1
            log.warning("skipping non-monotonic frame at %d", t)
            return None
        if not len(self.imu.buffer):
            self.stats["frames_skipped"] += 1
            return None
        frame = clean_frame(frame, self.settings.mode == "stereo")
        self._last_frame_t = t
        self.stats["frames"] += 1
        if len(frame) == 0:
            self.stats["frames_without_tracks"] += 1
        if self._initialised:
            return self._process(frame)
        start = self.initialiser.add(frame)
        if start is None:
            return None
        if start.first:
            self.window.t0_ns = start.t_ns
        self._start(start.t_ns, start.T, start.v, start.bias6, rot_sigma=start.rot_sigma, pos_sigma=1e-3,
                    v_sigma=start.v_sigma, ba_sigma=0.1, bg_sigma=start.bg_sigma, first=start.first)
        self._initialised = True
        out = None
        for fr in start.frames:
            out = self._process(fr)
        return out

    # ------------------------------------------------------------------ per frame
    def _process(self, fr: "_Frame") -> VioState | None:
        t = fr.stamp_ns
        max_gap = int(self.config.imu_max_gap_s * 1e9)
        imu, pre = self.imu.buffer, self.preintegrator
        if imu.last_t < t:
            self.stats["imu_late"] += 1
            if t - imu.last_t > max_gap:      # inside an IMU hole: nothing to estimate with
                self.stats["frames_without_imu"] += 1
                return None
        if t > pre.t_ns and imu.max_gap(pre.t_ns, t) > max_gap:
            self._imu_gap_reset(fr)
            return None
        if t > pre.t_ns:
            pre.integrate_to(t)
        kf = self.window.last
        T_pred, v_pred = pre.predict_frame(kf)
        if t == kf.t_ns:      # first frame after (re)initialisation is the keyframe itself
            return self._keyframe_state(fr, kf)
        if self.keyframes.is_keyframe(fr, T_pred):
            T_pred, v_pred = pre.predict(kf)       # gtsam's: its preintegration makes the keyframe's factor
            state = self._add_keyframe(fr, T_pred, v_pred)
        else:
            state = VioState(t, T_pred[:3, 3].copy(), rot_to_quat_xyzw(T_pred[:3, :3]), v_pred,
                             kf.bias[3:].copy(), kf.bias[:3].copy(), False)
            self.trajectory_record.add(t, kf.idx, kf.T_inv() @ T_pred, T_pred, state)
        imu.trim_before(self.window.last.t_ns - int(2e9))
        return state

    def _keyframe_state(self, fr: "_Frame", kf: Keyframe) -> VioState:
        """The state of the frame ``fr`` that the keyframe ``kf`` (the smoother's newest) was made of."""
        kf.obs = (fr.ids.copy(), fr.xy.copy())
        self.landmark_map.record_pending(fr, kf.idx)
        state = VioState(kf.t_ns, kf.T[:3, 3].copy(), rot_to_quat_xyzw(kf.T[:3, :3]), kf.v.copy(),
                         kf.bias[3:].copy(), kf.bias[:3].copy(), True)
        self.trajectory_record.add(fr.stamp_ns, kf.idx, np.eye(4), kf.T, state)
        return state

    def _add_keyframe(self, fr: "_Frame", T_pred: np.ndarray, v_pred: np.ndarray) -> VioState:
        t_start = time.perf_counter()
        prev = self.window.last
        k = self.window.idx + 1
        ts = self.window.ts(fr.stamp_ns)
        sm = self.smoother
        batch = sm.keyframe(prev, k, ts, T_pred, v_pred, self.preintegrator.pim)
        still = self.keyframes.is_still(fr, T_pred)
        if still:                                   # zero-velocity update at rest
            sm.add_rest(batch, prev, (fr.stamp_ns - prev.t_ns) * 1e-9)
            self.stats["zero_velocity_updates"] += 1
        # ---- visual factors
        t_vis = time.perf_counter()
        window_s = self.settings.window_s
        horizon = fr.stamp_ns - int(0.85 * window_s * 1e9)
        if sm.ends_first_seen_landmarks(ts):
            self.landmark_map.end_first_seen_before(fr.stamp_ns - int(window_s * 1e9))
        n_added = self.landmark_map.add_observations(fr, k, T_pred, horizon, sm.solver)
        self.tracking.keyframe(fr.stamp_ns, len(fr), n_added, still or self.settings.mode == "mono")
        # ---- smoother update
        t_py = time.perf_counter()
        sm.set_lag(ts)
        try:
            sm.update(batch)
            t_upd = time.perf_counter()
            est = sm.estimate()
            T_new, v_new, b_new = read_state(est, k)
        except Exception as exc:  # IndeterminantLinearSystemException, ValueError, RuntimeError...
            log.debug("smoother exception", exc_info=True)
            t_sm = time.perf_counter() - t_py
            msg = " ".join(ln.strip() for ln in str(exc).splitlines() if ln.strip())[:200]
            self._reset(f"smoother failed: {type(exc).__name__}: {msg}", fr.stamp_ns, T_pred, v_pred, prev.bias)
            return self._after_reset(fr, t_start, t_sm)
        t_sm = time.perf_counter() - t_py
        bad = diverged(T_new, v_new, b_new, self.config)
        if bad:
            self._reset(bad, fr.stamp_ns, T_pred, v_pred, prev.bias)
            return self._after_reset(fr, t_start, t_sm)
        # ---- book-keeping from the new estimate
        t_py2 = time.perf_counter()
        kf = Keyframe(k, fr.stamp_ns, T_new, v_new, b_new, (fr.ids.copy(), fr.xy.copy()))
        self.window.accept(kf, horizon, est)
        final = self.trajectory_record.kf_final
        for i, f in self.window.kfs.items():
            final[i] = f.T
        self.landmark_map.refresh(est, horizon, fr.stamp_ns, sm.removed_landmarks)
        self.preintegrator.start(fr.stamp_ns, b_new)
        self.stats["keyframes"] += 1
        state = VioState(kf.t_ns, kf.T[:3, 3].copy(), rot_to_quat_xyzw(kf.T[:3, :3]), kf.v.copy(),
                         kf.bias[3:].copy(), kf.bias[:3].copy(), True)
        self.trajectory_record.add(fr.stamp_ns, k, np.eye(4), kf.T, state)
        t_end = time.perf_counter()
        self.kf_timings.append({"total_s": t_end - t_start, "smoother_s": t_sm,
                                "python_s": (t_py - t_start) + (t_end - t_py2), "factors": n_added,
                                "update_s": t_upd - t_py, "visual_s": t_py - t_vis, "bookkeeping_s": t_end - t_py2})
        return state

    def _after_reset(self, fr: "_Frame", t_start: float, t_sm: float) -> VioState:
        state = self._keyframe_state(fr, self.window.last)
        t = time.perf_counter() - t_start
        self.kf_timings.append({"total_s": t, "smoother_s": t_sm, "python_s": t - t_sm, "factors": 0,
                                "reset": True})
        return state

    # ------------------------------------------------------------------ (re)starts
    def _start(self, t_ns, T, v, bias6, rot_sigma, pos_sigma, v_sigma, ba_sigma, bg_sigma, first=False):
        """The smoother, the window and the landmark map start over from one keyframe's state."""
        k = 0 if first else self.window.idx + 1
        self.landmark_map.reset()
        self.window.clear()
        self.smoother.start(k, self.window.ts(t_ns), T, v, bias6, rot_sigma, pos_sigma, v_sigma, ba_sigma, bg_sigma)
        kf = Keyframe(k, int(t_ns), T.copy(), np.asarray(v, float).copy(), np.asarray(bias6, float).copy())
        self.window.restart(kf)
        self.trajectory_record.kf_final[k] = T.copy()
        self.preintegrator.start(t_ns, bias6)
        self.stats["keyframes"] += 1

    def _reset(self, reason: str, t_ns: int, T, v, bias6):
        self.stats["resets"] += 1
        self._warn("reset", "backend reset #%d at %d: %s", self.stats["resets"], t_ns, reason)
        self.covariance.restart(t_ns, v, self.imu_noise_densities)
        v, bias6 = restart_state(v, bias6, self.config)
        self._start(t_ns, T, v, bias6, rot_sigma=0.01, pos_sigma=0.01, v_sigma=0.2, ba_sigma=0.1, bg_sigma=0.01)

    def _imu_gap_reset(self, fr: "_Frame"):
        """After an IMU hole: re-initialise, anchored at the last keyframe pose (module docstring)."""
        kf = self.window.last
        gap_s = self.imu.buffer.max_gap(self.preintegrator.t_ns, fr.stamp_ns) * 1e-9
        self.stats["imu_gap_resets"] += 1
        self.stats["resets"] += 1
        self._warn("imu_gap_reset", "backend reset #%d at %d: IMU hole of %.3f s before this frame; "
                   "re-initialising from the IMU and frames after it, continuing from the last keyframe pose "
                   "(%.2f s old)", self.stats["resets"], fr.stamp_ns, gap_s, (fr.stamp_ns - kf.t_ns) * 1e-9)
        self.covariance.restart(fr.stamp_ns, kf.v, self.imu_noise_densities, hidden_s=(fr.stamp_ns - kf.t_ns) * 1e-9)
        self.initialiser.restart(fr, kf.T.copy())
        self._initialised = False

    # ------------------------------------------------------------------ outputs
    def propagate(self, t_ns: int) -> VioState | None:
        """IMU-rate state: the last frame state integrated with the buffered IMU up to t_ns."""
        s, imu = self.trajectory_record.last_state, self.imu.buffer
        if s is None or t_ns < s.stamp_ns or imu.max_gap(s.stamp_ns, int(t_ns)) > self.config.imu_max_gap_s * 1e9:
            return None
        m, dt = imu.pieces(s.stamp_ns, int(t_ns))
        R, p, v = propagate_imu(self.trajectory_record.last_R, s.p, s.v, s.bg, s.ba, m, dt, float(self.config.gravity))
        return VioState(int(t_ns), p, rot_to_quat_xyzw(R), v, s.bg.copy(), s.ba.copy(), False)

    def state_covariance(self) -> StateCovariance | None:
        """Marginal covariance of the newest keyframe's pose (body frame) and velocity (world),
        from the smoother; None before initialisation or where the smoother cannot give one."""
        if not self._initialised:
            return None
        kf = self.window.last
        try:
            S_pose, S_vel = self.smoother.covariance(kf.idx)
        except Exception:  # noqa: BLE001 - variable marginalised out / indeterminant system
            return None
        return StateCovariance(kf.t_ns, kf.T[:3, :3].copy(), S_pose, S_vel)

    @property
    def imu_noise_densities(self) -> tuple[float, float]:
        """(gyroscope rad/s/sqrt(Hz), accelerometer m/s^2/sqrt(Hz)) white-noise densities the current keyframe
        interval's preintegration uses (the sensor's, scaled: :attr:`imu_noise_scales`)."""
        n, (g, a) = self.preintegrator.noise, self.preintegrator.noise_scales
        return n["gyroscope_noise_density"] * g, n["accelerometer_noise_density"] * a

    def odometry_covariance(self, state: VioState | None = None, angular_variance: float = 1e3):
        """(pose_cov (6, 6), twist_cov (6, 6)) of ``state`` (default: the newest frame's), ROS conventions: the
        newest keyframe's marginal (taken on the first call after the keyframe) propagated by the IMU to the
        state (:class:`~.health.OdometryCovariance`). None before initialisation and the first marginal."""
        if not self._initialised:
            return None
        s = state if state is not None else self.trajectory_record.last_state
        if s is None:
            return None
        return self.covariance.of_state(s, self.window.last, self.state_covariance, self.imu_noise_densities,
                                        self.tracking.lost_since is not None, angular_variance)

    def predicted_covariance(self, state: VioState, angular_variance: float = 1e3):
        """(pose_cov, twist_cov) of an IMU-rate ``state`` from :meth:`propagate`, as :meth:`odometry_covariance`
        gives a frame's, without changing what the frames report. None before the first marginal."""
        if not self._initialised:
            return None
        return self.covariance.ahead(state, self.window.last, self.state_covariance, self.imu_noise_densities,
                                     angular_variance)

    def health(self) -> dict:
        """:meth:`~.health.TrackingHealth.status` at the newest frame: ``tracking`` ('initialising', 'lost' or
        'ok') and ``lost_for_s``."""
        last = self.trajectory_record.last_state
        return self.tracking.status(None if last is None or not self._initialised else last.stamp_ns)

    def counters(self) -> dict:
        """Every counter of the estimator (a copy: ints by name, see :attr:`COUNTERS`) and
        ``init_kind``, how it initialised ('' before): what the node's diagnostics report."""
        out = {k: int(self.stats[k]) for k in self.COUNTERS}
        out["init_kind"] = str(self.stats["init_kind"])
        return out

    def landmarks(self) -> np.ndarray:
        """(M, 3) world positions of the landmarks currently in the window."""
        return self.landmark_map.positions()

    def landmark_keys(self) -> dict:
        """{track id: smoother key} of the landmarks in the window (a re-created landmark has a new key)."""
        return self.landmark_map.keys()

    def landmark_ids(self) -> np.ndarray:
        """Track ids in the order of :meth:`landmarks`."""
        return self.landmark_map.ids()

    def trajectory(self, smoothed: bool = True):
        """(t_ns (N,), p (N,3), q_xyzw (N,4)) for every processed frame. ``smoothed``: each frame
        is expressed relative to its keyframe, and the keyframe's last estimate in the window is
        used; otherwise the online (causal) output."""
        return self.trajectory_record.arrays(smoothed)

    def write_tum(self, path, smoothed: bool = True) -> Path:
        """TUM trajectory file: ``t[s] x y z qx qy qz qw`` per processed frame."""
        return self.trajectory_record.write_tum(path, smoothed)
