"""``python -m bench node-process``: the frontend node's tracker and per-frame steps, outside ROS.

Why is ``process()`` slower inside the frontend node than in ``python -m bench tracker``? This
builds the node's own tracker (:mod:`vilib_ros.nodes.frontend_setup`: the node's parameter
defaults with ``bench-node``'s overrides, the same FrontendConfig, camera and warm-up) and runs
the 95 real EuRoC frames through it, one variant after the other in rounds (the host's speed
drifts on a shared machine: variants are compared within the same minutes), each adding one
thing the node does that ``bench-tracker`` does not:

* ``bench``: ``process(frame)`` from a NumPy frame, no gyro (what ``bench-tracker --per-frame-only`` times);
* ``gyro``: the same with the 10-11 gyro samples since the previous frame (the node passes them:
  the rotation is integrated on the host before the frame is submitted);
* ``message``: the frame as the node gets it: a view of a freshly allocated serialized
  ``sensor_msgs/Image`` (rclpy hands every message over in a new ``bytes`` object);
* ``node``: the node's per-frame path without DDS: the frame's 10 serialized IMU messages
  decoded and queued (the node's IMU path), the image message converted, the gyro taken from the
  IMU queue, ``submit()`` + ``result()`` (as the node times them), the tracks message encoded;
* ``node, IMU one by one``: the node path with the IMU messages decoded and queued one at a time
  (the node's path before the burst path);
* ``node, sleep N ms``: the node path with the thread asleep N ms between frames (the node
  waits for DDS between frames: does the host or the device get slower when idle?);
* ``node, spin N ms``: the same gap spent busy on the host (CPU kept awake; the device idle).

Per variant: ``process()`` p50 / p90 / p99 (submit + result), submit p50, result p50, the
device time (CUDA events, ``gpu_s``) p50, and for the node paths each step's p50. Writes
``node_process.json`` / ``.md`` into ``--out``.
"""
from __future__ import annotations

import datetime as _dt
import platform
import time

import numpy as np

IMU_PER_FRAME = 10
PERIOD_NS = 50_000_000
T0_NS = 1_500_000_000_000_000_000
#: what bench-node sets on the frontend node (bench.node._Run.node), mono
NODE_OVERRIDES = {"stereo": False, "input_reliability": "reliable", "queue_size": 100, "publish_debug_image": False,
                  "stereo_timeout_s": 1.0}


def configure_parser(p) -> None:
    p.add_argument("--data", default=None, help="EuRoC ASL folder (default: as bench-node finds it)")
    p.add_argument("--device", default="auto", choices=("auto", "cuda", "cpu"), help="frontend device")
    p.add_argument("--frames", type=int, default=200, help="frames per variant (in rounds of --round)")
    p.add_argument("--round", type=int, default=50, help="frames per variant per round")
    p.add_argument("--gaps", default="1,5,20", help="ms between frames of the paced node variants ('' = none)")
    p.add_argument("--out", default="bench/results", help="folder for node_process.json / .md")


