"""player_node: replay a EuRoC dataset (ASL folder, ROS 1 .bag, ROS 2 bag) as ROS 2 topics.

The dataset is opened with :func:`vilib_ros.datasets.open_dataset`; its events are published
in time order (:func:`vilib_ros.datasets.replay.replay_events`): IMU samples first, then the
images of the same instant. IMU samples are replayed from ``imu_margin_s`` before the first
image to the last image (EuRoC IMU logs run longer than a cut image sequence). Images are read
and decoded ahead (``prefetch`` frames; an ASL folder's PNGs by ``decoders``: processes writing
into shared memory, or threads with the process's GIL switch interval lowered to 0.5 ms so that a
decoded image does not wait 5 ms for the publishing thread,
:func:`vilib_ros.datasets.replay.hand_gil_to_decoders`), so the player is not the bottleneck. While it waits for the pipeline (backpressure) it takes the tracks and
``backend_processed`` messages straight from their subscriptions; the executor gets a turn at most
every 20 ms (parameter requests).
A frame that cannot be read (missing, empty, corrupt, wrong size) is skipped, counted under its
reason (log, ``stats_path``) and the replay goes on; what the dataset reader reported on opening
(no IMU, a truncated bag) is logged as a warning first. Replaying needs no calibration: the
player publishes images and IMU only.

Topics of a bag: ``image_topic``, ``image_right_topic``, ``imu_topic`` name the bag's left camera,
right camera and IMU topics (empty: EuRoC's ``/cam0/image_raw``, ``/cam1/image_raw``, ``/imu0``, else
the only topic of its type; two candidates and no name given is a start-up error listing them).
Whatever their names in the bag, they are published as ``cam0/image_raw``, ``cam1/image_raw`` and
``imu0``.

Start: the replay begins only when every publisher of the player is matched with every
subscriber the graph shows on its topic, and at least ``wait_for_subscribers`` on the images
and ``wait_for_imu_subscribers`` on ``imu0`` (the frontend and the backend both take the IMU:
a replay that starts before the backend's IMU subscription is matched loses its first samples),
then ``start_delay_s`` later.

Timing: ``rate`` > 0 replays at ``rate`` x real time (1.0 = real time). ``rate`` = 0 is the
backpressure mode: before each cam0 image the player waits until the frontend's ``tracks``
message for the previous cam0 image has arrived (at most ``backpressure_timeout_s``, then
it goes on and counts a timeout), so nothing is dropped however slow the pipeline is. With
``backend_lag_frames`` = N > 0 it also waits until the backend has finished the cam0 image sent
N images before (``backend_processed``; same timeout, counted apart): the backend is not paced
by the frontend's tracks, and without this a backend slower than the frontend falls further
behind until its queues overflow. ``rate`` can be changed while the player runs (``ros2 param set``)
within its mode: the images after the change follow at the new rate; a change between 0 and > 0 is
refused with the reason (the mode is chosen at start).

A tqdm progress bar (images) goes to stderr. When the replay ends the player publishes
``True`` on ``player_done`` (latched: transient local) and, with ``exit_when_done``, exits
``done_linger_s`` later.

Subscribed
----------
  tracks (sensor_msgs/PointCloud, reliable): only in backpressure mode (``rate`` = 0)
  backend_processed (std_msgs/Header, reliable): in backpressure mode with ``backend_lag_frames`` > 0

Published
---------
  cam0/image_raw (sensor_msgs/Image, mono8, reliable, depth 30)
  cam1/image_raw (sensor_msgs/Image, mono8, reliable, depth 30): when the dataset has a second camera and ``publish_cam1``
  imu0 (sensor_msgs/Imu, reliable, depth 1000)
  player_done (std_msgs/Bool, reliable + transient local): True once everything is published

Parameters
----------
Parameters: ``python -m vilib_ros.nodes.player_node --print-parameters``, or docs/parameters.md; all
read-only except ``rate`` and ``backpressure_timeout_s``. ``loops`` > 1 replays the dataset again
with the stamps shifted so that time runs on (the content jumps back, the clock does not). Before
``player_done`` and before exiting, the player waits up to ``ack_timeout_s`` for every matched
subscriber to acknowledge everything published (a reliable sample lost on the way is repaired only
while the player lives).
"""
from __future__ import annotations

import collections
import json
import sys
import time
from pathlib import Path

import rclpy
from rclpy.node import Node
from sensor_msgs.msg import Image, Imu, PointCloud
from std_msgs.msg import Bool, Header

