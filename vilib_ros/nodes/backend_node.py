"""backend_node: visual-inertial odometry from the frontend's tracks and the IMU (separate process).

Runs :class:`vilib_ros.backend.VioEstimator` (IMU preintegration + sliding-window
bundle adjustment on gtsam's factors: our own smoother in stereo, gtsam's iSAM2 in mono; see
``solver``) with ``estimator: auto``, and refuses to start where the backend's dependencies
(gtsam, scipy: the ``backend`` extra) do not import: ``BackendNode: cannot start: the backend
needs gtsam: ...``, exit 2. With ``estimator: none`` it only records what it receives -- counts in
``diagnostics`` and the summary file -- and says so once in the log. A bad message
(malformed tracks, non-finite IMU, stamps going backwards) or an estimator failure is
counted and skipped; the node never dies on one. A tracks stamp jumping back, or forward by
more than ``time_jump_threshold_s`` together with the IMU (a looped bag, a restarted driver,
a clock jump), is a time reset: logged, counted (``time_resets``), the estimator starts again
from scratch on the new time line (its trajectory so far is kept for the file). A forward
jump of the tracks alone, over continuous IMU, is a hole in the vision (``tracks_gaps``): the
IMU bridges it. The IMU has a ring of its own (a jump empties it; gaps counted in
``imu_gaps``); the estimator is fed from it up to each frame, so both meet on one time line.
The input side (IMU, tracks, their stamps) is :class:`vilib_ros.nodes.backend_input.BackendInput`.

The process runs one OpenBLAS thread (:mod:`vilib_ros.nodes._single_blas`: the backend's matrices are
small, an idle pool only spins); ``vilib-ros run`` and the launch files start it with jemalloc where
installed (:mod:`vilib_ros.allocator`: gtsam's many small allocations).

Frames follow REP 105: the estimate is the pose of ``base_frame`` (the body = IMU frame) in
``odom_frame`` (continuous, drifting; a ``map`` frame above it is a localisation system's).

Subscribed
----------
  tracks (sensor_msgs/PointCloud, reliable, depth 2000): from frontend_node, either tracks
      layout (vins_mono, or vins_fusion: camera id 1 = right observations); the right-camera
      observations are used when ``stereo``; while tracks stream, the tracks callback takes the
      next ones itself (waiting briefly for each on a wait set): one executor turn per burst
  imu (sensor_msgs/Imu, sensor-data QoS or reliable (``input_reliability``), depth 20000): read
      serialized, every waiting sample taken at once (one executor turn per batch, not per sample)

Published
---------
  odometry (nav_msgs/Odometry): pose of ``base_frame`` in ``odom_frame`` at frame rate,
      ``child_frame_id`` = ``base_frame``, twist in ``base_frame``. pose.covariance: the
      smoother's marginal of the newest keyframe pose propagated by the IMU to the frame (it grows
      between keyframes and while tracking is lost), order (x, y, z, rot x, rot y, rot z),
      perturbations in ``odom_frame``; twist.covariance: the velocity's in ``base_frame``
      (linear part; the angular part is not estimated: 1e3 on its diagonal). Zero before
      the first keyframe is optimised (always zero with ``odometry_covariance`` off). See
      :mod:`vilib_ros.backend.covariance` and :mod:`vilib_ros.backend.health`.
  odometry_imu (nav_msgs/Odometry): the same pose propagated with the IMU at IMU rate, its
      covariance propagated the same way (zero with ``odometry_covariance`` off)
  path (nav_msgs/Path): the frame-rate poses so far (at most ``path_max_length``), republished
      every ``path_publish_period_s`` while someone subscribes (a viewer needs no more; the whole
      path every frame would cost O(length) per frame), serialized from arrays
  landmarks (visualization_msgs/MarkerArray): the landmarks in the window (POINTS), on keyframes
  /tf (tf2_msgs/TFMessage, with ``publish_tf``): ``odom_frame -> base_frame`` per odometry message
  /tf_static (tf2_msgs/TFMessage, transient local, with ``publish_tf``): ``base_frame -> cam0``
      (and ``-> cam1`` in stereo) from ``T_BS``, ``base_frame -> imu_frame_id`` (identity: the
      body is the IMU)
  diagnostics (diagnostic_msgs/DiagnosticArray): rates, per-frame time, keyframes, resets, skip counts,
      ``tracking`` (ok | lost | initialising) and how long a loss has lasted: WARN while tracking is lost
  backend_processed (std_msgs/Header, reliable, depth 10): the stamp of each tracks message the
      backend has finished (estimated, or taken while it initialises); a replay paces on it

Parameters
----------
Parameters: ``python -m vilib_ros.nodes.backend_node --print-parameters``, or docs/parameters.md;
all read-only. The node's own (calibration as for frontend_node, ``stereo``, the IMU noise file,
outputs, frames, QoS, waits) come first; the estimator's are the fields of
:class:`vilib_ros.backend.BackendConfig`, whose help, range and choices are written once, on the
fields. ``trajectory_path``: the trajectory (TUM format), appended as poses are published and
flushed every ``trajectory_flush_s`` (a killed backend keeps it), rewritten with the smoothed
estimate at a clean shutdown. ``odometry_covariance``: the smoother's marginals go into the
odometry's covariances once per keyframe (the own smoother: from its last Cholesky factor; iSAM2:
the newest state is the Bayes tree's root clique); off: zeros.
"""
from __future__ import annotations

