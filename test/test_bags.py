"""ROS bag round trips (ASL -> ROS 1 / ROS 2 bag -> open_dataset) and message conversion.

References: the ASL files read with cv2 / plain parsing, and rosbags' own reader.
"""
from __future__ import annotations

import cv2
import numpy as np
import pytest

from test_euroc import make_asl

pytest.importorskip("rosbags")

KINDS = [("ros1", "sqlite3"), ("ros2", "sqlite3"), ("ros2", "mcap")]


@pytest.fixture(scope="module")
def real_asl(euroc_path):
    from vilib_ros.datasets import open_dataset

    return open_dataset(euroc_path)


class TestWriteBagRoundTrip:
    @pytest.mark.parametrize("kind,storage", KINDS)
    def test_real_frames(self, tmp_path, real_asl, euroc_path, kind, storage):
        from vilib_ros.datasets.bags import BagDataset
        from vilib_ros.datasets.bag_writer import write_bag
        from vilib_ros.datasets import open_dataset

        n = 4
        out = write_bag(real_asl, tmp_path / "seq", kind=kind, storage=storage, max_images=n)
        assert out.suffix == ".bag" if kind == "ros1" else (out / "metadata.yaml").is_file()
        with open_dataset(out) as b:
            assert isinstance(b, BagDataset)
            st = b.image_stamps(0)
            np.testing.assert_array_equal(st, real_asl.image_stamps(0)[:n])
            files = sorted((euroc_path / "mav0" / "cam0" / "data").glob("*.png"))
            for k in range(n):
                np.testing.assert_array_equal(b.load_image(0, k), cv2.imread(str(files[k]), cv2.IMREAD_GRAYSCALE))
            m = int(np.searchsorted(real_asl.imu_stamps, st[-1], side="right"))
            assert m > 30
            np.testing.assert_array_equal(b.imu_stamps, real_asl.imu_stamps[:m])
            np.testing.assert_array_equal(b.imu_data, real_asl.imu_data[:m])
            c0, c1 = b.cameras[0], real_asl.cameras[0]
            assert (c0.width, c0.height, c0.distortion_model) == (c1.width, c1.height, c1.distortion_model)
            np.testing.assert_allclose([c0.fx, c0.fy, c0.cx, c0.cy], [c1.fx, c1.fy, c1.cx, c1.cy])
            np.testing.assert_allclose(c0.distortion, c1.distortion)
            np.testing.assert_allclose(c0.T_BS, c1.T_BS, atol=1e-12)
            gt = b.groundtruth
            g = real_asl.groundtruth
            k = int(np.searchsorted(g.t_ns, st[-1], side="right"))
            np.testing.assert_array_equal(gt.t_ns, g.t_ns[:k])
            np.testing.assert_allclose(gt.p, g.p[:k])
            np.testing.assert_allclose(gt.q_xyzw, g.q_xyzw[:k])
            evs = list(b.iter_events())
            assert sum(e[0] == "image" for e in evs) == n

    @pytest.mark.parametrize("kind,storage", KINDS)
    def test_stereo_readable_by_rosbags(self, tmp_path, generated_frames, kind, storage):
        """A stereo ASL folder with custom extrinsics; rosbags' reader sees the expected topics."""
        from rosbags.highlevel import AnyReader

        from vilib_ros.datasets.bag_writer import write_bag
        from vilib_ros.datasets import open_dataset

        root = make_asl(tmp_path / "asl", generated_frames[:3], cams=2, imu_n=60)
        T = np.eye(4)
        T[:3, :3] = cv2.Rodrigues(np.array([0.1, -0.2, 0.3]))[0]
        T[:3, 3] = [0.11, -0.02, 0.05]
        yaml = ("%YAML:1.0\nsensor_type: camera\nT_BS:\n  cols: 4\n  rows: 4\n  data: ["
                + ", ".join(repr(float(v)) for v in T.ravel())
                + "]\nrate_hz: 20\nresolution: [752, 480]\ncamera_model: pinhole\n"
                  "intrinsics: [400.5, 401.5, 370.25, 250.75]\ndistortion_model: radial-tangential\n"
                  "distortion_coefficients: [0, 0, 0, 0]\n")
        (root / "mav0" / "cam1" / "sensor.yaml").write_text(yaml)
        out = write_bag(root, tmp_path / "bag", kind=kind, storage=storage)
        with AnyReader([out]) as r:
            topics = {c.topic: c.msgtype for c in r.connections}
            assert topics["/cam0/image_raw"] == "sensor_msgs/msg/Image"
            assert topics["/cam1/image_raw"] == "sensor_msgs/msg/Image"
            assert topics["/imu0"] == "sensor_msgs/msg/Imu"
            counts = {}
            first_img = None
            for c, t, raw in r.messages():
                counts[c.topic] = counts.get(c.topic, 0) + 1
                if c.topic == "/cam1/image_raw" and first_img is None:
                    first_img = r.deserialize(raw, c.msgtype)
            assert counts["/cam0/image_raw"] == 3 and counts["/cam1/image_raw"] == 3 and counts["/imu0"] == 60
            assert first_img.encoding == "mono8" and (first_img.width, first_img.height) == (752, 480)
            np.testing.assert_array_equal(np.asarray(first_img.data).reshape(480, 752), generated_frames[0][:, ::-1])
        with open_dataset(out) as b:
            assert len(b.cameras) == 2
            np.testing.assert_allclose(b.cameras[1].T_BS, T, atol=1e-12)
            assert b.cameras[1].fx == pytest.approx(400.5) and b.cameras[1].cy == pytest.approx(250.75)
            np.testing.assert_array_equal(b.load_image(1, 2), generated_frames[2][:, ::-1])
            np.testing.assert_array_equal(b.image_stamps(1), b.image_stamps(0))
            np.testing.assert_allclose(b.imu_data[7], [0.07, -0.14, 0.5, 9.8, 0.7, -1.5])
            assert b.groundtruth is not None and len(b.groundtruth) == 2