from vilib_ros.nodes._common import SubscriptionWaiter, exit_main, latched_qos, reliable_qos, take_pending
from vilib_ros.nodes.cdr import CdrError, encode_image, encode_imu, header_stamp_ns
from vilib_ros.nodes.params import ParamSpec, check_on_set, declare_all

#: Skipped frames logged one by one per reason; the rest only in the summary.
LOG_SKIPS_PER_REASON = 5


def parameter_table() -> list[ParamSpec]:
    return [
        ParamSpec("dataset", "", "ASL folder (with mav0/), ROS 1 .bag, or ROS 2 bag folder", read_only=True),
        ParamSpec("image_topic", "", "the bag's left camera topic ('' = /cam0/image_raw, else the only Image "
                  "topic)", read_only=True),
        ParamSpec("image_right_topic", "", "the bag's right camera topic ('' = /cam1/image_raw beside "
                  "/cam0/image_raw, else none)", read_only=True),
        ParamSpec("imu_topic", "", "the bag's IMU topic ('' = /imu0, else the only Imu topic)", read_only=True),
        ParamSpec("rate", 1.0, "replay speed factor (1.0 = real time); 0 = backpressure mode", range=(0.0, 1000.0)),
        ParamSpec("max_frames", 0, "stop after this many cam0 images (0 = all)", range=(0, 1_000_000_000),
                  read_only=True),
        ParamSpec("loops", 1, "replay the dataset this many times, the clock running on (soak tests)",
                  range=(1, 1_000_000), read_only=True),
        ParamSpec("publish_cam1", True, "publish the second camera when the dataset has one", read_only=True),
        ParamSpec("imu_margin_s", 0.5, "IMU is replayed from this long before the first image", range=(0.0, 3600.0),
                  read_only=True),
        ParamSpec("wait_for_subscribers", 1, "wait until the image topics have this many matched subscribers",
                  range=(0, 100), read_only=True),
        ParamSpec("wait_for_imu_subscribers", 0, "wait until imu0 has this many matched subscribers",
                  range=(0, 100), read_only=True),
        ParamSpec("wait_timeout_s", 30.0, "give up waiting for subscribers after this long (start anyway)",
                  range=(0.0, 3600.0), read_only=True),
        ParamSpec("backpressure_timeout_s", 5.0, "longest wait for a tracks message in backpressure mode",
                  range=(0.01, 3600.0)),
        ParamSpec("backend_lag_frames", 0, "in backpressure mode, how many cam0 images the backend may be behind "
                  "(0 = not paced by the backend)", range=(0, 100000), read_only=True),
        ParamSpec("start_delay_s", 0.5, "pause after discovery before the first message", range=(0.0, 60.0),
                  read_only=True),
        ParamSpec("exit_when_done", False, "exit the process when the replay is over", read_only=True),
        ParamSpec("done_linger_s", 1.0, "stay alive this long after player_done", range=(0.0, 60.0),
                  read_only=True),
        ParamSpec("ack_timeout_s", 10.0, "at the end, wait this long for every subscriber to acknowledge "
                  "everything published", range=(0.0, 3600.0), read_only=True),
        ParamSpec("progress", True, "show a tqdm progress bar on stderr", read_only=True),
        ParamSpec("decoders", "auto", "how the images of an ASL folder are decoded: 'processes' writing into "
                  "shared memory, 'threads' of the player, 'auto' = processes on a machine of 4 CPUs or more",
                  choices=("auto", "processes", "threads"), read_only=True),
        ParamSpec("decode_workers", 0, "decoders of the images of an ASL folder (0 = processes: half the CPU count, "
                  "2 to 8; threads: the CPU count, 4 to 8)", range=(0, 64), read_only=True),
        ParamSpec("prefetch", 16, "images read and decoded ahead in a worker thread", range=(1, 256),
                  read_only=True),
        ParamSpec("stats_path", "", "write what was sent and skipped as JSON here at the end", read_only=True),
        ParamSpec("cam0_frame_id", "cam0", "header frame id of cam0 images", read_only=True),
        ParamSpec("cam1_frame_id", "cam1", "header frame id of cam1 images", read_only=True),
        ParamSpec("imu_frame_id", "imu0", "header frame id of IMU messages", read_only=True),
    ]


