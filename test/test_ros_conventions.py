"""ROS 2 conventions over real DDS: four frontends and a backend.

The test process publishes the EuRoC frames (the generated sequence's where the real ones are
absent; header frame_id empty), the IMU stream,
the cam0 calibration as ``sensor_msgs/CameraInfo`` and the frames as lossless PNG
``sensor_msgs/CompressedImage``. Frontends (real processes, CPU): ``fe_yaml`` (calibration
from sensor.yaml), ``fe_info`` (calibration from the first camera_info), ``fe_comp``
(compressed input), ``fe_fusion`` (stereo, the same frames as a right camera 11 cm to the
side, ``tracks_layout: vins_fusion``); a backend (mono) on fe_fusion's tracks with tf on.

Checked: the camera_info- and PNG-fed frontends give exactly the YAML-fed tracks; the
vins_fusion message read with VINS-Fusion's indexing gives back the same left tracks plus
right observations; an empty frame_id became ``camera_frame_id``; ``/tf`` carries
``odom -> base_link`` equal to the odometry; ``/tf_static`` the extrinsics equal to ``T_BS``;
the odometry covariance is symmetric positive definite once the smoother has a marginal.
"""
from __future__ import annotations

import json

import numpy as np
import pytest

pytestmark = [pytest.mark.ros, pytest.mark.slow]

from euroc_stream import image_stamps, imu_rows, publish_imu_until  # noqa: E402

FRONTENDS = ("fe_yaml", "fe_info", "fe_comp", "fe_fusion")


@pytest.fixture(scope="module")
def session(ros_graph, sequence_path, frames, tmp_path_factory):
    import cv2
    from nav_msgs.msg import Odometry
    from nav_msgs.msg import Path as PathMsg
    from sensor_msgs.msg import CameraInfo, CompressedImage, Image, Imu, PointCloud

    from vilib_ros.camera import CameraModel
    from vilib_ros.nodes._common import latched_qos, reliable_qos
    from vilib_ros.nodes.conversions import numpy_to_image, stamp_to_ns
    from vilib_ros.nodes.tf2_msgs_build import import_tf2_msgs

    TFMessage = import_tf2_msgs().TFMessage
    tmp = tmp_path_factory.mktemp("ros_conventions")
    cam_yaml = sequence_path / "mav0" / "cam0" / "sensor.yaml"
    cam = CameraModel.from_euroc_yaml(cam_yaml)
    T_right = cam.T_BS @ np.array([[1, 0, 0, 0.11], [0, 1, 0, 0], [0, 0, 1, 0], [0, 0, 0, 1.0]])
    common = {"device": "cpu", "queue_size": 200, "input_reliability": "reliable", "stereo": False,
              "diagnostics_period_s": 0.5}
    fe_params = {
        "fe_yaml": {"camera_yaml": str(cam_yaml)},
        "fe_info": {"calibration_source": "camera_info", "T_BS": cam.T_BS.ravel().tolist()},
        "fe_comp": {"camera_yaml": str(cam_yaml), "image_transport": "compressed"},
        "fe_fusion": {"camera_yaml": str(cam_yaml), "stereo": True, "tracks_layout": "vins_fusion",
                      "right.intrinsics": [cam.fx, cam.fy, cam.cx, cam.cy],
                      "right.distortion_coefficients": cam.distortion.tolist(), "right.T_BS": T_right.ravel().tolist(),
                      "stereo_timeout_s": 2.0},
    }
    g = ros_graph
    client = g.client
    node = g.node
    got = {n: [] for n in FRONTENDS}
    got.update(odom=[], tf=[], tf_static=[], path=[])
    try:
        for name in FRONTENDS:
            g.start("frontend_node", node_name=name, params={**common, **fe_params[name],
                                                             "stats_path": str(tmp / f"{name}.json")},
                    remaps={"tracks": f"tracks_{name}"}, log=tmp / f"{name}.log")
        backend = g.start("backend_node", params={
            "camera_yaml": str(cam_yaml), "imu_yaml": str(sequence_path / "mav0" / "imu0" / "sensor.yaml"),
            "input_reliability": "reliable", "stats_path": str(tmp / "backend.json")},
            remaps={"tracks": "tracks_fe_fusion"}, log=tmp / "backend.log")
        subs = [node.create_subscription(PointCloud, f"tracks_{name}", lambda m, n=name: got[n].append(m),
                                         reliable_qos(200)) for name in FRONTENDS]
        subs.append(node.create_subscription(Odometry, "odometry", lambda m: got["odom"].append(m), reliable_qos(200)))
        node.create_subscription(PathMsg, "path", lambda m: got["path"].append(m), reliable_qos(10))
        node.create_subscription(TFMessage, "/tf", lambda m: got["tf"].append(m), reliable_qos(200))
        node.create_subscription(TFMessage, "/tf_static", lambda m: got["tf_static"].append(m), latched_qos())
        pub_img = node.create_publisher(Image, "image", reliable_qos(200))
        pub_right = node.create_publisher(Image, "image_right", reliable_qos(200))
        pub_comp = node.create_publisher(CompressedImage, "image/compressed", reliable_qos(200))
        pub_info = node.create_publisher(CameraInfo, "camera_info", reliable_qos(10))
        pub_imu = node.create_publisher(Imu, "imu", reliable_qos(2000))
        need = {"/image": 3, "/image_right": 1, "/image/compressed": 1, "/camera_info": 1, "/imu": 5,
                "/tracks_fe_fusion": 2}
        g.wait_for_subscribers(need, 120)
        assert client.spin_until(lambda: len(got["tf_static"]) >= 1, 60), backend.tail()
        # matched endpoints (the graph's names can come first: a reliable message sent before its
        # reader matched is not delivered)
        g.wait_matched({pub_img: 3, pub_right: 1, pub_comp: 1, pub_info: 1, pub_imu: 5}, subs, 60)
        client.spin_for(1.0)
        stamps = image_stamps(sequence_path)
        t_imu, gyro, acc = imu_rows(sequence_path)
        info = CameraInfo(width=cam.width, height=cam.height, distortion_model="plumb_bob",
                          d=[*cam.distortion.tolist(), 0.0], k=cam.K.ravel().tolist())
        # the calibration first: images before it are skipped (counted as no_calibration)
        for _ in range(20):
            pub_info.publish(info)
            client.spin_for(0.1)
        j = int(np.searchsorted(t_imu, stamps[0] - 500_000_000))
        for k, (t, img) in enumerate(zip(stamps, frames)):
            j = publish_imu_until(pub_imu, t_imu, gyro, acc, j, t)
            pub_info.publish(info)
            m = numpy_to_image(img, "mono8", t, "")          # empty frame_id on purpose
            pub_right.publish(m)
            pub_img.publish(m)
            ok, png = cv2.imencode(".png", img)
            c = CompressedImage(format="png", data=png.tobytes())
            c.header = m.header
            pub_comp.publish(c)
            client.spin_for(0.05)

        def done():
            return all(len(got[n]) >= len(stamps) for n in FRONTENDS)

        client.spin_until(done, 300, 0.2)
        client.spin_until(lambda: len(got["odom"]) and stamp_to_ns(got["odom"][-1].header.stamp) >= stamps[-3], 60)
        client.spin_for(1.0)
        # the path is republished every path_publish_period_s (0.5 s): wait for one covering the last pose
        client.spin_until(lambda: got["path"] and got["path"][-1].header.stamp == got["odom"][-1].header.stamp, 10)
        alive = g.alive()
        procs = {p.name: p for p in g.processes}
        g.stop_all()
        stats = {n: json.loads((tmp / f"{n}.json").read_text()) for n in FRONTENDS}
        yield {"got": got, "stamps": stamps, "alive": alive, "stats": stats, "cam": cam, "T_right": T_right,
               "procs": procs}
    finally:
        g.reset()


