"""frontend_node: GPU (or CPU) feature tracking on camera images -> VINS-style tracks.

Each image is converted with NumPy (mono8, mono16, rgb8, bgr8; row padding in ``step``
honoured) and passed with the gyro samples since the previous image to
:class:`vilib_ros.frontend.FeatureTracker` (pyramid, FAST + grid NMS, pyramidal LK;
CUDA through CuPy, or the NumPy/OpenCV twin with ``device: cpu``). Every accepted image
produces exactly one ``tracks`` message (possibly empty). Bad input never stops the node:
it is skipped, counted per reason in ``diagnostics`` and warned about once per
topic/reason (once per topic/encoding for unsupported encodings).

Skip / drop reasons counted: ``unsupported_encoding``, ``zero_size``, ``step_mismatch``,
``data_size``, ``size_mismatch`` (image size differs from the calibration),
``out_of_order`` (stamp not after the previous image's), ``frontend_error``;
``frame_gap`` counts images missing from the stream (a stamp gap of more than 1.5
median frame periods; e.g. dropped by a slow link); ``imu_non_finite`` and
``imu_out_of_order`` count rejected IMU messages; ``stereo_unmatched`` counts left images
processed without a right image.

Subscribed
----------
  image (sensor_msgs/Image, sensor-data QoS: best effort, depth ``queue_size``): left / mono camera
  image_right (sensor_msgs/Image, sensor-data QoS): right camera, only when ``stereo`` is true;
      paired with the left image of the same stamp (left images are processed alone while
      nobody publishes on image_right)
  imu (sensor_msgs/Imu, sensor-data QoS, depth 1000): gyro for the tracker's motion prediction;
      drained before each image is processed, so the gyro up to the image's stamp is used

Published
---------
  tracks (sensor_msgs/PointCloud, reliable, depth 10): VINS-Mono feature-tracker layout:
      points = undistorted normalised (x, y, 1); channels id_of_point, u_of_point, v_of_point,
      velocity_x_of_point, velocity_y_of_point, score_of_point, level_of_point, age_of_point
      (+ u/v/x/y_right_of_point in stereo); header = the image's stamp and frame id
  tracks_image (sensor_msgs/Image, bgr8 or mono8, reliable, depth 2): the image with tracks drawn,
      built and published only while someone subscribes
  diagnostics (diagnostic_msgs/DiagnosticArray, every ``diagnostics_period_s``): input/output
      rates, latency (receive -> publish), per-stage times, counts per skip reason

Parameters
----------
Node parameters (read-only unless said otherwise):
  device (string, default 'auto', one of auto|cuda|cpu): where the frontend runs
  camera_yaml (string, default ''): EuRoC/Kalibr sensor.yaml for cam0; overrides the
      calibration parameters below when set
  image_width, image_height (integer, default 752 / 480, range [1, 16384]): calibration image size
  intrinsics (double[4], default EuRoC cam0 [458.654, 457.296, 367.215, 248.375]): fx fy cx cy
  distortion_model (string, default 'radial-tangential', one of radial-tangential|equidistant|none)
  distortion_coefficients (double[4], default EuRoC cam0): k1 k2 p1 p2 (or k1..k4 equidistant)
  T_BS (double[16], default EuRoC cam0): camera -> body transform, row-major 4x4
  right.camera_yaml, right.image_width, right.image_height, right.intrinsics,
  right.distortion_model, right.distortion_coefficients, right.T_BS: the same for the
      right camera (defaults EuRoC cam1), used when ``stereo`` is true
  queue_size (integer, default 10, range [1, 1000]): image subscription depth
  input_reliability (string, default 'best_effort', one of best_effort|reliable): QoS of the image
      and IMU subscriptions; best effort (sensor data) matches any publisher, reliable is needed
      for images over Fast DDS's 512 KB shared-memory segment (their best-effort UDP fragments
      get dropped) and where no frame may be lost (vilib-ros run uses it)
  stereo_timeout_s (double, default 0.2, range [0, 10]): a left image whose right image has not
      arrived after this long is processed alone (counted as stereo_unmatched)
  publish_debug_image (bool, default true, writable): allow ``tracks_image``
  debug_image_encoding (string, default 'bgr8', one of bgr8|mono8, writable)
  diagnostics_period_s (double, default 1.0, range [0.1, 60])
  stats_path (string, default ''): write a JSON summary (counts, latency, per-stage times) here on shutdown
  tracks_frame_id (string, default ''): frame id of ``tracks`` ('' = the image's)
Frontend parameters (writable except ``stereo``: a change rebuilds the tracker, tracks restart),
named as the fields of :class:`vilib_ros.frontend.FrontendConfig`, nested dataclasses as prefixes
(``python -m vilib_ros.nodes.frontend_node --print-parameters`` prints this table from the code):
  detector.threshold (double, default 10.0, range [1.0, 254.0]): FAST threshold eps (intensity
      levels)
  detector.arc_length (integer, default 10, range [9, 12]): FAST contiguous arc length N
  detector.score (string, default 'sad_arc', one of sad_circle|sad_arc|max_threshold): corner
      score: SAD over the circle, SAD over the arc, or max threshold
  detector.levels (integer, default 2, range [1, 4]): pyramid levels used for detection
  detector.cell_width (integer, default 32, range [32, 1024] step 32): NMS cell width in level-0
      pixels (multiple of 32)
  detector.cell_height (integer, default 32, range [1, 1024]): NMS cell height in level-0 pixels
      (multiple of 2^(levels-1))
  detector.nms_radius (integer, default 1, range [1, 4]): NMS Moore neighbourhood radius n
      ((2n+1)^2 pixels)
  detector.border (integer, default 8, range [3, 256]): pixels skipped at each level's edge
  tracker.mode (string, default 'gain_offset', one of translation|offset|gain|gain_offset): LK
      photometric model: translation, +offset, +gain, +gain+offset
  tracker.levels (integer, default 5, range [1, 8]): pyramid levels used for tracking
  tracker.patch_sizes (integer[], default [16, 16, 16, 8, 8]): LK patch size per level (8 or 16)
  tracker.max_iterations (integer, default 30, range [1, 1000]): LK iterations per level
  tracker.eps (double, default 0.0005, range [1e-12, 1.0]): LK convergence: stop when the
      squared update is below this (level pixels^2)
  tracker.min_eigen (double, default 1e-05, range [0.0, 1.0]): reject flat patches: min
      eigenvalue of the gradient matrix / patch area
  tracker.max_residual (double, default 0.0, range [0.0, 255.0]): mean |residual| above which a
      track is dropped (0 = off)
  tracker.osc_eps (double, default 0.01): OpenCV's 'jumping back and forth': |dq_k + dq_k-1| <
      osc_eps in x and y (level px)
  tracker.osc_growth (double, default 1.0): a reversal that does not shrink: dq_k . dq_k-1 < 0
      and |dq_k|^2 >= osc_growth |dq_k-1|^2
  tracker.cpu_backend (string, default 'numpy', one of numpy|opencv): CPU LK implementation
      (opencv: translation mode only)
  max_features (integer, default 0, range [0, 100000]): target track count (0 = one per detector
      cell)
  min_track_fraction (double, default 0.3, range [0.0, 1.0]): redetect when live tracks drop
      below this fraction of the target
  fb_check (bool, default False): forward-backward consistency check of every track
  fb_threshold (double, default 0.5, range [1e-06, 1000.0]): forward-backward error limit
      (pixels)
  ransac (bool, default False): fundamental-matrix RANSAC outlier rejection
  ransac_threshold (double, default 1.0, range [1e-06, 1000.0]): RANSAC inlier threshold
      (pixels)
  ransac_confidence (double, default 0.99, range [0.5, 0.999999]): RANSAC confidence
  imu_prediction (bool, default True): predict track positions from the gyro (rotation) when IMU
      is given
  imu_max_gap_ms (double, default 50.0, range [0.001, 1000000.0]): largest IMU gap bridged by
      the gyro prediction
  stereo (bool, default True): subscribe to image_right and track into the right image (stereo);
      without right images the left ones are processed alone
  stereo_epipolar_threshold (double, default 2.0, range [0.0, 1000.0]): epipolar limit of stereo
      matches (pixels; 0 = off)
  use_graph (bool, default True): GPU: capture the per-frame kernel sequence in a CUDA graph
"""
from __future__ import annotations

