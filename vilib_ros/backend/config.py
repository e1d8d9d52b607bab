"""Backend configuration (:class:`BackendConfig`, validated once by the estimator, and the options that
differ between stereo and mono resolved once for its mode: :class:`ModeSettings`) and the records it
outputs (:class:`VioState`, :class:`StateCovariance`). Each field of :class:`BackendConfig` carries its
help, range and choices (:func:`vilib_ros.params_meta.param`): the backend node declares its parameters
from them."""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from vilib_ros.params_meta import param

SOLVERS = ("schur", "isam2")
MODES = ("stereo", "mono", "auto")


@dataclass
class BackendConfig:
    # --- sliding window ---
    # solver 'schur' ends a landmark when its first state leaves: a longer window keeps it longer;
    # iSAM2's update time grows with the window
    window_s: float = field(default=2.0, metadata=param("the smoother's lag, seconds", range=(0.1, 600.0)))
    # the metric scale comes from the IMU alone: a longer window keeps more of it in the states being solved
    mono_window_s: float = field(default=4.0, metadata=param(
        "mono mode uses max(window_s, mono_window_s): scale needs it", range=(0.1, 600.0)))
    # the updates between batches do not re-eliminate the whole window
    marginalise_every_s: float = field(default=1.0, metadata=param(
        "old states leave the smoother in batches this often; the window then spans window_s .. window_s + "
        "this, s (0 = every keyframe)", range=(0.0, 60.0)))
    # in proportion to mono's longer window
    mono_marginalise_every_s: float = field(default=1.5, metadata=param(
        "mono mode's marginalise_every_s, s", range=(0.0, 60.0)))
    mode: str = field(default="auto", metadata=param(
        "'stereo' | 'mono' | 'auto' (stereo where the right camera is given: stereo:=true in the backend node)",
        choices=MODES))
    # --- keyframe selection ---
    kf_min_interval_s: float = field(default=0.08, metadata=param(
        "shortest time between keyframes, s", range=(0.001, 10.0)))
    kf_max_interval_s: float = field(default=0.4, metadata=param(
        "longest time between keyframes, s", range=(0.001, 60.0)))
    kf_parallax_px: float = field(default=12.0, metadata=param(
        "keyframe when the rotation-compensated median parallax to the last keyframe exceeds this, px",
        range=(0.0, 1000.0)))
    kf_track_fraction: float = field(default=0.65, metadata=param(
        "fewer of the last keyframe's tracks survive -> keyframe", range=(0.0, 1.0)))
    kf_min_tracks: int = field(default=30, metadata=param(
        "keyframe when fewer tracks than this are left", range=(0, 100000)))
    zero_velocity_updates: bool = field(default=True, metadata=param(
        "at rest: zero-velocity prior + no-motion pose factor"))
    still_parallax_px: float = field(default=1.5, metadata=param(
        "rest = median parallax below this AND a static IMU window", range=(0.0, 1000.0)))
    still_velocity_sigma: float = field(default=0.005, metadata=param(
        "velocity sigma of the zero-velocity prior at rest, m/s", range=(1e-06, 100.0)))
    # --- landmarks ---
    max_landmarks_per_kf: int = field(default=60, metadata=param(
        "observations added per keyframe (longest tracks first)", range=(1, 100000)))
    # each cell's longest track first, then each cell's second, ...
    landmark_grid: int = field(default=0, metadata=param(
        "> 0: the observations of a keyframe spread over a grid of this many cells per side, each cell's longest "
        "track first (0 = off)", range=(0, 1000)))
    # spread over the grid below, fewer observations are as accurate at less update time
    mono_max_landmarks_per_kf: int = field(default=45, metadata=param(
        "mono mode's max_landmarks_per_kf", range=(1, 100000)))
    # stereo leaves the grid off: it is less accurate there
    mono_landmark_grid: int = field(default=4, metadata=param("mono mode's landmark_grid", range=(0, 1000)))
    min_depth: float = field(default=0.3, metadata=param("nearest landmark depth accepted, m", range=(0.0, 1000.0)))
    max_depth: float = field(default=25.0, metadata=param(
        "farthest landmark depth accepted, m", range=(0.0, 100000.0)))
    min_disparity_px: float = field(default=1.0, metadata=param(
        "smallest stereo disparity for a landmark, px", range=(0.0, 1000.0)))
    mono_min_parallax_deg: float = field(default=1.5, metadata=param(
        "triangulation angle before a mono landmark is created", range=(0.0, 90.0)))
    pixel_sigma: float = field(default=1.0, metadata=param("reprojection noise sigma, px", range=(1e-06, 100.0)))
    landmark_prior_sigma: float = field(default=5.0, metadata=param(
        "weak landmark prior at creation, m (0 = none)", range=(0.0, 1000000.0)))
    # in stereo the prior only costs update time; mono needs it
    landmark_prior_stereo: bool = field(default=False, metadata=param(
        "stereo mode: new landmarks get the weak prior too (a stereo observation alone fixes the point)"))
    huber_k: float = field(default=1.345, metadata=param(
        "Huber threshold of the visual factors, in sigmas", range=(1e-06, 100.0)))
    chi2_stereo: float = field(default=11.34, metadata=param(
        "stereo outlier gate (99 % of chi2(3))", range=(0.0, 1000000.0)))
    chi2_mono: float = field(default=9.21, metadata=param(
        "mono outlier gate (99 % of chi2(2))", range=(0.0, 1000000.0)))
    max_outlier_count: int = field(default=10, metadata=param(
        "rejected observations before a track is blacklisted", range=(0, 1000000)))
    retriangulate_outliers: bool = field(default=True, metadata=param(
        "a rejected observation ends its landmark; the track starts a new one"))
    landmark_max_span_s: float = field(default=0.0, metadata=param(
        "a landmark older than this is ended and its track starts a new one (0 = never), s", range=(0.0, 600.0)))
    # --- IMU ---
    # The sensor.yaml densities are datasheet values of a sensor at rest; on a flying multicopter
    # rotor vibration makes the effective white noise many times larger, and the biases drift
    # faster (temperature, vibration); VINS-Fusion's EuRoC configuration inflates by 50-60x. With
    # the datasheet values the estimator trusts the IMU over exact stereo tracks.
    # imu_noise_measured: the white-noise density of the last imu_noise_window_s of samples (first
    # differences, robust) per keyframe interval, so a quiet sensor keeps its datasheet noise and a
    # vibrating one gets what it shows.
    imu_noise_measured: bool = field(default=True, metadata=param(
        "measure the IMU white-noise density from the stream"))
    imu_noise_scale: float = field(default=1.0, metadata=param(
        "fixed IMU white-noise multiplier where imu_noise_measured is false", range=(1e-06, 1000000.0)))
    imu_noise_window_s: float = field(default=1.0, metadata=param(
        "IMU samples the measured noise scale looks at, s", range=(0.05, 60.0)))
    imu_noise_scale_max: float = field(default=100.0, metadata=param(
        "bound of the measured IMU noise scale", range=(1.0, 1000000.0)))
    imu_walk_scale: float = field(default=5.0, metadata=param(
        "multiplies the IMU bias random walks", range=(1e-06, 1000000.0)))
    gravity: float = field(default=9.81, metadata=param("gravity magnitude, m/s^2", range=(0.0, 100.0)))
    imu_max_gap_s: float = field(default=0.1, metadata=param(
        "a longer hole between IMU samples is never integrated across, s", range=(0.001, 10.0)))
    # 2000 deg/s and 16 g: the ADIS16448's range
    imu_max_gyro: float = field(default=35.0, metadata=param(
        "IMU samples with a larger angular rate are rejected (sensor range), rad/s", range=(0.1, 1000.0)))
    imu_max_acc: float = field(default=160.0, metadata=param(
        "IMU samples with a larger acceleration are rejected (sensor range), m/s^2", range=(1.0, 10000.0)))
    # --- initialisation ---
    init_window_s: float = field(default=0.5, metadata=param(
        "IMU window of the static initialisation, s", range=(0.0, 60.0)))
    static_gyro_std: float = field(default=0.01, metadata=param(
        "rad/s, std of the 10 block means of the init window", range=(0.0, 100.0)))
    static_acc_std: float = field(default=0.15, metadata=param("m/s^2, std of the 10 block means", range=(0.0, 100.0)))
    static_gyro_mean: float = field(default=0.15, metadata=param(
        "rad/s (|mean gyro| at rest = the bias)", range=(0.0, 100.0)))
    dynamic_init_frames: int = field(default=20, metadata=param(
        "stereo: frames for the moving-start alignment", range=(2, 1000)))
    mono_init_window_s: float = field(default=2.0, metadata=param(
        "mono: window for the moving-start alignment", range=(0.0, 600.0)))
    # --- optimisation ---
    # larger relinearisation thresholds leave linearisation errors of the order of the accuracy (poses);
    # a larger one for the landmarks saves update time at some cost in accuracy on some sequences
    relinearize_threshold: float = field(default=0.01, metadata=param(
        "relinearisation threshold of poses, velocities and biases (iSAM2; the own smoother: of its inertial "
        "factors)", range=(0.0, 10.0)))
    relinearize_threshold_landmarks: float = field(default=0.01, metadata=param(
        "iSAM2 relinearisation threshold of landmarks, m", range=(0.0, 10.0)))
    relinearize_skip: int = field(default=1, metadata=param(
        "iSAM2 relinearises every this many updates", range=(1, 1000)))
    partial_relinearization_check: bool = field(default=False, metadata=param(
        "iSAM2 partial relinearisation check"))
    extra_updates: int = field(default=0, metadata=param("extra iSAM2 iterations per keyframe", range=(0, 100)))
    # 'schur': schur_smoother (a landmark leaves with the first state that saw it); 'isam2': isam2_smoother
    solver: str = field(default="schur", metadata=param(
        "stereo mode's smoother: our own Gauss-Newton with the landmarks eliminated (schur), or gtsam's iSAM2",
        choices=SOLVERS))
    # 'schur' is less accurate in mono
    mono_solver: str = field(default="isam2", metadata=param("mono mode's smoother", choices=SOLVERS))
    # > 0 is less accurate here
    schur_keep_landmarks: int = field(default=0, metadata=param(
        "own smoother's marginalisation: > 0, a landmark a leaving state saw goes on in the window from its "
        "estimate where at least this many of its observations are by remaining states (VINS-Mono's depth "
        "shift); 0, it leaves with that state", range=(0, 1000)))
    # isam2_smoother.RootedFixedLagSmoother: the newest state's covariance without a shortcut
    rooted_smoother: bool = field(default=True, metadata=param(
        "iSAM2 eliminates landmarks first and the newest state last (its covariance from the root clique); "
        "false: gtsam's IncrementalFixedLagSmoother"))
    # --- failure handling ---
    max_speed: float = field(default=30.0, metadata=param(
        "speed above which the estimate counts as diverged (reset), m/s", range=(0.0, 10000.0)))
    max_gyro_bias: float = field(default=0.3, metadata=param(
        "gyro bias above which the estimate counts as diverged, rad/s", range=(0.0, 100.0)))
    max_acc_bias: float = field(default=2.0, metadata=param(
        "accelerometer bias above which the estimate counts as diverged, m/s^2", range=(0.0, 100.0)))
    tracking_min_tracks: int = field(default=10, metadata=param(
        "a keyframe with fewer tracks is a tracking loss (counted, warned about; the IMU alone carries the "
        "state)", range=(1, 100000)))

    def validate(self) -> "BackendConfig":
        if self.solver not in SOLVERS or self.mono_solver not in SOLVERS:
            raise ValueError(f"solver and mono_solver must be 'isam2' or 'schur', got {self.solver!r} and "
                             f"{self.mono_solver!r}")
        if self.window_s <= 0:
            raise ValueError(f"window_s must be > 0, got {self.window_s}")
        if self.mode not in MODES:
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
