"""The visual frontend: detect, track, keep persistent ids, redetect in free cells.

:class:`FeatureTracker` turns frames (+ optional gyro samples and a right image) into
:class:`vilib_ros.types.TrackFrame` s. Per frame:

1. pyramid of the new frame;
2. LK tracking (:mod:`vilib_ros.frontend.tracker`) of every live track from the previous frame, started at
   the IMU-predicted position (rotation-only homography, :mod:`vilib_ros.frontend.imu_prediction`) or at
   the old position, against the track's reference template from its detection frame with an affine
   warp (``tracker.template: reference``, ``tracker.warp: affine``, the default:
   :mod:`vilib_ros.frontend.templates`) or against the previous frame's patch (``previous`` /
   ``translation``); forward-backward check and RANSAC (fundamental matrix on undistorted points),
   both on by default;
3. the track table (:mod:`vilib_ros.frontend.track_table`) keeps the tracked ones; when live tracks
   fall below ``min_track_fraction`` of the target (the number of detector cells, or ``max_features``),
   FAST detection in the cells without a live track gives new tracks;
4. keypoints undistorted to normalised coordinates; velocities; optional stereo matching of the
   tracks into the right image with the same LK kernel (:mod:`vilib_ros.frontend.stereo`).

The work is done by a pipeline: :class:`~vilib_ros.frontend.gpu_pipeline.GpuPipeline` (one CUDA
graph per frame, the track table on the device, results in page-locked memory) or
:class:`~vilib_ros.frontend.cpu_pipeline.CpuPipeline` (NumPy, and whatever CPU detector and
tracker the factories make). This class is the interface: input checks, counted skips, IMU
rotation, the submit / result queue, live configuration and ids.
"""
from __future__ import annotations

import collections
import dataclasses
import logging
import time
from dataclasses import dataclass, field

import numpy as np

from vilib_ros.frontend.detector import DetectorConfig, make_detector
from vilib_ros.frontend.gpu_pipeline import RESULT_SLOTS
from vilib_ros.frontend.imu_prediction import GyroPredictor, ImuGapError
from vilib_ros.frontend.track_table import COUNTER_INDEX
from vilib_ros.frontend.tracker import TrackerConfig, make_tracker
from vilib_ros.log_throttle import ThrottledWarnings
from vilib_ros.types import FrameStats, TrackFrame

log = logging.getLogger("vilib_ros.frontend")
_U8 = np.dtype(np.uint8)


@dataclass
class FrontendConfig:
    detector: DetectorConfig = field(default_factory=DetectorConfig)
    tracker: TrackerConfig = field(default_factory=TrackerConfig)
    max_features: int = 0              # target track count; 0 = number of detector cells
    min_track_fraction: float = 0.3    # redetect when live tracks < fraction * target
    fb_check: bool = True              # forward-backward check (on: bench/results/tracks_quality.md)
    fb_threshold: float = 0.5          # px
    fb_levels: int = 0                 # pyramid levels of the backward track, finest first; 0 = the tracker's levels
    ransac: bool = True                # fundamental-matrix RANSAC on undistorted points (on: bench/results/tracks_quality.md)
    ransac_threshold: float = 1.0      # px (converted with fx)
    ransac_confidence: float = 0.99
    imu_prediction: bool = True        # use gyro samples when given
    imu_max_gap_ms: float = 50.0
    stereo: bool = True                # track into image_right when given
    stereo_epipolar_threshold: float = 2.0  # px; 0 = off
    use_graph: bool = True             # GPU: CUDA-graph the per-frame sequence

    def validate(self) -> "FrontendConfig":
        if not isinstance(self.detector, DetectorConfig) or not isinstance(self.tracker, TrackerConfig):
            raise ValueError("FrontendConfig.detector / .tracker must be DetectorConfig / TrackerConfig")
        self.detector.validate()
        self.tracker.validate()
        if int(self.max_features) != self.max_features or self.max_features < 0:
            raise ValueError(f"FrontendConfig.max_features must be an integer >= 0, got {self.max_features!r}")
        if not 0.0 <= self.min_track_fraction <= 1.0:
            raise ValueError(f"FrontendConfig.min_track_fraction must be in [0, 1], got {self.min_track_fraction!r}")
        for f in ("fb_threshold", "ransac_threshold", "imu_max_gap_ms"):
            if not getattr(self, f) > 0:
                raise ValueError(f"FrontendConfig.{f} must be > 0, got {getattr(self, f)!r}")
        if int(self.fb_levels) != self.fb_levels or not 0 <= self.fb_levels <= self.tracker.levels:
            raise ValueError(f"FrontendConfig.fb_levels must be an integer in 0..tracker.levels "
                             f"({self.tracker.levels}; 0 = all of them), got {self.fb_levels!r}")
        if not 0.5 < self.ransac_confidence < 1.0:
            raise ValueError(f"FrontendConfig.ransac_confidence must be in (0.5, 1), got {self.ransac_confidence!r}")
        if not self.stereo_epipolar_threshold >= 0:
            raise ValueError("FrontendConfig.stereo_epipolar_threshold must be >= 0")
        return self

    @property
    def fb_levels_used(self) -> int:
        """The backward track's levels: ``fb_levels``, or all of the tracker's where it is 0."""
        return int(self.fb_levels) or int(self.tracker.levels)


