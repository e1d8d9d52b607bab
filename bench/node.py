"""``python -m bench node``: the frontend node over real DDS on localhost.

Three processes: a publisher (its own process) sends the real EuRoC frames (mono, or stereo
pairs from cam0 + cam1 where the folder has cam1, else cam0 twice) with 10 IMU samples per
frame, at a fixed frame rate (``--rates``, default 20, 200, 1000 Hz) and as fast as
backpressure allows (``bp``: the next frame goes out when the previous one's tracks came
back, a round trip per frame; ``bp4``: at most 4 frames in flight, so that the transport of one
overlaps the processing of another); the frontend node (``python -m vilib_ros.nodes.frontend_node``, reliable input) in its
own process, restarted for every configuration; and this process, which records when each
tracks message arrives (taking them itself, woken by a wait set of its subscription alone: an
executor turn per message would add 0.1-0.3 ms of its own Python to every latency) and when its
middleware received it. The publisher writes every frame's send time (``CLOCK_MONOTONIC``,
shared by the processes of one machine).

Per configuration: sustained frames/s (tracks received / time from the first send to the
last tracks), frames sent / received by the node / tracks out (drops), latency from send to
tracks received (p50 / p99, the p99 from frame 20 on, and the five worst frames) and to the
recorder's middleware (p50 / p99), the node's own receive -> publish time minus ``process()``
(overhead, p50 / p99, from its stats file), ``process()`` p50 (its submit and result halves, and
the device time), and the node's CPU time per
frame (all its threads, from its first frame on: start-up is not spread over the frames).
The floor: the same images from the same publisher to a bare subscriber (no node), latency
p50 / p99 at each rate. The burst case (``--burst N``, default 20,000; 0 = off): N
mono images as fast as the publisher can, reliable and best effort: frames in / out /
dropped and the node's RSS at start and end.

The replay (``--replay-duration`` s, default 30; 0 = off): ``vilib-ros run`` on its generated
stereo-inertial sequence of that length, backend on, no video, as fast as backpressure allows:
``replay_fps`` = stereo frames the player sent / the replay's time: the longer of the player's
first to last frame (paced by the frontend's tracks) and the first tracks to the backend's last
odometry (the backend is not paced), with the run's APE and its whole wall time (node
start-up, the player's start-up and discovery, the backend's final 3 s of quiet) beside it.

The backend node (``--backend-duration`` s, default 30; 0 = off): ``backend_node`` fed recorded
tracks and IMU over DDS against the offline backend on the same tracks in the same run
(:mod:`bench.backend_node`; no frontend, so the device does not matter).

Beside every configuration an idle process records the host's stalls (wake-ups more than 1 ms
late, :mod:`bench.host_stalls`), and each configuration says how many of its frames
over 3 ms had one inside their send -> tracks interval.

Writes ``node_bench.json`` and ``node_bench.md`` into ``--out`` with device and date.
"""
from __future__ import annotations

import datetime as _dt
import gc
import json
import os
import platform
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from bench.host_stalls import HostStallSampler, stall_overlap

IMU_PER_FRAME = 10
STEADY_FROM = 20        # latency_p99_steady_ms: from this frame on (start-up apart)
PERIOD_NS = 50_000_000
T0_NS = 1_500_000_000_000_000_000


def configure_parser(p) -> None:
    p.add_argument("--data", default=None, help="EuRoC ASL folder (default: $VILIB_ROS_EUROC, ../shared/data/"
                   "euroc_v101_head, .data/euroc_v101_head)")
    p.add_argument("--out", default="bench/results", help="folder for node_bench.json / .md")
    p.add_argument("--device", default="auto", choices=("auto", "cuda", "cpu"), help="frontend device")
    p.add_argument("--rates", default="20,200,1000,bp,bp4", help="frame rates (Hz) and/or 'bp' (backpressure: the "
                   "next frame when the previous one's tracks came back) or 'bpN' (at most N frames in flight)")
    p.add_argument("--modes", default="mono,stereo", help="mono and/or stereo")
    p.add_argument("--frames", type=int, default=380, help="frames per configuration (the 95 frames looped)")
    p.add_argument("--burst", type=int, default=20000, help="images in the burst case (0 = skip it)")
    p.add_argument("--domain-id", type=int, default=None, help="ROS_DOMAIN_ID (default: from the pid)")
    p.add_argument("--replay-duration", type=float, default=30.0,
                   help="seconds of the generated sequence replayed by `vilib-ros run` for replay_fps (0 = skip)")
    p.add_argument("--backend-duration", type=float, default=30.0,
                   help="seconds of synthetic tracks fed to the backend node and the offline backend (0 = skip)")
    p.add_argument("--no-host-stalls", action="store_true", help="no host-stall sampler beside the configurations "
                   "(it wakes every 0.5 ms, so a core never idles long: run with and without it to see its effect)")
    p.add_argument("--trace-dir", default=None, help="write every frame's latency and its segments (publisher, "
                   "transport, executor, node, back) as CSV per configuration into this folder")
    p.add_argument("--profile-backend", action="store_true",
                   help="run the backend node under cProfile and add its top functions to the JSON")


