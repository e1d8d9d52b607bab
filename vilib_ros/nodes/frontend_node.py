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
set of the image and IMU subscriptions (at most ``INLINE_WAIT_S``, queueing the IMU that comes
meanwhile) for up to ``INLINE_IMAGES`` frames before it returns to the executor, whose turn per
message costs Python time; timers and parameter requests wait at most that long.
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
      on image_right). Left images that go without a right image for 2 s (a mono camera with
      ``stereo`` on, a right camera that stopped) are warned about, naming the topic and
      ``stereo:=false`` (again every 10 s at most), and shown in ``diagnostics``
      (``stereo.right_missing_s``, ``stereo.left_alone``, level WARN)
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
Parameters: ``python -m vilib_ros.nodes.frontend_node --print-parameters``, or docs/parameters.md.
At start the node logs where its calibration comes from (``camera_yaml`` files, the parameters or
camera_info); where it is the declared defaults, EuRoC V1_01's cameras, the line is a warning. A new
tracker first runs ``warm_up_frames`` synthetic frames and is then reset (its ids go on after the
warm-up's).
``stats_path``: a JSON summary on shutdown (counts, latency, overhead, per-stage times, CPU time per
frame, GC pauses, and ``frames``: per frame of the last 4096 its stamp and when the middleware
received it, the previous callback ended, its callback began, the IMU was there, process() returned,
the tracks were published).
The frontend parameters are the fields of :class:`vilib_ros.frontend.FrontendConfig`, nested
dataclasses as prefixes (``detector.threshold``); their help, range and choices are written once, on
the fields. Writable except ``stereo``: a change is checked on-set (the whole FrontendConfig must
validate and fit the camera and device: refused with the reason otherwise) and then applied
(post-set): the fields marked live (kernel scalars: threshold, iterations, eps, eigenvalue and
residual limits, FB / RANSAC thresholds, ...) on the running tracker, anything structural by
rebuilding the tracker, whose new tracks take ids after the last one handed out (ids are never
reused within a run).
"""
from __future__ import annotations

import time

import numpy as np
from diagnostic_msgs.msg import DiagnosticArray, DiagnosticStatus
from rclpy.node import Node
from sensor_msgs.msg import CameraInfo, CompressedImage, Image, Imu, PointCloud

from vilib_ros.frontend.config import check_fits
from vilib_ros.interrupts import raise_if_stop_requested
from vilib_ros.nodes._common import (GcPauses, SubscriptionWaiter, diagnostic_status, exit_main, reliable_qos,
                                     sensor_qos, write_json)
from vilib_ros.nodes.cdr import encode_image
from vilib_ros.nodes.conversions import TracksEncoder, camera_from_camera_info, draw_tracks
from vilib_ros.nodes.debug_image import DebugImageWorker
from vilib_ros.nodes.frontend_input import FrontendInput
from vilib_ros.nodes.frontend_stats import FrontendStats
from vilib_ros.nodes.frontend_setup import (build_config, calibration_notice, frontend_specs, make_tracker,
                                            node_specs, parameter_table, warm_up)
from vilib_ros.nodes.input_guard import ImuQueue, TimeJump
from vilib_ros.nodes.params import add_parameter_callbacks, camera_from_params, check_on_set, declare_all
from vilib_ros.nodes.stereo_pairing import StereoPairer

#: a stereo frontend whose left images have gone without a right image this long says so
RIGHT_MISSING_WARN_S = 2.0
#: and again at most this often
RIGHT_MISSING_REPEAT_S = 10.0


class FrontendNode(FrontendInput, Node):
    def __init__(self):
        super().__init__("frontend_node")
        self.fe_specs = frontend_specs()
        self.fe_names = {s.name for s in self.fe_specs}
        self.specs = node_specs(any(s.name == "stereo" for s in self.fe_specs)) + self.fe_specs
        self.p = declare_all(self, self.specs)
        self.stereo = bool(self.p.get("stereo", False))
        # validated once, here and in the on-set callback for a change; the trackers take it as it is
        self.config = build_config(self.p, self.fe_names)
        self.st = FrontendStats(self.get_logger().warning)
        self.gc = GcPauses()
        self.device = self.p["device"]
        self.tracker = None
        self.cam = self.cam_right = None
        self.encoder = TracksEncoder(self.p["tracks_layout"])
        notice, euroc_defaults = calibration_notice(self.p, self.stereo)
        (self.get_logger().warning if euroc_defaults else self.get_logger().info)(notice)
        if self.p["calibration_source"] == "parameters":
            cam, cam_right = camera_from_params(self.p), camera_from_params(self.p, "right.") if self.stereo else None
            if cam_right is not None and (cam_right.width, cam_right.height) != (cam.width, cam.height):
                raise ValueError(f"right.image_width x right.image_height ({cam_right.width}x{cam_right.height}) "
                                 f"differ from image_width x image_height ({cam.width}x{cam.height}): stereo "
                                 "needs two images of one size; set right.* too, or stereo:=false")
            self._set_calibration(cam, cam_right)
        self._check_on_set = check_on_set(self.specs)
        add_parameter_callbacks(self, self._validate_parameters, self._apply_parameters)

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
            self._right_warned_at = None
            self.create_timer(0.5, self._check_right_stream)
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
    def _set_calibration(self, cam, cam_right) -> None:
        self.cam, self.cam_right = cam, cam_right
        self.tracker = self._make_tracker(0)

    def _make_tracker(self, first_id: int):
        """The tracker (:func:`vilib_ros.nodes.frontend_setup.make_tracker`) of the validated
        ``self.config``, warmed up on ``warm_up_frames`` synthetic frames (with the image conversion and
        the tracks encoder: their first calls import OpenCV and build buffers, which the first real frame
        and the frames queued behind it would wait for). A failed warm-up is logged, never fatal: the
        real frames then pay for it."""
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
        """on-set: reject values outside the declared choices, a FrontendConfig that does not validate,
        or one that does not fit the camera and device (what building the tracker would refuse: the
        image's cells and border, the GPU's track table; refused here, not in the post-set callback,
        where it could only stop the node)."""
        from rcl_interfaces.msg import SetParametersResult

        res = self._check_on_set(params)
        changed = {p.name: (list(p.value) if isinstance(p.value, tuple) else p.value)
                   for p in params if p.name in self.fe_names}
        if res.successful and changed:
            try:
                cfg = build_config({**self.p, **changed}, self.fe_names)
                if self.cam is not None:
                    check_fits(self.cam.width, self.cam.height, cfg, self._build_device())
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
        # exactly the values _validate_parameters checked: not validated again
        self.config = build_config(self.p, self.fe_names, check=False)
        if self.tracker is None:
            return
        if self.tracker.apply_config(self.config, validated=True):
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
        # serialized here in one copy (rclpy's serializer holds the GIL that the image callbacks
        # wait for, for milliseconds per image)
        self.pub_debug.publish(encode_image(frame.stamp_ns, frame_id, dbg, self.p["debug_image_encoding"]))
        self.st.events["debug_images"] += 1

    # --- diagnostics ---------------------------------------------------------------------
    def _right_missing(self) -> str:
        """What to say where a stereo frontend's left images go without right images ('' = nothing)."""
        if not self.stereo:
            return ""
        missing = self.pairs.right_missing_s()
        if missing < RIGHT_MISSING_WARN_S:
            return ""
        return (f"stereo is on, but no image came on {self.sub_right.topic_name} for {missing:.0f} s "
                f"({self.pairs.lefts_alone} left images tracked without a right one); for a mono camera "
                "set stereo:=false (parameter stereo: false)")

    def _check_right_stream(self) -> None:
        """Warn (then every RIGHT_MISSING_REPEAT_S at most) while left images go without right images."""
        said = self._right_missing()
        now = time.monotonic()
        if said and (self._right_warned_at is None or now - self._right_warned_at >= RIGHT_MISSING_REPEAT_S):
            self._right_warned_at = now
            self.get_logger().warning(said)
        elif not said:
            self._right_warned_at = None

    def diagnostics_values(self) -> dict:
        d = self.st.diagnostics_values(self.device)
        d["events.imu_gaps"], d["events.imu_gap_samples"] = self.imu.gaps, self.imu.gap_samples
        if self.stereo:
            d["stereo.right_missing_s"] = round(self.pairs.right_missing_s(), 1)
            d["stereo.left_alone"] = self.pairs.lefts_alone
        return d

    def _publish_diagnostics(self) -> None:
        t = time.monotonic()
        self._build_and_publish_diagnostics()
        self._cb_end = time.monotonic()
        self.st.node_stage["diagnostics"].add((self._cb_end - t) * 1e3)

    def _build_and_publish_diagnostics(self) -> None:
        d = self.diagnostics_values()
        problems = self.st.skips.total()
        right_missing = self._right_missing()
        level = DiagnosticStatus.OK if problems == 0 and not right_missing else DiagnosticStatus.WARN
        level = level[0] if isinstance(level, bytes) else level
        msg = DiagnosticArray()
        msg.header.stamp = self.get_clock().now().to_msg()
        text = f"{d['output_rate_hz']:.1f} Hz, {d['features']} tracks, {problems} skipped"
        msg.status = [diagnostic_status(
            f"vilib_ros: {self.get_name()}", f"frontend ({self.device})", level,
            text + (f"; {right_missing}" if right_missing else ""), d)]
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
