"""The visual frontend: detect, track, keep persistent ids, redetect in free cells.

:class:`FeatureTracker` turns frames (+ optional gyro samples and a right image) into
:class:`vilib_ros.types.TrackFrame` s. Per frame:

1. pyramid of the new frame;
2. LK tracking (:mod:`vilib_ros.frontend.reference.lk` and its twins) of every live track from
   the previous frame, started at the IMU-predicted position (rotation-only homography,
   :mod:`vilib_ros.frontend.imu_prediction`) or at the old position, against the track's
   reference template from its detection frame with an affine warp (``tracker.template:
   reference``, ``tracker.warp: affine``, the default:
   :mod:`vilib_ros.frontend.reference.templates`) or against the previous frame's patch
   (``previous`` / ``translation``); forward-backward check and RANSAC (fundamental matrix on
   undistorted points), both on by default;
3. the track table (:mod:`vilib_ros.frontend.track_table`) keeps the tracked ones; when live tracks
   fall below ``min_track_fraction`` of the target (the number of detector cells, or ``max_features``),
   FAST detection in the cells without a live track gives new tracks;
4. keypoints undistorted to normalised coordinates; velocities; optional stereo matching of the
   tracks into the right image with the same LK kernel (:mod:`vilib_ros.frontend.stereo`).

The work is done by a pipeline that :func:`vilib_ros.frontend.factory.make_pipeline` builds:
:class:`~vilib_ros.frontend.gpu.pipeline.GpuPipeline` (one CUDA graph per frame, the track table
on the device, results in page-locked memory) or
:class:`~vilib_ros.frontend.cpu_pipeline.CpuPipeline` (the NumPy track table, and the CPU
implementation's stages). This class is the interface: input checks, counted skips, IMU
rotation, the submit / result queue, live configuration and ids.
"""
from __future__ import annotations

import collections
import dataclasses
import logging
import time

import numpy as np

from vilib_ros._cuda import CudaUnavailable, resolve_device
from vilib_ros.frontend.config import COUNTER_INDEX, FrontendConfig, flat_fields, grid_shape_for, live_fields
from vilib_ros.frontend.factory import RESULT_SLOTS, make_pipeline
from vilib_ros.frontend.imu_prediction import GyroPredictor, ImuGapError
from vilib_ros.log_throttle import ThrottledWarnings
from vilib_ros.types import FrameStats, TrackFrame

log = logging.getLogger("vilib_ros.frontend")
_U8 = np.dtype(np.uint8)
HOST_COUNTERS = ("frames", "skipped_empty", "skipped_nonmonotonic", "imu_predicted", "imu_nan", "imu_gaps", "resets",
                 "graph_launches", "upload_timeouts")


def _is_cupy(a) -> bool:
    return not isinstance(a, np.ndarray) and type(a).__module__.startswith("cupy")


class FrameWarnings(ThrottledWarnings):
    """The frontend's per-frame warnings (an IMU gap limit below the IMU's period, a stream of empty
    frames): :class:`vilib_ros.log_throttle.ThrottledWarnings` on the frontend's logger."""

    def __init__(self, period_s: float = 10.0):
        super().__init__(log, period_s)


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

    ``config`` is validated here (ValueError) unless ``validated`` says the caller has done it:
    a node validates the configuration once, where it takes the parameters, and passes it on.
    """

    RESULT_SLOTS = RESULT_SLOTS

    def __init__(self, camera, config: FrontendConfig | None = None, device: str = "auto",
                 camera_right=None, T_right_left=None, first_id: int = 0, validated: bool = False):
        config = config or FrontendConfig()
        self.config = config if validated else config.validate()
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
        c = self.config
        self.grid_shape = grid_shape_for(self.width, self.height, c.detector)
        self.n_cells = self.grid_shape[0] * self.grid_shape[1]
        self.target = int(c.max_features) if c.max_features > 0 else self.n_cells
        self.levels = max(int(c.tracker.levels), int(c.detector.levels))
        return make_pipeline(dev, self.camera, c, capacity=self.target, levels=self.levels, first_id=first_id,
                             camera_right=self.camera_right, T_right_left=self.T_right_left)

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

    def apply_config(self, config: FrontendConfig, validated: bool = False) -> bool:
        """Apply ``config`` to the running tracker where only live fields changed (those marked
        live in :mod:`vilib_ros.frontend.config`: the detector threshold, LK iteration cap, eps,
        min eigenvalue and residual, the forward-backward and RANSAC thresholds, ...), and return
        True; tracks and ids go on. Return False and change nothing where a structural field
        changed (sizes, levels, cells, modes, stereo, ...): the caller builds a new tracker
        (``first_id=next_id``). ``config`` is validated first (ValueError), unless ``validated``."""
        if not validated:
            config.validate()
        old, new = flat_fields(self.config), flat_fields(config)
        changed = {k for k in new if new[k] != old[k]}
        structural = changed - live_fields(config)
        if structural:
            log.info("structural frontend change (%s): the tracker must be rebuilt", ", ".join(sorted(structural)))
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
