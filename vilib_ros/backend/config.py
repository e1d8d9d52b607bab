"""Backend configuration (:class:`BackendConfig`, validated once by the estimator, and the options that
differ between stereo and mono resolved once for its mode: :class:`ModeSettings`) and the records it
outputs (:class:`VioState`, :class:`StateCovariance`)."""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np


@dataclass
class BackendConfig:
    # --- sliding window ---
    window_s: float = 2.0               # the smoother's lag, seconds (solver 'schur' ends a landmark when its
                                        # first state leaves: a longer window keeps it longer; iSAM2's update
                                        # time grows with the window)
    mono_window_s: float = 2.5          # mono mode uses max(window_s, mono_window_s): the metric scale needs
                                        # a longer window
    marginalise_every_s: float = 1.0    # old states leave the smoother in batches, this often: the window
                                        # then spans window_s .. window_s + this (0 = every keyframe); the
                                        # updates between batches do not re-eliminate the whole window
    mono_marginalise_every_s: float = 1.5  # mono mode's marginalise_every_s (in proportion to its longer window)
    mode: str = "auto"                  # 'stereo' | 'mono' | 'auto' (stereo if cam1 is given;
                                        # in the backend node: stereo:=true)
    # --- keyframe selection ---
    kf_min_interval_s: float = 0.08
    kf_max_interval_s: float = 0.4      # time criterion
    kf_parallax_px: float = 12.0        # rotation-compensated median parallax vs last keyframe
    kf_track_fraction: float = 0.65     # fewer of the last keyframe's tracks survive -> keyframe
    kf_min_tracks: int = 30             # fewer tracks -> keyframe
    zero_velocity_updates: bool = True  # at rest: zero-velocity prior + no-motion pose factor
    still_parallax_px: float = 1.5      # rest = median parallax below this AND a static IMU window
    still_velocity_sigma: float = 0.005  # m/s
    # --- landmarks ---
    max_landmarks_per_kf: int = 60      # observations added per keyframe (longest tracks first)
    landmark_grid: int = 0              # > 0: spread them over a grid of this many cells per side (each
                                        # cell's longest track first, then each cell's second, ...)
    mono_max_landmarks_per_kf: int = 45  # mono mode's max_landmarks_per_kf (spread over the grid below, fewer
                                        # observations are as accurate at less update time)
    mono_landmark_grid: int = 4         # mono mode's landmark_grid (stereo leaves it off: it made stereo less
                                        # accurate)
    min_depth: float = 0.3
    max_depth: float = 25.0
    min_disparity_px: float = 1.0
    mono_min_parallax_deg: float = 1.5  # triangulation angle before a mono landmark is created
    pixel_sigma: float = 1.0
    landmark_prior_sigma: float = 5.0   # m, weak prior at creation (0 = none)
    landmark_prior_stereo: bool = False  # stereo mode too (a stereo observation alone fixes the point: the
                                        # prior only costs update time there; mono needs it)
    huber_k: float = 1.345              # in sigmas
    chi2_stereo: float = 11.34          # 99 % of chi2(3)
    chi2_mono: float = 9.21             # 99 % of chi2(2)
    max_outlier_count: int = 10         # rejected observations before a track is blacklisted
    retriangulate_outliers: bool = True  # a rejected observation ends the landmark; the track starts a new one
    landmark_max_span_s: float = 0.0   # a landmark older than this is ended, its track starts a new one (0 = never)
    # --- IMU ---
    # The sensor.yaml densities are datasheet values of a sensor at rest; on a flying multicopter
    # rotor vibration makes the effective white noise many times larger, and the biases drift
    # faster (temperature, vibration); VINS-Fusion's EuRoC configuration inflates by 50-60x. With
    # the datasheet values the estimator trusts the IMU over exact stereo tracks.
    # imu_noise_measured: the white-noise density of the last imu_noise_window_s of samples (first
    # differences, robust) per keyframe interval, so a quiet sensor keeps its datasheet noise and a
    # vibrating one gets what it shows.
    imu_noise_measured: bool = True     # measure the white-noise density from the IMU stream
    imu_noise_scale: float = 1.0        # fixed white-noise multiplier where imu_noise_measured is false
    imu_noise_window_s: float = 1.0     # samples the measured scale looks at
    imu_noise_scale_max: float = 100.0  # bound of the measured scale
    imu_walk_scale: float = 5.0         # multiplies the bias random walks
    gravity: float = 9.81
    imu_max_gap_s: float = 0.1          # a longer hole between IMU samples is never integrated across
    imu_max_gyro: float = 35.0          # rad/s (2000 deg/s, the ADIS16448 range): larger samples are rejected
    imu_max_acc: float = 160.0          # m/s^2 (16 g): larger samples are rejected
    # --- initialisation ---
    init_window_s: float = 0.5
    static_gyro_std: float = 0.01       # rad/s, std of the 10 block means of the init window
    static_acc_std: float = 0.15        # m/s^2, std of the 10 block means
    static_gyro_mean: float = 0.15      # rad/s (|mean gyro| at rest = the bias)
    dynamic_init_frames: int = 20       # stereo: frames for the moving-start alignment
    mono_init_window_s: float = 2.0     # mono: window for the moving-start alignment
    # --- optimisation ---
    relinearize_threshold: float = 0.01  # larger ones leave linearisation errors of the order of the accuracy
    relinearize_threshold_landmarks: float = 0.01  # landmarks' own threshold (m); a larger one saves update time
                                        # at some cost in accuracy on some sequences
    relinearize_skip: int = 1
    partial_relinearization_check: bool = False
    extra_updates: int = 0              # extra iSAM2 iterations per keyframe
    solver: str = "schur"               # stereo mode's smoother: 'schur', our own Gauss-Newton with the landmarks
                                        # eliminated (schur_smoother; a landmark leaves with the first state that
                                        # saw it); 'isam2', gtsam's iSAM2 (isam2_smoother)
    mono_solver: str = "isam2"          # mono mode's smoother ('schur' is less accurate in mono)
    schur_keep_landmarks: int = 0       # solver 'schur' marginalisation: > 0: a landmark a leaving state saw is
                                        # marginalised all the same and then goes on in the window from its
                                        # estimate where at least this many of its observations are by remaining
                                        # states (VINS-Mono's depth shift; less accurate here);
                                        # 0: it leaves with the first state that saw it
    rooted_smoother: bool = True        # the newest state in the Bayes tree's root: its covariance without a
                                        # shortcut (isam2_smoother.RootedFixedLagSmoother); false: gtsam's
                                        # IncrementalFixedLagSmoother
    # --- failure handling ---
    max_speed: float = 30.0             # m/s
    max_gyro_bias: float = 0.3          # rad/s
    max_acc_bias: float = 2.0           # m/s^2
    tracking_min_tracks: int = 10       # a keyframe with fewer tracks is a tracking loss (the IMU alone carries
                                        # the state)

    def validate(self) -> "BackendConfig":
        if self.solver not in ("isam2", "schur") or self.mono_solver not in ("isam2", "schur"):
            raise ValueError(f"solver and mono_solver must be 'isam2' or 'schur', got {self.solver!r} and "
                             f"{self.mono_solver!r}")
        if self.window_s <= 0:
            raise ValueError(f"window_s must be > 0, got {self.window_s}")
        if self.mode not in ("stereo", "mono", "auto"):
            raise ValueError(f"mode must be 'stereo', 'mono' or 'auto', got {self.mode!r}")
        if not 0 < self.kf_min_interval_s <= self.kf_max_interval_s:
            raise ValueError("need 0 < kf_min_interval_s <= kf_max_interval_s")
        if self.relinearize_threshold < 0 or self.relinearize_threshold_landmarks < 0:
            raise ValueError("relinearize_threshold and relinearize_threshold_landmarks must be >= 0")
        if self.schur_keep_landmarks < 0:
            raise ValueError(f"schur_keep_landmarks must be >= 0, got {self.schur_keep_landmarks}")
        if self.marginalise_every_s < 0 or self.mono_marginalise_every_s < 0:
            raise ValueError(f"marginalise_every_s and mono_marginalise_every_s must be >= 0, got "
                             f"{self.marginalise_every_s} and {self.mono_marginalise_every_s}")
        if self.kf_max_interval_s >= self.window_s:
            raise ValueError("kf_max_interval_s must be shorter than window_s")
        if self.pixel_sigma <= 0 or self.huber_k <= 0:
            raise ValueError("pixel_sigma and huber_k must be > 0")
        if self.landmark_grid < 0 or self.mono_landmark_grid < 0:
            raise ValueError(f"landmark_grid and mono_landmark_grid must be >= 0, got {self.landmark_grid} and "
                             f"{self.mono_landmark_grid}")
        if self.tracking_min_tracks < 1:
            raise ValueError(f"tracking_min_tracks must be >= 1, got {self.tracking_min_tracks}")
        if self.max_landmarks_per_kf < 1 or self.mono_max_landmarks_per_kf < 1:
            raise ValueError("max_landmarks_per_kf and mono_max_landmarks_per_kf must be >= 1")
        if not (self.imu_max_gap_s > 0 and self.imu_max_gyro > 0 and self.imu_max_acc > 0):
            raise ValueError("imu_max_gap_s, imu_max_gyro and imu_max_acc must be > 0")
        if not (self.imu_noise_scale > 0 and self.imu_walk_scale > 0 and self.imu_noise_window_s > 0
                and self.imu_noise_scale_max >= 1):
            raise ValueError("need imu_noise_scale > 0, imu_walk_scale > 0, imu_noise_window_s > 0, "
                             "imu_noise_scale_max >= 1")
        return self

    def for_mode(self, has_right_camera: bool) -> "ModeSettings":
        """The options of the mode this configuration runs in: ``mode`` ('auto': stereo where a right camera
        is given), and where mono has its own field (``mono_window_s``, ``mono_max_landmarks_per_kf``,
        ``mono_landmark_grid``, ``mono_marginalise_every_s``, ``mono_solver``), that one in mono."""
        mode = self.mode
        if mode == "auto":
            mode = "stereo" if has_right_camera else "mono"
        if mode == "stereo" and not has_right_camera:
            raise ValueError("mode='stereo' needs cam1")
        if mode == "mono":
            return ModeSettings(mode, max(self.window_s, self.mono_window_s), self.mono_max_landmarks_per_kf,
                                self.mono_landmark_grid, self.mono_marginalise_every_s, self.mono_solver)
        return ModeSettings(mode, self.window_s, self.max_landmarks_per_kf, self.landmark_grid,
                            self.marginalise_every_s, self.solver)