import collections
import threading
import time

import numpy as np
from diagnostic_msgs.msg import DiagnosticArray, DiagnosticStatus
from rclpy.node import Node
from sensor_msgs.msg import Image, Imu, PointCloud

from vilib_ros.camera import euroc_cam0
from vilib_ros.nodes._common import RateMeter, Stat, diagnostic_status, exit_main, reliable_qos, sensor_qos, write_json
from vilib_ros.nodes.conversions import (ImageConversionError, ImuConversionError, draw_tracks,
                                         image_to_mono8, imu_to_arrays, numpy_to_image, stamp_to_ns,
                                         trackframe_to_pointcloud)
from vilib_ros.nodes.params import (ParamSpec, build_dataclass, camera_from_params, camera_specs, check_on_set,
                                    declare_all, default_right, specs_from_dataclass)

# Ranges and choices of the algorithm parameters (one name for one thing: the dataclass fields).
FRONTEND_RANGES = {
    "detector.threshold": (1.0, 254.0),
    "detector.arc_length": (9, 12),
    "detector.levels": (1, 4),
    "detector.cell_width": (32, 1024, 32),
    "detector.cell_height": (1, 1024),
    "detector.nms_radius": (1, 4),
    "detector.border": (3, 256),
    "max_features": (0, 100000),
    "min_track_fraction": (0.0, 1.0),
    "ransac_confidence": (0.5, 0.999999),
    "imu_max_gap_ms": (0.001, 1e6),
    "stereo_epipolar_threshold": (0.0, 1000.0),
    "tracker.levels": (1, 8),
    "tracker.max_iterations": (1, 1000),
    "tracker.eps": (1e-12, 1.0),
    "tracker.min_eigen": (0.0, 1.0),
    "tracker.max_residual": (0.0, 255.0),
    "fb_threshold": (1e-6, 1000.0),
    "ransac_threshold": (1e-6, 1000.0),
}
FRONTEND_CHOICES = {
    "detector.score": ("sad_circle", "sad_arc", "max_threshold"),
    "tracker.mode": ("translation", "offset", "gain", "gain_offset"),
    "tracker.cpu_backend": ("numpy", "opencv"),
}
# Changing these needs new subscriptions or buffers: fixed at start.
FRONTEND_READ_ONLY = ("stereo",)
FRONTEND_DESCRIPTIONS = {
    "detector.threshold": "FAST threshold eps (intensity levels)",
    "detector.arc_length": "FAST contiguous arc length N",
    "detector.score": "corner score: SAD over the circle, SAD over the arc, or max threshold",
    "detector.levels": "pyramid levels used for detection",
    "detector.cell_width": "NMS cell width in level-0 pixels (multiple of 32)",
    "detector.cell_height": "NMS cell height in level-0 pixels (multiple of 2^(levels-1))",
    "detector.nms_radius": "NMS Moore neighbourhood radius n ((2n+1)^2 pixels)",
    "detector.border": "pixels skipped at each level's edge",
    "tracker.mode": "LK photometric model: translation, +offset, +gain, +gain+offset",
    "tracker.levels": "pyramid levels used for tracking",
    "tracker.patch_sizes": "LK patch size per level (8 or 16)",
    "tracker.max_iterations": "LK iterations per level",
    "tracker.eps": "LK convergence: stop when the squared update is below this (level pixels^2)",
    "tracker.min_eigen": "reject flat patches: min eigenvalue of the gradient matrix / patch area",
    "tracker.max_residual": "mean |residual| above which a track is dropped (0 = off)",
    "tracker.cpu_backend": "CPU LK implementation (opencv: translation mode only)",
    "min_track_fraction": "redetect when live tracks drop below this fraction of the target",
    "max_features": "target track count (0 = one per detector cell)",
    "fb_check": "forward-backward consistency check of every track",
    "fb_threshold": "forward-backward error limit (pixels)",
    "ransac": "fundamental-matrix RANSAC outlier rejection",
    "ransac_threshold": "RANSAC inlier threshold (pixels)",
    "ransac_confidence": "RANSAC confidence",
    "imu_prediction": "predict track positions from the gyro (rotation) when IMU is given",
    "imu_max_gap_ms": "largest IMU gap bridged by the gyro prediction",
    "stereo": "subscribe to image_right and track into the right image (stereo); without right "
              "images the left ones are processed alone",
    "stereo_epipolar_threshold": "epipolar limit of stereo matches (pixels; 0 = off)",
    "use_graph": "GPU: capture the per-frame kernel sequence in a CUDA graph",
}

