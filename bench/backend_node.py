"""The backend node over real DDS against the offline backend on the same tracks (``python -m bench node``).

Isolates the backend node from the frontend: the synthetic generator's stereo-inertial sequence
(the one ``vilib-ros run`` generates, seed 0) gives ground-truth projections of its scene points
as tracks (1 px noise, dropouts, outliers: :func:`vilib_ros.synthetic.tracks.synthetic_track_frames`)
and its 200 Hz IMU. In the same run:

* offline: :class:`vilib_ros.backend.VioEstimator` fed in time order in this process (IMU
  sample by sample, then each frame), as the offline runner does: frames/s = frames / wall time;
* node: ``backend_node`` in its own process (stereo, reliable IMU, the settings of ``vilib-ros
  run``); this process publishes the serialized tracks (``vins_fusion`` layout, as the frontend
  node writes them) and the IMU up to each frame's stamp, keeping at most ``window`` frames in
  flight (backpressure on ``backend_processed``), and subscribes to ``odometry`` as the recorder
  of ``vilib-ros run`` does. frames/s = frames / (first send -> last ``backend_processed``); the
  node's CPU time per frame (all its threads, from /proc) and its estimator time per frame (its
  stats file) beside it. ``profile``: the node runs under cProfile; the top functions by
  cumulative time are returned. The node starts with jemalloc where installed, as ``vilib-ros run``
  starts it (:mod:`vilib_ros.allocator`; ``VILIB_ROS_JEMALLOC=0``: without); the offline estimator
  runs in this process, with this process's allocator.
"""
from __future__ import annotations

import json
import os
import sys
import tempfile
import time
from pathlib import Path

import numpy as np


def _sequence(duration: float):
    from vilib_ros.synthetic.tracks import synthetic_track_frames
    from vilib_ros.synthetic import SequenceConfig, SyntheticSequence

    seq = SyntheticSequence(SequenceConfig(duration_s=duration, seed=0))
    frames = synthetic_track_frames(seq)
    st, data, _, _ = seq.imu()
    return seq, frames, np.asarray(st, dtype=np.int64), np.asarray(data, dtype=np.float64)


def offline(seq, frames, st, data) -> dict:
    """The estimator in this process, fed as the offline runner feeds it."""
    from vilib_ros.backend import BackendConfig, VioEstimator

    est = VioEstimator(BackendConfig(), seq.camera(0), seq.camera(1), seq.imu_noise_dict())
    i = 0
    t0 = time.perf_counter()
    c0 = time.process_time()
    for f in frames:
        while i < len(st) and st[i] <= f.stamp_ns:
            est.add_imu(int(st[i]), data[i, :3], data[i, 3:])
            i += 1
        est.add_frame(f)
    wall = time.perf_counter() - t0
    cpu = time.process_time() - c0
    return {"frames": len(frames), "wall_s": wall, "fps": len(frames) / wall, "ms_per_frame": 1e3 * wall / len(frames),
            "cpu_ms_per_frame": 1e3 * cpu / len(frames), "keyframes": int(est.stats["keyframes"])}


def _cpu_s(pid: int) -> float | None:
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, IndexError, ValueError):
        return None


def _threads_cpu_s(pid: int) -> dict:
    """CPU seconds per thread name of ``pid`` (/proc/<pid>/task/*: comm, utime + stime), summed over the
    threads of one name: where a node's CPU goes besides its main thread (DDS, BLAS pools, ...)."""
    out: dict[str, float] = {}
    tck = os.sysconf("SC_CLK_TCK")
    for task in Path(f"/proc/{pid}/task").glob("*"):
        try:
            name = (task / "comm").read_text().strip()
            fields = (task / "stat").read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        main = task.name == str(pid)
        key = "main thread" if main else name
        out[key] = out.get(key, 0.0) + (int(fields[11]) + int(fields[12])) / tck
    return out


def _write_calibration(seq, tmp: Path) -> dict:
    import yaml

    (tmp / "cam0.yaml").write_text(yaml.safe_dump(seq.camera(0).to_euroc_dict(), sort_keys=False))
    (tmp / "cam1.yaml").write_text(yaml.safe_dump(seq.camera(1).to_euroc_dict(), sort_keys=False))
    (tmp / "imu0.yaml").write_text(yaml.safe_dump({k: float(v) for k, v in seq.imu_noise_dict().items()}))
    return {"camera_yaml": str(tmp / "cam0.yaml"), "right.camera_yaml": str(tmp / "cam1.yaml"), "stereo": True,
            "imu_yaml": str(tmp / "imu0.yaml")}