import collections
import dataclasses
import time

import vilib_ros.nodes._single_blas  # noqa: F401, I001 - first: one OpenBLAS thread (see there)
import numpy as np
from diagnostic_msgs.msg import DiagnosticArray, DiagnosticStatus
from geometry_msgs.msg import Point
from nav_msgs.msg import Odometry
from nav_msgs.msg import Path as PathMsg
from rclpy.node import Node
from sensor_msgs.msg import Imu, PointCloud
from std_msgs.msg import Header
from visualization_msgs.msg import Marker, MarkerArray

from vilib_ros.backend.config import BackendConfig
from vilib_ros.camera import euroc_cam0
from vilib_ros.dependencies import require_backend
from vilib_ros.nodes._common import (GcPauses, RateMeter, Stat, SubscriptionWaiter, diagnostic_status, exit_main,
                                     latched_qos, reliable_qos, sensor_qos, write_json)
from vilib_ros.nodes.backend_input import BackendInput
from vilib_ros.nodes.backend_outputs import PathBuffer, TrajectoryLog, odom_tf_bytes, odometry_bytes, static_transforms
from vilib_ros.nodes.cdr import encode_header
from vilib_ros.nodes.conversions import ns_to_stamp
from vilib_ros.nodes.input_guard import ImuQueue, SkipLog, TimeJump
from vilib_ros.nodes.params import (ParamSpec, build_dataclass, camera_from_params, camera_specs, declare_all,
                                    default_right, specs_from_dataclass)

#: subscription depths: at 20 Hz, 100 s of tracks and of 200 Hz IMU
TRACKS_DEPTH, IMU_DEPTH = 2000, 20000


def backend_specs() -> list[ParamSpec]:
    """The BackendConfig fields as parameters, all read-only (help, range, choices from the fields'
    metadata)."""
    names = [f.name for f in dataclasses.fields(BackendConfig)]
    return specs_from_dataclass(BackendConfig(), read_only=names)