class PlayerNode(Node):
    def __init__(self):
        super().__init__("player_node")
        self.specs = parameter_table()
        self.p = declare_all(self, self.specs)
        self.add_on_set_parameters_callback(check_on_set(self.specs))
        self.add_on_set_parameters_callback(self._check_rate_mode)
        if not self.p["dataset"]:
            raise ValueError("player_node: parameter 'dataset' is required (ASL folder, .bag or ROS 2 bag)")
        from vilib_ros.datasets import Topics, open_dataset
        from vilib_ros.datasets.replay import Prefetcher

        path = self.p["dataset"]
        names = {"image": "image_topic", "image_right": "image_right_topic", "imu": "imu_topic"}
        topics = Topics(**{k: self.p[v] or None for k, v in names.items()},
                        origin={k: f"parameter {v}" for k, v in names.items() if self.p[v]})
        self.feed = Prefetcher(lambda: open_dataset(path, topics), depth=self.p["prefetch"],
                               workers=int(self.p["decode_workers"]) or None, kind=self.p["decoders"])
        dec = self.feed.decoders
        if dec.kind == "threads" and dec.workers > 1:
            from vilib_ros.datasets.replay import hand_gil_to_decoders

            hand_gil_to_decoders()      # decoded images do not wait a whole switch interval for the GIL
        self.ds = self.feed.ds
        self.n_cams = min(self.ds.num_cameras if self.p["publish_cam1"] else 1, 2)
        self.pub_img = [self.create_publisher(Image, f"cam{c}/image_raw", reliable_qos(30))
                        for c in range(self.n_cams)]
        self.pub_imu = self.create_publisher(Imu, "imu0", reliable_qos(1000))
        self.pub_done = self.create_publisher(Bool, "player_done", latched_qos())
        self.last_tracks_ns = -1
        self.tracks_received = 0
        # progress of the pipeline (backpressure): taken straight from these subscriptions and waited
        # for on a wait set of their own, not through an executor turn per message or per image
        self._progress: list = []
        if self.p["rate"] <= 0.0:
            # raw: only the stamp is read (a PointCloud object builds one Python object per point)
            sub = self.create_subscription(PointCloud, "tracks", self._on_tracks, reliable_qos(10), raw=True)
            self._progress.append((sub, self._on_tracks))
        self.last_backend_ns = -1
        if self.p["rate"] <= 0.0 and self.p["backend_lag_frames"] > 0:
            sub = self.create_subscription(Header, "backend_processed", self._on_backend, reliable_qos(10), raw=True)
            self._progress.append((sub, self._on_backend))
        self._progress_waiter = SubscriptionWaiter(self, [s for s, _ in self._progress]) if self._progress else None
        self._last_spin = 0.0
        self.stats = {"images": [0] * self.n_cams, "imu": 0, "backpressure_timeouts": 0,
                      "backend_backpressure_timeouts": 0, "skipped": {},
                      "dataset_stats": dict(getattr(self.ds, "stats", {})),
                      "dataset_warnings": list(getattr(self.ds, "warnings", []))}
        self.get_logger().info(f"opened {self.ds!r}; images decoded by {dec.describe()}")
        if getattr(self.ds, "topics", None):
            t = self.ds.topics
            self.get_logger().info("replaying " + ", ".join(f"{a} as {b}" for a, b in (
                (t.image, "cam0/image_raw"), (t.image_right if self.n_cams > 1 else None, "cam1/image_raw"),
                (t.imu, "imu0")) if a))
        for w in self.stats["dataset_warnings"]:
            self.get_logger().warning(w)

    def _on_tracks(self, msg: bytes) -> None:
        try:
            t = header_stamp_ns(msg)
        except CdrError:
            return
        self.tracks_received += 1
        self.last_tracks_ns = max(self.last_tracks_ns, t)

    def _on_backend(self, msg: bytes) -> None:
        try:
            self.last_backend_ns = max(self.last_backend_ns, header_stamp_ns(msg))
        except CdrError:
            pass

    def _check_rate_mode(self, params):
        """On-set: ``rate`` may change mid-replay, but not between 0 (backpressure: the player
        subscribes to ``tracks`` at start) and > 0 (timed): a rate set to 0 mid-replay would make
        every image wait ``backpressure_timeout_s`` for tracks the player has no subscription for."""
        from rcl_interfaces.msg import SetParametersResult

        for p in params:
            if p.name == "rate" and (float(p.value) <= 0.0) != (self.p["rate"] <= 0.0):
                mode = "backpressure (rate 0)" if self.p["rate"] <= 0.0 else f"timed (rate {self.p['rate']:g})"
                return SetParametersResult(successful=False, reason=(
                    f"the player started {mode}; rate can change within that mode only: restart it "
                    "with the rate wanted to switch between backpressure and timed replay"))
        return SetParametersResult(successful=True)

    def _wait_backend(self, stamp: int) -> None:
        """Until the backend has finished ``stamp`` (bounded; only while it publishes progress)."""
        if self.last_backend_ns < stamp and self.count_publishers("backend_processed") >= 1:
            self._wait_until("last_backend_ns", stamp, "backend_backpressure_timeouts")

    def _wait_until(self, attr: str, stamp: int, timeouts: str) -> None:
        """Spin until ``self.<attr>`` reaches ``stamp``, at most ``backpressure_timeout_s`` (then
        count one in ``stats[timeouts]``)."""
        t_end = time.monotonic() + self.p["backpressure_timeout_s"]
        self._take_progress()
        while rclpy.ok() and getattr(self, attr) < stamp:
            now = time.monotonic()
            if now > t_end:
                self.stats[timeouts] += 1
                return
            if self._progress_waiter is None:
                rclpy.spin_once(self, timeout_sec=0.01)
                continue
            self._progress_waiter.wait(min(0.01, t_end - now))
            self._take_progress()
            self._spin_now_and_then()

    def _take_progress(self) -> None:
        """The tracks / backend_processed messages waiting in their subscriptions, handled now."""
        for sub, handle in self._progress:
            for raw in take_pending(sub):
                handle(raw)

    def _spin_now_and_then(self, period_s: float = 0.02) -> None:
        """One executor turn at most every ``period_s`` (parameter requests, the rest): a turn builds
        the wait set of every entity in Python, a large share of the player's time if it came with
        every image."""
        now = time.monotonic()
        if now - self._last_spin >= period_s:
            self._last_spin = now
            rclpy.spin_once(self, timeout_sec=0)

    # --- replay -------------------------------------------------------------------------
    def _spin_for(self, seconds: float) -> None:
        end = time.monotonic() + seconds
        while rclpy.ok():
            left = end - time.monotonic()
            if left <= 0:
                break
            rclpy.spin_once(self, timeout_sec=min(left, 0.05))

    def _unmatched(self) -> list[str]:
        """Publishers not yet matched with every subscriber they must reach (empty when ready)."""
        need = [(pub, self.p["wait_for_subscribers"]) for pub in self.pub_img]
        need += [(self.pub_imu, self.p["wait_for_imu_subscribers"]), (self.pub_done, 0)]
        out = []
        for pub, n in need:
            want = max(n, self.count_subscribers(pub.topic_name))
            if pub.get_subscription_count() < want:
                out.append(f"{pub.topic_name} {pub.get_subscription_count()}/{want}")
        if self.p["rate"] <= 0.0 and self.count_publishers("tracks") < 1:
            out.append("no tracks publisher (backpressure mode)")
        return out

    def _wait_for_pipeline(self) -> None:
        """Until every consumer is matched (then ``start_delay_s``, checked again), or the timeout."""
        t_end = time.monotonic() + self.p["wait_timeout_s"]
        while rclpy.ok():
            missing = self._unmatched()
            if not missing:
                self._spin_for(self.p["start_delay_s"])
                missing = self._unmatched()     # a subscriber that appeared meanwhile is waited for too
                if not missing:
                    return
            if time.monotonic() > t_end:
                self.get_logger().warning(f"starting after {self.p['wait_timeout_s']} s without every consumer "
                                          f"matched: {', '.join(missing)}")
                return
            rclpy.spin_once(self, timeout_sec=0.05)

    def _wait_backpressure(self, prev_stamp: int) -> None:
        self._wait_until("last_tracks_ns", prev_stamp, "backpressure_timeouts")

    def _skip(self, cam: int, index: int, reason: str, message: str) -> None:
        n = self.stats["skipped"].get(reason, 0) + 1
        self.stats["skipped"][reason] = n
        if n <= LOG_SKIPS_PER_REASON:
            self.get_logger().warning(f"skipped cam{cam} frame {index} ({reason}): {message}" +
                                      (" (further frames skipped for this reason are only counted)"
                                       if n == LOG_SKIPS_PER_REASON else ""))

    def run(self) -> int:
        from vilib_ros.datasets.replay import replay_events

        self._wait_for_pipeline()
        n, events = replay_events(self.ds, self.p["max_frames"], self.p["imu_margin_s"], self.n_cams,
                                  self.p["loops"])
        self.feed.start(events)
        from tqdm import tqdm

        bar = tqdm(total=n, unit="img", desc="player", file=sys.stderr, disable=not self.p["progress"],
                   mininterval=0.5)
        from vilib_ros.datasets.replay import ReplayClock

        clock = ReplayClock()       # the targets' wall times; a rate changed mid-replay applies from there
        prev_cam0 = None
        t_start = time.monotonic()
        # where the replay's time goes (player_stats.json "time_s"): waiting for decoded events,
        # waiting for the frontend's tracks (backpressure), publishing
        spent = self.stats["time_s"] = {"feed": 0.0, "backpressure": 0.0, "publish": 0.0}
        feed, rate = iter(self.feed), None
        lag = int(self.p["backend_lag_frames"])
        sent: collections.deque = collections.deque(maxlen=max(1, lag))   # the last cam0 stamps sent
        while True:
            t_a = time.monotonic()
            ev = next(feed, None)
            spent["feed"] += time.monotonic() - t_a
            if ev is None or not rclpy.ok():
                break
            t_ev = ev[1] if ev[0] == "imu" else ev[2]
            if ev[0] != "imu" or rate is None:       # the live value, read once per image
                rate = float(self.get_parameter("rate").value)
            if rate > 0.0:
                target = clock.target(t_ev, rate, time.monotonic())
                if target - time.monotonic() > 0:
                    self._spin_for(target - time.monotonic())
            if ev[0] == "imu":
                t_a = time.monotonic()
                self.pub_imu.publish(encode_imu(t_ev, self.p["imu_frame_id"], ev[2], ev[3]))
                spent["publish"] += time.monotonic() - t_a
                self.stats["imu"] += 1
                continue
            cam, index = ev[1], ev[3]
            if ev[0] == "skip":
                self._skip(cam, index, ev[4], ev[5])
                if cam == 0:
                    bar.update(1)
                continue
            t_a = time.monotonic()
            if cam == 0 and rate <= 0.0 and prev_cam0 is not None:
                self._wait_backpressure(prev_cam0)
                if lag and len(sent) >= lag:
                    self._wait_backend(sent[-lag])
            t_b = time.monotonic()
            spent["backpressure"] += t_b - t_a
            frame_id = self.p["cam0_frame_id"] if cam == 0 else self.p["cam1_frame_id"]
            # serialized here in one copy (rclpy's serializer is slow on images)
            self.pub_img[cam].publish(encode_image(t_ev, frame_id, ev[4], "mono8"))
            spent["publish"] += time.monotonic() - t_b
            self.stats["images"][cam] += 1
            if cam == 0:
                prev_cam0 = t_ev
                sent.append(t_ev)
                bar.update(1)
            self._take_progress()
            self._spin_now_and_then()
        bar.close()
        if not rclpy.ok():
            return 0
        if self.p["rate"] <= 0.0 and prev_cam0 is not None:
            self._wait_backpressure(prev_cam0)
        elapsed = time.monotonic() - t_start
        self.stats["replay_s"] = elapsed
        skipped = ", ".join(f"{k} {v}" for k, v in sorted(self.stats["skipped"].items())) or "none"
        self.get_logger().info(
            f"replay done in {elapsed:.1f} s: cam0 {self.stats['images'][0]}"
            + (f", cam1 {self.stats['images'][1]}" if self.n_cams > 1 else "")
            + f", imu {self.stats['imu']}, frames skipped: {skipped}, "
            f"backpressure timeouts {self.stats['backpressure_timeouts']}")
        unacked = self._drain(self.pub_img + [self.pub_imu])
        if unacked:
            self.stats["unacknowledged_topics"] = unacked
            self.get_logger().warning(f"not every subscriber acknowledged everything within "
                                      f"{self.p['ack_timeout_s']} s: {', '.join(unacked)}")
        self._write_stats()
        self.pub_done.publish(Bool(data=True))
        if self.p["exit_when_done"]:
            self._drain([self.pub_done])
            self._spin_for(self.p["done_linger_s"])
            return 0
        while rclpy.ok():
            rclpy.spin_once(self, timeout_sec=0.1)
        return 0

    def _drain(self, pubs) -> list[str]:
        """Wait (bounded) until every matched reliable subscriber acknowledged everything published
        on ``pubs``: a sample lost on the way is repaired only while this process lives, so
        exiting right after the last publish lost the tail of the IMU stream. Returns the topics
        still unacknowledged."""
        from rclpy.duration import Duration

        end = time.monotonic() + self.p["ack_timeout_s"]
        pending = []
        for pub in pubs:
            if not pub.wait_for_all_acked(Duration(seconds=max(0.0, end - time.monotonic()))):
                pending.append(pub.topic_name)
        return pending

    def _write_stats(self) -> None:
        if self.p["stats_path"]:
            path = Path(self.p["stats_path"])
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(json.dumps(self.stats, indent=2, default=str))

    def close(self) -> None:
        self.feed.close()
        self._write_stats()      # also when interrupted: what was sent so far


def main(args=None):
    exit_main(PlayerNode, args, parameter_table)


if __name__ == "__main__":
    main()