def node(seq, frames, st, data, domain: int, window: int = 4, profile: bool = False, params: dict | None = None,
         timeout: float = 600.0) -> dict:
    """``backend_node`` in its own process, fed the same tracks and IMU over DDS."""
    from rclpy.serialization import serialize_message
    from nav_msgs.msg import Odometry
    from sensor_msgs.msg import Imu, PointCloud
    from std_msgs.msg import Header

    from vilib_ros.allocator import with_jemalloc
    from vilib_ros.nodes._common import reliable_qos
    from vilib_ros.nodes.cdr import header_stamp_ns
    from vilib_ros.nodes.conversions import TracksEncoder, arrays_to_imu
    from vilib_ros.nodes.processes import GraphClient, NodeProcess, node_argv, ros_env

    enc = TracksEncoder("vins_fusion")
    tracks = [enc.encode(f, "cam0") for f in frames]
    imu = [serialize_message(arrays_to_imu(int(t), d[:3], d[3:])) for t, d in zip(st, data)]
    with tempfile.TemporaryDirectory() as tmpd:
        tmp = Path(tmpd)
        p = _write_calibration(seq, tmp)
        p.update(input_reliability="reliable", imu_wait_s=10.0, stats_path=str(tmp / "backend_stats.json"),
                 trajectory_path=str(tmp / "trajectory.txt"))
        p.update(params or {})
        argv = node_argv("backend_node", params=p)
        if profile:
            argv[1:3] = ["-m", "cProfile", "-o", str(tmp / "backend.prof"), "-m", argv[2]]
        env = with_jemalloc(ros_env(domain))      # as vilib-ros run starts it (vilib_ros.allocator)
        client = GraphClient(domain, "bench_backend_driver")
        proc = NodeProcess("backend_node", argv, env, tmp / "backend.log")
        done: dict[int, float] = {}
        odometry = []
        try:
            n = client.node
            pub_tracks = n.create_publisher(PointCloud, "tracks", reliable_qos(100))
            pub_imu = n.create_publisher(Imu, "imu", reliable_qos(1000))
            n.create_subscription(Header, "backend_processed",
                                  lambda b: done.setdefault(header_stamp_ns(b), time.monotonic()), reliable_qos(100),
                                  raw=True)
            n.create_subscription(Odometry, "odometry", lambda b: odometry.append(time.monotonic()), reliable_qos(100),
                                  raw=True)
            ok = client.spin_until(lambda: not proc.alive or (n.count_subscribers("tracks") >= 1 and n.count_subscribers(
                "imu") >= 1 and n.count_publishers("backend_processed") >= 1), 90)
            if not ok or not proc.alive:
                raise RuntimeError(f"backend node did not come up:\n{proc.tail()}")
            client.spin_for(1.0)
            cpu0 = _cpu_s(proc.pid)
            th0 = _threads_cpu_s(proc.pid)
            t_end = time.monotonic() + timeout
            sent_imu = 0
            t_first = time.monotonic()
            for k, f in enumerate(frames):
                if k >= window:
                    want = frames[k - window].stamp_ns
                    while want not in done and proc.alive and time.monotonic() < t_end:
                        client.executor.spin_once(timeout_sec=0.001)
                while sent_imu < len(st) and st[sent_imu] <= f.stamp_ns:
                    pub_imu.publish(imu[sent_imu])
                    sent_imu += 1
                pub_tracks.publish(tracks[k])
            last = frames[-1].stamp_ns
            while last not in done and proc.alive and time.monotonic() < t_end:
                client.executor.spin_once(timeout_sec=0.005)
            cpu1 = _cpu_s(proc.pid)
            th1 = _threads_cpu_s(proc.pid)
            client.spin_for(0.5)
        finally:
            proc.stop()
            client.close()
        stats = json.loads((tmp / "backend_stats.json").read_text()) if (tmp / "backend_stats.json").is_file() else {}
        span = (max(done.values()) - t_first) if done else 0.0
        res = {"frames": len(frames), "processed": len(done), "odometry": len(odometry), "window": window,
               "wall_s": span, "fps": len(done) / span if span > 0 else 0.0,
               "ms_per_frame": 1e3 * span / max(1, len(done)),
               "cpu_ms_per_frame": 1e3 * (cpu1 - cpu0) / max(1, len(done)) if cpu0 is not None and cpu1 else None,
               "estimator_ms_per_frame": (stats.get("frame_ms") or {}).get("mean"),
               "threads_cpu_ms_per_frame": {k: round(1e3 * (v - th0.get(k, 0.0)) / max(1, len(done)), 3)
                                            for k, v in sorted(th1.items(), key=lambda kv: -(kv[1] - th0.get(kv[0], 0.0)))
                                            if v - th0.get(k, 0.0) > 0},
               "skipped": {k: v for k, v in (stats.get("skipped") or {}).items() if v},
               "params": {k: v for k, v in (params or {}).items()}, "log_tail": "" if done else proc.tail(10)}
        if profile and (tmp / "backend.prof").is_file():
            res["profile"] = _top(tmp / "backend.prof")
    return res


