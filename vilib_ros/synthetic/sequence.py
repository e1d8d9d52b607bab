"""Synthetic visual-inertial sequences with exact ground truth, in the EuRoC ASL layout.

``SyntheticSequence(config)`` holds a textured room (:mod:`.scene`), a smooth analytic body
trajectory (:mod:`.trajectory`), EuRoC-like cameras (EuRoC cam0 intrinsics without distortion,
``T_BS`` of EuRoC's cam0; cam1 shifted by ``baseline`` along cam0's x axis, same orientation:
a rectified pair) and an IMU (the body frame) at 200 Hz:

    gyro = w_B(t) + b_g(t) + n_g,        acc = R_WB(t)^T (a_W(t) - g_W) + b_a(t) + n_a,

with ``g_W = (0, 0, -9.81)``, white noise ``n ~ N(0, sigma_c^2 * rate)`` and biases following a
random walk ``b_{i+1} = b_i + sigma_rw * sqrt(dt) * N(0, 1)`` (EuRoC's densities by default).
Everything is deterministic for a given seed (each frame's image noise has its own stream, so
parallel rendering gives the same files).

Imaging conditions (each off by default; :data:`CONDITIONS` names the accuracy benchmark's sets):

* ``lens='euroc'``: EuRoC's radial-tangential coefficients (cam0's for cam0, cam1's for cam1; the
  intrinsics stay), the image rendered through the lens: each pixel's ray is the camera model's
  undistortion of the pixel (:class:`.scene.RayGrid`), not a warp of a pinhole image;
  ``sensor.yaml`` carries the model and the coefficients;
* ``exposure_s``: motion blur: the image is the mean of sub-frames rendered at the true poses over
  ``[t - exposure_s / 2, t + exposure_s / 2]`` (the stamp is the middle of the exposure), as many as
  keep consecutive sub-frames within ``blur_step_px`` of each other in the image;
* ``shot_noise_e_per_grey``: photon shot noise (Poisson in electrons, this many per grey level) on
  the exposed intensity, with ``image_noise_sigma`` as the Gaussian read noise; then rounded and
  clipped to 8 bits;
* ``exposure_steps_s``: auto-exposure steps: the global gain changes in steps at random times
  (exponential intervals of this mean), each by 10 % up to ``exposure_step_max``, kept within [0.6, 1.6];
* ``vignetting``: radial falloff ``1 - vignetting * (r / r_corner)^2`` (r from the principal point);
* ``blank_intervals_s``: frames in these (start, end) spans (seconds from the start) are black (a
  covered lens): no texture, no tracks;
* ``rate_hz``: the camera rate (20, 10, 20/3 Hz, ...; the IMU keeps ``imu_rate_hz``).

An image is the radiance (rendered through the lens where there is one) averaged over the exposure,
times the vignetting falloff, times the photometric gain plus the offset of
:meth:`SyntheticSequence.photometric` (illumination, exposure steps), with shot and then read noise,
rounded and clipped to 8 bits (:mod:`.imaging`).

Recorded motion (``recorded_groundtruth``, a TUM file of body poses such as EuRoC's
``V101_groundtruth_tum.txt``): the trajectory is a spline through the recorded poses
(:mod:`.recorded`), the frames are rendered at the recorded stamps (every ``rate_hz`` frame
of them), the room is sized around the trajectory (at least ``recorded_margin_m`` from its
bounding box to every wall, boxes outside it), and with ``recorded_imu`` (an ASL ``imu0``
folder) the IMU is the real sensor's; without it the IMU is synthesised from the spline as above.
"""
from __future__ import annotations

import logging
import os
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from ..camera import CameraModel, euroc_cam0, euroc_cam1
from ..datasets.common import EUROC_CAM_HEADER, EUROC_IMU_HEADER, EUROC_IMU_NOISE, Groundtruth
from .imaging import auto_exposure_gains, image_motion_px, sensor_noise, subframe_offsets_ns, vignette_falloff
from .scene import NEAR, RayGrid, Scene, build_room
from .trajectory import G_W, Trajectory

log = logging.getLogger(__name__)

PRESETS = {
    "default": {"speed": 0.5, "angular_rate": 0.5},
    "fast_rotation": {"speed": 0.6, "angular_rate": 3.0},
    "slow": {"speed": 0.2, "angular_rate": 0.2},
}

LENSES = ("pinhole", "euroc")

#: Lenses, motion blur, sensor noise, auto-exposure steps and vignetting together (the accuracy
#: benchmark's degraded images, ``vilib-ros generate --condition blur``).
DEGRADED = {"lens": "euroc", "exposure_s": 0.008, "shot_noise_e_per_grey": 10.0, "image_noise_sigma": 2.0,
            "exposure_steps_s": 4.0, "vignetting": 0.3}