def _find_data(arg) -> Path:
    cands = [arg, os.environ.get("VILIB_ROS_EUROC"), Path.cwd().parent / "shared" / "data" / "euroc_v101_head",
             Path.cwd() / ".data" / "euroc_v101_head"]
    for c in cands:
        if c and (Path(c) / "mav0" / "cam0" / "data.csv").is_file():
            return Path(c)
    raise SystemExit("python -m bench node: error: no EuRoC folder (give --data, or set VILIB_ROS_EUROC)")


def _window(rate: str) -> int:
    """Frames in flight of a backpressure rate: ``bp`` 1 (the next frame goes out when the
    previous one's tracks came back), ``bpN`` N; 0 for a fixed rate or ``max``."""
    if not str(rate).startswith("bp"):
        return 0
    return int(rate[2:] or 1)


def _pct(a, q):
    return float(np.percentile(a, q)) if len(a) else None


# ------------------------------------------------------------------------------------- publisher
def publisher_main(spec_path: str) -> int:
    """The publisher process: ``python -m bench.node --publisher SPEC.json``."""
    import cv2
    import rclpy
    from rclpy.serialization import serialize_message
    from sensor_msgs.msg import Image, Imu, PointCloud

    from vilib_ros.nodes._common import reliable_qos, sensor_qos
    from vilib_ros.nodes.cdr import header_stamp_ns
    from vilib_ros.nodes.conversions import arrays_to_imu, numpy_to_image

    spec = json.loads(Path(spec_path).read_text())
    rclpy.init()
    node = rclpy.create_node("bench_publisher")
    qos = reliable_qos if spec["reliability"] == "reliable" else sensor_qos
    pub_l = node.create_publisher(Image, spec["image_topic"], qos(100))
    pub_r = node.create_publisher(Image, "image_right", qos(100)) if spec["stereo"] else None
    pub_imu = node.create_publisher(Imu, "imu", qos(1000)) if spec["imu"] else None
    got = {"last": -1}
    window = _window(spec["rate"])
    if window:
        node.create_subscription(PointCloud, "tracks", lambda b: got.__setitem__("last", header_stamp_ns(b)),
                                 reliable_qos(100), raw=True)

    def load(cam):
        files = sorted((Path(spec["data"]) / "mav0" / cam / "data").glob("*.png"))
        return [cv2.imread(str(f), cv2.IMREAD_GRAYSCALE) for f in files]

    left = load("cam0")
    right = (load("cam1") or left) if spec["stereo"] else []
    # serialized once; the stamp (bytes 4..12 of the CDR) is patched per send
    ser_l = [bytearray(serialize_message(numpy_to_image(im, "mono8", 0, "cam0"))) for im in left]
    ser_r = [bytearray(serialize_message(numpy_to_image(im, "mono8", 0, "cam1"))) for im in right]
    imu_proto = bytearray(serialize_message(arrays_to_imu(0, [0.01, -0.02, 0.005], [9.8, 0.1, -0.2], "imu0")))
    gc.collect()
    gc.freeze()         # the frames and modules out of the collector's reach: no full collection mid-run
    need = {spec["image_topic"]: 1} if not spec["imu"] else {spec["image_topic"]: 1, "imu": 1}
    end = time.monotonic() + 60
    while time.monotonic() < end and not all(node.count_subscribers(t) >= n for t, n in need.items()):
        rclpy.spin_once(node, timeout_sec=0.05)
    if window:
        while time.monotonic() < end and node.count_publishers("tracks") < 1:
            rclpy.spin_once(node, timeout_sec=0.05)
    t_end = time.monotonic() + 1.0
    while time.monotonic() < t_end:
        rclpy.spin_once(node, timeout_sec=0.05)

    def stamped(buf, t_ns):
        b = bytearray(buf)
        b[4:12] = int(t_ns // 1_000_000_000).to_bytes(4, "little", signed=True) + \
            int(t_ns % 1_000_000_000).to_bytes(4, "little")
        return bytes(b)

    sends = []
    n = int(spec["frames"])
    period = 0.0 if window or spec["rate"] == "max" else 1.0 / float(spec["rate"])
    t_start = time.monotonic()
    cpu0, waited = time.process_time(), 0.0
    for k in range(n):
        stamp = T0_NS + (k + 1) * PERIOD_NS
        if window and k >= window:
            prev = T0_NS + (k + 1 - window) * PERIOD_NS
            t_wait = time.monotonic()
            deadline = t_wait + 10.0
            while got["last"] < prev and time.monotonic() < deadline:
                rclpy.spin_once(node, timeout_sec=0.001)
            waited += time.monotonic() - t_wait
        elif period:
            delay = t_start + k * period - time.monotonic()
            if delay > 0:
                time.sleep(delay)
                waited += delay
        if pub_imu is not None:
            for j in range(IMU_PER_FRAME):
                pub_imu.publish(stamped(imu_proto, stamp - PERIOD_NS + (j + 1) * (PERIOD_NS // IMU_PER_FRAME)))
        i = k % len(ser_l)
        msg_l = stamped(ser_l[i], stamp)
        msg_r = stamped(ser_r[i % len(ser_r)], stamp) if pub_r is not None else None
        if msg_r is not None:
            pub_r.publish(msg_r)
        t_send = time.monotonic()
        pub_l.publish(msg_l)   # the left image last: latency counts from the later image of the pair
        sends.append((stamp, t_send, time.monotonic()))     # and when publish() returned
    # what the publisher itself cost per frame: it is the limit where its busy time (wall minus
    # waiting for tracks or for the next frame's time) per frame comes near 1 / frames/s
    wall, cpu = time.monotonic() - t_start, time.process_time() - cpu0
    Path(spec["sends"]).write_text(json.dumps({"sends": sends, "publisher": {
        "cpu_ms_per_frame": 1e3 * cpu / max(1, n), "busy_ms_per_frame": 1e3 * (wall - waited) / max(1, n),
        "waiting_ms_per_frame": 1e3 * waited / max(1, n)}}))
    t_end = time.monotonic() + 2.0
    while time.monotonic() < t_end:
        rclpy.spin_once(node, timeout_sec=0.05)
    node.destroy_node()
    rclpy.try_shutdown()
    return 0


# ------------------------------------------------------------------------------------- driver
class _Run:
    """One configuration: start the node (optional), the publisher; record arrivals."""

    def __init__(self, client, env, tmp: Path, data: Path, device: str):
        self.client, self.env, self.tmp, self.data, self.device = client, env, tmp, data, device

    def node(self, name: str, stereo: bool, reliability: str):
        from vilib_ros.nodes.processes import NodeProcess, node_argv

        cam = self.data / "mav0"
        params = {"camera_yaml": str(cam / "cam0" / "sensor.yaml"), "device": self.device, "stereo": stereo,
                  "input_reliability": reliability, "queue_size": 100, "stats_path": str(self.tmp / f"{name}.json"),
                  "publish_debug_image": False, "stereo_timeout_s": 1.0}
        if stereo and (cam / "cam1" / "sensor.yaml").is_file():
            params["right.camera_yaml"] = str(cam / "cam1" / "sensor.yaml")
        return NodeProcess("frontend_node", node_argv("frontend_node", params=params), self.env,
                           self.tmp / f"{name}.log")

    def publish(self, name: str, topic_in: str, topic_out: str, rate, frames: int, stereo: bool,
                imu: bool, reliability: str = "reliable", node=None, timeout: float = 600.0,
                rss_pid: int | None = None) -> dict:
        from vilib_ros.nodes.cdr import header_stamp_ns
        from vilib_ros.nodes.processes import NodeProcess
        from sensor_msgs.msg import Image, PointCloud

        from vilib_ros.nodes._common import SubscriptionWaiter, received_monotonic, reliable_qos, sensor_qos, take_pending

        arrivals: dict[int, float] = {}
        dds_arrivals: dict[int, float] = {}     # the recorder's middleware received it
        qos = reliable_qos if reliability == "reliable" else sensor_qos
        cb = lambda b: arrivals.setdefault(header_stamp_ns(b), time.monotonic())  # noqa: E731
        if topic_out == "tracks":
            sub = self.client.node.create_subscription(PointCloud, topic_out, cb, reliable_qos(1000), raw=True)
        else:
            sub = self.client.node.create_subscription(Image, topic_out, cb, qos(1000), raw=True)
        # the recorder takes its messages itself, woken by its own wait set (not the executor's
        # turn per message: 0.1-0.3 ms of Python that was part of every latency, "to driver")
        waiter = SubscriptionWaiter(self.client.node, [sub])

        def receive(timeout_s: float) -> None:
            if waiter.wait(timeout_s):
                for raw, info in take_pending(sub, with_info=True):
                    now = time.monotonic()
                    stamp = header_stamp_ns(raw)
                    arrivals.setdefault(stamp, now)
                    rx = received_monotonic(info)
                    if rx is not None:
                        dds_arrivals.setdefault(stamp, rx)
        if node is not None:
            ok = self.client.spin_until(lambda: self.client.node.count_publishers(topic_out) >= 1 or not node.alive, 90)
            if not ok or not node.alive:
                raise RuntimeError(f"frontend node did not come up:\n{node.tail()}")
        spec = {"data": str(self.data), "image_topic": topic_in, "stereo": stereo, "imu": imu, "rate": rate,
                "frames": frames, "reliability": reliability, "sends": str(self.tmp / f"{name}_sends.json")}
        (self.tmp / f"{name}_spec.json").write_text(json.dumps(spec))
        pub = NodeProcess("bench_publisher", [sys.executable, "-m", "bench.node", "--publisher",
                                              str(self.tmp / f"{name}_spec.json")], self.env,
                          self.tmp / f"{name}_publisher.log")
        t_limit = time.monotonic() + timeout
        rss, t_rss = [], 0.0      # (tracks received so far, RSS kB) every 0.5 s
        while pub.alive and time.monotonic() < t_limit:
            receive(0.01)
            if rss_pid is not None and time.monotonic() - t_rss > 0.5:
                t_rss = time.monotonic()
                rss.append((len(arrivals), _rss_kb(rss_pid)))
        pub.stop()
        # the last tracks may still be in flight
        last_n, still = -1, time.monotonic()
        while time.monotonic() - still < 2.0 and time.monotonic() < t_limit:
            receive(0.05)
            if len(arrivals) != last_n:
                last_n, still = len(arrivals), time.monotonic()
        self.client.node.destroy_subscription(sub)
        sent = json.loads(Path(spec["sends"]).read_text()) if Path(spec["sends"]).is_file() else {}
        sends, publisher = sent.get("sends", []), sent.get("publisher", {})
        lat = [(arrivals[s[0]] - s[1]) * 1e3 for s in sends if s[0] in arrivals]
        lat_dds = [(dds_arrivals[s[0]] - s[1]) * 1e3 for s in sends if s[0] in dds_arrivals]
        idx = [k for k, s in enumerate(sends) if s[0] in arrivals]
        worst = sorted(zip(lat, idx), reverse=True)[:5]
        steady = [v for v, k in zip(lat, idx) if k >= STEADY_FROM]
        span = (max(arrivals.values()) - sends[0][1]) if arrivals and sends else 0.0
        if rss_pid is not None:
            rss.append((len(arrivals), _rss_kb(rss_pid)))
        return {"rss_kb": rss, "publisher": publisher, "sent": len(sends), "received": len(arrivals), "dropped": len(sends) - len(lat),
                "sustained_fps": len(arrivals) / span if span > 0 else 0.0,
                "latency_p50_ms": _pct(lat, 50), "latency_p99_ms": _pct(lat, 99),
                # to the recorder's middleware (its message info): without the recorder's own wake-up
                "latency_dds_p50_ms": _pct(lat_dds, 50), "latency_dds_p99_ms": _pct(lat_dds, 99),
                # where the tail is: the five worst frames (index in the send order, ms)
                "latency_worst": [[k, round(v, 2)] for v, k in worst],
                "latency_p99_steady_ms": _pct(steady, 99),
                "publisher_log_tail": pub.tail(5) if not sends else "",
                "_sends": sends, "_arrivals": arrivals}


#: The segments of a frame's latency (ms), from the publisher's send to the tracks received here
SEGMENTS = ("publish_call", "to_node", "busy", "wakeup", "in_node", "to_driver")


def latency_breakdown(sends: list, arrivals: dict, frames: dict | None, rows_out: list | None = None) -> dict:
    """Where each frame's latency went, from the publisher's send times (stamp, before publish(),
    after it returned), the node's per-frame trace (its stats' ``frames``) and the arrival times
    here (all CLOCK_MONOTONIC): ``publish_call`` the publisher's publish() itself; ``to_node`` send
    to the node's middleware receiving it; then, until the node's callback began, ``busy`` (the
    executor still in earlier callbacks: a backlog) and ``wakeup`` (the executor free, the image
    there, its callback not begun: wake-up or the process not scheduled); ``in_node`` the
    callback to the tracks published; ``to_driver`` from there to the tracks received by this
    process. Returns p50 / p99 / max per segment and the five worst frames (index in the send
    order, latency and its segments); ``rows_out`` gets every frame's (index, latency, segments)."""
    if not frames or not frames.get("stamp_ns"):
        return {}
    node = {st: k for k, st in enumerate(frames["stamp_ns"])}
    rows = []
    for i, snd in enumerate(sends):
        stamp, t_send = snd[0], snd[1]
        k = node.get(stamp)
        if k is None or stamp not in arrivals:
            continue
        dds, cb, pubd = frames["dds_received"][k], frames["callback"][k], frames["published"][k]
        prev = (frames.get("previous_callback_end") or [None] * len(frames["callback"]))[k]
        busy = wake = None
        if dds is not None:
            free = max(dds, prev) if prev is not None else dds      # the executor could take it from here
            busy, wake = (free - dds) * 1e3, (cb - free) * 1e3
        seg = {"publish_call": (snd[2] - t_send) * 1e3 if len(snd) > 2 else None,
               "to_node": (dds - t_send) * 1e3 if dds is not None else None, "busy": busy, "wakeup": wake,
               "in_node": (pubd - cb) * 1e3, "to_driver": (arrivals[stamp] - pubd) * 1e3}
        rows.append((i, (arrivals[stamp] - t_send) * 1e3, seg))
    if rows_out is not None:
        rows_out.extend(rows)
    out: dict = {}
    for name in SEGMENTS:
        v = [seg[name] for _i, _l, seg in rows if seg[name] is not None]
        if v:
            out[name] = {"p50": _pct(v, 50), "p99": _pct(v, 99), "max": float(max(v))}
    out["worst"] = [{"index": i, "latency_ms": round(lat, 2), **{k: (None if v is None else round(v, 2))
                                                                 for k, v in seg.items()}}
                    for i, lat, seg in sorted(rows, key=lambda r: -r[1])[:5]]
    return out


def _write_trace(path: Path, rows: list) -> None:
    """Every frame's latency and its segments (ms) as CSV (``--trace-dir``)."""
    lines = ["index,latency_ms," + ",".join(SEGMENTS)]
    lines += [f"{i},{lat:.3f}," + ",".join("" if seg[k] is None else f"{seg[k]:.3f}" for k in SEGMENTS)
              for i, lat, seg in rows]
    path.write_text("\n".join(lines) + "\n")


class _Stalls:
    """The host-stall sampler (:mod:`bench.host_stalls`) around one configuration
    (none where ``on`` is false: ``--no-host-stalls``)."""

    def __init__(self, tmp: Path, name: str, on: bool):
        self.sampler, self.record, self.on = HostStallSampler(tmp / f"{name}_stalls.json"), {}, on

    def __enter__(self):
        if self.on:
            self.sampler.start()
        return self

    def __exit__(self, *exc):
        self.record = self.sampler.stop()
        return False


def _frame_times(sends: list, arrivals: dict) -> list:
    """(send, tracks received) per frame that came back, CLOCK_MONOTONIC s."""
    return [(s[1], arrivals[s[0]]) for s in sends if s[0] in arrivals]


def _rss_kb(pid: int) -> int | None:
    try:
        for ln in Path(f"/proc/{pid}/status").read_text().splitlines():
            if ln.startswith("VmRSS:"):
                return int(ln.split()[1])
    except OSError:
        return None
    return None


def run_command(args) -> int:
    from vilib_ros.nodes.processes import GraphClient, ros_env

    data = _find_data(args.data)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    domain = args.domain_id if args.domain_id is not None else 220 + os.getpid() % 12
    env = ros_env(domain)
    os.environ["ROS_DOMAIN_ID"] = str(domain)
    stalls_on = not args.no_host_stalls
    rates = [r.strip() for r in args.rates.split(",") if r.strip()]
    modes = [m.strip() for m in args.modes.split(",") if m.strip()]
    results: dict = {"configs": {}, "floor": {}, "burst": {}}
    client = GraphClient(domain, "bench_node_driver")
    gc.collect()
    gc.freeze()         # as the nodes do: this process's arrival times are part of every latency
    device_used = args.device
    try:
        with tempfile.TemporaryDirectory() as tmpd:
            run = _Run(client, env, Path(tmpd), data, args.device)
            for rate in [r for r in rates if not _window(r)]:
                name = f"floor_{rate}"
                print(f"bench-node: floor, bare publisher -> subscriber at {rate} Hz", file=sys.stderr)
                with _Stalls(Path(tmpd), name, stalls_on) as st:
                    r = run.publish(name, "bench_floor_image", "bench_floor_image", rate, args.frames, False, False)
                r["host_stalls"] = stall_overlap(st.record, _frame_times(r.pop("_sends"), r.pop("_arrivals")))
                results["floor"][rate] = r
            for mode in modes:
                for rate in rates:
                    name = f"{mode}_{rate}"
                    print(f"bench-node: {mode} at {f'backpressure, {_window(rate)} in flight' if _window(rate) else rate + ' Hz'}",
                          file=sys.stderr)
                    node = run.node(name, mode == "stereo", "reliable")
                    try:
                        with _Stalls(Path(tmpd), name, stalls_on) as stalls:
                            r = run.publish(name, "image", "tracks", rate, args.frames, mode == "stereo", True, node=node)
                    finally:
                        node.stop()
                    r["host_stalls"] = stall_overlap(stalls.record, _frame_times(r["_sends"], r["_arrivals"]))
                    st = json.loads((Path(tmpd) / f"{name}.json").read_text()) if (Path(tmpd) / f"{name}.json").is_file() else {}
                    rows: list = []
                    device_used = st.get("device", device_used)
                    r.update(frames_in=st.get("images_received"), tracks_out=st.get("tracks_published"),
                             overhead_p50_ms=st.get("overhead_ms", {}).get("median"),
                             overhead_p99_ms=st.get("overhead_ms", {}).get("p99"),
                             process_p50_ms=st.get("process_ms", {}).get("median"),
                             gpu_p50_ms=st.get("stages_ms", {}).get("gpu", {}).get("median"),
                             node_latency_p50_ms=st.get("latency_ms", {}).get("median"),
                             cpu_ms_per_frame=st.get("cpu_ms_per_frame"),
                             imu_incomplete=st.get("events", {}).get("imu_incomplete"),
                             node_stages_p50_ms={k: v.get("median") for k, v in st.get("node_stages_ms", {}).items()},
                             node_stages_max_ms={k: v.get("max") for k, v in st.get("node_stages_ms", {}).items()},
                             node_latency_max_ms=st.get("latency_ms", {}).get("max"),
                             process_max_ms=st.get("process_ms", {}).get("max"),
                             skipped={k: v for k, v in st.get("skipped", {}).items() if v},
                             gc_pauses=st.get("gc_pauses"),
                             where=latency_breakdown(r.pop("_sends"), r.pop("_arrivals"), st.get("frames"), rows))
                    results["configs"][name] = r
                    if args.trace_dir:
                        Path(args.trace_dir).mkdir(parents=True, exist_ok=True)
                        _write_trace(Path(args.trace_dir) / f"{name}.csv", rows)
                    print(f"  {r['received']}/{r['sent']} tracks, {r['sustained_fps']:.1f} frames/s, latency p50 "
                          f"{r['latency_p50_ms']}, overhead p50 {r['overhead_p50_ms']} ms", file=sys.stderr)
            for rel in (("reliable", "best_effort") if args.burst > 0 else ()):
                name = f"burst_{rel}"
                print(f"bench-node: burst of {args.burst} images, {rel}", file=sys.stderr)
                node = run.node(name, False, rel)
                try:
                    client.spin_until(lambda: client.node.count_publishers("tracks") >= 1, 90)
                    client.spin_for(2.0)
                    r = run.publish(name, "image", "tracks", "max", args.burst, False, False, reliability=rel,
                                    node=node, rss_pid=node.pid)
                finally:
                    node.stop()
                st = json.loads((Path(tmpd) / f"{name}.json").read_text()) if (Path(tmpd) / f"{name}.json").is_file() else {}
                # RSS after warm-up (once 10 % of the tracks came back: pyramids, OpenCV and
                # DDS buffers allocated) and at the end; every sample is kept in rss_kb
                samples = [(n, v) for n, v in r["rss_kb"] if v]
                warm = [v for n, v in samples if n >= 0.1 * max(1, r["received"])]
                r.update(frames_in=st.get("images_received"), tracks_out=st.get("tracks_published"),
                         rss_start_kb=warm[0] if warm else None, rss_end_kb=samples[-1][1] if samples else None,
                         rss_max_kb=max(v for _, v in samples) if samples else None)
                r.pop("_sends"), r.pop("_arrivals")
                results["burst"][rel] = r
    finally:
        client.close()
    if args.backend_duration > 0:
        from bench.backend_node import run as backend_run

        try:
            results["backend_node"] = backend_run(args.backend_duration, domain, args.profile_backend)
        except ImportError as exc:      # no gtsam here (the backend extra): the frontend figures stand
            print(f"bench-node: backend node section skipped: {exc}", file=sys.stderr)
            results["backend_node"] = {"error": f"{exc.__class__.__name__}: {exc}"}
    if args.replay_duration > 0:
        results["replay"] = replay(args.replay_duration, args.device, domain)
    return _write(results, out, args, data, device_used)


def replay(duration: float, device: str, domain: int) -> dict:
    """``vilib-ros run`` on its generated stereo sequence of ``duration`` s (backend on, no video,
    backpressure): stereo frames sent per second of replay wall time, and the run's APE."""
    import subprocess

    print(f"bench-node: vilib-ros run, generated {duration:g} s stereo sequence, backend on", file=sys.stderr)
    with tempfile.TemporaryDirectory() as tmpd:
        out = Path(tmpd) / "run"
        cmd = [sys.executable, "-m", "vilib_ros", "run", "--duration", f"{duration:g}", "--device", device,
               "--no-video", "--out", str(out), "--domain-id", str(domain), "--namespace", f"bench_replay_{os.getpid()}",
               "--timeout", str(max(300.0, 20 * duration))]
        proc = subprocess.run(cmd, capture_output=True, text=True, cwd=tmpd)   # its generated sequence lands there
        res: dict = {"command": "vilib-ros run --duration %g --device %s --no-video" % (duration, device),
                     "rc": proc.returncode}
        try:
            timing = json.loads((out / "timing.json").read_text())
            player = json.loads((out / "player_stats.json").read_text())
            frames = int((player.get("images") or [0])[0])
            replay_s, wall = float(player["replay_s"]), float(timing["wall_s"]["replay"])
            # the backend is not paced by the player: the replay lasts until its last odometry
            recv = {"tracks": [], "odometry": []}
            with open(out / "recorded.jsonl", "rb") as fh:
                for line in fh:
                    if b'"topic": "tracks"' in line or b'"topic": "odometry"' in line:
                        r = json.loads(line)
                        recv[r["topic"]].append(r["recv_mono_ns"])
            pipeline_s = (max(recv["tracks"] + recv["odometry"]) - min(recv["tracks"])) * 1e-9
            dur = max(replay_s, pipeline_s)
            res.update(player_time_s=player.get("time_s"), frames=frames, replay_s=dur, player_s=replay_s, first_tracks_to_last_odometry_s=pipeline_s,
                       odometry=len(recv["odometry"]), replay_wall_s=wall,
                       fps=frames / dur if dur > 0 else None, wall_fps=frames / wall if wall > 0 else None)
            report = (out / "report.md").read_text()
            res["ape_line"] = next((ln.strip("- ") for ln in report.splitlines() if "APE" in ln), None)
        except (OSError, KeyError, ValueError, TypeError) as exc:
            res["error"] = f"{exc.__class__.__name__}: {exc}; last output: {proc.stderr[-400:]}"
        dataset = Path(tmpd) / "vilib_ros_output" / "generated" / f"synthetic_{duration:g}s"
        if (dataset / "mav0").is_dir():
            # the ceiling of replay_fps: the player alone on the same sequence
            from bench.player import run as player_run

            res["player_alone"] = player_run(dataset, domain)
            # the player as the replay drives it (each image waits for the tracks of the one before),
            # against a frontend that answers at once: the player's own share of a replay frame
            res["player_backpressure"] = player_run(dataset, domain, backpressure=True)
        else:
            res.setdefault("error", f"the run's generated sequence is not in {dataset}")
    print(f"  replay: {res.get('frames')} stereo frames in {res.get('replay_s')} s -> {res.get('fps')} frames/s "
          f"(whole run {res.get('replay_wall_s')} s; the player's time: {res.get('player_time_s')})", file=sys.stderr)
    return res


def _player_lines(pa: dict, what: str, f) -> list[str]:
    """The Markdown paragraph of one player row of the replay section (``bench/player.py run``)."""
    if not pa:
        return []
    if not pa.get("player_fps"):
        return ["", f"{what.split(' (')[0]}: no figure ({pa.get('error')})"]
    ts, rx = pa.get("player_time_s") or {}, pa.get("received") or {}
    tracks = f", for the tracks {f(ts.get('backpressure'))} s" if pa.get("backpressure") else ""
    return ["", f"{what}: {pa['images_sent']} stereo frames in {pa['player_replay_s']:.2f} s = "
            f"**{pa['player_fps']:.0f} frames/s** (of which waiting for decoded images {f(ts.get('feed'))} s{tracks}, "
            f"publishing {f(ts.get('publish'))} s); received {rx.get('cam0')} cam0, {rx.get('cam1')} cam1 images, "
            f"{rx.get('imu')} IMU samples ({f(pa.get('received_fps'), 0)} frames/s)."]


def _machine(device: str) -> str:
    from bench.results import cpu_model

    cpu = cpu_model()
    desc = f"{cpu}, {os.cpu_count()} cores, load average {' / '.join(f'{v:.1f}' for v in os.getloadavg())}"
    if device == "cuda":
        try:
            from vilib_ros._cuda import device_name

            desc += f", GPU {device_name()}"
        except Exception:  # noqa: BLE001
            pass
    return desc


def _write(results: dict, out: Path, args, data: Path, device: str) -> int:
    cfg = results["configs"]

    def get(name, key):
        return cfg.get(name, {}).get(key)

    summary = {
        "device": device, "date": _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "machine": _machine(device), "python": platform.python_version(),
        "data": f"{data.name}: real EuRoC V1_01 frames (752x480), looped to {args.frames} per configuration, "
                f"{IMU_PER_FRAME} IMU samples per frame",
        "overhead_p50_ms": get("mono_20", "overhead_p50_ms") or get("mono_bp", "overhead_p50_ms"),
        "stereo_overhead_p50_ms": get("stereo_20", "overhead_p50_ms") or get("stereo_bp", "overhead_p50_ms"),
        "mono_sustained_fps": max([c["sustained_fps"] for n, c in cfg.items() if n.startswith("mono")
                                   and c["dropped"] == 0] or [0.0]),
        "stereo_sustained_fps": max([c["sustained_fps"] for n, c in cfg.items() if n.startswith("stereo")
                                     and c["dropped"] == 0] or [0.0]),
        "latency_p99_ms_at_200hz": get("mono_200", "latency_p99_ms"),
        "latency_dds_p99_ms_at_200hz": get("mono_200", "latency_dds_p99_ms"),
        "replay_fps": (results.get("replay") or {}).get("fps"),
        "host_stall_sampler": not getattr(args, "no_host_stalls", False),
        "backend_node_fps": ((results.get("backend_node") or {}).get("node") or {}).get("fps"),
        "backend_offline_fps": ((results.get("backend_node") or {}).get("offline") or {}).get("fps"),
    }
    summary.update(results)
    lines = ["# Frontend node over real DDS (`python -m bench node`)", "",
             f"{summary['date']}, {summary['machine']}, device {device}, Python {summary['python']}; {summary['data']}.",
             "Reliable QoS; latency = publisher send -> tracks received (CLOCK_MONOTONIC across processes);",
             "overhead = the node's receive -> publish minus `process()`; floor = the same images, bare publisher -> "
             "subscriber, same run." + ("" if summary["host_stall_sampler"] else
                                        " No host-stall sampler beside the configurations (--no-host-stalls)."), "",
             "| config | sent | node in | tracks out | dropped | frames/s | latency p50 / p99 ms | to the recorder's "
             f"middleware p50 / p99 ms | p99 from frame {STEADY_FROM} ms | worst frames (index: ms) | floor p50 / p99 ms "
             "| overhead p50 / p99 ms | of which convert / IMU / publish p50 ms | process p50 ms (submit + result; "
             "GPU) | CPU ms/frame after start-up |",
             "|---" * 15 + "|"]

    def f(v, d=2):
        return "-" if v is None else (f"{v:.{d}f}" if isinstance(v, float) else str(v))

    def stages(c):
        st = c.get("node_stages_p50_ms") or {}
        return " / ".join(f(st.get(k), 3) for k in ("convert", "imu", "publish"))

    def process(c):
        st = c.get("node_stages_p50_ms") or {}
        split = f" ({f(st.get('submit'))} + {f(st.get('result'))}" if st.get("submit") is not None else ""
        gpu = f"; GPU {f(c.get('gpu_p50_ms'), 3)})" if c.get("gpu_p50_ms") is not None else (")" if split else "")
        return f"{f(c.get('process_p50_ms'))}{split}{gpu}"

    for name, c in cfg.items():
        fl = results["floor"].get(name.split("_", 1)[1], {})
        lines.append(f"| {name} | {c['sent']} | {f(c.get('frames_in'))} | {c['received']} | {c['dropped']} | "
                     f"{f(c['sustained_fps'], 1)} | {f(c['latency_p50_ms'])} / {f(c['latency_p99_ms'])} | "
                     f"{f(c.get('latency_dds_p50_ms'))} / {f(c.get('latency_dds_p99_ms'))} | "
                     f"{f(c.get('latency_p99_steady_ms'))} | "
                     + ", ".join(f"{k}: {v:.0f}" for k, v in (c.get("latency_worst") or [])[:3]) + " | "
                     f"{f(fl.get('latency_p50_ms'))} / {f(fl.get('latency_p99_ms'))} | {f(c.get('overhead_p50_ms'))} / "
                     f"{f(c.get('overhead_p99_ms'))} | {stages(c)} | {process(c)} | "
                     f"{f(c.get('cpu_ms_per_frame'))} |")
    wh = {n: c["where"] for n, c in cfg.items() if c.get("where")}
    if wh:
        lines += ["", "Where the latency goes (ms, p50 / p99 per segment; the worst frame's segments): publish() in "
                  "the publisher; send -> the node's middleware received it; then, until the node's callback began, busy "
                  "(the executor still in earlier callbacks) and wake-up (the executor free, the callback not begun); "
                  "callback -> tracks published; -> tracks received here:", "",
                  "| config | publish() | to node | busy | wake-up | in node | to driver | worst frame: index, ms = "
                  "publish + to node + busy + wake-up + in node + to driver | publisher busy / CPU ms per frame |",
                  "|---" * 9 + "|"]
        for name, w in wh.items():
            cells = [f"{f(w[k]['p50'])} / {f(w[k]['p99'])}" if k in w else "-" for k in SEGMENTS]
            wf = (w.get("worst") or [{}])[0]
            worst = (f"{wf['index']}, {f(wf['latency_ms'])} = " + " + ".join(f(wf.get(k)) for k in SEGMENTS)) if wf else "-"
            pb = cfg[name].get("publisher") or {}
            lines.append(f"| {name} | " + " | ".join(cells) + f" | {worst} | {f(pb.get('busy_ms_per_frame'))} / "
                         f"{f(pb.get('cpu_ms_per_frame'))} |")
    hs = {**{f"floor_{k}": c.get("host_stalls") for k, c in results["floor"].items()},
          **{n: c.get("host_stalls") for n, c in cfg.items()}}
    hs = {n: h for n, h in hs.items() if h}
    if hs:
        lines += ["", "Host stalls beside each configuration (`bench/host_stalls.py`: an idle process sleeping "
                  "0.5 ms in a loop records every wake-up more than 1 ms late, CLOCK_MONOTONIC); where cores are free, such a stall "
                  "is the host's (it slows every process), not the node's; slow frames = latency over 3 ms:", "",
                  "| config | stalls | longest / total ms | slow frames | of which with a stall inside |", "|---|---|---|---|---|"]
        for name, h in hs.items():
            lines.append(f"| {name} | {h['stalls']} | {f(h['stall_max_ms'])} / {f(h['stall_total_ms'], 1)} | "
                         f"{h['frames_over']} | {h['frames_over_with_stall']} |")
    if results["burst"]:
        lines += ["", "Burst (mono images as fast as the publisher sends them):", "",
                  "| QoS | sent | node in | tracks out | dropped | RSS after warm-up / end / max MB |", "|---|---|---|---|---|---|"]
        for rel, c in results["burst"].items():
            rss = "-" if not c.get("rss_start_kb") else (f"{c['rss_start_kb'] / 1024:.1f} / {c['rss_end_kb'] / 1024:.1f}"
                                                         f" / {c['rss_max_kb'] / 1024:.1f}")
            lines.append(f"| {rel} | {c['sent']} | {f(c.get('frames_in'))} | {c['received']} | {c['dropped']} | {rss} |")
    be = results.get("backend_node")
    if be and be.get("error"):
        lines += ["", f"Backend node section skipped: {be['error']}"]
    elif be:
        off = be["offline"]
        lines += ["", f"Backend node over DDS against the offline backend, same tracks, same run ({be['data']}; "
                  "the node: stereo, reliable IMU, 4 frames in flight, paced on `backend_processed`, `odometry` "
                  "subscribed):", "",
                  "| backend | frames processed | frames/s | ms/frame | CPU ms/frame (all threads) | estimator ms/frame |",
                  "|---|---|---|---|---|---|",
                  f"| offline (in process) | {off['frames']} | {off['fps']:.0f} | {off['ms_per_frame']:.2f} | "
                  f"{off['cpu_ms_per_frame']:.2f} | - |"]
        for name in ("node", "node_no_covariance"):
            nd = be.get(name)
            if nd:
                label = "backend_node" + (" (odometry_covariance off)" if name != "node" else " (defaults)")
                lines.append(f"| {label} | {nd['processed']}/{nd['frames']} | {nd['fps']:.0f} | {nd['ms_per_frame']:.2f} "
                             f"| {f(nd.get('cpu_ms_per_frame'))} | {f(nd.get('estimator_ms_per_frame'))} |")
    rp = results.get("replay")
    if rp:
        lines += ["", f"Replay (`{rp['command']}`, stereo, backend on, backpressure): "
                  + (f"{rp['frames']} stereo frames sent in {rp['replay_s']:.2f} s = **{rp['fps']:.0f} frames/s** "
                     f"(the longer of the player's first to last frame and the first tracks to the last odometry); the run's replay phase with start-up and the "
                     f"backend's drain {rp['replay_wall_s']:.1f} s ({rp['wall_fps']:.0f} frames/s); "
                     f"{rp.get('ape_line') or 'no APE line'}" if rp.get("fps") else
                     f"no figure (rc {rp['rc']}: {rp.get('error')})")]
        for key, what in (("player_alone", "The player alone on the same sequence (rate 1000, no backpressure, a "
                                           "bare reliable subscriber on its topics, same run)"),
                          ("player_backpressure", "The player with backpressure against an instant frontend (rate 0, "
                                                  "each image waits for the tracks of the one before; a subscriber "
                                                  "answers every cam0 image at once, same run)")):
            lines += _player_lines(rp.get(key) or {}, what, f)
    from bench.results import write_results

    write_results(out, "node_bench", summary, "\n".join(lines))
    return 0


if __name__ == "__main__":
    if len(sys.argv) >= 3 and sys.argv[1] == "--publisher":
        sys.exit(publisher_main(sys.argv[2]))
    raise SystemExit("usage: python -m bench node (this module's own entry is the publisher process)")