def _frontend_classes():
    from vilib_ros.frontend import FeatureTracker, FrontendConfig

    return FeatureTracker, FrontendConfig


def frontend_specs() -> list[ParamSpec]:
    _, FrontendConfig = _frontend_classes()
    return specs_from_dataclass(FrontendConfig(), "", FRONTEND_RANGES, FRONTEND_CHOICES, FRONTEND_DESCRIPTIONS,
                                read_only=FRONTEND_READ_ONLY)


def node_specs(has_stereo_field: bool) -> list[ParamSpec]:
    specs = [
        ParamSpec("device", "auto", "where the frontend runs", choices=("auto", "cuda", "cpu"), read_only=True),
    ]
    specs += camera_specs("", euroc_cam0(), "left (cam0) camera")
    specs += camera_specs("right.", default_right(), "right (cam1) camera")
    if not has_stereo_field:
        specs.append(ParamSpec("stereo", False, "subscribe to image_right and track stereo", read_only=True))
    specs += [
        ParamSpec("queue_size", 10, "image subscription depth", range=(1, 1000), read_only=True),
        ParamSpec("input_reliability", "best_effort",
                  "QoS reliability of the image and IMU subscriptions: best_effort (sensor data) matches every "
                  "publisher; reliable is needed for images larger than Fast DDS's 512 KB shared-memory segment, "
                  "whose best-effort UDP fragments get dropped", choices=("best_effort", "reliable"), read_only=True),
        ParamSpec("publish_debug_image", True, "allow the tracks_image debug output"),
        ParamSpec("debug_image_encoding", "bgr8", "encoding of tracks_image", choices=("bgr8", "mono8")),
        ParamSpec("diagnostics_period_s", 1.0, "diagnostics publishing period", range=(0.1, 60.0), read_only=True),
        ParamSpec("stats_path", "", "write a JSON summary here on shutdown ('' = none)", read_only=True),
        ParamSpec("tracks_frame_id", "", "frame id of tracks ('' = the image's frame id)", read_only=True),
        ParamSpec("stereo_timeout_s", 0.2, "a left image whose right image has not come after this long is "
                  "processed alone", range=(0.0, 10.0), read_only=True),
    ]
    for s in specs:
        if s.choices and "one of" not in s.description:
            s.description += f" (one of: {', '.join(s.choices)})"
    return specs


