"""Bad traffic into frontend_node and backend_node from a publisher in the test process.

Unsupported encodings, a zero-size image, a row step smaller than the width, a short data
buffer, a wrong image size, an IMU sample with NaN, IMU and image stamps going backwards,
a dropped frame, malformed and out-of-order tracks: both nodes keep running, count each
event in their diagnostics under its own reason, warn once per topic/encoding, and lose
none of the good messages in between (valid rgb8 and padded mono16 images included).
Also: the parameter descriptors (ranges, read-only) seen through the parameter services,
and the debug image. The good frames come from a generated sequence (everywhere) and from the
real EuRoC frames (where present).
"""
from __future__ import annotations

import time

import numpy as np
import pytest

pytestmark = [pytest.mark.ros, pytest.mark.slow]

from conftest import dataset_frames  # noqa: E402

T0 = 1_403_715_273_262_142_976
DT = 50_000_000


def _image(img: np.ndarray, stamp: int, encoding: str = "mono8", step: int | None = None, data: bytes | None = None,
           width: int | None = None, height: int | None = None):
    from sensor_msgs.msg import Image

    from vilib_ros.nodes.conversions import ns_to_stamp

    m = Image()
    m.header.stamp = ns_to_stamp(stamp)
    m.header.frame_id = "cam0"
    m.height = img.shape[0] if height is None else height
    m.width = img.shape[1] if width is None else width
    m.encoding = encoding
    m.step = int(img.strides[0]) if step is None else step
    m.data = img.tobytes() if data is None else data
    return m