class TestWriteBagErrors:
    def test_existing_output(self, tmp_path, generated_frames):
        from vilib_ros.datasets.bag_writer import write_bag

        root = make_asl(tmp_path / "asl", generated_frames[:1], imu_n=3)
        (tmp_path / "x").mkdir()
        with pytest.raises(FileExistsError):
            write_bag(root, tmp_path / "x", kind="ros2")

    def test_bad_kind(self, tmp_path):
        from vilib_ros.datasets.bag_writer import write_bag

        with pytest.raises(ValueError, match="kind"):
            write_bag(tmp_path, tmp_path / "out", kind="ros3")

    def test_corrupt_bag(self, tmp_path):
        from vilib_ros.datasets import open_dataset

        p = tmp_path / "broken.bag"
        p.write_bytes(b"#ROSBAG V2.0\n" + b"\x00" * 100)
        with pytest.raises(ValueError, match="broken.bag"):
            open_dataset(p)


class TestDamagedBags:
    """A bag cut short (full disk, killed recorder): the readable part is replayed, byte-identical to
    the source, and ``warnings`` says where it stopped (guards: such a bag could not be opened)."""

    @pytest.mark.parametrize("kind,storage", [("ros1", "sqlite3"), ("ros2", "sqlite3"), ("ros2", "mcap")])
    def test_truncated_replays_the_readable_part(self, tmp_path, generated_frames, kind, storage):
        from vilib_ros.datasets import open_dataset
        from vilib_ros.datasets.bag_writer import write_bag

        root = make_asl(tmp_path / "asl", generated_frames[:8], imu_n=80)
        out = write_bag(root, tmp_path / "bag", kind=kind, storage=storage)
        f = out if out.is_file() else next(p for p in out.iterdir() if p.suffix in (".db3", ".mcap"))
        data = f.read_bytes()
        f.write_bytes(data[:int(0.6 * len(data))])
        ds = open_dataset(out)
        n = len(ds.image_stamps(0))
        assert 2 <= n < 8
        assert any("read front to back" in w and ("stopped" in w or "cut short" in w) for w in ds.warnings), ds.warnings
        asl = open_dataset(root)
        np.testing.assert_array_equal(ds.image_stamps(0), asl.image_stamps(0)[:n])
        for k in range(n):
            np.testing.assert_array_equal(ds.load_image(0, k), asl.load_image(0, k))
        m = len(ds.imu_stamps)
        np.testing.assert_array_equal(ds.imu_data, asl.imu_data[:m])

    @pytest.mark.parametrize("storage", ["sqlite3", "mcap"])
    def test_ros2_folder_without_metadata(self, tmp_path, generated_frames, storage):
        from vilib_ros.datasets import open_dataset
        from vilib_ros.datasets.bag_writer import write_bag

        root = make_asl(tmp_path / "asl", generated_frames[:3], imu_n=20)
        out = write_bag(root, tmp_path / "bag", kind="ros2", storage=storage)
        (out / "metadata.yaml").unlink()
        ds = open_dataset(out)
        assert any("no metadata.yaml" in w for w in ds.warnings)
        np.testing.assert_array_equal(ds.load_image(0, 2), generated_frames[2])
        assert len(ds.imu_stamps) == 20

    def test_text_file_named_bag(self, tmp_path):
        from vilib_ros.datasets import DatasetError, open_dataset

        p = tmp_path / "notes.bag"
        p.write_text("not a bag\n")
        with pytest.raises(DatasetError, match="not a ROS 1 bag, an MCAP file or an sqlite3 database"):
            open_dataset(p)


