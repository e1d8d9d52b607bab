"""Time jumps and hostile input into frontend_node and backend_node over real DDS.

The test process publishes, to a frontend and a backend (real processes): 300 images with
distinct 100 KB encoding strings; 30 EuRoC frames (the generated sequence's where the real ones are
absent) with their IMU, one gyro sample of 1e30 rad/s among it; one frame and one IMU sample stamped
a year ahead; the next 30 frames; then the replay started again from its first stamp (``ros2 bag
play --loop``, a restarted driver) for 40 frames.

Bugs guarded: no good frame tracked after the future frame (``frame_gap`` counting the year); none
in the restarted replay; the warn-once record growing the log and the node with every new encoding.
"""
from __future__ import annotations

import json

import numpy as np
import pytest

pytestmark = [pytest.mark.ros, pytest.mark.slow]

from euroc_stream import image_stamps, imu_rows, publish_imu_until  # noqa: E402

YEAR = 365 * 24 * 3600 * 1_000_000_000


def _rss_kb(pid):
    for ln in open(f"/proc/{pid}/status").read().splitlines():
        if ln.startswith("VmRSS:"):
            return int(ln.split()[1])
    return 0


@pytest.fixture(scope="module")
def session(ros_graph, sequence_path, frames, tmp_path_factory):
    from diagnostic_msgs.msg import DiagnosticArray
    from nav_msgs.msg import Odometry
    from sensor_msgs.msg import Image, Imu, PointCloud

    from vilib_ros.nodes._common import reliable_qos
    from vilib_ros.nodes.conversions import arrays_to_imu, numpy_to_image, stamp_to_ns

    tmp = tmp_path_factory.mktemp("ros_time_reset")
    g = ros_graph
    cam_yaml = str(sequence_path / "mav0" / "cam0" / "sensor.yaml")
    fe = g.start("frontend_node", params={
        "camera_yaml": cam_yaml, "device": "cpu", "stereo": False, "queue_size": 400, "input_reliability": "reliable",
        "stats_path": str(tmp / "frontend.json"), "publish_debug_image": False, "diagnostics_period_s": 0.3},
        log=tmp / "frontend.log")
    be = g.start("backend_node", params={
        "camera_yaml": cam_yaml, "imu_yaml": str(sequence_path / "mav0" / "imu0" / "sensor.yaml"),
        "input_reliability": "reliable", "stats_path": str(tmp / "backend.json"),
        "trajectory_path": str(tmp / "traj.txt")}, log=tmp / "backend.log")
    client = g.client
    node = g.node
    tracks, odom = [], []
    subs = [node.create_subscription(PointCloud, "tracks", lambda m: tracks.append(m), reliable_qos(500)),
            node.create_subscription(Odometry, "odometry", lambda m: odom.append(m), reliable_qos(500))]
    fe_diag = {}

    def on_diag(m):
        for st in m.status:
            if st.name == "vilib_ros: frontend_node":
                fe_diag.update({kv.key: kv.value for kv in st.values})

    node.create_subscription(DiagnosticArray, "diagnostics", on_diag, reliable_qos(50))
    pub_img = node.create_publisher(Image, "image", reliable_qos(400))
    pub_imu = node.create_publisher(Imu, "imu", reliable_qos(4000))
    stamps = image_stamps(sequence_path)
    t_imu, gyro, acc = imu_rows(sequence_path)
    try:
        g.wait_for_subscribers({"/image": 1, "/imu": 2, "/tracks": 2}, 120)
        # matched endpoints, not only the graph's names (a reliable message sent before its reader matched is lost)
        g.wait_matched({pub_img: 1, pub_imu: 2}, subs, 60)
        client.spin_for(1.0)
        out = {"rss0": _rss_kb(fe.pid), "log0": len(fe.output())}

        # --- hostile encodings
        for i in range(300):
            m = numpy_to_image(np.zeros((2, 2), np.uint8), "mono8", stamps[0] - 10**9, "cam0")
            m.encoding = f"{i:05d}" + "x" * 100_000
            pub_img.publish(m)
            if i % 20 == 0:
                client.spin_for(0.05)
        # measured once the frontend has taken all 300 (its diagnostics count them), not after a fixed
        # time: else the log bound could pass on messages not yet read, and RSS count ones still queued
        def hostile_taken():
            return sum(int(fe_diag.get(f"skipped.{k}", 0)) for k in ("unsupported_encoding", "malformed")) >= 300
        assert client.spin_until(hostile_taken, 120), (fe_diag, fe.tail())
        client.spin_for(0.5)
        out["rss1"], out["log1"] = _rss_kb(fe.pid), len(fe.output())

        def send(frames_idx, offset=0, imu_from=None):
            j = int(np.searchsorted(t_imu, (imu_from if imu_from is not None else stamps[frames_idx[0]] - 500_000_000)))
            for k in frames_idx:
                t = stamps[k]
                j = publish_imu_until(pub_imu, t_imu, gyro, acc, j, t, offset)
                pub_img.publish(numpy_to_image(frames[k], "mono8", t + offset, "cam0"))
                client.spin_for(0.05)

        send(range(0, 10))
        # an absurd but finite gyro sample (rejected: the prediction must not use it)
        pub_imu.publish(arrays_to_imu(stamps[10] - 2_500_000, [1e30, 0.0, 0.0], acc[0]))
        send(range(10, 30), imu_from=stamps[9])
        # one frame and one IMU sample a year ahead
        pub_imu.publish(arrays_to_imu(stamps[30] + YEAR - 1_000_000, gyro[0], acc[0]))
        pub_img.publish(numpy_to_image(frames[30], "mono8", stamps[30] + YEAR, "cam0"))
        client.spin_for(0.3)
        send(range(31, 61), imu_from=stamps[30])
        client.spin_for(1.0)
        # the replay starts again from its first stamp
        send(range(0, 40))
        n_expected = 30 + 1 + 30 + 40

        def all_tracks():
            return len(tracks) >= n_expected

        client.spin_until(all_tracks, 240, 0.2)
        client.spin_until(lambda: odom and stamp_to_ns(odom[-1].header.stamp) >= stamps[37], 60, 0.2)
        client.spin_for(1.0)
        out.update(alive=g.alive(), tracks=tracks, odom=odom, stamps=stamps, fe=fe, be=be)
        out["traj_killed"] = (tmp / "traj.txt").read_text()      # the file as a kill would leave it
        g.stop_all()
        out["fe_stats"] = json.loads((tmp / "frontend.json").read_text())
        out["be_stats"] = json.loads((tmp / "backend.json").read_text())
        out["traj_final"] = (tmp / "traj.txt").read_text()
        yield out
    finally:
        g.reset()


