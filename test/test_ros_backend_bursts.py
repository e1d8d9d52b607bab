"""backend_node taking tracks and IMU in bursts (its tracks callback waits for the next tracks message
on a wait set of the tracks and IMU subscriptions and takes it itself, queueing the IMU that comes
meanwhile; IMU bursts decoded in one call) against the offline backend, real rclpy / Fast DDS.

Guards the node's own message taking: a frame whose tracks overtake its IMU must wait for it (the
estimator needs the IMU up to each frame's stamp first), bursts of tracks back to back must each
be processed once and in order, and every message must be counted. The reference is
:class:`vilib_ros.backend.VioEstimator` fed the same data in time order in this process.
"""
from __future__ import annotations

import json

import numpy as np
import pytest

pytestmark = [pytest.mark.ros, pytest.mark.slow]

DURATION_S = 6.0
GROUP = 6           # frames per burst


def _read_tum(path):
    rows = np.loadtxt(path, ndmin=2)
    return np.rint(rows[:, 0] * 1e9).astype(np.int64), rows[:, 1:4]


class TestBackendNodeBursts:
    def test_interleaved_bursts_match_offline(self, ros_graph, tmp_path):
        """Groups of GROUP frames sent as bursts, alternating tracks-before-IMU (each frame waits for
        its IMU) and IMU-before-tracks: every frame and IMU sample counted, the smoothed trajectory
        equal to the offline estimator's on the same data (1 mm; the inputs are the same, in the
        same order)."""
        pytest.importorskip("gtsam", reason="gtsam (backend extra) not installed")
        from rclpy.serialization import serialize_message
        from sensor_msgs.msg import Imu, PointCloud
        from std_msgs.msg import Header

        from vilib_ros.backend import BackendConfig, VioEstimator
        from bench.backend_node import _sequence, _write_calibration
        from vilib_ros.nodes._common import reliable_qos
        from vilib_ros.nodes.cdr import header_stamp_ns
        from vilib_ros.nodes.conversions import TracksEncoder, arrays_to_imu, pointcloud_to_trackframe

        seq, frames, st, data = _sequence(DURATION_S)
        enc = TracksEncoder("vins_fusion")
        tracks = [enc.encode(f, "cam0") for f in frames]
        # the reference: the estimator in this process on the same tracks as the wire carries them
        # (float32 points), the IMU sample by sample up to each frame, then the frame
        est = VioEstimator(BackendConfig(), seq.camera(0), seq.camera(1), seq.imu_noise_dict())
        i = 0
        for f, msg in zip(frames, tracks):
            while i < len(st) and st[i] <= f.stamp_ns:
                est.add_imu(int(st[i]), data[i, :3], data[i, 3:])
                i += 1
            est.add_frame(pointcloud_to_trackframe(msg))
        t_ref, p_ref, _ = est.trajectory(True)
        assert len(t_ref) > 0.9 * len(frames)

        imu = [serialize_message(arrays_to_imu(int(t), d[:3], d[3:])) for t, d in zip(st, data)]
        n_imu = int(np.searchsorted(st, frames[-1].stamp_ns, "right"))
        p = _write_calibration(seq, tmp_path)
        p.update(input_reliability="reliable", imu_wait_s=30.0, stats_path=str(tmp_path / "stats.json"),
                 trajectory_path=str(tmp_path / "traj.txt"))
        g = ros_graph
        proc = g.start("backend_node", params=p, log=tmp_path / "be.log")
        client = g.client
        done = set()
        try:
            n = g.node
            pub_tracks = n.create_publisher(PointCloud, "tracks", reliable_qos(1000))
            pub_imu = n.create_publisher(Imu, "imu", reliable_qos(5000))
            sub_done = n.create_subscription(Header, "backend_processed", lambda b: done.add(header_stamp_ns(b)),
                                             reliable_qos(1000), raw=True)
            # matched endpoints, not only the graph's names: a reliable message sent before its reader
            # matched is not delivered
            assert client.spin_until(lambda: not proc.alive or (pub_tracks.get_subscription_count() >= 1 and
                                     pub_imu.get_subscription_count() >= 1 and sub_done.get_publisher_count() >= 1),
                                     120), proc.tail()
            assert proc.alive, proc.tail()
            client.spin_for(1.0)
            sent_imu = 0
            for g0 in range(0, len(frames), GROUP):
                group = range(g0, min(g0 + GROUP, len(frames)))
                upto = int(np.searchsorted(st, frames[group[-1]].stamp_ns, "right"))
                tracks_first = (g0 // GROUP) % 2 == 0
                if tracks_first:        # the tracks overtake their IMU: each frame must wait for it
                    for k in group:
                        pub_tracks.publish(tracks[k])
                for j in range(sent_imu, upto):
                    pub_imu.publish(imu[j])
                sent_imu = upto
                if not tracks_first:
                    for k in group:
                        pub_tracks.publish(tracks[k])
                # bounded wait for the burst (nothing assumed about how the node splits it)
                assert client.spin_until(lambda: frames[group[-1]].stamp_ns in done or not proc.alive, 120), \
                    f"burst at frame {g0} not processed:\n{proc.tail()}"
            assert proc.alive, proc.tail()
            assert client.spin_until(lambda: len(done) >= len(frames), 60)
        finally:
            rc = proc.stop()
            g.reset()
        assert rc == 0, proc.tail()
        assert done == {f.stamp_ns for f in frames}
        stats = json.loads((tmp_path / "stats.json").read_text())
        assert stats["frames_received"] == len(frames)
        assert stats["imu_received"] == n_imu
        assert not any(stats["skipped"].values()), stats["skipped"]
        assert stats["time_resets"] == 0 and stats["tracks_gaps"] == 0
        t, pos = _read_tum(tmp_path / "traj.txt")
        assert len(t) == len(t_ref)
        assert np.all(np.abs(t - t_ref) < 1000)           # the file's stamps: 1 ns resolution, via float
        assert np.max(np.linalg.norm(pos - p_ref, axis=1)) < 1e-3