#: Named imaging conditions: SequenceConfig fields over the defaults.
CONDITIONS = {
    "clean": {},
    "distort": {"lens": "euroc"},
    "blur": dict(DEGRADED),
    "blur20": {**DEGRADED, "exposure_s": 0.020},
    "10hz": {**DEGRADED, "rate_hz": 10.0},
    "6.7hz": {**DEGRADED, "rate_hz": 20.0 / 3.0},
}


@dataclass
class SequenceConfig:
    duration_s: float = 10.0
    rate_hz: float = 20.0
    imu_rate_hz: float = 200.0
    preset: str = "default"            # 'default' | 'fast_rotation' | 'slow'
    speed: float | None = None         # RMS body speed (long-run), m/s (None: from the preset)
    angular_rate: float | None = None  # RMS body angular rate (long-run), rad/s (None: from the preset)
    stereo: bool = True
    baseline: float = 0.11             # metres, along cam0's x axis
    seed: int = 0
    width: int = 752
    height: int = 480
    image_noise_sigma: float = 1.0     # grey levels, Gaussian per pixel
    illumination: bool = False         # global gain/offset varying over time
    gain_amplitude: float = 0.2        # gain(t) = 1 + A sin(2 pi t / P)
    offset_amplitude: float = 12.0     # offset(t) = B sin(2 pi t / P + 1.3), grey levels
    illumination_period_s: float = 6.0
    imu_noise: bool = True             # white noise on gyro and accelerometer
    imu_bias_walk: bool = True         # bias random walk
    initial_bias: bool = True          # random initial biases (else zero)
    initial_bias_gyro_sigma: float = 0.01   # rad/s
    initial_bias_acc_sigma: float = 0.05    # m/s^2
    gyroscope_noise_density: float = EUROC_IMU_NOISE["gyroscope_noise_density"]
    gyroscope_random_walk: float = EUROC_IMU_NOISE["gyroscope_random_walk"]
    accelerometer_noise_density: float = EUROC_IMU_NOISE["accelerometer_noise_density"]
    accelerometer_random_walk: float = EUROC_IMU_NOISE["accelerometer_random_walk"]
    room_size: tuple = (8.0, 6.0, 3.0)
    n_boxes: int = 6
    textures: str = "skimage"          # 'skimage' | 'procedural'
    start_ns: int = 1_500_000_000_000_000_000
    name: str = "synthetic"
    recorded_groundtruth: str | None = None   # TUM body poses: recorded motion instead of the analytic one
    recorded_imu: str | None = None           # ASL imu0 folder or data.csv: the real IMU (with recorded motion)
    recorded_start_s: float = 0.0             # where in the recording the sequence starts
    recorded_margin_m: float = 2.0            # room walls at least this far from the trajectory's bounding box
    lens: str = "pinhole"              # 'pinhole' | 'euroc': EuRoC's radial-tangential coefficients, rendered
                                       # through the lens
    exposure_s: float = 0.0            # exposure time: motion blur over it, centred on the stamp (0 = none)
    blur_step_px: float = 0.5          # a blurred frame's sub-frames lie at most this far apart in the image
    shot_noise_e_per_grey: float = 0.0  # photon shot noise, electrons per grey level (0 = none); the read
                                       # noise is image_noise_sigma
    exposure_steps_s: float = 0.0      # auto-exposure: a global gain step every this many seconds on average
                                       # (0 = none)
    exposure_step_max: float = 0.3     # largest relative gain change of one step
    vignetting: float = 0.0            # brightness lost at the image corners (radial, quadratic in r)
    blank_intervals_s: tuple = ()      # (start, end) spans, seconds from the start: black frames there

    def __post_init__(self):
        if self.preset not in PRESETS:
            raise ValueError(f"preset must be one of {sorted(PRESETS)}, got {self.preset!r}")
        p = PRESETS[self.preset]
        if self.speed is None:
            self.speed = p["speed"]
        if self.angular_rate is None:
            self.angular_rate = p["angular_rate"]
        self.room_size = tuple(float(v) for v in self.room_size)
        try:
            self.blank_intervals_s = tuple((float(a), float(b)) for a, b in self.blank_intervals_s)
        except (TypeError, ValueError):
            raise ValueError(f"blank_intervals_s must be (start, end) pairs of seconds, got "
                             f"{self.blank_intervals_s!r}") from None
        self.validate()

    def validate(self) -> None:
        def pos(name):
            if not getattr(self, name) > 0:
                raise ValueError(f"{name} must be > 0, got {getattr(self, name)!r}")

        for n in ("duration_s", "rate_hz", "imu_rate_hz", "width", "height", "baseline", "illumination_period_s"):
            pos(n)
        for n in ("speed", "angular_rate", "image_noise_sigma", "gain_amplitude", "offset_amplitude",
                  "gyroscope_noise_density", "gyroscope_random_walk", "accelerometer_noise_density",
                  "accelerometer_random_walk", "initial_bias_gyro_sigma", "initial_bias_acc_sigma"):
            if getattr(self, n) < 0:
                raise ValueError(f"{n} must be >= 0, got {getattr(self, n)!r}")
        if self.gain_amplitude >= 1:
            raise ValueError("gain_amplitude must be < 1")
        if self.imu_rate_hz < self.rate_hz:
            raise ValueError("imu_rate_hz must be >= rate_hz")
        if abs(1e9 / self.rate_hz - round(1e9 / self.rate_hz)) > 1e-6 or abs(1e9 / self.imu_rate_hz - round(1e9 / self.imu_rate_hz)) > 1e-6:
            raise ValueError(f"rate_hz and imu_rate_hz must give whole-nanosecond periods, got {self.rate_hz!r} "
                             f"and {self.imu_rate_hz!r} (6.7 Hz is 20/3: a 150 ms period)")
        if self.textures not in ("skimage", "procedural"):
            raise ValueError(f"textures must be 'skimage' or 'procedural', got {self.textures!r}")
        L, W, H = self.room_size
        if L < 5 or W < 4 or H < 2.5:
            raise ValueError(f"room_size must be at least 5 x 4 x 2.5 m, got {self.room_size}")
        if self.n_boxes < 0:
            raise ValueError("n_boxes must be >= 0")
        if self.recorded_imu is not None and self.recorded_groundtruth is None:
            raise ValueError("recorded_imu needs recorded_groundtruth (the IMU belongs to a recorded motion)")
        if self.recorded_start_s < 0 or self.recorded_margin_m < 0.5:
            raise ValueError("recorded_start_s must be >= 0 and recorded_margin_m >= 0.5")
        if self.lens not in LENSES:
            raise ValueError(f"lens must be one of {LENSES}, got {self.lens!r}")
        for n in ("exposure_s", "shot_noise_e_per_grey", "exposure_steps_s", "exposure_step_max"):
            if not getattr(self, n) >= 0:
                raise ValueError(f"{n} must be >= 0, got {getattr(self, n)!r}")
        if self.exposure_s >= 1.0 / self.rate_hz:
            raise ValueError(f"exposure_s ({self.exposure_s}) must be shorter than the frame period "
                             f"({1.0 / self.rate_hz:.4g} s)")
        if not self.blur_step_px > 0:
            raise ValueError(f"blur_step_px must be > 0, got {self.blur_step_px!r}")
        if not 0 <= self.vignetting < 1:
            raise ValueError(f"vignetting must be in [0, 1), got {self.vignetting!r}")
        if any(not (np.isfinite(a) and np.isfinite(b) and a < b) for a, b in self.blank_intervals_s):
            raise ValueError(f"blank_intervals_s must be (start, end) pairs with start < end, got "
                             f"{self.blank_intervals_s!r}")