@dataclass(frozen=True)
class ModeSettings:
    """What the estimator's mode takes of a :class:`BackendConfig` (:meth:`BackendConfig.for_mode`): its
    members read these, never the mono / stereo pairs of fields."""

    mode: str                   # 'stereo' | 'mono'
    window_s: float             # the smoother's lag, s
    max_obs_per_kf: int         # observations added per keyframe
    landmark_grid: int          # > 0: those observations spread over this many image cells per side
    marginalise_every_s: float  # batch marginalisation period (0: every keyframe)
    solver: str                 # 'schur' | 'isam2'


@dataclass
class VioState:
    """Navigation state of the body (= IMU) frame in the world frame (z up, gravity -z)."""

    stamp_ns: int
    p: np.ndarray                                   # (3,) position, m
    q_xyzw: np.ndarray                              # (4,) orientation body -> world
    v: np.ndarray                                   # (3,) velocity in world, m/s
    bg: np.ndarray = field(default_factory=lambda: np.zeros(3))   # gyro bias, rad/s
    ba: np.ndarray = field(default_factory=lambda: np.zeros(3))   # accelerometer bias, m/s^2
    is_keyframe: bool = False

    @property
    def R(self) -> np.ndarray:
        from scipy.spatial.transform import Rotation

        return Rotation.from_quat(self.q_xyzw).as_matrix()

    @property
    def T(self) -> np.ndarray:
        T = np.eye(4)
        T[:3, :3], T[:3, 3] = self.R, self.p
        return T


@dataclass(frozen=True)
class StateCovariance:
    """Marginal covariance of a keyframe state (:meth:`VioEstimator.state_covariance`).

    ``pose`` is gtsam's ``Pose3`` marginal: the covariance of the body-frame perturbation
    ``xi = (rotation xyz, position xyz)`` with ``T = T_hat * Exp(xi)``; ``velocity`` is in the world
    frame. ``R_wb`` is the estimate's orientation (body -> world) the body-frame blocks refer to."""

    stamp_ns: int
    R_wb: np.ndarray            # (3, 3)
    pose: np.ndarray            # (6, 6), body frame, (rotation, position)
    velocity: np.ndarray        # (3, 3), world frame