def _tracks(msg):
    from vilib_ros.nodes.conversions import pointcloud_to_trackframe

    return pointcloud_to_trackframe(msg)


class TestFrontendInputs:
    def test_all_frames_tracked(self, session):
        assert all(session["alive"].values()), session["alive"]
        for n in FRONTENDS:
            assert len(session["got"][n]) == len(session["stamps"]), (n, len(session["got"][n]), session["procs"][n].tail())

    @staticmethod
    def _same_tracks(a_msgs, b_msgs):
        """Both frontends' tracks: the same ids and positions. Not bit-identical: each node's IMU
        prediction uses the samples that had arrived (or imu_wait_s allowed), which moves LK's
        starting point and so its last iteration by hundredths of a pixel."""
        for a, b in zip(a_msgs, b_msgs):
            fa, fb = _tracks(a), _tracks(b)
            assert fa.stamp_ns == fb.stamp_ns
            common, ia, ib = np.intersect1d(fa.ids, fb.ids, return_indices=True)
            assert len(common) >= 0.97 * max(len(fa), len(fb)), (len(common), len(fa), len(fb))
            err = np.linalg.norm(fa.uv[ia] - fb.uv[ib], axis=1)
            assert np.median(err) < 0.02 and np.percentile(err, 95) < 0.2, (np.median(err), err.max())

    def test_camera_info_tracks_like_yaml(self, session):
        self._same_tracks(session["got"]["fe_yaml"], session["got"]["fe_info"])
        assert session["stats"]["fe_info"]["skipped"]["no_calibration"] == 0

    def test_png_compressed_tracks_like_raw(self, session):
        self._same_tracks(session["got"]["fe_yaml"], session["got"]["fe_comp"])

    def test_empty_frame_id_replaced(self, session):
        """Guards: an empty image frame_id passed through to the tracks."""
        assert {m.header.frame_id for n in FRONTENDS for m in session["got"][n]} == {"cam0"}
        assert session["stats"]["fe_yaml"]["events"]["empty_frame_id"] == len(session["stamps"])