def _cameras(cfg: SequenceConfig) -> list[CameraModel]:
    """EuRoC cam0's intrinsics (scaled to the image size) and ``T_BS``; cam1 ``baseline`` along cam0's x
    axis, same orientation; the lens: none, or EuRoC's radial-tangential coefficients per camera."""
    base = euroc_cam0()
    sx, sy = cfg.width / base.width, cfg.height / base.height
    lens = [("none", np.zeros(4))] * 2
    if cfg.lens == "euroc":
        lens = [("radial-tangential", euroc_cam0().distortion), ("radial-tangential", euroc_cam1().distortion)]
    cams = [CameraModel(cfg.width, cfg.height, base.fx * sx, base.fy * sy, base.cx * sx, base.cy * sy,
                        lens[0][0], lens[0][1].copy(), base.T_BS.copy())]
    if cfg.stereo:
        T_01 = np.eye(4)
        T_01[0, 3] = cfg.baseline
        cams.append(CameraModel(cfg.width, cfg.height, base.fx * sx, base.fy * sy, base.cx * sx,
                                base.cy * sy, lens[1][0], lens[1][1].copy(), base.T_BS @ T_01))
    return cams


class SyntheticSequence:
    def __init__(self, config: SequenceConfig | None = None):
        self.config = cfg = config or SequenceConfig()
        self.frame_period_ns = int(round(1e9 / cfg.rate_hz))
        self.imu_period_ns = int(round(1e9 / cfg.imu_rate_hz))
        self.start_ns = cfg.start_ns
        self._recorded_imu = None
        if cfg.recorded_groundtruth is not None:
            from .recorded import recorded_motion

            rec = recorded_motion(cfg, self.frame_period_ns)
            self.start_ns, self.frame_stamps_ns, self.trajectory = rec.start_ns, rec.frame_stamps_ns, rec.trajectory
            self.room_size, self.scene, self._recorded_imu = rec.room_size, rec.scene, rec.imu
        else:
            L, W, H = self.room_size = cfg.room_size
            self.scene: Scene = build_room(np.random.default_rng([cfg.seed, 1]), cfg.room_size, cfg.n_boxes,
                                           use_skimage=cfg.textures == "skimage",
                                           keep_out=(L / 2 - 1.9, W / 2 - 1.4))
            # Trajectory box keeps >= 0.5 m from the boxes and >= 0.6 m from floor and ceiling.
            extent = (L / 2 - 2.4, W / 2 - 1.9, min(0.45, H / 2 - 0.9))
            self.trajectory = Trajectory(np.random.default_rng([cfg.seed, 2]), center=(0.0, 0.0, H / 2),
                                         extent=extent, speed=cfg.speed, angular_rate=cfg.angular_rate,
                                         yaw0=float(np.random.default_rng([cfg.seed, 5]).uniform(-np.pi, np.pi)))
            n = int(np.floor(cfg.duration_s * cfg.rate_hz + 1e-9)) + 1
            self.frame_stamps_ns = cfg.start_ns + self.frame_period_ns * np.arange(n, dtype=np.int64)
        self._cams = _cameras(cfg)
        self._imu = None
        self._ray_grids: dict = {}          # camera -> RayGrid (lens 'euroc')
        self._vignettes: dict = {}          # camera -> falloff image (vignetting)
        self._exposure_gains = None         # per frame (exposure_steps_s)

    # ------------------------------------------------------------------ geometry
    @property
    def num_cameras(self) -> int:
        return len(self._cams)

    @property
    def num_frames(self) -> int:
        return int(self.frame_stamps_ns.shape[0])

    def camera(self, cam: int = 0) -> CameraModel:
        if not 0 <= cam < len(self._cams):
            raise ValueError(f"camera index {cam} out of range ({len(self._cams)} cameras)")
        c = self._cams[cam]
        return CameraModel(c.width, c.height, c.fx, c.fy, c.cx, c.cy, c.distortion_model, c.distortion.copy(), c.T_BS.copy())

    def _t(self, t_ns) -> np.ndarray:
        return (np.asarray(t_ns, dtype=np.int64) - self.start_ns).astype(np.float64) * 1e-9

    def pose_wb(self, t_ns: int) -> np.ndarray:
        s = self.trajectory.sample(self._t(t_ns))
        T = np.eye(4)
        T[:3, :3] = s.R[0]
        T[:3, 3] = s.p[0]
        return T

    def pose_wc(self, k: int, cam: int = 0) -> np.ndarray:
        return self.pose_wb(int(self.frame_stamps_ns[k])) @ self._cams[cam].T_BS

    def photometric(self, k: int) -> tuple[float, float]:
        """(gain, offset) applied to frame k: ``I = gain * I_scene + offset`` (before noise): the
        illumination's and the auto-exposure steps' (:meth:`exposure_gain`)."""
        c = self.config
        step = self.exposure_gain(k) if c.exposure_steps_s > 0 else 1.0
        if not c.illumination:
            return step, 0.0
        t = float(self._t(self.frame_stamps_ns[k]))
        ph = 2 * np.pi * t / c.illumination_period_s
        return (1.0 + c.gain_amplitude * np.sin(ph)) * step, c.offset_amplitude * np.sin(ph + 1.3)

    def exposure_gain(self, k: int) -> float:
        """The auto-exposure gain of frame k (1 without ``exposure_steps_s``;
        :func:`.imaging.auto_exposure_gains`)."""
        c = self.config
        if c.exposure_steps_s <= 0:
            return 1.0
        if self._exposure_gains is None:
            self._exposure_gains = auto_exposure_gains(self._t(self.frame_stamps_ns), c.exposure_steps_s,
                                                       c.exposure_step_max, np.random.default_rng([c.seed, 6]))
        return float(self._exposure_gains[k])

    def is_blank(self, k: int) -> bool:
        """Whether frame k lies in one of ``blank_intervals_s`` (a black frame)."""
        spans = self.config.blank_intervals_s
        if not spans:
            return False
        t = float(self._t(self.frame_stamps_ns[k]))
        return any(a <= t < b for a, b in spans)

    # ------------------------------------------------------------------ images
    def render(self, k: int, cam: int = 0, noise: bool = True) -> tuple[np.ndarray, np.ndarray]:
        """Frame ``k`` of camera ``cam``: (uint8 HxW image, float32 HxW camera depth z in metres at the
        stamp; 0 where no surface is seen, everywhere in a blank frame)."""
        if not 0 <= k < self.num_frames:
            raise IndexError(f"frame {k} out of range ({self.num_frames} frames)")
        cfg = self.config
        c = self._cams[cam] if 0 <= cam < len(self._cams) else self.camera(cam)
        if self.is_blank(k):
            img = np.zeros((c.height, c.width), np.float32)
            depth = np.zeros((c.height, c.width), np.float32)
        else:
            T = self.pose_wc(k, cam)
            img, depth = self._view(T, cam)
            if cfg.exposure_s > 0:
                img = self._exposure(k, cam, img, depth)
            depth[~np.isfinite(depth)] = 0.0
            if cfg.vignetting > 0:
                img = img * self.vignette(cam)
        gain, offset = self.photometric(k)
        if gain != 1.0 or offset != 0.0:
            img = img * np.float32(gain) + np.float32(offset)
        if noise and (cfg.image_noise_sigma > 0 or cfg.shot_noise_e_per_grey > 0):
            img = sensor_noise(img, np.random.default_rng([cfg.seed, 4, k, cam]), cfg.shot_noise_e_per_grey,
                               cfg.image_noise_sigma)
        return np.clip(np.rint(img), 0, 255).astype(np.uint8), depth

    def _view(self, T_wc: np.ndarray, cam: int) -> tuple[np.ndarray, np.ndarray]:
        """Radiance (float32) and depth (inf where empty) of camera ``cam`` at the pose ``T_wc``: a
        pinhole render, or through the lens (each pixel's own ray)."""
        c = self._cams[cam]
        if c.distortion_model == "none":
            return self.scene.render(c.K, T_wc[:3, :3], T_wc[:3, 3], c.width, c.height)
        return self.scene.render_rays(self.ray_grid(cam), T_wc[:3, :3], T_wc[:3, 3])

    def ray_grid(self, cam: int = 0) -> RayGrid:
        """Camera ``cam``'s per-pixel rays (the camera model's undistortion of every pixel; built once)."""
        if cam not in self._ray_grids:
            self._ray_grids[cam] = RayGrid.of_camera(self._cams[cam])
        return self._ray_grids[cam]

    def vignette(self, cam: int = 0) -> np.ndarray:
        """Camera ``cam``'s vignetting falloff (float32 HxW, :func:`.imaging.vignette_falloff`; built once)."""
        if cam not in self._vignettes:
            self._vignettes[cam] = vignette_falloff(self._cams[cam], self.config.vignetting)
        return self._vignettes[cam]

    def exposure_offsets_ns(self, k: int, cam: int = 0, depth: np.ndarray | None = None) -> np.ndarray:
        """Sub-frame times of frame k relative to its stamp (ns, :func:`.imaging.subframe_offsets_ns`) for the
        largest image motion over the exposure of a 9 x 9 grid of the frame's visible points (their depth
        from ``depth``, the frame's, else ray cast)."""
        cfg = self.config
        e = cfg.exposure_s
        if e <= 0:
            return np.zeros(1, np.int64)
        c = self._cams[cam]
        t = int(self.frame_stamps_ns[k])
        T0 = self.pose_wc(k, cam)
        gu, gv = np.meshgrid(np.linspace(8, c.width - 9, 9), np.linspace(8, c.height - 9, 9))
        uv = np.column_stack([gu.ravel(), gv.ravel()])
        if depth is None:
            lam = self.depth_at(k, uv, cam)
        else:
            lam = depth[np.rint(uv[:, 1]).astype(int), np.rint(uv[:, 0]).astype(int)].astype(np.float64)
        ok = np.isfinite(lam) & (lam > NEAR)
        motion = 0.0
        if ok.any():
            X = T0[:3, 3] + lam[ok, None] * self._rays(T0, cam, uv[ok])
            start, end = (self.pose_wb(t + int(round(dt * 1e9))) @ c.T_BS for dt in (-e / 2, e / 2))
            motion = image_motion_px(c, X, start, end)
        return subframe_offsets_ns(motion, e, cfg.blur_step_px)

    def _exposure(self, k: int, cam: int, centre: np.ndarray, depth: np.ndarray) -> np.ndarray:
        """Motion blur: the mean radiance of the sub-frames (:meth:`exposure_offsets_ns`) at the true
        poses; ``centre`` is the render at the stamp (the middle sub-frame)."""
        offsets = self.exposure_offsets_ns(k, cam, depth)
        if len(offsets) == 1:
            return centre
        t = int(self.frame_stamps_ns[k])
        T_BS = self._cams[cam].T_BS
        acc = centre.astype(np.float32).copy()
        for o in offsets:
            if o == 0:
                continue
            img, _ = self._view(self.pose_wb(t + int(o)) @ T_BS, cam)
            acc += img
        return acc / np.float32(len(offsets))

    def _rays(self, T_wc: np.ndarray, cam: int, uv: np.ndarray) -> np.ndarray:
        c = self._cams[cam]
        uv = np.asarray(uv, float).reshape(-1, 2)
        if c.distortion_model != "none":
            xy1 = np.column_stack([c.undistort(uv), np.ones(len(uv))])
        else:
            xy1 = np.column_stack([(uv[:, 0] - c.cx) / c.fx, (uv[:, 1] - c.cy) / c.fy, np.ones(len(uv))])
        return xy1 @ T_wc[:3, :3].T

    def depth_at(self, k: int, uv: np.ndarray, cam: int = 0) -> np.ndarray:
        """Exact camera depth z (metres) at sub-pixel points ``uv`` (N,2) of frame k (ray casting)."""
        T = self.pose_wc(k, cam)
        lam, _ = self.scene.raycast(T[:3, 3], self._rays(T, cam, uv))
        return lam

    def gt_flow(self, k0: int, k1: int, uv: np.ndarray, cam: int = 0, cam_to: int | None = None):
        """Where points ``uv`` (N,2) of frame k0 (camera ``cam``) are in frame k1 (camera ``cam_to``,
        default the same camera): ``(uv1 (N,2), visible (N,))``. ``visible`` is False where the
        surface point is behind the camera, outside the image or occluded in frame k1.
        Exact: ray casting against the scene geometry with the true poses."""
        cam_to = cam if cam_to is None else cam_to
        uv = np.asarray(uv, float).reshape(-1, 2)
        T0 = self.pose_wc(k0, cam)
        lam, _ = self.scene.raycast(T0[:3, 3], self._rays(T0, cam, uv))
        hit = np.isfinite(lam)
        X = T0[:3, 3] + np.where(hit, lam, 0.0)[:, None] * self._rays(T0, cam, uv)
        T1 = self.pose_wc(k1, cam_to)
        Xc = (X - T1[:3, 3]) @ T1[:3, :3]
        c1 = self._cams[cam_to]
        z = Xc[:, 2]
        front = hit & (z > NEAR)
        zs = np.where(front, z, 1.0)
        if c1.distortion_model != "none":
            uv1 = c1.project(np.column_stack([Xc[:, :2], zs]))
        else:
            uv1 = np.column_stack([c1.fx * Xc[:, 0] / zs + c1.cx, c1.fy * Xc[:, 1] / zs + c1.cy])
        uv1[~front] = np.nan
        inside = front & (uv1[:, 0] >= 0) & (uv1[:, 0] <= c1.width - 1) & (uv1[:, 1] >= 0) & (uv1[:, 1] <= c1.height - 1)
        visible = inside.copy()
        if inside.any():
            lam1, _ = self.scene.raycast(T1[:3, 3], self._rays(T1, cam_to, uv1[inside]))
            visible[inside] = lam1 >= z[inside] * (1 - 1e-6) - 1e-9
        return uv1, visible

    # ------------------------------------------------------------------ IMU and ground truth
    @property
    def imu_stamps_ns(self) -> np.ndarray:
        if self._recorded_imu is not None:
            return self._recorded_imu[0].copy()
        c = self.config
        if c.recorded_groundtruth is not None:
            m = int((self.frame_stamps_ns[-1] - self.start_ns) // self.imu_period_ns) + 1
        else:
            m = int(np.floor(c.duration_s * c.imu_rate_hz + 1e-9)) + 1
        return self.start_ns + self.imu_period_ns * np.arange(m, dtype=np.int64)

    def imu_truth(self, t_ns: np.ndarray | None = None):
        """Noise- and bias-free (gyro (N,3), specific force (N,3)) in the body/IMU frame."""
        t_ns = self.imu_stamps_ns if t_ns is None else np.asarray(t_ns, np.int64)
        s = self.trajectory.sample(self._t(t_ns))
        f = np.einsum("nji,nj->ni", s.R, s.a - G_W)
        return s.w_body, f

    def imu(self):
        """``(stamps_ns (M,), data (M,6) [wx wy wz ax ay az], true_bg (M,3), true_ba (M,3))``
        (recorded IMU: the biases are unknown, NaN)."""
        if self._imu is None and self._recorded_imu is not None:
            t, data = self._recorded_imu
            nan = np.full((len(t), 3), np.nan)
            self._imu = (t, data, nan, nan.copy())
        if self._imu is None:
            c = self.config
            t = self.imu_stamps_ns
            m = t.shape[0]
            w, f = self.imu_truth(t)
            rng = np.random.default_rng([c.seed, 3])
            dt = self.imu_period_ns * 1e-9
            bg0 = rng.normal(0, c.initial_bias_gyro_sigma, 3) if c.initial_bias else np.zeros(3)
            ba0 = rng.normal(0, c.initial_bias_acc_sigma, 3) if c.initial_bias else np.zeros(3)
            steps_g = rng.standard_normal((m, 3))
            steps_a = rng.standard_normal((m, 3))
            white_g = rng.standard_normal((m, 3))
            white_a = rng.standard_normal((m, 3))
            bg = np.tile(bg0, (m, 1))
            ba = np.tile(ba0, (m, 1))
            if c.imu_bias_walk and m > 1:
                bg[1:] += np.cumsum(steps_g[:-1] * c.gyroscope_random_walk * np.sqrt(dt), axis=0)
                ba[1:] += np.cumsum(steps_a[:-1] * c.accelerometer_random_walk * np.sqrt(dt), axis=0)
            data = np.concatenate([w + bg, f + ba], axis=1)
            if c.imu_noise:
                data[:, :3] += white_g * c.gyroscope_noise_density / np.sqrt(dt)
                data[:, 3:] += white_a * c.accelerometer_noise_density / np.sqrt(dt)
            self._imu = (t, data, bg, ba)
        t, data, bg, ba = self._imu
        return t.copy(), data.copy(), bg.copy(), ba.copy()

    def groundtruth(self) -> Groundtruth:
        """Body poses, world velocity and the true biases at every IMU stamp."""
        from scipy.spatial.transform import Rotation

        t, _, bg, ba = self.imu()
        if self.config.recorded_groundtruth is not None:
            t = t[(t >= self.frame_stamps_ns[0]) & (t <= self.frame_stamps_ns[-1])]
            t = np.union1d(t, self.frame_stamps_ns)          # exact recorded poses at every frame
            bg = ba = None
        s = self.trajectory.sample(self._t(t))
        return Groundtruth(t, s.p, Rotation.from_matrix(s.R).as_quat(), s.v, bg, ba)

    def imu_noise_dict(self) -> dict:
        c = self.config
        return {"gyroscope_noise_density": c.gyroscope_noise_density, "gyroscope_random_walk": c.gyroscope_random_walk,
                "accelerometer_noise_density": c.accelerometer_noise_density,
                "accelerometer_random_walk": c.accelerometer_random_walk, "rate_hz": c.imu_rate_hz}


# ---------------------------------------------------------------------------- writing

_WORKER_SEQ: SyntheticSequence | None = None
_WORKER_ARGS: dict = {}


def _yaml_dump(d: dict) -> str:
    import yaml

    return "%YAML:1.0\n" + yaml.safe_dump(d, default_flow_style=None, sort_keys=False, width=200)


def _write_frame(seq: SyntheticSequence, mav: Path, k: int, depth: bool) -> None:
    import cv2

    ts = int(seq.frame_stamps_ns[k])
    for c in range(seq.num_cameras):
        img, z = seq.render(k, c)
        p = mav / f"cam{c}" / "data" / f"{ts}.png"
        if not cv2.imwrite(str(p), img, [cv2.IMWRITE_PNG_COMPRESSION, 1]):
            raise OSError(f"cannot write {p}")
        if depth:
            mm = np.clip(np.rint(z * 1000.0), 0, 65535).astype(np.uint16)
            cv2.imwrite(str(mav / f"cam{c}" / "depth" / f"{ts}.png"), mm, [cv2.IMWRITE_PNG_COMPRESSION, 1])


def _worker_init(config: "SequenceConfig", mav: str, depth: bool) -> None:
    """Spawned worker: rebuild the (deterministic) sequence from its config.

    'spawn', not 'fork': a forked child inherits OpenCV's thread pool in whatever state the
    parent left it and can deadlock in its first cv2 call."""
    global _WORKER_SEQ, _WORKER_ARGS
    import cv2

    cv2.setNumThreads(1)
    _WORKER_SEQ = SyntheticSequence(config)
    _WORKER_ARGS = {"mav": Path(mav), "depth": depth}


def _worker_frame(k: int) -> int:
    _write_frame(_WORKER_SEQ, _WORKER_ARGS["mav"], k, _WORKER_ARGS["depth"])
    return k


def generate_sequence(out_dir: str | Path, config: SequenceConfig | None = None, progress: bool = True,
                      bag: str | None = None, depth: bool = False, workers: int | None = None,
                      bag_storage: str = "sqlite3", overwrite: bool = False) -> Path:
    """Render ``config`` into ``out_dir`` in the EuRoC ASL layout; returns ``out_dir``.

    Writes ``mav0/cam{c}/data/<ts>.png``, ``data.csv``, ``sensor.yaml`` (intrinsics, ``T_BS``,
    radial-tangential: zero coefficients, or EuRoC's with ``lens='euroc'``), ``mav0/imu0/data.csv`` +
    ``sensor.yaml`` (noise densities), ``mav0/state_groundtruth_estimate0/data.csv`` (EuRoC columns, at IMU rate, with
    the true biases), ``mav0/body.yaml``, ``synthetic.yaml`` (the config); with ``depth=True``
    also ``mav0/cam{c}/depth/<ts>.png`` (uint16 millimetres, 0 = no surface); with
    ``bag='ros1'|'ros2'`` also ``<out_dir>/<name>.bag`` or ``<out_dir>/<name>_ros2/``.
    ``workers`` processes render frames in parallel (default: the CPU count).
    """
    import shutil

    import yaml
    from tqdm import tqdm

    config = config or SequenceConfig()
    if bag not in (None, "ros1", "ros2"):
        raise ValueError(f"bag must be None, 'ros1' or 'ros2', got {bag!r}")
    out = Path(out_dir)
    mav = out / "mav0"
    if mav.exists():
        if not overwrite:
            raise FileExistsError(f"output exists: {mav} (use overwrite=True / --overwrite)")
        shutil.rmtree(mav)
    seq = SyntheticSequence(config)
    for c in range(seq.num_cameras):
        (mav / f"cam{c}" / "data").mkdir(parents=True)
        if depth:
            (mav / f"cam{c}" / "depth").mkdir(parents=True)
        d = seq.camera(c).to_euroc_dict()
        d["rate_hz"] = float(config.rate_hz)
        d["comment"] = (f"vilib_ros synthetic cam{c} (pinhole, no distortion)" if config.lens == "pinhole" else
                        f"vilib_ros synthetic cam{c} (EuRoC cam{c}'s radial-tangential lens, rendered through it)")
        (mav / f"cam{c}" / "sensor.yaml").write_text(_yaml_dump(d))
        lines = [EUROC_CAM_HEADER] + [f"{int(t)},{int(t)}.png" for t in seq.frame_stamps_ns]
        (mav / f"cam{c}" / "data.csv").write_text("\n".join(lines) + "\n")
    (mav / "imu0").mkdir(parents=True)
    imu_yaml = {"sensor_type": "imu", "comment": "vilib_ros synthetic IMU (the body frame)",
                "T_BS": {"cols": 4, "rows": 4, "data": [float(v) for v in np.eye(4).ravel()]},
                "rate_hz": float(config.imu_rate_hz)}
    imu_yaml.update({k: float(v) for k, v in seq.imu_noise_dict().items() if k != "rate_hz"})
    (mav / "imu0" / "sensor.yaml").write_text(_yaml_dump(imu_yaml))
    t, data, _, _ = seq.imu()
    with open(mav / "imu0" / "data.csv", "w") as f:
        f.write(EUROC_IMU_HEADER + "\n")
        for ti, row in zip(t, data):
            f.write(f"{int(ti)}," + ",".join(f"{x:.17g}" for x in row) + "\n")
    (mav / "state_groundtruth_estimate0").mkdir(parents=True)
    gt = seq.groundtruth()
    gt.write_euroc_csv(mav / "state_groundtruth_estimate0" / "data.csv")
    gt.write_tum(out / "groundtruth_tum.txt")  # for evo: `evo_ape tum groundtruth_tum.txt est.txt`
    (mav / "state_groundtruth_estimate0" / "sensor.yaml").write_text(_yaml_dump(
        {"sensor_type": "visual-inertial", "comment": "exact synthetic ground truth of the body (IMU) frame"}))
    (mav / "body.yaml").write_text(_yaml_dump({"comment": "vilib_ros synthetic body (= IMU frame)"}))
    cfg = asdict(config)
    cfg["room_size"] = list(cfg["room_size"])
    cfg["blank_intervals_s"] = [list(v) for v in cfg["blank_intervals_s"]]
    (out / "synthetic.yaml").write_text(yaml.safe_dump(cfg, sort_keys=False))

    n = seq.num_frames
    workers = max(1, min(workers or os.cpu_count() or 1, n))
    bar = tqdm(total=n, desc=f"render {config.name}", unit="frame", disable=not progress)
    try:
        if workers == 1:
            for k in range(n):
                _write_frame(seq, mav, k, depth)
                bar.update(1)
        else:
            import multiprocessing as mp
            from concurrent.futures import ProcessPoolExecutor

            ctx = mp.get_context("spawn")
            with ProcessPoolExecutor(workers, mp_context=ctx, initializer=_worker_init,
                                     initargs=(config, str(mav), depth)) as ex:
                for _ in ex.map(_worker_frame, range(n), chunksize=2):
                    bar.update(1)
    finally:
        bar.close()
    if bag is not None:
        from ..datasets.bag_writer import write_bag

        target = out / (f"{config.name}.bag" if bag == "ros1" else f"{config.name}_ros2")
        write_bag(out, target, kind=bag, storage=bag_storage, overwrite=overwrite)
    return out


def ensure_generated(ds_path: str | Path, duration_s: float, who: str = "vilib-ros") -> Path:
    """The default synthetic stereo sequence in ``ds_path`` (generated once, reused after)."""
    import sys

    ds_path = Path(ds_path)
    if not (ds_path / "mav0").is_dir():
        print(f"{who}: generating a {duration_s:g} s synthetic stereo sequence in {ds_path}", file=sys.stderr)
        # rendering workers are spawned processes that re-import __main__; from an
        # interactive or ``python -c`` session render in this process instead
        main_file = getattr(sys.modules.get("__main__"), "__file__", None)
        generate_sequence(ds_path, SequenceConfig(duration_s=float(duration_s)), progress=True,
                          workers=None if main_file else 1)
    return ds_path