# Fields that FeatureTracker.apply_config changes on a running tracker (kernel scalars and host-side
# thresholds); a change of any other field is structural: the caller builds a new tracker.
LIVE_FIELDS = frozenset({
    "detector.threshold", "tracker.max_iterations", "tracker.eps", "tracker.min_eigen", "tracker.max_residual",
    "fb_threshold", "fb_levels", "ransac_threshold", "ransac_confidence", "min_track_fraction", "imu_prediction",
    "imu_max_gap_ms", "stereo_epipolar_threshold", "tracker.template_refresh_residual", "tracker.template_max_age"})
HOST_COUNTERS = ("frames", "skipped_empty", "skipped_nonmonotonic", "imu_predicted", "imu_nan", "imu_gaps", "resets",
                 "graph_launches", "upload_timeouts")


def _flat_fields(config: FrontendConfig) -> dict:
    out = {}
    for f in dataclasses.fields(config):
        v = getattr(config, f.name)
        if dataclasses.is_dataclass(v):
            out.update({f"{f.name}.{g.name}": getattr(v, g.name) for g in dataclasses.fields(v)})
        else:
            out[f.name] = v
    return out


def _is_cupy(a) -> bool:
    return not isinstance(a, np.ndarray) and type(a).__module__.startswith("cupy")


class FrameWarnings(ThrottledWarnings):
    """The frontend's per-frame warnings (an IMU gap limit below the IMU's period, a stream of empty
    frames): :class:`vilib_ros.log_throttle.ThrottledWarnings` on the frontend's logger."""

    def __init__(self, period_s: float = 10.0):
        super().__init__(log, period_s)


def check_buildable(width: int, height: int, config: FrontendConfig, device: str = "cpu") -> None:
    """ValueError, with the reason, where a :class:`FeatureTracker` of this image size and
    configuration could not be built on ``device`` ('cpu' or 'cuda'): the configuration's own
    checks, the detector's cells and border against the image, and on the GPU the track table's
    capacity. A node checks a parameter change with it before taking it (regression: an in-range
    ``detector.cell_width`` of 1024 passed the configuration's checks, and the rebuild of the
    tracker then raised inside the post-set callback and ended the frontend node)."""
    from vilib_ros.frontend.detector import check_geometry, grid_shape_for
    from vilib_ros.frontend.track_table import check_capacity

    config.validate()
    check_geometry(width, height, config.detector)
    if device == "cuda":
        rows, cols = grid_shape_for(width, height, config.detector)
        check_capacity(int(config.max_features) or rows * cols, rows * cols)