class TestVinsFusionLayoutOverDds:
    def test_feature_callback_reads_our_tracks(self, session):
        from test_conversions import vins_fusion_feature_callback

        n_right = n_left = 0
        for a, b in zip(session["got"]["fe_yaml"], session["got"]["fe_fusion"]):
            ff, _ = vins_fusion_feature_callback(b)
            mono = _tracks(a)
            left = {i: obs for i, o in ff.items() for cid, obs in o if cid == 0}
            right = {i: obs for i, o in ff.items() for cid, obs in o if cid == 1}
            # the same left tracks as the mono frontend (up to LK's last iteration, see above)
            common = set(left) & set(mono.ids.tolist())
            assert len(common) >= 0.97 * max(len(left), len(mono))
            err = [np.hypot(left[i][3] - mono.uv[k, 0], left[i][4] - mono.uv[k, 1])
                   for k, i in enumerate(mono.ids.tolist()) if i in common]
            assert np.median(err) < 0.02
            assert set(right) <= set(left)
            # the right camera sees the same picture: matches at (almost) the same pixel
            du = [abs(right[i][3] - left[i][3]) for i in right]
            if du:
                assert np.median(du) < 1.0
            n_left, n_right = n_left + len(left), n_right + len(right)
        assert n_right > 0.5 * n_left, (n_right, n_left, session["stats"]["fe_fusion"]["frontend_stats"],
                                        {k: v for k, v in session["stats"]["fe_fusion"]["skipped"].items() if v})


class TestTfAndOdometry:
    def test_tf_matches_odometry(self, session):
        from vilib_ros.nodes.conversions import stamp_to_ns

        odom = {stamp_to_ns(o.header.stamp): o for o in session["got"]["odom"]}
        assert len(odom) >= 50
        tfs = [t for m in session["got"]["tf"] for t in m.transforms]
        assert tfs and {(t.header.frame_id, t.child_frame_id) for t in tfs} == {("odom", "base_link")}
        assert {o.header.frame_id for o in odom.values()} == {"odom"}
        assert {o.child_frame_id for o in odom.values()} == {"base_link"}
        for t in tfs:
            o = odom[stamp_to_ns(t.header.stamp)]
            p, q = o.pose.pose.position, o.pose.pose.orientation
            tr, r = t.transform.translation, t.transform.rotation
            np.testing.assert_allclose([tr.x, tr.y, tr.z], [p.x, p.y, p.z], atol=1e-9)
            assert abs(abs(np.dot([r.x, r.y, r.z, r.w], [q.x, q.y, q.z, q.w])) - 1) < 1e-9

    def test_tf_static_is_T_BS(self, session):
        from scipy.spatial.transform import Rotation

        st = {t.child_frame_id: t for m in session["got"]["tf_static"] for t in m.transforms}
        assert set(st) == {"cam0", "imu0"}                # mono backend: no cam1
        assert {t.header.frame_id for t in st.values()} == {"base_link"}
        t = st["cam0"].transform
        T = np.eye(4)
        T[:3, :3] = Rotation.from_quat([t.rotation.x, t.rotation.y, t.rotation.z, t.rotation.w]).as_matrix()
        T[:3, 3] = [t.translation.x, t.translation.y, t.translation.z]
        np.testing.assert_allclose(T, session["cam"].T_BS, atol=1e-6)
        i = st["imu0"].transform
        assert (i.translation.x, i.translation.y, i.translation.z, i.rotation.w) == (0.0, 0.0, 0.0, 1.0)

    def test_path_holds_every_odometry_pose(self, session):
        """The path is serialized from arrays and republished periodically (a growing nav_msgs/Path
        built from one PoseStamped per pose and republished every frame costs O(length) per frame);
        its last message holds every published pose, in order, equal to the odometry."""
        from vilib_ros.nodes.conversions import stamp_to_ns

        odom, paths = session["got"]["odom"], session["got"]["path"]
        assert paths, "no path received"
        last = paths[-1]
        assert last.header.frame_id == "odom" and {p.header.frame_id for p in last.poses} == {"odom"}
        assert [stamp_to_ns(p.header.stamp) for p in last.poses] == [stamp_to_ns(o.header.stamp) for o in odom]
        for ps, o in zip(last.poses, odom):
            assert ps.pose == o.pose.pose
        assert len(paths) < len(odom)          # decimated, not one whole path per frame

    def test_odometry_covariance_valid(self, session):
        covs = [np.asarray(o.pose.covariance).reshape(6, 6) for o in session["got"]["odom"]]
        valid = [c for c in covs if np.any(c)]
        assert len(valid) >= 0.8 * len(covs)
        for c in valid:
            np.testing.assert_allclose(c, c.T, atol=1e-12)
            assert np.linalg.eigvalsh(c).min() > 0