def node_specs() -> list[ParamSpec]:
    specs = [ParamSpec("estimator", "auto", "auto = run VioEstimator (needs gtsam: the backend extra); none = record "
                       "only",
                       choices=("auto", "none"), read_only=True)]
    specs += camera_specs("", euroc_cam0(), "left (cam0) camera")
    specs += camera_specs("right.", default_right(), "right (cam1) camera")
    specs += [
        ParamSpec("stereo", False, "use the right-camera channels of the tracks (stereo factors)", read_only=True),
        ParamSpec("imu_yaml", "", "EuRoC imu0/sensor.yaml for the IMU noise ('' = EuRoC defaults)", read_only=True),
        ParamSpec("trajectory_path", "", "the trajectory (TUM format): appended as poses are published, flushed "
                  "every trajectory_flush_s, rewritten with the smoothed estimate at a clean shutdown", read_only=True),
        ParamSpec("trajectory_flush_s", 1.0, "flush period of the trajectory file, s", range=(0.0, 3600.0),
                  read_only=True),
        ParamSpec("stats_path", "", "write a JSON summary here on shutdown", read_only=True),
        ParamSpec("odom_frame", "odom", "REP 105 odometry frame: frame id of odometry, path and landmarks",
                  read_only=True),
        ParamSpec("base_frame", "base_link", "REP 105 body frame (the IMU): child frame id of odometry",
                  read_only=True),
        ParamSpec("camera_frame_ids", ["cam0", "cam1"], "frame ids of the left and right camera (static "
                  "transforms from T_BS)", read_only=True),
        ParamSpec("imu_frame_id", "imu0", "frame id of the IMU (static transform: identity, the body is the IMU)",
                  read_only=True),
        ParamSpec("publish_tf", True, "publish odom -> base on /tf and the sensor extrinsics on /tf_static",
                  read_only=True),
        ParamSpec("time_jump_threshold_s", 1.0, "a stamp jumping back, or forward by more than this, is a time "
                  "reset: the estimator starts again", range=(0.001, 3600.0), read_only=True),
        ParamSpec("publish_odometry_imu", True, "publish odometry_imu at IMU rate", read_only=True),
        ParamSpec("odometry_covariance", True, "fill the odometry covariances from the smoother's marginals once "
                  "per keyframe (off: zeros)", read_only=True),
        ParamSpec("path_max_length", 20000, "poses kept in the published path (oldest dropped)",
                  range=(1, 10_000_000), read_only=True),
        ParamSpec("path_publish_period_s", 0.5, "path republishing period while subscribed, s (0 = every frame)",
                  range=(0.0, 60.0), read_only=True),
        ParamSpec("diagnostics_period_s", 1.0, "diagnostics publishing period", range=(0.1, 60.0), read_only=True),
        ParamSpec("input_reliability", "best_effort", "QoS reliability of the IMU subscription: best_effort "
                  "(sensor data) matches every publisher; reliable loses nothing under load",
                  choices=("best_effort", "reliable"), read_only=True),
        ParamSpec("imu_wait_s", 0.5, "longest a frame waits for the IMU to reach its stamp", range=(0.0, 60.0),
                  read_only=True),
    ]
    return specs


def parameter_table() -> list[ParamSpec]:
    return node_specs() + backend_specs()


def _imu_noise_from_yaml(path: str) -> dict | None:
    """The IMU noise of an EuRoC / Kalibr ``imu0/sensor.yaml``; keys it lacks keep the EuRoC defaults
    (said in the log). A file that does not parse, or that has none of the four keys (a camera's
    sensor.yaml given by mistake), is a ValueError with the reason (not a YAML traceback, nor a silent
    start with the defaults)."""
    if not path:
        return None
    import logging

    import yaml

    from vilib_ros.camera import load_euroc_yaml

    try:
        d = load_euroc_yaml(path)
    except (OSError, yaml.YAMLError, UnicodeDecodeError) as exc:
        raise ValueError(f"imu_yaml {path}: cannot read the IMU noise ({str(exc).splitlines()[0]})") from None
    from vilib_ros.backend.imu import IMU_NOISE_ALIASES, normalise_imu_noise

    known = {a for aliases in IMU_NOISE_ALIASES.values() for a in aliases}
    if not isinstance(d, dict) or not known & set(d):
        raise ValueError(f"imu_yaml {path}: none of {', '.join(IMU_NOISE_ALIASES)} (or their usual aliases): "
                         "not an IMU's sensor.yaml")
    noise = {k: d[k] for k in known & set(d)}
    missing = [k for k, aliases in IMU_NOISE_ALIASES.items() if not set(aliases) & set(noise)]
    if missing:
        logging.getLogger("vilib_ros.nodes").warning("imu_yaml %s has no %s: EuRoC's default for it", path,
                                                     ", ".join(missing))
    try:
        return normalise_imu_noise(noise)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"imu_yaml {path}: {exc}") from None