def _top(path: Path, n: int = 40) -> list[dict]:
    import pstats

    s = pstats.Stats(str(path))
    rows = []
    for (file, line, fn), (_cc, nc, tt, ct, _callers) in s.stats.items():
        rows.append({"function": f"{Path(file).name}:{line}({fn})", "calls": nc, "tottime_s": tt, "cumtime_s": ct})
    rows.sort(key=lambda r: -r["cumtime_s"])
    return rows[:n]


#: the node's configurations in a run (``reverse``: in the opposite order, for order effects)
VARIANTS = (("node", {}), ("node_no_covariance", {"odometry_covariance": False}))


def run(duration: float, domain: int, profile: bool = False, window: int = 4, reverse: bool = False) -> dict:
    """Offline and node on the same tracks, one after the other, in this run."""
    print(f"bench-node: backend node vs offline backend, synthetic {duration:g} s stereo tracks", file=sys.stderr)
    seq, frames, st, data = _sequence(duration)
    off = offline(seq, frames, st, data)
    res = {"data": (f"synthetic generator, {duration:g} s stereo-inertial (seed 0, 20 Hz frames, 200 Hz IMU), "
                    "ground-truth projections with 1 px noise, 3 % dropouts, 1 % outliers, <= 150 tracks/frame"),
           "offline": off}
    print(f"  offline {off['fps']:.0f} frames/s ({off['ms_per_frame']:.2f} ms/frame)", file=sys.stderr)
    for name, params in (VARIANTS[::-1] if reverse else VARIANTS):
        nd = node(seq, frames, st, data, domain, window=window, profile=profile, params=params)
        print(f"  {name}: {nd['fps']:.0f} frames/s ({nd['ms_per_frame']:.2f} ms/frame, CPU {_f(nd['cpu_ms_per_frame'])} "
              f"ms/frame, estimator {_f(nd['estimator_ms_per_frame'])} ms/frame), {nd['processed']}/{nd['frames']} "
              "processed", file=sys.stderr)
        print("    CPU ms/frame by thread: " + ", ".join(f"{k} {v:.2f}" for k, v in
                                                       list(nd["threads_cpu_ms_per_frame"].items())[:8]), file=sys.stderr)
        res[name] = nd
    return res


def _f(v) -> str:
    return "-" if v is None else f"{v:.2f}"


if __name__ == "__main__":
    import argparse

    ap = argparse.ArgumentParser(description="backend node vs offline backend on the same tracks")
    ap.add_argument("--duration", type=float, default=30.0)
    ap.add_argument("--domain-id", type=int, default=int(os.environ.get("ROS_DOMAIN_ID", "0") or 0))
    ap.add_argument("--profile", action="store_true", help="run the node under cProfile, print its top functions")
    ap.add_argument("--window", type=int, default=4, help="frames in flight")
    ap.add_argument("--reverse", action="store_true", help="the node's configurations in the opposite order")
    a = ap.parse_args()
    r = run(a.duration, a.domain_id, a.profile, a.window, a.reverse)
    print(json.dumps(r, indent=1))