def _stamp(m):
    from vilib_ros.nodes.conversions import stamp_to_ns

    return stamp_to_ns(m.header.stamp)


class TestHostileEncodings:
    def test_log_and_memory_bounded(self, session):
        """300 distinct 100 KB encodings: the log and the node's memory stay bounded."""
        assert session["alive"]["frontend_node"]
        assert session["log1"] - session["log0"] < 40_000, session["log1"] - session["log0"]
        assert session["rss1"] - session["rss0"] < 15_000, (session["rss0"], session["rss1"])
        sk = session["fe_stats"]["skipped"]
        # (an encoding longer than any real one is a malformed message: counted under that reason)
        assert sk["unsupported_encoding"] + sk["malformed"] == 300, sk


class TestAbsurdImu:
    def test_rejected_and_counted(self, session):
        """Guards: a finite 1e30 gyro sample used by the frontend's prediction."""
        assert session["fe_stats"]["skipped"]["imu_out_of_range"] == 1
        assert session["be_stats"]["skipped"]["imu_out_of_range"] == 1
        first = session["tracks"][:30]
        assert all(len(m.points) > 50 for m in first)
        kept = [len(np.intersect1d(a.channels[0].values, b.channels[0].values)) / len(a.points)
                for a, b in zip(first[9:12], first[10:13])]
        assert min(kept) > 0.9          # the frames around it kept their tracks


class TestTimeJumps:
    def test_frames_after_the_future_frame_tracked(self, session):
        """Guards: no good frame tracked after one frame stamped a year ahead."""
        st = session["stamps"]
        after = session["tracks"][31:61]         # one publisher, reliable: in the order sent
        assert [_stamp(m) for m in after] == st[31:61]
        assert all(len(m.points) > 50 for m in after[1:])      # tracked again from the first good frame on

    def test_restarted_replay_tracked(self, session):
        """Guards: no tracks in the second pass of a replay restarted from its first stamp."""
        st = session["stamps"]
        second = session["tracks"][61:]
        assert [_stamp(m) for m in second] == st[:40]
        assert all(len(m.points) > 50 for m in second[1:])
        # ids keep counting across resets: no id of the first pass comes back
        first_ids = {int(i) for m in session["tracks"][:30] for i in m.channels[0].values}
        assert not first_ids & {int(i) for m in second for i in m.channels[0].values}

    def test_frontend_counted_resets(self, session):
        s = session["fe_stats"]
        # a year ahead, back from there, back to the start: 3 image time resets, 3 IMU ones
        assert s["events"]["time_resets"] == 3, s["events"]
        assert s["events"]["imu_time_resets"] == 3, s["events"]
        assert s["skipped"]["frame_gap"] <= 2, s["skipped"]
        assert s["tracks_published"] == 101
        assert "time reset" in session["fe"].output()

    def test_backend_reset_and_carried_on(self, session):
        s = session["be_stats"]
        assert session["alive"]["backend_node"]
        assert s["time_resets"] >= 2, s
        st = session["stamps"]
        odom = [_stamp(m) for m in session["odom"]]
        assert any(st[31] < t <= st[60] for t in odom)           # odometry after the future frame
        assert any(t <= st[39] for t in odom[odom.index(max(odom)):])   # and after the restart

    def test_trajectory_written_as_it_goes(self, session):
        """Guards: the trajectory written only at clean shutdown (a kill loses it)."""
        lines = [ln for ln in session["traj_killed"].splitlines() if ln.strip()]
        assert len(lines) >= 0.5 * len(session["odom"]), (len(lines), len(session["odom"]))
        vals = np.array([ln.split() for ln in lines], dtype=np.float64)
        assert vals.shape[1] == 8 and np.all(np.isfinite(vals))
        assert session["traj_final"].strip()