class FeatureTracker:
    """Feature tracks with persistent ids from mono (+ optional stereo) frames.

    ``camera``: cam0 model (size, intrinsics, distortion, ``T_BS``). ``camera_right`` and
    ``T_right_left`` (4x4, X_right = T X_left; default from the two ``T_BS``) enable stereo.
    ``device``: ``auto`` (GPU where CUDA works, else CPU, with a logged reason), ``cuda`` or
    ``cpu``. ``first_id``: the id of the first track; :attr:`next_id` is where a tracker built
    to replace this one should start, so that no id is given twice within a run.

    Frames: a 2D uint8 NumPy array (on the GPU path also a CuPy array, read in place, or
    page-locked memory, read without a copy). Results: :meth:`process` (synchronous), or
    :meth:`submit` ahead and :meth:`result` in order. On the GPU path a TrackFrame's arrays are
    views of a reused result slot: valid until :attr:`RESULT_SLOTS` - 1 further frames have been
    submitted; ``frame.copy()`` keeps one longer.
    """

    RESULT_SLOTS = RESULT_SLOTS

    def __init__(self, camera, config: FrontendConfig | None = None, device: str = "auto",
                 camera_right=None, T_right_left=None, first_id: int = 0):
        from vilib_ros._cuda import CudaUnavailable, resolve_device

        self.config = (config or FrontendConfig()).validate()
        if int(first_id) != first_id or first_id < 0:
            raise ValueError(f"first_id must be an integer >= 0, got {first_id!r}")
        self.camera = camera
        self.width, self.height = int(camera.width), int(camera.height)
        self._shape = (self.height, self.width)
        self.camera_right = camera_right
        if camera_right is not None:
            if (camera_right.width, camera_right.height) != (self.width, self.height):
                raise ValueError("camera_right must have the same size as camera")
            if T_right_left is None:
                T_right_left = np.linalg.inv(camera_right.T_BS) @ camera.T_BS
            T_right_left = np.asarray(T_right_left, np.float64).reshape(4, 4)
        self.T_right_left = T_right_left
        c = self.config
        dev = resolve_device(device)
        self._gyro = GyroPredictor(camera, int(c.imu_max_gap_ms * 1e6))
        self.stats_host = {k: 0 for k in HOST_COUNTERS}
        self._warn = FrameWarnings()
        self._queue: collections.deque = collections.deque()
        self._last_stamp: int | None = None
        self._pipe = None
        if dev == "cuda":
            try:
                self._pipe = self._make_pipeline("cuda", int(first_id))
            except CudaUnavailable as exc:
                if device == "cuda":
                    raise
                log.warning("GPU frontend unavailable, using the CPU path: %s", exc)
        if self._pipe is None:
            self._pipe = self._make_pipeline("cpu", int(first_id))
        self.device = self._pipe.device

    def _make_pipeline(self, dev: str, first_id: int):
        from vilib_ros._cuda import CudaUnavailable

        c = self.config
        detector = make_detector(self.width, self.height, c.detector, device=dev)
        self.grid_shape = tuple(detector.grid_shape)
        self.n_cells = self.grid_shape[0] * self.grid_shape[1]
        self.target = int(c.max_features) if c.max_features > 0 else self.n_cells
        self.levels = max(int(c.tracker.levels), int(c.detector.levels))
        tracker = make_tracker(self.width, self.height, c.tracker, device=dev, max_features=self.target)
        kw = dict(camera=self.camera, config=c, detector=detector, tracker=tracker, capacity=self.target,
                  levels=self.levels, first_id=first_id, camera_right=self.camera_right,
                  T_right_left=self.T_right_left)
        if dev == "cuda":
            if getattr(detector, "device", "cpu") != "cuda" or getattr(tracker, "device", "cpu") != "cuda":
                raise CudaUnavailable("GPU tracker or detector unavailable")
            from vilib_ros.frontend.gpu_pipeline import GpuPipeline

            return GpuPipeline(**kw)
        from vilib_ros.frontend.cpu_pipeline import CpuPipeline

        return CpuPipeline(**kw)

    # ------------------------------------------------------------------ state
    @property
    def pipeline(self):
        """The GpuPipeline or CpuPipeline doing the work."""
        return self._pipe

    @property
    def next_id(self) -> int:
        """The smallest id a future track of this tracker can get (pass it as ``first_id`` to a
        tracker that replaces this one)."""
        return int(self._pipe.next_id)

    @property
    def num_tracks(self) -> int:
        """Live tracks after the last collected frame."""
        return int(self._pipe.num_tracks)

    @property
    def stats(self) -> FrameStats:
        """Counters since start, as of the last collected frame."""
        host = dict(self.stats_host, graph_launches=getattr(self._pipe, "graph_launches", 0),
                    upload_timeouts=getattr(self._pipe, "upload_timeouts", 0))
        return FrameStats(COUNTER_INDEX, self._pipe.counters().copy(), host)

    def pinned_frames(self, count: int) -> list[np.ndarray]:
        """``count`` frame buffers (height x width uint8) that :meth:`submit` reads without a host
        copy on the GPU path (page-locked memory); plain arrays on the CPU path."""
        if self.device == "cuda":
            return self._pipe.pinned_frames(count)
        return [np.zeros((self.height, self.width), np.uint8) for _ in range(int(count))]

    @property
    def graph_error(self) -> str | None:
        """Why CUDA graph capture failed (then the kernels are launched one by one), or None."""
        return getattr(self._pipe, "graph_error", None)

    def reset(self) -> None:
        """Drop every track and the previous frame; pending results are discarded. Ids go on."""
        self._pipe.reset()
        self._queue.clear()
        self._last_stamp = None
        self.stats_host["resets"] += 1

    def apply_config(self, config: FrontendConfig) -> bool:
        """Apply ``config`` to the running tracker where only live fields (:data:`LIVE_FIELDS`:
        the detector threshold, LK iteration cap, eps, min eigenvalue and residual, the
        forward-backward and RANSAC thresholds, ...) changed, and return True; tracks and ids go
        on. Return False and change nothing where a structural field changed (sizes, levels,
        cells, modes, stereo, ...): the caller builds a new tracker (``first_id=next_id``).
        ``config`` is validated first (ValueError)."""
        config.validate()
        old, new = _flat_fields(self.config), _flat_fields(config)
        changed = {k for k in new if new[k] != old[k]}
        if changed - LIVE_FIELDS:
            log.info("structural frontend change (%s): the tracker must be rebuilt", ", ".join(sorted(changed - LIVE_FIELDS)))
            return False
        config = dataclasses.replace(config, detector=dataclasses.replace(config.detector),
                                     tracker=dataclasses.replace(config.tracker))
        self.config = config
        self._gyro.max_gap_ns = int(config.imu_max_gap_ms * 1e6)
        self._pipe.apply_config(config)
        if changed:
            log.info("frontend parameters applied live: %s", ", ".join(sorted(changed)))
        return True

    # ------------------------------------------------------------------ frames
    def process(self, image, stamp_ns: int, gyro=None, image_right=None) -> TrackFrame:
        """Submit one frame and return its TrackFrame (synchronous)."""
        self.submit(image, stamp_ns, gyro, image_right)
        return self.result()

    def submit(self, image, stamp_ns: int, gyro=None, image_right=None) -> None:
        """Queue a frame; on the GPU its work starts at once. Bad sizes / dtypes / gyro shapes
        raise ValueError before any state changes; non-monotonic stamps and empty frames are
        counted skips (their result is an empty TrackFrame)."""
        t0 = time.perf_counter()
        stamp_ns = int(stamp_ns)
        image = self._check_image(image, "image")
        right_given = image_right is not None
        want_right = right_given and self.config.stereo and self.camera_right is not None
        if right_given:
            image_right = self._check_image(image_right, "image_right")
        gyro_arr = None
        if gyro is not None:
            gyro_arr = np.asarray(gyro, np.float64)
            if gyro_arr.ndim != 2 or gyro_arr.shape[1] != 4:
                raise ValueError(f"gyro must be (K, 4) rows of t_ns, wx, wy, wz; got shape {gyro_arr.shape}")
        h = self.stats_host
        if image is None or (right_given and image_right is None):
            h["skipped_empty"] += 1
            self._warn("empty", "empty frame at %d skipped", stamp_ns)
            return self._skip(stamp_ns, t0)
        if self._last_stamp is not None and stamp_ns <= self._last_stamp:
            h["skipped_nonmonotonic"] += 1
            self._warn("stamp", "frame stamp %d is not after the previous %d: skipped", stamp_ns, self._last_stamp)
            return self._skip(stamp_ns, t0)
        prev, self._last_stamp = self._last_stamp, stamp_ns
        h["frames"] += 1
        R = None
        if self.config.imu_prediction and gyro_arr is not None and prev is not None:
            try:
                R = self._gyro.rotation(gyro_arr, prev, stamp_ns)
                h["imu_predicted"] += 1
            except ImuGapError as exc:
                h["imu_nan" if "NaN" in str(exc) else "imu_gaps"] += 1
                self._warn("imu", "no IMU prediction for frame %d: %s", stamp_ns, exc)
        dt = (stamp_ns - prev) * 1e-9 if prev is not None else 0.0
        right = image_right if want_right else None
        if self.device == "cuda":
            self._queue.append((self._pipe.submit(image, right, stamp_ns, R, dt, dict(h)), t0))
        else:
            if _is_cupy(image):
                image, right = image.get(), (None if right is None else right.get())
            self._queue.append((self._pipe.run(image, right, stamp_ns, R, dt, dict(h)), t0))

    def result(self) -> TrackFrame:
        """The oldest submitted frame's TrackFrame (waits for it)."""
        if not self._queue:
            raise RuntimeError("result() called with no submitted frame")
        item, t0 = self._queue.popleft()
        fr = item if isinstance(item, TrackFrame) else self._pipe.collect(item)
        fr.timings["total_s"] = time.perf_counter() - t0
        return fr

    # ------------------------------------------------------------------ helpers
    def _check_image(self, image, what):
        if type(image) is np.ndarray and image.shape == self._shape and image.dtype == _U8:
            return image                    # the common case, one test
        if not (isinstance(image, np.ndarray) or _is_cupy(image)):
            raise ValueError(f"{what} must be a numpy (or, on the GPU, CuPy) array, got {type(image).__name__}")
        if image.size == 0:
            return None
        if image.dtype != np.uint8 or image.ndim != 2:
            raise ValueError(f"{what} must be a 2D uint8 (mono8) image, got {image.dtype} with shape {image.shape}")
        if tuple(image.shape) != (self.height, self.width):
            raise ValueError(f"{what} is {image.shape[1]}x{image.shape[0]}, the frontend was built for "
                             f"{self.width}x{self.height}")
        if _is_cupy(image) and not image.flags.c_contiguous:
            raise ValueError(f"{what}: a CuPy frame must be C-contiguous")
        return image

    def _skip(self, stamp_ns: int, t0: float) -> None:
        z2 = np.zeros((0, 2))
        fr = TrackFrame(stamp_ns=stamp_ns, ids=np.zeros(0, np.int64), uv=np.zeros((0, 2), np.float32), xy=z2,
                        velocity=z2.copy(), score=np.zeros(0, np.float32), level=np.zeros(0, np.int32),
                        age=np.zeros(0, np.int32), stats=self.stats)
        self._queue.append((fr, t0))