class BackendNode(BackendInput, Node):
    def __init__(self):
        super().__init__("backend_node")
        self.be_specs = backend_specs()
        self.specs = node_specs() + self.be_specs
        self.p = declare_all(self, self.specs)
        if self.p["estimator"] == "auto":
            require_backend()       # a MissingDependency (ValueError): one line naming gtsam and the extra
        self.cam0 = camera_from_params(self.p)
        self.cam1 = camera_from_params(self.p, "right.") if self.p["stereo"] else None
        if self.p["mode"] == "stereo" and not self.p["stereo"]:
            raise ValueError("mode:=stereo needs stereo:=true (the tracks' right-camera channels and the right.* "
                             "calibration); without it the backend runs mono (mode:=auto or mode:=mono)")
        self.estimator = None
        self.mode = "record-only"
        self.segments: list = []       # (t, p, q) of estimators ended by a time reset
        if self.p["estimator"] == "auto":
            self.estimator = self._make_estimator()
            self.mode = f"VioEstimator ({self.estimator.mode})"
        else:
            self.get_logger().info("estimator: none -- recording only, no odometry will be published")

        self.pub_odom = self.create_publisher(Odometry, "odometry", reliable_qos(10))
        self.pub_odom_imu = self.create_publisher(Odometry, "odometry_imu", reliable_qos(50))
        self.pub_path = self.create_publisher(PathMsg, "path", reliable_qos(2))
        self.pub_lm = self.create_publisher(MarkerArray, "landmarks", reliable_qos(2))
        self.pub_diag = self.create_publisher(DiagnosticArray, "diagnostics", reliable_qos(10))
        self.pub_processed = self.create_publisher(Header, "backend_processed", reliable_qos(10))
        self.pub_tf = None
        if self.p["publish_tf"]:
            self._start_tf()
        imu_qos = reliable_qos if self.p["input_reliability"] == "reliable" else sensor_qos
        # deep queues: the backend is not paced by a replay (the player waits for the frontend's
        # tracks only), and behind a slow keyframe it must catch up, not drop (a fast replay
        # overflows shallow queues and the trajectory is lost)
        self.sub_imu = self.create_subscription(Imu, "imu", self._on_imu, imu_qos(IMU_DEPTH), raw=True)
        self.sub_tracks = self.create_subscription(PointCloud, "tracks", self._on_tracks, reliable_qos(TRACKS_DEPTH),
                                                   raw=True)
        # Frames wait here until the IMU has caught up with their stamp (IMU and tracks come on
        # separate topics, so a frame can overtake the IMU samples before it) or imu_wait_s passed.
        self.pending: collections.deque = collections.deque()
        self.create_timer(0.02, self._drain)
        # the tracks callback waits here for the next tracks message while tracks stream (and for the
        # IMU too where a frame waits for it or odometry_imu is subscribed)
        self._stream_waiter = SubscriptionWaiter(self, [self.sub_tracks, self.sub_imu])
        self._tracks_waiter = SubscriptionWaiter(self, [self.sub_tracks])

        self.skips = SkipLog(("bad_tracks", "tracks_out_of_order", "imu_malformed", "imu_non_finite", "imu_out_of_order",
                              "imu_out_of_range", "estimator_error"), self.get_logger().warning)
        self.time_resets = 0
        self.frames_rx = RateMeter()
        self.imu_rx = RateMeter()
        self.odom_tx = RateMeter()
        self.frame_ms = Stat()
        self.gc = GcPauses()
        threshold = int(self.p["time_jump_threshold_s"] * 1e9)
        self.frame_clock = TimeJump(threshold)
        # IMU ring: a time line of its own (a jump empties it); the estimator is fed from it up to
        # each frame it processes, so frames and IMU meet on the same time line after a reset
        self.imu = ImuQueue(capacity=16384, gyro_range=1e3, accel_range=1e3, jump_threshold_ns=threshold,
                            keep_ns=5_000_000_000)
        self.fed_until: int | None = None   # newest IMU stamp handed to the estimator
        self._imu_resets = 0                # IMU time resets seen at the last frame
        self.tracks_gaps = 0                # forward jumps of the tracks bridged by continuous IMU
        self.path = PathBuffer(self.p["path_max_length"])
        self._path_dirty = False
        if self.p["path_publish_period_s"] > 0:
            self.create_timer(float(self.p["path_publish_period_s"]), self._publish_path)
        self.traj = TrajectoryLog(self.p["trajectory_path"], self.p["trajectory_flush_s"]) \
            if self.p["trajectory_path"] and self.estimator is not None else None
        self.create_timer(float(self.p["diagnostics_period_s"]), self._publish_diagnostics)
        self.get_logger().info(f"backend: {self.mode}, frames {self.p['odom_frame']} -> {self.p['base_frame']}"
                               f"{', tf on' if self.pub_tf is not None else ''}")

    def _make_estimator(self):
        """A VioEstimator of the parameters' BackendConfig (the estimator validates it: its one check)."""
        from vilib_ros.backend import VioEstimator

        cfg = build_dataclass(BackendConfig, {s.name: self.p[s.name] for s in self.be_specs})
        return VioEstimator(cfg, self.cam0, self.cam1, _imu_noise_from_yaml(self.p["imu_yaml"]))

    def _start_tf(self) -> None:
        """/tf and /tf_static (tf2_msgs built from its definition where no ROS install has it)."""
        from vilib_ros.nodes.tf2_msgs_build import Tf2MsgsUnavailable, import_tf2_msgs

        try:
            self.TFMessage = import_tf2_msgs().TFMessage
        except Tf2MsgsUnavailable as exc:
            self.get_logger().error(f"publish_tf is on but tf2_msgs is unavailable: {exc} -- no /tf, no /tf_static")
            return
        self.pub_tf = self.create_publisher(self.TFMessage, "/tf", reliable_qos(100))
        self.pub_tf_static = self.create_publisher(self.TFMessage, "/tf_static", latched_qos())
        frames = list(self.p["camera_frame_ids"]) + ["cam1"] * 2
        sensors = {frames[0]: self.cam0.T_BS, self.p["imu_frame_id"]: np.eye(4)}
        if self.cam1 is not None:
            sensors[frames[1]] = self.cam1.T_BS
        stamp = self.get_clock().now().nanoseconds
        self.pub_tf_static.publish(self.TFMessage(transforms=static_transforms(stamp, self.p["base_frame"], sensors)))

    # --- callbacks ---------------------------------------------------------------------
    def _time_reset(self, t_new: int, t_old: int) -> None:
        self.time_resets += 1
        self.get_logger().warning(f"time reset: tracks stamp jumped from {t_old} to {t_new} (more than "
                                  f"{self.p['time_jump_threshold_s']} s back or forward): estimator restarted")
        self.pending.clear()
        self.fed_until = None
        if self.estimator is not None:
            t, p, q = self.estimator.trajectory(True)
            if len(t):
                self.segments.append((t, p, q))
            self.estimator = self._make_estimator()

    def _processed(self, stamp_ns: int) -> None:
        """``backend_processed``: this frame is done (a replay waits for it, bounded)."""
        if self.pub_processed.get_subscription_count() > 0:
            self.pub_processed.publish(encode_header(stamp_ns))

    def _process_frame(self, frame, publish: bool = True) -> None:
        t0 = time.monotonic()
        self._feed_imu(frame.stamp_ns)
        try:
            state = self.estimator.add_frame(frame)
        except Exception as exc:  # noqa: BLE001 - the estimator recovers on the next frame
            self.skips.skip("estimator_error", "tracks", f"estimator failed on frame {frame.stamp_ns}: {exc!r}")
            return
        self.frame_ms.add((time.monotonic() - t0) * 1e3)
        if state is None or not publish:
            return
        cov = self.estimator.odometry_covariance(state) if self.p["odometry_covariance"] else None
        odom = self._odometry(state, cov)
        self.pub_odom.publish(odom)
        self.odom_tx.tick()
        if self.traj is not None:
            self.traj.append(state)
        if self.pub_tf is not None:
            self.pub_tf.publish(odom_tf_bytes(state, self.p["odom_frame"], self.p["base_frame"]))
        self.path.append(state.stamp_ns, state.p, state.q_xyzw)
        self._path_dirty = True
        if self.p["path_publish_period_s"] <= 0:
            self._publish_path()
        if getattr(state, "is_keyframe", False) and self.pub_lm.get_subscription_count() > 0:
            self.pub_lm.publish(self._landmarks(ns_to_stamp(state.stamp_ns)))

    # --- messages ------------------------------------------------------------------------
    def _publish_path(self) -> None:
        if self._path_dirty and len(self.path) and self.pub_path.get_subscription_count() > 0:
            t, _ = self.path.arrays()
            self.pub_path.publish(self.path.encode(int(t[-1]), self.p["odom_frame"]))
            self._path_dirty = False

    def _odometry(self, s, covariance=None) -> bytes:
        """The serialized odometry of state ``s`` (no message object per frame)."""
        return odometry_bytes(s, self.p["odom_frame"], self.p["base_frame"], covariance)

    def _landmarks(self, stamp) -> MarkerArray:
        m = Marker()
        m.header.stamp = stamp
        m.header.frame_id = self.p["odom_frame"]
        m.ns, m.id, m.type, m.action = "landmarks", 0, Marker.POINTS, Marker.ADD
        m.pose.orientation.w = 1.0
        m.scale.x = m.scale.y = 0.05
        m.color.g, m.color.a = 1.0, 1.0
        lm = self.estimator.landmarks()
        pts = []
        for x, y, z in np.asarray(lm, dtype=np.float64).reshape(-1, 3).tolist():
            pt = Point()
            pt.x, pt.y, pt.z = x, y, z
            pts.append(pt)
        m.points = pts
        return MarkerArray(markers=[m])

    def _estimator_stats(self) -> dict:
        if self.estimator is None:
            return {}
        return self.estimator.counters()

    def _publish_diagnostics(self) -> None:
        w = self.frame_ms.window()
        d = {"mode": self.mode, "frames_received": self.frames_rx.count, "imu_received": self.imu_rx.count,
             "odometry_published": self.odom_tx.count, "frame_rate_hz": self.frames_rx.rate(),
             "imu_rate_hz": self.imu_rx.rate(), "odometry_rate_hz": self.odom_tx.rate(),
             "frame_ms_mean": float(np.mean(w)) if w else 0.0, "frame_ms_max": float(np.max(w)) if w else 0.0,
             "time_resets": self.time_resets, "tracks_gaps": self.tracks_gaps, "imu_time_resets": self.imu.resets, "imu_gaps": self.imu.gaps,
             "imu_gap_samples": self.imu.gap_samples}
        d.update({f"skipped.{k}": v for k, v in sorted(self.skips.counts.items())})
        d.update({f"estimator.{k}": v for k, v in sorted(self._estimator_stats().items())})
        health = self.estimator.health() if self.estimator is not None else {"tracking": "none", "lost_for_s": 0.0}
        d["tracking"], d["tracking_lost_for_s"] = health["tracking"], health["lost_for_s"]
        problems = self.skips.total()
        lost = health["tracking"] == "lost"
        level = DiagnosticStatus.WARN if (problems or lost or self.estimator is None) else DiagnosticStatus.OK
        level = level[0] if isinstance(level, bytes) else level
        text = f"{self.mode}: {self.frames_rx.count} frames, {problems} skipped"
        if lost:
            text += f", tracking lost for {health['lost_for_s']:.1f} s (IMU only)"
        msg = DiagnosticArray()
        msg.header.stamp = self.get_clock().now().to_msg()
        msg.status = [diagnostic_status(f"vilib_ros: {self.get_name()}", "backend", level, text, d)]
        self.pub_diag.publish(msg)

    def summary(self) -> dict:
        return {"node": self.get_name(), "mode": self.mode, "frames_received": self.frames_rx.count,
                "imu_received": self.imu_rx.count, "odometry_published": self.odom_tx.count,
                "time_resets": self.time_resets, "tracks_gaps": self.tracks_gaps, "imu_time_resets": self.imu.resets, "imu_gaps": self.imu.gaps,
                "imu_gap_samples": self.imu.gap_samples, "skipped": dict(self.skips.counts),
                "frame_ms": self.frame_ms.summary(), "estimator": self._estimator_stats(),
                "gc_pauses": self.gc.summary()}

    def close(self) -> None:
        while self.pending and self.estimator is not None:
            self._process_frame(self.pending.popleft()[1], publish=False)
        if self.traj is not None:
            self.traj.close()
            try:
                self._write_smoothed(self.p["trajectory_path"])
            except Exception as exc:  # noqa: BLE001 - the incremental file stays
                print(f"backend_node: could not write the smoothed trajectory ({exc!r}); the online one stays")
        elif self.p["trajectory_path"]:
            print("backend_node: record-only mode, no trajectory written")
        if self.p["stats_path"]:
            write_json(self.p["stats_path"], self.summary())

    def _write_smoothed(self, path) -> None:
        """Every time line's smoothed trajectory (earlier ones first), written atomically."""
        from pathlib import Path

        t, p, q = self.estimator.trajectory(True)
        parts = self.segments + ([(t, p, q)] if len(t) else [])
        tmp = Path(str(path) + ".tmp")
        with open(tmp, "w") as f:
            for ts, ps, qs in parts:
                for ti, pi, qi in zip(ts, ps, qs):
                    f.write(f"{ti // 1_000_000_000}.{ti % 1_000_000_000:09d} "
                            + " ".join(f"{x:.9f}" for x in (*pi, *qi)) + "\n")
        tmp.replace(path)


def main(args=None):
    exit_main(BackendNode, args, parameter_table)


if __name__ == "__main__":
    main()