class TestImageMessages:
    def _msg(self, enc, data, h, w, step, big=0):
        from rosbags.typesys import Stores, get_typestore

        T = get_typestore(Stores.ROS2_JAZZY).types
        hdr = T["std_msgs/msg/Header"](stamp=T["builtin_interfaces/msg/Time"](sec=1, nanosec=2), frame_id="c")
        return T["sensor_msgs/msg/Image"](header=hdr, height=h, width=w, encoding=enc, is_bigendian=big,
                                          step=step, data=np.frombuffer(data, np.uint8))

    def test_encodings(self, generated_frames):
        from vilib_ros.datasets.bags import image_msg_to_array

        rng = np.random.default_rng(1)
        rgb = rng.integers(0, 256, (6, 5, 3), dtype=np.uint8)
        out = image_msg_to_array(self._msg("rgb8", rgb.tobytes(), 6, 5, 15))
        np.testing.assert_array_equal(out, cv2.cvtColor(rgb, cv2.COLOR_RGB2GRAY))
        out = image_msg_to_array(self._msg("bgr8", rgb.tobytes(), 6, 5, 15))
        np.testing.assert_array_equal(out, cv2.cvtColor(rgb, cv2.COLOR_BGR2GRAY))
        m16 = rng.integers(0, 65536, (4, 3), dtype=np.uint16)
        out = image_msg_to_array(self._msg("mono16", m16.astype(">u2").tobytes(), 4, 3, 6, big=1))
        np.testing.assert_array_equal(out, (m16 >> 8).astype(np.uint8))
        # Padded rows (step > width).
        g = generated_frames[0][:4, :7]
        padded = np.concatenate([g, np.full((4, 3), 255, np.uint8)], axis=1)
        np.testing.assert_array_equal(image_msg_to_array(self._msg("mono8", padded.tobytes(), 4, 7, 10)), g)
        with pytest.raises(ValueError, match="encoding"):
            image_msg_to_array(self._msg("yuv422", g.tobytes(), 4, 7, 7))
        with pytest.raises(ValueError, match="bytes"):
            image_msg_to_array(self._msg("mono8", g.tobytes()[:10], 4, 7, 7))


class TestZeroHeaderStamps:
    def test_bag_time_used(self, tmp_path, generated_frames):
        """Recorders that leave header stamps at 0: the bag's receive times are used (counted)."""
        from rosbags.rosbag2 import Writer
        from rosbags.typesys import Stores, get_typestore

        from vilib_ros.datasets import open_dataset

        ts = get_typestore(Stores.ROS2_JAZZY)
        T = ts.types
        zero = T["builtin_interfaces/msg/Time"](sec=0, nanosec=0)
        out = tmp_path / "zero"
        with Writer(out, version=9) as w:
            ci = w.add_connection("/cam0/image_raw", "sensor_msgs/msg/Image", typestore=ts)
            cu = w.add_connection("/imu0", "sensor_msgs/msg/Imu", typestore=ts)
            for k in range(3):
                img = T["sensor_msgs/msg/Image"](header=T["std_msgs/msg/Header"](stamp=zero, frame_id="cam0"),
                                                 height=480, width=752, encoding="mono8", is_bigendian=0, step=752,
                                                 data=generated_frames[k].reshape(-1))
                w.write(ci, 1000 + k * 50_000_000, ts.serialize_cdr(img, "sensor_msgs/msg/Image"))
            for j in range(4):
                v = T["geometry_msgs/msg/Vector3"](x=1.0 * j, y=0.0, z=0.0)
                imu = T["sensor_msgs/msg/Imu"](header=T["std_msgs/msg/Header"](stamp=zero, frame_id="imu0"),
                                               orientation=T["geometry_msgs/msg/Quaternion"](x=0.0, y=0.0, z=0.0, w=1.0),
                                               orientation_covariance=np.zeros(9), angular_velocity=v,
                                               angular_velocity_covariance=np.zeros(9), linear_acceleration=v,
                                               linear_acceleration_covariance=np.zeros(9))
                w.write(cu, 2000 + j * 5_000_000, ts.serialize_cdr(imu, "sensor_msgs/msg/Imu"))
        with open_dataset(out) as ds:
            np.testing.assert_array_equal(ds.image_stamps(0), 1000 + 50_000_000 * np.arange(3))
            np.testing.assert_array_equal(ds.imu_stamps, 2000 + 5_000_000 * np.arange(4))
            assert ds.stats["header_stamps_missing"] == 7
            np.testing.assert_array_equal(ds.load_image(0, 2), generated_frames[2])
            assert ds.cameras[0].fx == pytest.approx(458.654)  # no camera_info: EuRoC default
            assert ds.groundtruth is None