class _Feed:
    """The frames and IMU messages of a replay as the node receives them, stamps increasing."""

    def __init__(self, frames):
        from vilib_ros.nodes.cdr import encode_imu

        self.frames = frames
        self.k = 0
        self.stamp = T0_NS
        self._encode_imu = encode_imu

    def next(self):
        """(frame array, its stamp, its serialized image message (new bytes), its IMU messages)."""
        from vilib_ros.nodes.cdr import encode_image

        self.k += 1
        self.stamp += PERIOD_NS
        img = self.frames[self.k % len(self.frames)]
        imu = [self._encode_imu(self.stamp - PERIOD_NS + (j + 1) * (PERIOD_NS // IMU_PER_FRAME), "imu0",
                                (0.01, -0.02, 0.005), (9.8, 0.1, -0.2)) for j in range(IMU_PER_FRAME)]
        return img, self.stamp, encode_image(self.stamp, "cam0", img, "mono8"), imu


class NodeSteps:
    """The frontend node's per-frame steps on one tracker (the node's own functions)."""

    def __init__(self, values: dict):
        from vilib_ros.nodes.conversions import TracksEncoder
        from vilib_ros.nodes.frontend_setup import build_config, make_tracker, warm_up
        from vilib_ros.nodes.input_guard import ImuQueue
        from vilib_ros.nodes.params import camera_from_params

        self.values = values
        self.cam = camera_from_params(values)
        self.tracker = make_tracker(self.cam, build_config(values), values["device"])
        self.device = self.tracker.device
        self.encoder = TracksEncoder(values["tracks_layout"])
        self.imu = ImuQueue(gyro_range=values["gyro_range"], accel_range=values["accel_range"],
                            jump_threshold_ns=int(values["time_jump_threshold_s"] * 1e9))
        self.warm_up_s = warm_up(self.tracker, int(values["warm_up_frames"]), self.cam, False, self.convert,
                                 lambda fr: self.encoder.encode(fr, "warm_up"))
        self.prev = None

    @staticmethod
    def convert(buf):
        from vilib_ros.nodes.cdr import decode_image
        from vilib_ros.nodes.conversions import image_to_mono8

        raw = decode_image(buf)
        return raw.stamp_ns, image_to_mono8(raw)

    def add_imu(self, msgs, batch: bool = True) -> None:
        """The node's IMU path (frontend_node._add_imu_burst): the burst decoded and queued at once,
        one by one where that declines (or ``batch`` is False: the path before the burst one)."""
        from vilib_ros.nodes.cdr import decode_imu

        if batch and self.imu.add_serialized(msgs) is not None:
            return
        for m in msgs:
            t, g, a = decode_imu(m)
            self.imu.add(t, g, a)

    def gyro(self, stamp):
        prev = self.prev if self.prev is not None else stamp - 100_000_000
        return self.imu.gyro_between(prev - 10_000_000, stamp)

    def process(self, img, stamp, gyro=None) -> tuple:
        """(frame, submit s, result s): process() as the node calls it, its halves timed."""
        t0 = time.perf_counter()
        self.tracker.submit(img, stamp, gyro)
        t1 = time.perf_counter()
        fr = self.tracker.result()
        self.prev = stamp
        return fr, t1 - t0, time.perf_counter() - t1


def _variant(steps: NodeSteps, feed: _Feed, kind: str, n: int, gap_s: float = 0.0, spin: bool = False) -> list:
    """``n`` frames of one variant: a dict of step times (s) per frame."""
    rows = []
    for _ in range(n):
        img, stamp, msg, imu = feed.next()
        if gap_s:
            if spin:
                end = time.perf_counter() + gap_s
                while time.perf_counter() < end:
                    pass
            else:
                time.sleep(gap_s)
        row = {}
        if kind == "bench":
            steps.imu.clear()
            fr, row["submit"], row["result"] = steps.process(img, stamp)
        elif kind == "gyro":
            steps.imu.clear()
            steps.add_imu(imu)
            fr, row["submit"], row["result"] = steps.process(img, stamp, steps.gyro(stamp))
        elif kind == "message":
            steps.imu.clear()
            _, im = steps.convert(msg)
            fr, row["submit"], row["result"] = steps.process(im, stamp)
        else:
            t0 = time.perf_counter()
            steps.add_imu(imu, batch=kind != "node_imu_one_by_one")
            t1 = time.perf_counter()
            _, im = steps.convert(msg)
            t2 = time.perf_counter()
            gyro = steps.gyro(stamp)
            t3 = time.perf_counter()
            fr, row["submit"], row["result"] = steps.process(im, stamp, gyro)
            t4 = time.perf_counter()
            steps.encoder.encode(fr, "cam0")
            t5 = time.perf_counter()
            row.update(imu_messages=t1 - t0, convert=t2 - t1, imu=t3 - t2, publish_encode=t5 - t4,
                       node_total=t5 - t0)
        row["process"] = row["submit"] + row["result"]
        row["gpu"] = float(fr.timings.get("gpu_s", float("nan")))
        row["tracks"] = len(fr)
        rows.append(row)
    return rows


def gyro_rotation_times(steps: NodeSteps, feed: _Feed, n: int = 500) -> dict:
    """The host's gyro rotation per frame (10 samples + the bracketing ones, as the node passes
    them): ``GyroPredictor.rotation`` as it is, and the per-sub-interval loop it replaced (one
    ``so3_exp`` and one 3x3 product per sample in Python), in the same run; us p50 / p99. A tight
    loop is the best case: inside ``process()`` the same call cost 3x more on the H100 host."""
    from vilib_ros.frontend.imu_prediction import GyroPredictor, camera_rotation, so3_exp

    pred = GyroPredictor(steps.cam)
    q = steps.imu
    q.clear()
    stamps = []
    for _ in range(3):
        _img, stamp, _msg, imu = feed.next()
        steps.add_imu(imu)
        stamps.append(stamp)
    t0, t1 = stamps[-2], stamps[-1]
    g = q.gyro_between(t0 - 10_000_000, t1)

    def loop():
        t = g[:, 0]
        inside = t[(t > t0) & (t < t1)]
        knots = np.concatenate([[float(t0)], inside, [float(t1)]])
        mids, dts = 0.5 * (knots[:-1] + knots[1:]), np.diff(knots) * 1e-9
        w = np.stack([np.interp(mids, t, g[:, i]) for i in (1, 2, 3)], axis=1)
        R = np.eye(3)
        for wi, dt in zip(w, dts):
            R = R @ so3_exp(wi * dt)
        return camera_rotation(R, steps.cam.T_BS)

    out = {}
    for name, fn in (("current", lambda: pred.rotation(g, t0, t1)), ("loop (before)", loop)):
        ts = []
        for _ in range(n):
            a = time.perf_counter()
            fn()
            ts.append(time.perf_counter() - a)
        out[name] = {"p50_us": float(np.percentile(ts, 50)) * 1e6, "p99_us": float(np.percentile(ts, 99)) * 1e6}
    out["samples"] = int(len(g))
    out["max_difference"] = float(np.abs(pred.rotation(g, t0, t1) - loop()).max())
    steps.prev = None
    return out


def run(frames, device: str, n: int, per_round: int, gaps_ms, values_override=None) -> dict:
    from vilib_ros.nodes.frontend_setup import default_values

    values = default_values({**NODE_OVERRIDES, "device": device, **(values_override or {})})
    steps = NodeSteps(values)
    feed = _Feed(frames)
    variants = {"bench": ("bench", 0.0, False), "gyro": ("gyro", 0.0, False), "message": ("message", 0.0, False),
                "node": ("node", 0.0, False), "node, IMU one by one": ("node_imu_one_by_one", 0.0, False)}
    for g in gaps_ms:
        variants[f"node, sleep {g:g} ms"] = ("node", g * 1e-3, False)
        variants[f"node, spin {g:g} ms"] = ("node", g * 1e-3, True)
    _variant(steps, feed, "node", 30)                       # warm: every path once
    rows = {k: [] for k in variants}
    for _ in range(max(1, -(-n // per_round))):
        for name, (kind, gap, spin) in variants.items():
            rows[name] += _variant(steps, feed, kind, per_round, gap, spin)
    out = {}
    for name, rs in rows.items():
        keys = [k for k in rs[0] if k != "tracks"]
        st = {}
        for k in keys:
            v = np.asarray([r[k] for r in rs], float)
            st[k] = float(np.median(v[np.isfinite(v)])) * 1e3 if np.isfinite(v).any() else None
        p = np.asarray([r["process"] for r in rs]) * 1e3
        st.update(process_p90=float(np.percentile(p, 90)), process_p99=float(np.percentile(p, 99)),
                  frames=len(rs), tracks=float(np.mean([r["tracks"] for r in rs])))
        out[name] = st
    return {"device": steps.device, "warm_up_ms": steps.warm_up_s * 1e3, "variants": out,
            "gyro_rotation": gyro_rotation_times(steps, feed),
            "config": {k: values[k] for k in ("device", "stereo", "camera_yaml", "warm_up_frames")}}


def markdown(res: dict) -> str:
    cols = ("process", "process_p90", "process_p99", "submit", "result", "gpu", "imu_messages", "convert", "imu",
            "publish_encode", "node_total")
    L = ["# The frontend node's tracker outside ROS (`python -m bench node-process`)", "",
         f"{res['date']}, {res['machine']}, device {res['device']}, Python {res['python']}; {res['data']}; the node's "
         f"tracker (frontend_setup: node defaults + bench-node's overrides), warm-up {res['warm_up_ms']:.0f} ms; "
         "variants interleaved in rounds. ms, p50 unless said:", "",
         "| variant | frames | tracks | " + " | ".join(c.replace("_", " ") for c in cols) + " |",
         "|---" * (len(cols) + 3) + "|"]
    for name, st in res["variants"].items():
        cells = ["-" if st.get(c) is None else f"{st[c]:.3f}" for c in cols]
        L.append(f"| {name} | {st['frames']} | {st['tracks']:.0f} | " + " | ".join(cells) + " |")
    L += ["", "process = submit + result (as the node times them); gpu = CUDA events around the frame's work; "
          "imu messages = decoding and queueing the frame's 10 serialized IMU messages; imu = the gyro taken "
          "from the queue; node total = the steps from the IMU messages to the encoded tracks message."]
    gr = res.get("gyro_rotation")
    if gr:
        L += ["", f"The gyro's rotation on the host, per frame ({gr['samples']} samples), same run, in a tight loop: "
              f"{gr['current']['p50_us']:.1f} us p50 / {gr['current']['p99_us']:.1f} p99, the per-sample NumPy loop it "
              f"replaced {gr['loop (before)']['p50_us']:.1f} / {gr['loop (before)']['p99_us']:.1f} us "
              f"(largest difference {gr['max_difference']:.1e})."]
    return "\n".join(L) + "\n"


def run_command(args) -> int:
    import cv2

    from bench.node import _find_data, _machine

    data = _find_data(args.data)
    files = sorted((data / "mav0" / "cam0" / "data").glob("*.png"))
    frames = [cv2.imread(str(f), cv2.IMREAD_GRAYSCALE) for f in files]
    gaps = [float(g) for g in args.gaps.split(",") if g.strip()]
    res = run(frames, args.device, args.frames, args.round, gaps,
              {"camera_yaml": str(data / "mav0" / "cam0" / "sensor.yaml")})
    res.update(date=_dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"), machine=_machine(res["device"]),
               python=platform.python_version(),
               data=f"{data.name}: {len(frames)} real EuRoC V1_01 cam0 frames (752x480), looped, "
                    f"{IMU_PER_FRAME} IMU messages per frame")
    from bench.results import write_results

    write_results(args.out, "node_process", res, markdown(res))
    return 0


if __name__ == "__main__":
    import argparse

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    configure_parser(ap)
    raise SystemExit(run_command(ap.parse_args()))
