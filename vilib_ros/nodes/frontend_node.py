"""frontend_node: GPU (or CPU) feature tracking on camera images -> VINS-style tracks.

Each image is read straight from its serialized message (a raw subscription: the pixels are
a zero-copy NumPy view; mono8, mono16, rgb8, bgr8, row padding in ``step`` honoured) or
decoded from a ``sensor_msgs/CompressedImage`` (PNG / JPEG), and passed with the gyro
samples since the previous image to :class:`vilib_ros.frontend.FeatureTracker` (pyramid,
FAST + grid NMS, pyramidal LK; CUDA through CuPy, or the NumPy/OpenCV twin with
``device: cpu``). Before an image is processed the node waits (at most ``imu_wait_s``, only
while IMU is flowing) for the IMU to reach the image's stamp; a frame processed without it
is counted (``events.imu_incomplete``). The tracks message is written as serialized CDR from
the track arrays (no Python object per feature) and published; the debug image is drawn in
its own thread, only while subscribed and at most ``debug_image_max_rate_hz``.

The input side (images, IMU, stamps) is :class:`vilib_ros.nodes.frontend_input.FrontendInput`.
While images stream, the image callback takes the next image itself: it waits for it on a wait
set of the image and IMU subscriptions (at most ``INLINE_WAIT_S``, 6 ms, queueing the IMU that
comes meanwhile) for up to ``INLINE_IMAGES`` (16) frames before it returns to the executor, whose
turn per message costs 0.1-0.3 ms of Python; timers and parameter requests wait at most that long.
A burst of IMU messages is decoded and queued at once (one by one where one of them is bad).

Every accepted image produces exactly one ``tracks`` message (possibly empty). Bad input
never stops the node: it is skipped, counted per reason in ``diagnostics`` (``skipped.*``)
and warned about once per topic/reason (once per encoding for unsupported encodings, for at
most 32 kinds; echoed text truncated).

Skip reasons: ``unsupported_encoding``, ``zero_size``, ``step_mismatch``, ``data_size``,
``decode_error`` (compressed data that does not decode), ``malformed`` (unreadable message
or camera_info), ``no_calibration`` (calibration_source camera_info, none received yet),
``size_mismatch`` (image size differs from the calibration: both named), ``out_of_order``
(stamp not after the previous image's, by less than ``time_jump_threshold_s``),
``frontend_error``; ``frame_gap`` counts images missing from the stream (a stamp gap of
more than 1.5 median frame periods); ``imu_non_finite``, ``imu_out_of_range`` (beyond
``gyro_range`` / ``accel_range``) and ``imu_out_of_order`` count rejected IMU messages;
``stereo_unmatched`` counts left images processed without a right image; ``unusable_calibration``
camera_info messages whose camera the frontend parameters do not fit (e.g. a detector cell larger
than the image: said once, the next camera_info is tried again).
Events (``events.*``, nothing lost): ``time_resets`` (an image stamp jumping back, or forward
by more than ``time_jump_threshold_s``: a looped bag, a restarted driver, a clock jump; the
tracks start again, ids keep counting), ``imu_time_resets``, ``imu_gaps`` / ``imu_gap_samples``
(holes in the IMU stamps longer than 2.5 sample periods, and the samples missing in them),
``imu_incomplete``, ``empty_frame_id`` (tracks got ``camera_frame_id``),
``config_applied_live`` / ``tracker_rebuilt`` (parameter changes; a change the tracker cannot be
built with is refused when it is set, with the reason), ``tracker_rebuild_failed`` (a backstop:
the previous tracker went on), ``debug_images``.

Subscribed
----------
  image (sensor_msgs/Image, or sensor_msgs/CompressedImage on image/compressed with
      ``image_transport: compressed``; sensor-data QoS or reliable (``input_reliability``), depth
      ``queue_size``): left / mono camera
  image_right (the same type and QoS): right camera, only when ``stereo`` is true; paired with
      the left image of the same stamp (left images are processed alone while nobody publishes
      on image_right)
  imu (sensor_msgs/Imu, depth 1000): gyro for the tracker's motion prediction; drained before
      each image is processed, so the gyro up to the image's stamp is used
  camera_info, camera_info_right (sensor_msgs/CameraInfo): only with ``calibration_source:
      camera_info``: K, D (plumb_bob or equidistant), width, height of the first message are the
      calibration (T_BS from the parameters); images before it are skipped (no_calibration)

Published
---------
  tracks (sensor_msgs/PointCloud, reliable, depth 10), header = the image's stamp and frame id
      (``tracks_frame_id`` overrides it; an empty one becomes ``camera_frame_id``), in the
      ``tracks_layout``:
      vins_mono: one point per track, points = undistorted normalised (x, y, 1); channels
          0 id_of_point, 1 u_of_point, 2 v_of_point, 3 velocity_x_of_point, 4 velocity_y_of_point,
          5 score_of_point, 6 level_of_point, 7 age_of_point, and in stereo
          8 u_right_of_point, 9 v_right_of_point, 10 x_right_of_point, 11 y_right_of_point (NaN
          where a track has no right match)
      vins_fusion (VINS-Fusion's feature_callback reads channels by index): one point per
          observation, first every track in the left image (camera id 0), then every right-image
          match as its own point (camera id 1; points = the right undistorted (x, y, 1)); channels
          0 id_of_point, 1 camera_id, 2 u_of_point, 3 v_of_point, 4 velocity_x_of_point,
          5 velocity_y_of_point (0 for right observations), 6 score_of_point, 7 level_of_point,
          8 age_of_point (6..8 are what VINS-Fusion reads as its ground-truth point whenever there
          are more than five channels: they keep its reader in range)
  tracks_image (sensor_msgs/Image, bgr8 or mono8, reliable, depth 2): the image with tracks drawn,
      built (in its own thread) only while someone subscribes, at most debug_image_max_rate_hz
  diagnostics (diagnostic_msgs/DiagnosticArray, every ``diagnostics_period_s``): input/output
      rates, latency (receive -> publish), overhead (latency minus process()), per-stage times,
      counts per skip reason and event

Parameters
----------
Node parameters (read-only unless said otherwise):
  device (string, default 'auto', one of auto|cuda|cpu): where the frontend runs
  calibration_source (string, default 'parameters', one of parameters|camera_info)
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
  image_transport (string, default 'raw', one of raw|compressed)
  queue_size (integer, default 10, range [1, 1000]): image subscription depth
  input_reliability (string, default 'best_effort', one of best_effort|reliable): QoS of the image
      and IMU subscriptions; best effort (sensor data) matches any publisher, reliable is needed
      for images over Fast DDS's 512 KB shared-memory segment (their best-effort UDP fragments
      get dropped) and where no frame may be lost (vilib-ros run uses it)
  stereo_timeout_s (double, default 0.2, range [0, 10]): a left image whose right image has not
      arrived after this long is processed alone (counted as stereo_unmatched)
  imu_wait_s (double, default 0.1, range [0, 10]): longest wait for the IMU to reach an image's stamp
  warm_up_frames (integer, default 8, range [0, 100]): synthetic frames run through a new tracker
      before the first image (module loading, CUDA graph capture per frame slot, memory pools: the
      first real frames paid for them, tens of ms of latency that later frames queue behind);
      the tracker is then reset (its ids go on after the warm-up's)
  time_jump_threshold_s (double, default 1.0, range [0.001, 3600]): see time_resets above
  gyro_range (double, default 35.0 rad/s), accel_range (double, default 160.0 m/s^2): sensor range
  tracks_layout (string, default 'vins_mono', one of vins_mono|vins_fusion)
  publish_debug_image (bool, default true, writable): allow ``tracks_image``
  debug_image_encoding (string, default 'bgr8', one of bgr8|mono8, writable)
  debug_image_max_rate_hz (double, default 10.0, range [0.1, 1000], writable)
  diagnostics_period_s (double, default 1.0, range [0.1, 60])
  stats_path (string, default ''): write a JSON summary (counts, latency, overhead, per-stage times,
      CPU time per frame, GC pauses, and ``frames``: per frame of the last 4096 its stamp and when
      the middleware received it, the previous callback ended, its callback began, the IMU was
      there, process() returned, the tracks were published) here on shutdown
  tracks_frame_id (string, default ''): frame id of ``tracks`` ('' = the image's)
  camera_frame_id (string, default 'cam0'): frame id of ``tracks`` when the image's is empty too
Frontend parameters, named as the fields of :class:`vilib_ros.frontend.FrontendConfig`, nested
dataclasses as prefixes; range, choices and help live once, in
:data:`vilib_ros.nodes.params.FRONTEND_PARAMS`. Writable except ``stereo``: a change is checked
(on-set: the whole FrontendConfig must validate) and then applied (post-set): kernel scalars
(threshold, iterations, eps, eigenvalue and residual limits, FB / RANSAC thresholds, ...) live,
anything structural by rebuilding the tracker, whose new tracks take ids after the last one
handed out (ids are never reused within a run). This table is the second part of
``python -m vilib_ros.nodes.frontend_node --print-parameters`` (test_launch_files checks):
  detector.threshold (double, default 10.0, range [1.0, 254.0]): FAST threshold eps (intensity levels; the
      floor is used)
  detector.arc_length (integer, default 10, range [9, 12]): FAST contiguous arc length N
  detector.score (string, default 'sad_arc', one of sad_circle|sad_arc|max_threshold): corner score: SAD over
      the circle, SAD over the arc, or max threshold
  detector.levels (integer, default 2, range [1, 4]): pyramid levels used for detection
  detector.cell_width (integer, default 32, range [32, 1024] step 32): NMS cell width in level-0 pixels
      (multiple of 32)
  detector.cell_height (integer, default 32, range [1, 1024]): NMS cell height in level-0 pixels (multiple of
      2^(levels-1))
  detector.nms_radius (integer, default 1, range [1, 4]): NMS Moore neighbourhood radius n ((2n+1)^2 pixels)
  detector.border (integer, default 8, range [3, 256]): pixels skipped at each level's edge
  tracker.mode (string, default 'gain_offset', one of translation|offset|gain|gain_offset): LK photometric
      model: translation, +offset, +gain, +gain+offset
  tracker.levels (integer, default 5, range [1, 8]): pyramid levels used for tracking
  tracker.patch_sizes (integer_array, default [16, 16, 16, 8, 8]): LK patch size per level (8 or 16)
  tracker.max_iterations (integer, default 30, range [1, 1000]): LK iterations per level
  tracker.eps (double, default 0.0005, range [1e-12, 1.0]): LK convergence: stop when the squared update is
      below this (level pixels^2)
  tracker.min_eigen (double, default 1e-05, range [0.0, 1.0]): reject flat patches: min eigenvalue of the
      gradient matrix / patch area
  tracker.max_residual (double, default 0.0, range [0.0, 255.0]): mean |residual| above which a track is
      dropped (0 = off)
  tracker.osc_eps (double, default 0.01, range [0.0, 100.0]): OpenCV's 'jumping back and forth': |dq_k +
      dq_k-1| < osc_eps in x and y (level px; 0 = off)
  tracker.osc_growth (double, default 1.0, range [0.0, 100.0]): a reversal that does not shrink: dq_k . dq_k-1
      < 0 and |dq_k|^2 >= osc_growth |dq_k-1|^2 (0 = off)
  tracker.cpu_backend (string, default 'numpy', one of numpy|opencv): CPU LK implementation (opencv: frame to
      frame, translation only: mode, warp translation, template previous)
  tracker.template (string, default 'reference', one of previous|reference): LK template: the previous frame's
      patch, or the patch of the frame where the track was detected
  tracker.template_refresh_residual (double, default 0.0, range [0.0, 255.0]): reference: take the template
      again where the mean |residual| exceeds this (0..255; 0 = never)
  tracker.template_max_age (integer, default 0, range [0, 100000]): reference: take the template again after
      this many frames (0 = never)
  tracker.warp (string, default 'affine', one of translation|affine): LK warp: translation, or affine (the
      patch's deformation since its template)
  max_features (integer, default 0, range [0, 100000]): target track count (0 = one per detector cell)
  min_track_fraction (double, default 0.3, range [0.0, 1.0]): redetect when live tracks drop below this
      fraction of the target
  fb_check (bool, default True): forward-backward consistency check of every track
  fb_threshold (double, default 0.5, range [1e-06, 1000.0]): forward-backward error limit (pixels)
  fb_levels (integer, default 0, range [0, 8]): pyramid levels of the forward-backward check's backward track,
      finest first; it starts at the track's old position (0 = all of tracker.levels; at most tracker.levels)
  ransac (bool, default True): fundamental-matrix RANSAC outlier rejection
  ransac_threshold (double, default 1.0, range [1e-06, 1000.0]): RANSAC inlier threshold (pixels)
  ransac_confidence (double, default 0.99, range [0.501, 0.999999]): RANSAC confidence
  imu_prediction (bool, default True): predict track positions from the gyro (rotation) when IMU is given
  imu_max_gap_ms (double, default 50.0, range [0.001, 1000000.0]): largest IMU gap bridged by the gyro
      prediction
  stereo (bool, default True, read-only): subscribe to image_right and track into the right image (stereo);
      without right images the left ones are processed alone
  stereo_epipolar_threshold (double, default 2.0, range [0.0, 1000.0]): epipolar limit of stereo matches
      (pixels; 0 = off)
  use_graph (bool, default True): GPU: capture the per-frame kernel sequence in a CUDA graph
"""
from __future__ import annotations

