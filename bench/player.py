"""The player alone over real DDS (``python -m bench node``'s replay section).

``player_node`` replays a dataset as fast as it can (``rate`` 1000: a 20 Hz camera's frames due
every 50 us, so it never waits on the clock; no backpressure, nothing downstream to wait for) to
a bare subscriber in this process on its image and IMU topics (reliable, as the frontend and
the backend subscribe in ``vilib-ros run``). The player must never be what limits a replay:
its frames/s here is the ceiling of ``replay_fps``. Reported: cam0 images the player sent and
its own replay time (``player_stats.json``: frames/s, and where its time went: waiting for
decoded images, publishing), and what the subscriber received (cam0 images, IMU samples, the
first to last image received).
"""
from __future__ import annotations

import json
import sys
import tempfile
import time
from pathlib import Path

import numpy as np


def run(dataset: Path, domain: int, publish_cam1: bool = True, timeout: float = 300.0,
        backpressure: bool = False) -> dict:
    """``backpressure``: the player as ``vilib-ros run`` drives it (``rate`` 0: each image waits for
    the tracks of the one before), the subscriber answering every cam0 image at once with an empty
    tracks message of its stamp: a frontend that costs nothing, so the player's own cost per frame
    in a replay is what is measured."""
    from sensor_msgs.msg import Image, Imu

    from vilib_ros.nodes._common import reliable_qos
    from vilib_ros.nodes.cdr import header_stamp_ns
    from vilib_ros.nodes.processes import GraphClient, NodeProcess, node_argv, ros_env

    print(f"bench-node: the player alone on {dataset.name}, as fast as it can, to a bare subscriber"
          + (" answering each image with its tracks (backpressure)" if backpressure else ""), file=sys.stderr)
    got: dict[str, dict[int, float]] = {"cam0": {}, "cam1": {}, "imu": {}}
    with tempfile.TemporaryDirectory() as tmpd:
        tmp = Path(tmpd)
        client = GraphClient(domain, "bench_player_driver")
        proc = None
        try:
            n = client.node
            topics = [("cam0", "cam0/image_raw", Image), ("imu", "imu0", Imu)]
            if publish_cam1:
                topics.append(("cam1", "cam1/image_raw", Image))
            answer = _answerer(n, reliable_qos(10)) if backpressure else None

            def received(b, k):
                t = header_stamp_ns(b)
                got[k].setdefault(t, time.monotonic())
                if k == "cam0" and answer is not None:
                    answer(t)

            for key, topic, kind in topics:
                n.create_subscription(kind, topic, lambda b, k=key: received(b, k), reliable_qos(1000), raw=True)
            params = {"dataset": str(dataset), "rate": 0.0 if backpressure else 1000.0, "publish_cam1": publish_cam1,
                      "exit_when_done": True, "progress": False, "wait_for_subscribers": 1, "wait_for_imu_subscribers": 1,
                      "stats_path": str(tmp / "player_stats.json"), "start_delay_s": 0.5}
            proc = NodeProcess("player_node", node_argv("player_node", params=params), ros_env(domain),
                               tmp / "player.log")
            t_end = time.monotonic() + timeout
            while proc.alive and time.monotonic() < t_end:
                client.executor.spin_once(timeout_sec=0.01)
            client.spin_for(0.5)
        finally:
            if proc is not None:
                proc.stop()
            client.close()
        try:
            st = json.loads((tmp / "player_stats.json").read_text())
        except (OSError, ValueError) as exc:
            return {"error": f"{exc.__class__.__name__}: {exc}", "log_tail": proc.tail(10) if proc else ""}
    images = int((st.get("images") or [0])[0])
    replay_s = float(st.get("replay_s") or 0.0)
    rx = sorted(got["cam0"].values())
    rx_s = rx[-1] - rx[0] if len(rx) > 1 else 0.0
    res = {"dataset": dataset.name, "backpressure": backpressure, "images_sent": images, "player_replay_s": replay_s,
           "player_fps": images / replay_s if replay_s > 0 else None, "player_time_s": st.get("time_s"),
           "backpressure_timeouts": st.get("backpressure_timeouts"),
           "received": {k: len(v) for k, v in got.items()},
           "received_fps": (len(rx) - 1) / rx_s if rx_s > 0 else None}
    print(f"  player alone: {images} cam0 images in {replay_s:.2f} s = {_f(res['player_fps'])} frames/s, "
          f"received {res['received']} ({_f(res['received_fps'])} frames/s)", file=sys.stderr)
    return res


def _answerer(node, qos):
    """A function publishing an empty ``tracks`` message of a given stamp (the instant frontend)."""
    from sensor_msgs.msg import PointCloud

    from vilib_ros.nodes.cdr import PointCloudEncoder

    pub, enc = node.create_publisher(PointCloud, "tracks", qos), PointCloudEncoder(())
    xyz, cols = np.zeros((0, 3)), np.zeros((0, 0))
    return lambda stamp: pub.publish(enc.encode(stamp, "cam0", xyz, cols))


def _f(v) -> str:
    return "-" if v is None else f"{v:.0f}"