@pytest.fixture(scope="module")
def session(ros_graph, node_dataset, tmp_path_factory):
    from diagnostic_msgs.msg import DiagnosticArray
    from sensor_msgs.msg import Image, Imu, PointCloud

    from vilib_ros.nodes._common import reliable_qos
    from vilib_ros.nodes.conversions import arrays_to_imu, stamp_to_ns, trackframe_to_pointcloud
    from vilib_ros.types import TrackFrame

    g = ros_graph
    client = g.client
    tmp = tmp_path_factory.mktemp("ros_bad")
    cam_yaml = str(node_dataset / "mav0" / "cam0" / "sensor.yaml")
    node = g.node
    fe = g.start("frontend_node", params={
        # reliable input: the rgb8 and mono16 test images are larger than Fast DDS's 512 KB
        # shared-memory segment, and their best-effort UDP fragments may be dropped
        "camera_yaml": cam_yaml, "device": "cpu", "stereo": False, "diagnostics_period_s": 0.3,
        "input_reliability": "reliable"}, log=tmp / "frontend.log")
    be = g.start("backend_node", params={
        "camera_yaml": cam_yaml, "diagnostics_period_s": 0.3, "input_reliability": "reliable",
        "imu_yaml": str(node_dataset / "mav0" / "imu0" / "sensor.yaml")}, log=tmp / "backend.log")
    # reliable IMU in the backends too: the one NaN and the one backwards sample are counted exactly
    rec_only = g.start("backend_node", node_name="backend_record", params={
        "camera_yaml": cam_yaml, "diagnostics_period_s": 0.3, "estimator": "none", "input_reliability": "reliable"},
        log=tmp / "backend_rec.log")
    got = {"tracks": g.collect(PointCloud, "tracks", reliable_qos(100)),
           "debug": g.collect(Image, "tracks_image", reliable_qos(50)), "diag": {}}

    def on_diag(m):
        for s in m.status:
            got["diag"][s.name] = {kv.key: kv.value for kv in s.values}

    node.create_subscription(DiagnosticArray, "diagnostics", on_diag, reliable_qos(50))
    pub_img = node.create_publisher(Image, "image", reliable_qos(10))
    pub_imu = node.create_publisher(Imu, "imu", reliable_qos(100))
    pub_tracks = node.create_publisher(PointCloud, "tracks", reliable_qos(10))
    try:
        g.wait_for_subscribers({"/image": 1, "/imu": 3, "/tracks": 3}, 90)
        g.wait_until(lambda: pub_img.get_subscription_count() >= 1 and pub_imu.get_subscription_count() >= 3
                     and node.count_publishers("tracks") >= 2, 30, "matched image and IMU publishers")
        client.spin_for(1.5)   # let every pair of endpoints match, not only ours
        sent = {"images": 0, "imu_good": 0}
        last_imu = [T0 - DT]

        def imu_until(k, nan_at=None, backwards_at=None):
            t_end = T0 + k * DT
            i = 0
            while last_imu[0] + 5_000_000 <= t_end:
                t = last_imu[0] + 5_000_000
                g, a = [0.01, -0.02, 0.005], [9.8, 0.1, -0.2]
                if i == nan_at:
                    pub_imu.publish(arrays_to_imu(t, [np.nan, 0.0, 0.0], a))
                if i == backwards_at:
                    pub_imu.publish(arrays_to_imu(t - 20_000_000, g, a))
                pub_imu.publish(arrays_to_imu(t, g, a))
                sent["imu_good"] += 1
                last_imu[0] = t
                i += 1
            client.spin_for(0.05)

        def send(msg, expect_tracks: bool):
            n = len(got["tracks"])
            pub_img.publish(msg)
            sent["images"] += 1
            if expect_tracks:
                assert client.spin_until(lambda: len(got["tracks"]) > n, 60), \
                    f"no tracks for stamp {stamp_to_ns(msg.header.stamp)}:\n{fe.tail()}"
            else:
                client.spin_for(0.3)

        frames = dataset_frames(node_dataset)
        imu_until(0)
        send(_image(frames[0], T0), True)
        imu_until(1)
        send(_image(frames[1], T0 + DT), True)
        imu_until(2, nan_at=3)
        s2 = T0 + 2 * DT
        send(_image(np.zeros((480, 752 * 2), np.uint8), s2, "yuv422"), False)          # unsupported
        send(_image(np.zeros((0, 0), np.uint8), s2, "mono8", 0, b"", 0, 0), False)       # zero size
        send(_image(frames[2], s2, "mono8", step=700), False)                            # step < width
        send(_image(frames[2], s2, "mono8", data=frames[2].tobytes()[:1000]), False)     # short buffer
        send(_image(np.zeros((240, 320), np.uint8), s2), False)                          # wrong size
        send(_image(frames[2], s2), True)
        send(_image(frames[1], T0 + DT), False)                                          # stamp backwards
        imu_until(3, backwards_at=4)
        send(_image(frames[3], T0 + 3 * DT), True)
        imu_until(5)                                                                     # frame 4 dropped
        send(_image(frames[5], T0 + 5 * DT), True)
        imu_until(6)
        rgb = np.ascontiguousarray(np.repeat(frames[6][:, :, None], 3, axis=2))
        send(_image(rgb, T0 + 6 * DT, "rgb8"), True)                                     # valid rgb8
        imu_until(7)
        m16 = np.zeros((480, 752 + 8), np.uint16)
        m16[:, :752] = frames[7].astype(np.uint16) * 257
        send(_image(m16, T0 + 7 * DT, "mono16", step=m16.strides[0], width=752), True)  # padded mono16
        send(_image(np.zeros((480, 752 * 2), np.uint8), T0 + 8 * DT, "yuv422"), False)  # same encoding again
        send(_image(np.zeros((480, 752 * 4), np.uint8), T0 + 8 * DT, "32FC1"), False)   # another one
        imu_until(8)
        send(_image(frames[8], T0 + 8 * DT), True)
        # bad tracks straight into the backend
        bad = trackframe_to_pointcloud(TrackFrame(T0 + 9 * DT, np.arange(3), np.zeros((3, 2), np.float32),
                                                  np.zeros((3, 2)), np.zeros((3, 2)), np.zeros(3, np.float32),
                                                  np.zeros(3, np.int32), np.zeros(3, np.int32)), "bad")
        bad.channels = bad.channels[1:]                        # no id_of_point
        pub_tracks.publish(bad)
        late = trackframe_to_pointcloud(TrackFrame(T0 + DT // 2, np.arange(3), np.zeros((3, 2), np.float32),
                                                   np.zeros((3, 2)), np.zeros((3, 2)), np.zeros(3, np.float32),
                                                   np.zeros(3, np.int32), np.zeros(3, np.int32)), "bad")
        pub_tracks.publish(late)                               # stamp before frames already seen
        client.spin_for(1.0)

        def diag_done():
            f = got["diag"].get("vilib_ros: frontend_node", {})
            b = got["diag"].get("vilib_ros: backend_node", {})
            r = got["diag"].get("vilib_ros: backend_record", {})
            # (the frontend's last tracks and the test's bad tracks come from different publishers:
            # no order between them, so wait for both in every node's diagnostics)
            return f.get("images_received") == str(sent["images"]) and \
                all(x.get("skipped.tracks_out_of_order") == "1" and x.get("frames_received") == "8" for x in (b, r))

        client.spin_until(diag_done, 20)
        alive = g.alive()
        yield {"got": got, "sent": sent, "alive": alive, "client": client, "fe": fe, "be": be, "rec": rec_only}
    finally:
        g.reset()