def parameter_table() -> list[ParamSpec]:
    """Every parameter the node declares (node parameters, then FrontendConfig fields)."""
    fe = frontend_specs()
    return node_specs(any(s.name == "stereo" for s in fe)) + fe


IMAGE_SKIP_REASONS = ("unsupported_encoding", "zero_size", "step_mismatch", "data_size", "size_mismatch",
                      "out_of_order", "frontend_error")


class FrontendNode(Node):
    def __init__(self):
        super().__init__("frontend_node")
        self.FeatureTracker, self.FrontendConfig = _frontend_classes()
        self.fe_specs = frontend_specs()
        self.specs = node_specs(any(s.name == "stereo" for s in self.fe_specs)) + self.fe_specs
        self.p = declare_all(self, self.specs)
        self.cam = camera_from_params(self.p)
        self.stereo = bool(self.p.get("stereo", False))
        self.cam_right = camera_from_params(self.p, "right.") if self.stereo else None
        self.config = self._build_config(self.p)
        self.tracker = self._make_tracker()
        self._rebuild = False
        self.add_on_set_parameters_callback(self._on_set_parameters)

        self.imu_lock = threading.Lock()
        q = int(self.p["queue_size"])
        in_qos = reliable_qos if self.p["input_reliability"] == "reliable" else sensor_qos
        self.pub_tracks = self.create_publisher(PointCloud, "tracks", reliable_qos(10))
        # reliable (depth 2): a bgr8 frame is over Fast DDS's 512 KB shared-memory segment and its
        # best-effort UDP fragments get lost; best-effort subscribers (rviz) still match
        self.pub_debug = self.create_publisher(Image, "tracks_image", reliable_qos(2))
        self.pub_diag = self.create_publisher(DiagnosticArray, "diagnostics", reliable_qos(10))
        self.create_subscription(Image, "image", self._on_image, in_qos(q))
        self.sub_right = None
        if self.stereo:
            self.sub_right = self.create_subscription(Image, "image_right", self._on_image_right, in_qos(q))
            self.create_timer(0.01, self._flush_pending)
        self.sub_imu = self.create_subscription(Imu, "imu", self._on_imu, in_qos(1000))

        self.skips = collections.Counter({r: 0 for r in IMAGE_SKIP_REASONS})
        self.skips.update({"frame_gap": 0, "imu_non_finite": 0, "imu_out_of_order": 0, "stereo_unmatched": 0})
        self._warned: set = set()
        self.rx = RateMeter()
        self.tx = RateMeter()
        self.imu_rx = RateMeter()
        self.latency = Stat()
        self.process = Stat()
        self.stage: dict[str, Stat] = collections.defaultdict(Stat)
        self.last_stamp: int | None = None
        self.last_imu: int | None = None
        self.periods: collections.deque = collections.deque(maxlen=20)
        self.imu: collections.deque = collections.deque(maxlen=4000)
        self.pending_left = None      # (stamp, img, header frame_id, t_recv)
        self.right_images: dict[int, np.ndarray] = {}
        self.last_features = 0
        self.last_stats: dict = {}
        self.create_timer(float(self.p["diagnostics_period_s"]), self._publish_diagnostics)
        self.get_logger().info(
            f"frontend on {self.device} ({self.cam.width}x{self.cam.height}, {self.cam.distortion_model}"
            f"{', stereo' if self.stereo else ''})")

    # --- configuration -------------------------------------------------------------------
    def _build_config(self, values: dict):
        cfg = build_dataclass(self.FrontendConfig, {k: v for k, v in values.items()
                                                    if k in {s.name for s in self.fe_specs}})
        for obj in (cfg, getattr(cfg, "detector", None), getattr(cfg, "tracker", None)):
            if obj is not None and hasattr(obj, "validate"):
                obj.validate()
        return cfg

    def _make_tracker(self):
        kwargs = {}
        if self.stereo and self.cam_right is not None:
            T_right_left = np.linalg.inv(self.cam_right.T_BS) @ self.cam.T_BS
            kwargs = {"camera_right": self.cam_right, "T_right_left": T_right_left}
        tracker = self.FeatureTracker(self.cam, self.config, device=self.p["device"], **kwargs)
        self.device = getattr(tracker, "device", self.p["device"])
        return tracker

    def _on_set_parameters(self, params):
        from rcl_interfaces.msg import SetParametersResult

        res = check_on_set(self.specs)(params)
        if not res.successful:
            return res
        fe_names = {s.name for s in self.fe_specs}
        changed = {p.name: p.value for p in params if p.name in fe_names}
        if changed:
            values = dict(self.p)
            values.update({k: (list(v) if isinstance(v, tuple) else v) for k, v in changed.items()})
            try:
                cfg = self._build_config(values)
            except (ValueError, TypeError) as exc:
                return SetParametersResult(successful=False, reason=str(exc))
            self.p = values
            self.config = cfg
            self._rebuild = True
        for p in params:
            if p.name not in fe_names:
                self.p[p.name] = p.value
        return SetParametersResult(successful=True)

    # --- helpers -------------------------------------------------------------------------
    def _skip(self, reason: str, topic: str, detail: str, warn_key=None) -> None:
        self.skips[reason] += 1
        key = warn_key or (topic, reason)
        if key not in self._warned:
            self._warned.add(key)
            self.get_logger().warning(f"{topic}: {detail} -- skipped (counted as '{reason}' in diagnostics; "
                                      "warned once)")

    def _convert(self, msg, topic: str):
        try:
            img = image_to_mono8(msg)
        except ImageConversionError as exc:
            wk = (topic, exc.reason, str(msg.encoding)) if exc.reason == "unsupported_encoding" else None
            self._skip(exc.reason, topic, str(exc), wk)
            return None
        except Exception as exc:  # noqa: BLE001 - malformed message of any kind
            self._skip("data_size", topic, f"cannot read image: {exc}")
            return None
        return img

    # --- callbacks -----------------------------------------------------------------------
    def _on_imu(self, msg) -> None:
        try:
            t, g, _a = imu_to_arrays(msg)
        except ImuConversionError as exc:
            with self.imu_lock:
                self._skip(exc.reason, "imu", str(exc))
            return
        with self.imu_lock:
            if self.last_imu is not None and t <= self.last_imu:
                self._skip("imu_out_of_order", "imu", f"IMU stamp {t} not after the previous {self.last_imu}")
                return
            self.last_imu = t
            self.imu_rx.tick()
            self.imu.append((t, g[0], g[1], g[2]))

    def _on_image_right(self, msg) -> None:
        img = self._convert(msg, "image_right")
        if img is None:
            return
        t = stamp_to_ns(msg.header.stamp)
        if self.pending_left is not None and self.pending_left[0] == t:
            left, self.pending_left = self.pending_left, None
            self._process(*left, img_right=img)
            return
        self.right_images[t] = img
        while len(self.right_images) > 10:
            self.right_images.pop(min(self.right_images))

    def _on_image(self, msg) -> None:
        t_recv = time.monotonic()
        self.rx.tick()
        img = self._convert(msg, "image")
        if img is None:
            return
        stamp = stamp_to_ns(msg.header.stamp)
        if self.stereo:
            if self.pending_left is not None:  # its right image never came
                self.skips["stereo_unmatched"] += 1
                left, self.pending_left = self.pending_left, None
                self._process(*left)
            right = self.right_images.pop(stamp, None)
            if right is None and self.count_publishers(self.sub_right.topic_name) == 0:
                self._process(stamp, img, msg.header.frame_id, t_recv)  # no right camera: mono
                return
            if right is None:
                self.pending_left = (stamp, img, msg.header.frame_id, t_recv)
                return
            self._process(stamp, img, msg.header.frame_id, t_recv, img_right=right)
        else:
            self._process(stamp, img, msg.header.frame_id, t_recv)

    def _flush_pending(self) -> None:
        if self.pending_left is not None and time.monotonic() - self.pending_left[3] > self.p["stereo_timeout_s"]:
            self.skips["stereo_unmatched"] += 1
            left, self.pending_left = self.pending_left, None
            self._process(*left)

    def _take_pending_imu(self) -> None:
        """Run the IMU callback for every IMU message already waiting in the subscription.

        The executor takes one message per subscription per turn, so behind images that take
        most of a frame period to process the IMU queue would grow and overflow; draining it
        here, before an image is processed, also makes the gyro up to the image's stamp
        available to the tracker's motion prediction.
        """
        sub = self.sub_imu
        for _ in range(10000):
            try:
                with sub.handle:
                    taken = sub.handle.take_message(sub.msg_type, sub.raw)
            except Exception:  # noqa: BLE001 - internal API changed: the executor still delivers
                return
            if taken is None:
                return
            self._on_imu(taken[0])

    def _gyro_until(self, stamp: int):
        t0 = (self.last_stamp if self.last_stamp is not None else stamp - 100_000_000) - 10_000_000
        with self.imu_lock:
            rows = [s for s in self.imu if t0 <= s[0] <= stamp]
            while self.imu and self.imu[0][0] < stamp - 50_000_000:
                self.imu.popleft()
        return np.asarray(rows, dtype=np.float64).reshape(-1, 4) if rows else None

    def _process(self, stamp: int, img: np.ndarray, frame_id: str, t_recv: float, img_right=None) -> None:
        if img.shape != (self.cam.height, self.cam.width):
            self._skip("size_mismatch", "image",
                       f"image is {img.shape[1]}x{img.shape[0]}, calibration {self.cam.width}x{self.cam.height}")
            return
        if self.last_stamp is not None and stamp <= self.last_stamp:
            self._skip("out_of_order", "image", f"stamp {stamp} is not after the previous image's {self.last_stamp}")
            return
        if self.last_stamp is not None:
            dt = stamp - self.last_stamp
            if len(self.periods) >= 3:
                period = float(np.median(self.periods))
                if dt > 1.5 * period:
                    missing = max(1, int(round(dt / period)) - 1)
                    self.skips["frame_gap"] += missing
                    self.get_logger().debug(f"stamp gap {dt * 1e-6:.1f} ms: {missing} frame(s) missing")
                else:
                    self.periods.append(dt)
            else:
                self.periods.append(dt)
        if self._rebuild:
            self._rebuild = False
            self.tracker = self._make_tracker()
            self.get_logger().info("frontend parameters changed: tracker rebuilt")
        self._take_pending_imu()
        gyro = self._gyro_until(stamp)
        t0 = time.monotonic()
        try:
            if img_right is not None:
                frame = self.tracker.process(img, stamp, gyro, image_right=img_right)
            else:
                frame = self.tracker.process(img, stamp, gyro)
        except ValueError as exc:
            self._skip("frontend_error", "image", f"frontend rejected the image: {exc}")
            return
        except Exception as exc:  # noqa: BLE001 - never die on one frame
            self.skips["frontend_error"] += 1
            self.get_logger().error(f"frontend failed on stamp {stamp}: {exc!r}", throttle_duration_sec=5.0)
            return
        t1 = time.monotonic()
        self.last_stamp = stamp
        msg = trackframe_to_pointcloud(frame, self.p["tracks_frame_id"] or frame_id)
        self.pub_tracks.publish(msg)
        t2 = time.monotonic()
        self.tx.tick()
        self.process.add((t1 - t0) * 1e3)
        self.latency.add((t2 - t_recv) * 1e3)
        for k, v in frame.timings.items():
            self.stage[k[:-2] if k.endswith("_s") else k].add(float(v) * 1e3)
        self.last_features = len(frame)
        self.last_stats = dict(frame.stats)
        if self.p["publish_debug_image"] and self.pub_debug.get_subscription_count() > 0:
            dbg = draw_tracks(img, frame)
            if self.p["debug_image_encoding"] == "mono8":
                dbg = dbg.max(axis=2)   # circles stay visible (bright) in grey
            self.pub_debug.publish(numpy_to_image(dbg, self.p["debug_image_encoding"], stamp,
                                                  self.p["tracks_frame_id"] or frame_id))

    # --- diagnostics ---------------------------------------------------------------------
    def diagnostics_values(self) -> dict:
        lat = self.latency.window()
        proc = self.process.window()
        d = {
            "device": self.device,
            "images_received": self.rx.count,
            "tracks_published": self.tx.count,
            "imu_received": self.imu_rx.count,
            "input_rate_hz": self.rx.rate(),
            "output_rate_hz": self.tx.rate(),
            "imu_rate_hz": self.imu_rx.rate(),
            "latency_ms_mean": float(np.mean(lat)) if lat else 0.0,
            "latency_ms_max": float(np.max(lat)) if lat else 0.0,
            "process_ms_mean": float(np.mean(proc)) if proc else 0.0,
            "features": self.last_features,
        }
        for k, v in sorted(self.skips.items()):
            d[f"skipped.{k}"] = v
        for k, st in sorted(self.stage.items()):
            w = st.window()
            d[f"time_ms.{k}"] = float(np.mean(w)) if w else 0.0
        for k, v in sorted(self.last_stats.items()):
            d[f"frontend.{k}"] = v
        return d

    def _publish_diagnostics(self) -> None:
        d = self.diagnostics_values()
        problems = sum(v for k, v in self.skips.items())
        level = DiagnosticStatus.OK if problems == 0 else DiagnosticStatus.WARN
        level = level[0] if isinstance(level, bytes) else level
        msg = DiagnosticArray()
        msg.header.stamp = self.get_clock().now().to_msg()
        msg.status = [diagnostic_status(
            f"vilib_ros: {self.get_name()}", f"frontend ({self.device})", level,
            f"{d['output_rate_hz']:.1f} Hz, {d['features']} tracks, {problems} skipped", d)]
        self.pub_diag.publish(msg)

    def summary(self) -> dict:
        return {
            "node": self.get_name(), "device": self.device,
            "images_received": self.rx.count, "tracks_published": self.tx.count, "imu_received": self.imu_rx.count,
            "skipped": dict(self.skips), "latency_ms": self.latency.summary(), "process_ms": self.process.summary(),
            "stages_ms": {k: v.summary() for k, v in self.stage.items()}, "frontend_stats": self.last_stats,
        }

    def close(self) -> None:
        if self.stereo and self.pending_left is not None:
            self.skips["stereo_unmatched"] += 1
        if self.p.get("stats_path"):
            write_json(self.p["stats_path"], self.summary())


def main(args=None):
    exit_main(FrontendNode, args, parameter_table)


if __name__ == "__main__":
    main()