import time

import numpy as np
from diagnostic_msgs.msg import DiagnosticArray, DiagnosticStatus
from rclpy.node import Node
from sensor_msgs.msg import CameraInfo, CompressedImage, Image, Imu, PointCloud

from vilib_ros.interrupts import raise_if_stop_requested
from vilib_ros.nodes._common import (GcPauses, SubscriptionWaiter, diagnostic_status, exit_main, reliable_qos,
                                     sensor_qos, write_json)
from vilib_ros.nodes.cdr import encode_image
from vilib_ros.nodes.conversions import TracksEncoder, camera_from_camera_info, draw_tracks
from vilib_ros.nodes.debug_image import DebugImageWorker
from vilib_ros.nodes.frontend_input import FrontendInput
from vilib_ros.nodes.frontend_stats import FrontendStats
from vilib_ros.nodes.frontend_setup import (build_config, frontend_specs, make_tracker, node_specs, parameter_table,
                                            warm_up)
from vilib_ros.nodes.input_guard import ImuQueue, TimeJump
from vilib_ros.nodes.params import camera_from_params, check_on_set, declare_all
from vilib_ros.nodes.stereo_pairing import StereoPairer

class FrontendNode(FrontendInput, Node):
    def __init__(self):
        super().__init__("frontend_node")
        self.fe_specs = frontend_specs()
        self.fe_names = {s.name for s in self.fe_specs}
        self.specs = node_specs(any(s.name == "stereo" for s in self.fe_specs)) + self.fe_specs
        self.p = declare_all(self, self.specs)
        self.stereo = bool(self.p.get("stereo", False))
        self.config = self._build_config(self.p)
        self.st = FrontendStats(self.get_logger().warning)
        self.gc = GcPauses()
        self.device = self.p["device"]
        self.tracker = None
        self.cam = self.cam_right = None
        self.encoder = TracksEncoder(self.p["tracks_layout"])
        if self.p["calibration_source"] == "parameters":
            cam, cam_right = camera_from_params(self.p), camera_from_params(self.p, "right.") if self.stereo else None
            if cam_right is not None and (cam_right.width, cam_right.height) != (cam.width, cam.height):
                raise ValueError(f"right.image_width x right.image_height ({cam_right.width}x{cam_right.height}) "
                                 f"differ from image_width x image_height ({cam.width}x{cam.height}): stereo "
                                 "needs two images of one size; set right.* too, or stereo:=false")
            self._set_calibration(cam, cam_right)
        self._check_on_set = check_on_set(self.specs)
        self.add_on_set_parameters_callback(self._validate_parameters)
        self.add_post_set_parameters_callback(self._apply_parameters)

        q = int(self.p["queue_size"])
        in_qos = reliable_qos if self.p["input_reliability"] == "reliable" else sensor_qos
        self.pub_tracks = self.create_publisher(PointCloud, "tracks", reliable_qos(10))
        # reliable (depth 2): a bgr8 frame is over Fast DDS's 512 KB shared-memory segment and its
        # best-effort UDP fragments get lost; best-effort subscribers (rviz) still match
        self.pub_debug = self.create_publisher(Image, "tracks_image", reliable_qos(2))
        self.pub_diag = self.create_publisher(DiagnosticArray, "diagnostics", reliable_qos(10))
        self.debug = DebugImageWorker(self._draw_and_publish, self.p["debug_image_max_rate_hz"])
        compressed = self.p["image_transport"] == "compressed"
        kind, suffix = (CompressedImage, "/compressed") if compressed else (Image, "")
        # callbacks with the message info: the middleware's receive time goes into the frame trace
        self.sub_image = self.create_subscription(kind, "image" + suffix,
                                                  lambda m, info: self._on_image(m, "image", info), in_qos(q),
                                                  raw=not compressed)
        self._image_subs = [(self.sub_image, "image")]
        self.sub_right = None
        if self.stereo:
            self.sub_right = self.create_subscription(kind, "image_right" + suffix,
                                                      lambda m, info: self._on_image(m, "image_right", info), in_qos(q),
                                                      raw=not compressed)
            self._image_subs.insert(0, (self.sub_right, "image_right"))
            self.pairs = StereoPairer(self._process, lambda: self.count_publishers(self.sub_right.topic_name) > 0,
                                      self.p["stereo_timeout_s"], lambda: self.st.skips.count("stereo_unmatched"))
            self.create_timer(0.01, self.pairs.flush)
        if self.p["calibration_source"] == "camera_info":
            self._infos: dict = {}
            for topic in ("camera_info",) + (("camera_info_right",) if self.stereo else ()):
                self.create_subscription(CameraInfo, topic, lambda m, t=topic: self._on_camera_info(m, t),
                                         reliable_qos(1) if self.p["input_reliability"] == "reliable" else sensor_qos(1))
        self.sub_imu = self.create_subscription(Imu, "imu", self._on_imu, in_qos(1000), raw=True)
        # the image callback waits for the next image (and an image for its IMU) on these, not in the executor
        self._stream_waiter = SubscriptionWaiter(self, [sub for sub, _ in self._image_subs] + [self.sub_imu])
        self._imu_waiter = SubscriptionWaiter(self, [self.sub_imu])
        self.imu = ImuQueue(gyro_range=self.p["gyro_range"], accel_range=self.p["accel_range"],
                            jump_threshold_ns=int(self.p["time_jump_threshold_s"] * 1e9))
        self.clock = TimeJump(int(self.p["time_jump_threshold_s"] * 1e9))
        self.periods: list = []
        self._dds_rx: dict = {}          # stamp -> the middleware's receive time (monotonic s)
        self._cb_end = self._prev_cb_end = float("nan")     # when the last callback ended (the trace)
        self.create_timer(float(self.p["diagnostics_period_s"]), self._publish_diagnostics)
        self.get_logger().info(
            f"frontend on {self.device} ({self._describe()}, tracks layout {self.p['tracks_layout']}, "
            f"{self.p['image_transport']} images)")

    def _describe(self) -> str:
        if self.cam is None:
            return "calibration from the first camera_info message"
        return (f"{self.cam.width}x{self.cam.height}, {self.cam.distortion_model}"
                f"{', stereo' if self.stereo else ''}")

    # --- configuration -------------------------------------------------------------------
    def _build_config(self, values: dict):
        return build_config(values, self.fe_names)

    def _set_calibration(self, cam, cam_right) -> None:
        self.cam, self.cam_right = cam, cam_right
        self.tracker = self._make_tracker(0)

    def _make_tracker(self, first_id: int):
        """The tracker (:func:`vilib_ros.nodes.frontend_setup.make_tracker`), warmed up on
        ``warm_up_frames`` synthetic frames (with the image conversion and the tracks encoder: their
        first calls imported OpenCV and built buffers, 20-25 ms on the first real frame, the frames
        behind it queued). A failed warm-up is logged, never fatal: the real frames then pay for it."""
        right = self.cam_right if self.stereo else None
        tracker = make_tracker(self.cam, self.config, self.p["device"], first_id, right)
        self.device = getattr(tracker, "device", self.p["device"])
        n = int(self.p["warm_up_frames"])
        if n > 0:
            try:
                s = warm_up(tracker, n, self.cam, right is not None, lambda b: self._convert(b, "image"),
                            lambda fr: self.encoder.encode(fr, "warm_up"))
                raise_if_stop_requested()   # a stop whose exception was lost in the warm-up ends it here
                self.get_logger().info(f"tracker warmed up on {n} synthetic frames in {s * 1e3:.0f} ms")
            except Exception as exc:  # noqa: BLE001 - the first real frame will say what is wrong
                self.get_logger().warning(f"tracker warm-up failed ({exc!r}); the first frames pay for it")
        return tracker

    def _on_camera_info(self, msg, topic: str) -> None:
        if self.tracker is not None or topic in self._infos:
            return
        prefix = "right." if topic == "camera_info_right" else ""
        try:
            self._infos[topic] = camera_from_camera_info(msg, np.asarray(self.p[prefix + "T_BS"]).reshape(4, 4))
        except ValueError as exc:
            self.st.skips.skip("malformed", topic, str(exc))
            return
        if len(self._infos) == (2 if self.stereo else 1):
            try:
                self._set_calibration(self._infos["camera_info"], self._infos.get("camera_info_right"))
            except ValueError as exc:
                # the parameters do not fit this camera (e.g. a cell larger than its image): say so, and
                # try again with the next camera_info (after the parameters are changed)
                self._infos.clear()
                self.cam = self.cam_right = self.tracker = None
                self.st.skips.skip("unusable_calibration", topic, f"no tracker for this camera: {exc}")
                return
            self.get_logger().info(f"calibration from camera_info: {self._describe()}")

    def _validate_parameters(self, params):
        """on-set: reject values outside the declared choices, or a FrontendConfig that does not validate."""
        from rcl_interfaces.msg import SetParametersResult

        res = self._check_on_set(params)
        changed = {p.name: (list(p.value) if isinstance(p.value, tuple) else p.value)
                   for p in params if p.name in self.fe_names}
        if res.successful and changed:
            try:
                cfg = self._build_config({**self.p, **changed})
                if self.cam is not None:
                    from vilib_ros.frontend.feature_tracker import check_buildable

                    # what building the tracker would refuse: the image's cells and border, the GPU's
                    # track table (regression: refused there, in the post-set callback, it ended the node)
                    check_buildable(self.cam.width, self.cam.height, cfg, self._build_device())
            except (ValueError, TypeError) as exc:
                return SetParametersResult(successful=False, reason=str(exc))
        return res

    def _build_device(self) -> str:
        """The device a rebuilt tracker would run on: the running one's, else the parameter's
        ('auto' checked as the CPU: where CUDA works, the build itself says what the GPU refuses)."""
        return getattr(self.tracker, "device", None) or ("cuda" if self.p["device"] == "cuda" else "cpu")

    def _apply_parameters(self, params) -> None:
        """post-set: scalars live (FeatureTracker.apply_config), a structural change rebuilds the
        tracker with ids continuing after the last one handed out."""
        for p in params:
            self.p[p.name] = list(p.value) if isinstance(p.value, tuple) else p.value
        if any(p.name == "debug_image_max_rate_hz" for p in params):
            self.debug.max_rate_hz = float(self.p["debug_image_max_rate_hz"])
        if not any(p.name in self.fe_names for p in params):
            return
        self.config = self._build_config(self.p)
        if self.tracker is None:
            return
        if self.tracker.apply_config(self.config):
            self.st.events["config_applied_live"] += 1
            self.get_logger().info("frontend parameters applied live: " + ", ".join(p.name for p in params))
        else:
            try:
                self.tracker = self._make_tracker(self.tracker.next_id)
            except ValueError as exc:   # checked on-set; a backstop, never the end of the node
                self.st.events["tracker_rebuild_failed"] += 1
                self.get_logger().error(f"frontend parameters changed, but the tracker cannot be rebuilt with them "
                                        f"({exc}); the previous tracker goes on")
                return
            self.st.events["tracker_rebuilt"] += 1
            self.get_logger().info("frontend parameters changed structurally: tracker rebuilt, tracks start "
                                   f"again with ids from {self.tracker.next_id}")

    # --- one frame -------------------------------------------------------------------------
    def _process(self, stamp: int, img: np.ndarray, frame_id: str, t_recv: float, img_right=None) -> None:
        if self.tracker is None:
            self.st.skips.skip("no_calibration", "image", "no camera_info received yet")
            return
        if img.shape != (self.cam.height, self.cam.width):
            self.st.skips.skip("size_mismatch", "image", f"image is {img.shape[1]}x{img.shape[0]}, the "
                               f"calibration ({self.p['calibration_source']}) is {self.cam.width}x{self.cam.height}")
            return
        if not self._check_stamp(stamp):
            return
        t_imu = time.monotonic()
        self._wait_for_imu(stamp)
        prev = self.clock.last if self.clock.last is not None and self.clock.last < stamp else stamp - 100_000_000
        gyro = self.imu.gyro_between(prev - 10_000_000, stamp)
        t0 = time.monotonic()
        self.st.node_stage["imu"].add((t0 - t_imu) * 1e3)
        try:
            # process() as its two halves, timed apart: submit (checks, the gyro's rotation, the
            # frame's copy, the launch) and result (the wait for the device, the TrackFrame)
            self.tracker.submit(img, stamp, gyro, image_right=img_right)
            t_sub = time.monotonic()
            frame = self.tracker.result()
        except ValueError as exc:
            self.st.skips.skip("frontend_error", "image", f"frontend rejected the image: {exc}")
            return
        except Exception as exc:  # noqa: BLE001 - never die on one frame
            self.st.skips.count("frontend_error")
            self.get_logger().error(f"frontend failed on stamp {stamp}: {exc!r}", throttle_duration_sec=5.0)
            return
        t1 = time.monotonic()
        self.st.node_stage["submit"].add((t_sub - t0) * 1e3)
        self.st.node_stage["result"].add((t1 - t_sub) * 1e3)
        self.clock.accept(stamp)
        out_id = self.p["tracks_frame_id"] or frame_id
        if not out_id:
            out_id = self.p["camera_frame_id"]
            self.st.events["empty_frame_id"] += 1
        self.pub_tracks.publish(self.encoder.encode(frame, out_id))
        t2 = time.monotonic()
        self.st.node_stage["publish"].add((t2 - t1) * 1e3)
        if self.st.tx.count == 0:
            self.gc.reset()             # the pauses from the first frame on (start-up apart)
        self.st.frame_done(t_recv, t0, t1, t2, frame, self._dds_rx.pop(stamp, float("nan")), self._prev_cb_end)
        if self.p["publish_debug_image"] and self.debug.due() and self.pub_debug.get_subscription_count() > 0:
            self.debug.offer(img, frame, out_id)

    def _draw_and_publish(self, img, frame, frame_id) -> None:
        """In the debug-image thread: draw the tracks and publish tracks_image."""
        dbg = draw_tracks(img, frame)
        if self.p["debug_image_encoding"] == "mono8":
            dbg = dbg.max(axis=2)   # circles stay visible (bright) in grey
        # serialized here in one copy (rclpy's serializer took 1-3 ms per image, holding the GIL
        # that the image callbacks wait for)
        self.pub_debug.publish(encode_image(frame.stamp_ns, frame_id, dbg, self.p["debug_image_encoding"]))
        self.st.events["debug_images"] += 1

    # --- diagnostics ---------------------------------------------------------------------
    def diagnostics_values(self) -> dict:
        d = self.st.diagnostics_values(self.device)
        d["events.imu_gaps"], d["events.imu_gap_samples"] = self.imu.gaps, self.imu.gap_samples
        return d

    def _publish_diagnostics(self) -> None:
        t = time.monotonic()
        self._build_and_publish_diagnostics()
        self._cb_end = time.monotonic()
        self.st.node_stage["diagnostics"].add((self._cb_end - t) * 1e3)

    def _build_and_publish_diagnostics(self) -> None:
        d = self.diagnostics_values()
        problems = self.st.skips.total()
        level = DiagnosticStatus.OK if problems == 0 else DiagnosticStatus.WARN
        level = level[0] if isinstance(level, bytes) else level
        msg = DiagnosticArray()
        msg.header.stamp = self.get_clock().now().to_msg()
        msg.status = [diagnostic_status(
            f"vilib_ros: {self.get_name()}", f"frontend ({self.device})", level,
            f"{d['output_rate_hz']:.1f} Hz, {d['features']} tracks, {problems} skipped", d)]
        self.pub_diag.publish(msg)

    def summary(self) -> dict:
        s = self.st.summary(self.get_name(), self.device)
        s["events"].update(imu_gaps=self.imu.gaps, imu_gap_samples=self.imu.gap_samples)
        s["gc_pauses"] = self.gc.summary()
        return s

    def close(self) -> None:
        self.debug.close()
        if self.stereo and self.pairs.lefts:
            self.st.skips.count("stereo_unmatched", len(self.pairs.lefts))
        if self.p.get("stats_path"):
            write_json(self.p["stats_path"], self.summary())


def main(args=None):
    exit_main(FrontendNode, args, parameter_table)


if __name__ == "__main__":
    main()