def _stamps(msgs):
    from vilib_ros.nodes.conversions import stamp_to_ns

    return [(stamp_to_ns(m.header.stamp) - T0) // DT for m in msgs]


class TestFrontendSurvivesBadTraffic:
    def test_still_running(self, session):
        assert session["alive"]["frontend_node"], session["fe"].tail()

    def test_no_good_message_lost(self, session):
        tracks = [m for m in session["got"]["tracks"] if m.header.frame_id == "cam0"]
        assert _stamps(tracks) == [0, 1, 2, 3, 5, 6, 7, 8]
        assert all(len(m.points) > 50 for m in tracks)
        d = session["got"]["diag"]["vilib_ros: frontend_node"]
        assert d["images_received"] == str(session["sent"]["images"])
        assert d["tracks_published"] == "8"
        assert d["imu_received"] == str(session["sent"]["imu_good"])

    def test_each_event_counted(self, session):
        d = session["got"]["diag"]["vilib_ros: frontend_node"]
        expected = {"unsupported_encoding": 3, "zero_size": 1, "step_mismatch": 1, "data_size": 1,
                    "size_mismatch": 1, "out_of_order": 1, "frame_gap": 1, "imu_non_finite": 1,
                    "imu_out_of_order": 1, "frontend_error": 0}
        assert {k: int(d[f"skipped.{k}"]) for k in expected} == expected
        assert d["frontend.imu_predicted"] != "0"   # the good IMU samples were used

    def test_warned_once_per_topic_and_encoding(self, session):
        log = session["fe"].output()
        assert log.count("unsupported image encoding 'yuv422'") == 1
        assert log.count("unsupported image encoding '32FC1'") == 1
        assert log.count("row step 700 is smaller than width 752") == 1

    def test_debug_image_published_when_subscribed(self, session):
        dbg = session["got"]["debug"]
        assert dbg, "no tracks_image although subscribed"
        m = dbg[0]
        assert (m.encoding, m.width, m.height) == ("bgr8", 752, 480)
        img = np.frombuffer(m.data, np.uint8).reshape(480, m.step)[:, :752 * 3].reshape(480, 752, 3)
        coloured = np.count_nonzero((img[:, :, 0] != img[:, :, 1]) | (img[:, :, 1] != img[:, :, 2]))
        assert coloured > 500   # grey input + coloured track circles


class TestBackendSurvivesBadTraffic:
    def test_still_running_and_counted(self, session):
        assert session["alive"]["backend_node"], session["be"].tail()
        d = session["got"]["diag"]["vilib_ros: backend_node"]
        assert d["skipped.bad_tracks"] == "1"
        assert d["skipped.tracks_out_of_order"] == "1"
        assert d["skipped.imu_non_finite"] == "1"
        assert d["skipped.imu_out_of_order"] == "1"
        assert d["frames_received"] == "8", d
        assert d["imu_received"] == str(session["sent"]["imu_good"]), d   # reliable IMU: every good sample


class TestBackendRecordOnly:
    def test_records_and_says_so(self, session):
        assert session["alive"]["backend_record"]
        d = session["got"]["diag"]["vilib_ros: backend_record"]
        assert d["mode"] == "record-only", d
        assert d["frames_received"] == "8" and d["odometry_published"] == "0", d
        assert d["skipped.bad_tracks"] == "1", d
        # its IMU subscription is best effort (sensor data): under heavy load a sample may be dropped
        assert int(d["imu_received"]) >= 0.95 * session["sent"]["imu_good"], d
        assert session["rec"].output().count("recording only") == 1


class TestParameters:
    def test_descriptor_ranges_and_read_only(self, session):
        from rclpy.parameter import Parameter
        from rclpy.parameter_client import AsyncParameterClient

        client = session["client"]
        pc = AsyncParameterClient(client.node, "frontend_node")
        assert pc.wait_for_services(20)
        fut = pc.describe_parameters(["detector.arc_length", "detector.threshold", "device", "tracker.mode"])
        assert client.spin_until(fut.done, 20)
        d = {x.name: x for x in fut.result().descriptors}
        r = d["detector.arc_length"].integer_range[0]
        assert (r.from_value, r.to_value) == (9, 12)
        assert d["detector.threshold"].floating_point_range[0].from_value == 1.0
        assert d["device"].read_only and not d["detector.threshold"].read_only
        assert "gain_offset" in d["tracker.mode"].additional_constraints
        assert d["detector.arc_length"].description
        fut = pc.set_parameters([Parameter("detector.arc_length", value=13), Parameter("tracker.mode", value="affine"),
                                 Parameter("device", value="cuda"), Parameter("detector.threshold", value=20.0)])
        assert client.spin_until(fut.done, 20)
        ok = [r.successful for r in fut.result().results]
        assert ok == [False, False, False, True]
        fut = pc.get_parameters(["detector.arc_length", "detector.threshold"])
        assert client.spin_until(fut.done, 20)
        vals = fut.result().values
        assert vals[0].integer_value == 10 and vals[1].double_value == 20.0
        time.sleep(0.1)
        assert session["fe"].alive
