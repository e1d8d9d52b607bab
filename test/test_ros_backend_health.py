"""backend_node while tracking is lost, real rclpy / Fast DDS: a generated sequence whose frames go black for
1.5 s (``blank_intervals_s``: no tracks), its exact tracks and IMU sent to the node in time order.

Checked on what the node publishes: ``diagnostics`` says WARN with ``tracking: lost`` while the loss lasts
(the replay pauses inside the gap until it does) and ``ok`` after it; the odometry's covariance grows
through the gap and its velocity part falls after it; the summary counts one loss and one recovery.
"""
from __future__ import annotations

import json

import numpy as np
import pytest

pytestmark = [pytest.mark.ros, pytest.mark.slow]

from conftest import ros_domain  # noqa: E402

# the backend node tests' domain (test_ros_backend_bursts): the modules run one after the other
DOMAIN = ros_domain("ros_backend_bursts")
GAP = (4.0, 5.5)
DURATION_S = 9.0


def _status(msg):
    """(level, message, {key: value}) of a DiagnosticArray's backend status."""
    for s in msg.status:
        if s.hardware_id == "backend":
            level = s.level[0] if isinstance(s.level, bytes) else int(s.level)
            return level, s.message, {kv.key: kv.value for kv in s.values}
    return None


def test_tracking_loss_in_diagnostics_and_covariance(tmp_path):
    pytest.importorskip("rclpy", reason="rclpy (ros extra) not installed")
    pytest.importorskip("gtsam", reason="gtsam (backend extra) not installed")
    from diagnostic_msgs.msg import DiagnosticArray
    from nav_msgs.msg import Odometry
    from rclpy.serialization import serialize_message
    from sensor_msgs.msg import Imu, PointCloud
    from std_msgs.msg import Header

    from bench.backend_node import _write_calibration
    from vilib_ros.nodes._common import reliable_qos
    from vilib_ros.nodes.cdr import header_stamp_ns
    from vilib_ros.nodes.conversions import TracksEncoder, arrays_to_imu, stamp_to_ns
    from vilib_ros.nodes.processes import GraphClient, NodeProcess, node_argv, ros_env
    from vilib_ros.synthetic import SequenceConfig, SyntheticSequence
    from vilib_ros.synthetic.tracks import synthetic_track_frames

    seq = SyntheticSequence(SequenceConfig(duration_s=DURATION_S, seed=0, blank_intervals_s=(GAP,)))
    frames = synthetic_track_frames(seq, pixel_sigma=0.5, outlier_fraction=0.0)
    st, data, _, _ = seq.imu()
    t0 = frames[0].stamp_ns
    enc = TracksEncoder("vins_fusion")
    tracks = [enc.encode(f, "cam0") for f in frames]
    imu = [serialize_message(arrays_to_imu(int(t), d[:3], d[3:])) for t, d in zip(st, data)]
    p = _write_calibration(seq, tmp_path)
    p.update(input_reliability="reliable", imu_wait_s=30.0, stats_path=str(tmp_path / "stats.json"),
             diagnostics_period_s=0.2)
    proc = NodeProcess("backend_node", node_argv("backend_node", params=p), ros_env(DOMAIN), tmp_path / "be.log")
    client = GraphClient(DOMAIN, "test_backend_health")
    done, odom, diags = set(), [], []
    try:
        n = client.node
        pub_tracks = n.create_publisher(PointCloud, "tracks", reliable_qos(1000))
        pub_imu = n.create_publisher(Imu, "imu", reliable_qos(5000))
        sub_done = n.create_subscription(Header, "backend_processed", lambda b: done.add(header_stamp_ns(b)),
                                         reliable_qos(1000), raw=True)
        sub_odom = n.create_subscription(Odometry, "odometry", odom.append, reliable_qos(1000))
        sub_diag = n.create_subscription(DiagnosticArray, "diagnostics", lambda m: diags.append(_status(m)),
                                         reliable_qos(100))
        assert client.spin_until(lambda: not proc.alive or (
            pub_tracks.get_subscription_count() >= 1 and pub_imu.get_subscription_count() >= 1
            and sub_done.get_publisher_count() >= 1 and sub_odom.get_publisher_count() >= 1
            and sub_diag.get_publisher_count() >= 1), 120), proc.tail()
        client.spin_for(1.0)
        sent = 0
        pause = t0 + int((GAP[0] + 0.8) * 1e9)          # inside the gap, the loss under way
        paused = False
        for k, f in enumerate(frames):
            upto = int(np.searchsorted(st, f.stamp_ns, "right"))
            for j in range(sent, upto):
                pub_imu.publish(imu[j])
            sent = upto
            pub_tracks.publish(tracks[k])
            if k % 10 == 9 or k == len(frames) - 1:     # bounded wait per group (nothing assumed of the split)
                assert client.spin_until(lambda: f.stamp_ns in done or not proc.alive, 120), proc.tail()
            if not paused and f.stamp_ns >= pause:
                assert client.spin_until(lambda: f.stamp_ns in done or not proc.alive, 120), proc.tail()
                n_before = len(diags)
                assert client.spin_until(lambda: any(d and d[2].get("tracking") == "lost" for d in diags[n_before:])
                                         or not proc.alive, 60), f"no 'lost' in diagnostics: {diags[-3:]}"
                paused = True
        assert client.spin_until(lambda: len(done) >= len(frames) or not proc.alive, 120), proc.tail()
        n_before = len(diags)
        assert client.spin_until(lambda: len(diags) > n_before + 1, 30)
        client.spin_for(1.0)                              # the last odometry messages in
    finally:
        rc = proc.stop()
        client.close()
    assert rc == 0, proc.tail()
    lost = [d for d in diags if d and d[2].get("tracking") == "lost"]
    level, text, values = lost[0]
    assert level == 1 and "tracking lost for" in text and float(values["tracking_lost_for_s"]) > 0.5
    level, text, values = diags[-1]
    assert values["tracking"] == "ok" and level == 0, diags[-1]
    assert int(values["estimator.tracking_lost"]) == 1 and int(values["estimator.tracking_recovered"]) == 1
    stats = json.loads((tmp_path / "stats.json").read_text())
    assert stats["estimator"]["tracking_lost"] == 1 and stats["estimator"]["tracking_recovered"] == 1
    # the odometry's covariance: position and velocity through the gap, velocity after it
    t = np.array([(stamp_to_ns(o.header.stamp) - t0) * 1e-9 for o in odom])
    pos = np.array([np.trace(np.reshape(o.pose.covariance, (6, 6))[:3, :3]) for o in odom])
    vel = np.array([np.trace(np.reshape(o.twist.covariance, (6, 6))[:3, :3]) for o in odom])
    gap = (t > GAP[0] + 0.1) & (t < GAP[1])
    assert gap.sum() >= 25 and np.all(pos[gap] > 0)
    assert np.all(np.diff(vel[gap]) > 0) and np.all(np.diff(pos[gap]) > -1e-4 * pos[gap][:-1])
    assert vel[gap][-1] > 3 * vel[gap][0]
    assert vel[t > GAP[1] + 2.0].max() < 0.25 * vel[gap][-1]
