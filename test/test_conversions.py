"""Message <-> NumPy conversions of the nodes (plain unit tests, no ROS graph).

References are independent of the code under test: the raw bytes are laid out by hand
(row padding filled with a marker value that must never show up), grey conversion is
checked against OpenCV's cvtColor / convertScaleAbs, and the tracks layout against the
VINS-Mono channel order written out literally.
"""
from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("sensor_msgs.msg", reason="ROS 2 message packages (ros extra) not installed")


def _image_msg(rows_bytes: np.ndarray, height: int, width: int, encoding: str, step: int, bigendian: bool = False):
    from sensor_msgs.msg import Image

    m = Image()
    m.height, m.width, m.encoding, m.step = height, width, encoding, step
    m.is_bigendian = int(bigendian)
    m.data = rows_bytes.tobytes()
    return m


def _padded(payload: np.ndarray, pad: int, marker: int = 0xAB) -> tuple[np.ndarray, int]:
    """payload (H, W*bpp) uint8 -> bytes with ``pad`` marker bytes at the end of each row."""
    h, row = payload.shape
    buf = np.full((h, row + pad), marker, np.uint8)
    buf[:, :row] = payload
    return buf, row + pad


RNG = np.random.default_rng(7)


class TestImageToNumpy:
    @pytest.mark.parametrize("pad", [0, 5, 64])
    def test_mono8_step_padding(self, pad):
        from vilib_ros.nodes.conversions import image_to_mono8

        img = RNG.integers(0, 255, (37, 53), dtype=np.uint8)
        buf, step = _padded(img, pad)
        out = image_to_mono8(_image_msg(buf, 37, 53, "mono8", step))
        assert out.dtype == np.uint8 and out.shape == (37, 53) and out.flags.c_contiguous
        np.testing.assert_array_equal(out, img)

    @pytest.mark.parametrize("bigendian", [False, True])
    @pytest.mark.parametrize("pad", [0, 6])
    def test_mono16_endianness_and_scaling(self, pad, bigendian):
        import cv2

        from vilib_ros.nodes.conversions import image_to_mono8, image_to_numpy

        img = RNG.integers(0, 65535, (20, 31), dtype=np.uint16)
        img[0, :4] = [0, 65535, 257, 32896]   # exact values: 0, 255, 1, 128
        raw = img.astype(">u2" if bigendian else "<u2").view(np.uint8).reshape(20, 62)
        buf, step = _padded(raw, pad)
        msg = _image_msg(buf, 20, 31, "mono16", step, bigendian)
        np.testing.assert_array_equal(image_to_numpy(msg), img)
        out = image_to_mono8(msg)
        ref = cv2.convertScaleAbs(img.astype(np.float64), alpha=255.0 / 65535.0)  # cv_bridge's scaling
        assert np.max(np.abs(out.astype(int) - ref.astype(int))) <= 1
        np.testing.assert_array_equal(out[0, :4], [0, 255, 1, 128])

    @pytest.mark.parametrize("encoding,code", [("rgb8", "COLOR_RGB2GRAY"), ("bgr8", "COLOR_BGR2GRAY")])
    @pytest.mark.parametrize("pad", [0, 3])
    def test_colour(self, encoding, code, pad):
        import cv2

        from vilib_ros.nodes.conversions import image_to_mono8

        img = RNG.integers(0, 255, (16, 24, 3), dtype=np.uint8)
        buf, step = _padded(img.reshape(16, 72), pad)
        out = image_to_mono8(_image_msg(buf, 16, 24, encoding, step))
        np.testing.assert_array_equal(out, cv2.cvtColor(img, getattr(cv2, code)))

    def test_rgb_and_bgr_differ(self):
        from vilib_ros.nodes.conversions import image_to_mono8

        img = np.zeros((4, 4, 3), np.uint8)
        img[..., 0] = 200  # first channel only
        a = image_to_mono8(_image_msg(img.reshape(4, 12), 4, 4, "rgb8", 12))
        b = image_to_mono8(_image_msg(img.reshape(4, 12), 4, 4, "bgr8", 12))
        assert a[0, 0] != b[0, 0]   # red weight 0.299 vs blue weight 0.114

    @pytest.mark.parametrize("h,w,enc,step,nbytes,reason", [
        (4, 4, "yuv422", 8, 32, "unsupported_encoding"),
        (4, 4, "32FC1", 16, 64, "unsupported_encoding"),
        (0, 4, "mono8", 4, 0, "zero_size"),
        (4, 0, "mono8", 0, 0, "zero_size"),
        (4, 8, "mono8", 6, 32, "step_mismatch"),
        (4, 4, "rgb8", 10, 40, "step_mismatch"),
        (4, 4, "mono8", 4, 10, "data_size"),
    ])
    def test_rejects_with_reason(self, h, w, enc, step, nbytes, reason):
        from vilib_ros.nodes.conversions import ImageConversionError, image_to_mono8

        msg = _image_msg(np.zeros(nbytes, np.uint8), h, w, enc, step)
        with pytest.raises(ImageConversionError) as ei:
            image_to_mono8(msg)
        assert ei.value.reason == reason
        assert isinstance(ei.value, ValueError)

    def test_last_row_without_padding_is_accepted(self):
        from vilib_ros.nodes.conversions import image_to_mono8

        img = RNG.integers(0, 255, (3, 5), dtype=np.uint8)
        buf, step = _padded(img, 3)
        data = buf.ravel()[: step * 2 + 5]   # some drivers omit the last row's padding
        np.testing.assert_array_equal(image_to_mono8(_image_msg(data, 3, 5, "mono8", step)), img)

    def test_numpy_to_image_roundtrip(self):
        from vilib_ros.nodes.conversions import image_to_numpy, numpy_to_image

        for img, enc in [(RNG.integers(0, 255, (9, 7), dtype=np.uint8), "mono8"),
                         (RNG.integers(0, 65535, (9, 7), dtype=np.uint16), "mono16"),
                         (RNG.integers(0, 255, (9, 7, 3), dtype=np.uint8), "bgr8")]:
            msg = numpy_to_image(img, stamp_ns=1_403_715_273_262_142_976, frame_id="cam0")
            assert msg.encoding == enc and msg.header.frame_id == "cam0"
            assert msg.header.stamp.sec == 1_403_715_273 and msg.header.stamp.nanosec == 262_142_976
            np.testing.assert_array_equal(image_to_numpy(msg), img)


def _frame(n=5, stereo=False):
    from vilib_ros.types import TrackFrame

    rng = np.random.default_rng(3)
    uv = rng.uniform(0, 700, (n, 2)).astype(np.float32)
    f = TrackFrame(
        stamp_ns=1_403_715_273_312_143_104,
        ids=np.arange(100, 100 + n, dtype=np.int64) * 7,
        uv=uv, xy=rng.normal(0, 0.5, (n, 2)), velocity=rng.normal(0, 0.1, (n, 2)),
        score=rng.uniform(10, 200, n).astype(np.float32), level=rng.integers(0, 2, n).astype(np.int32),
        age=rng.integers(0, 50, n).astype(np.int32))
    if stereo:
        f.uv_right = uv - np.float32(30)
        f.xy_right = f.xy - 0.05
        f.uv_right[1] = np.nan
        f.xy_right[1] = np.nan
    return f


class TestTracksLayout:
    def test_vins_mono_layout(self):
        from vilib_ros.nodes.conversions import trackframe_to_pointcloud

        f = _frame()
        msg = trackframe_to_pointcloud(f, "cam0")
        assert msg.header.frame_id == "cam0"
        assert msg.header.stamp.sec * 10**9 + msg.header.stamp.nanosec == f.stamp_ns
        pts = np.array([(p.x, p.y, p.z) for p in msg.points])
        np.testing.assert_allclose(pts[:, :2], f.xy, atol=1e-6)       # float32 points
        np.testing.assert_array_equal(pts[:, 2], 1.0)
        names = [c.name for c in msg.channels]
        # VINS-Mono's feature_tracker writes (and its estimator reads) these five first, in order.
        assert names[:5] == ["id_of_point", "u_of_point", "v_of_point", "velocity_x_of_point", "velocity_y_of_point"]
        assert names[5:] == ["score_of_point", "level_of_point", "age_of_point"]
        ch = {c.name: np.asarray(c.values) for c in msg.channels}
        np.testing.assert_array_equal(ch["id_of_point"], f.ids.astype(np.float32))
        np.testing.assert_allclose(ch["u_of_point"], f.uv[:, 0])
        np.testing.assert_allclose(ch["v_of_point"], f.uv[:, 1])
        np.testing.assert_allclose(ch["velocity_x_of_point"], f.velocity[:, 0], rtol=1e-6)
        np.testing.assert_allclose(ch["velocity_y_of_point"], f.velocity[:, 1], rtol=1e-6)
        np.testing.assert_array_equal(ch["level_of_point"], f.level)
        np.testing.assert_array_equal(ch["age_of_point"], f.age)
        assert all(len(c.values) == len(f) for c in msg.channels)

    def test_stereo_channels_and_roundtrip(self):
        from vilib_ros.nodes.conversions import pointcloud_to_trackframe, trackframe_to_pointcloud

        f = _frame(6, stereo=True)
        msg = trackframe_to_pointcloud(f)
        assert [c.name for c in msg.channels][8:] == ["u_right_of_point", "v_right_of_point",
                                                     "x_right_of_point", "y_right_of_point"]
        g = pointcloud_to_trackframe(msg)
        assert g.stamp_ns == f.stamp_ns
        np.testing.assert_array_equal(g.ids, f.ids)
        np.testing.assert_allclose(g.xy, f.xy, atol=1e-6)
        np.testing.assert_allclose(g.uv, f.uv)
        np.testing.assert_array_equal(g.age, f.age)
        assert np.isnan(g.xy_right[1]).all() and np.isnan(g.uv_right[1]).all()
        np.testing.assert_allclose(np.delete(g.xy_right, 1, 0), np.delete(f.xy_right, 1, 0), atol=1e-6)

    def test_empty_frame(self):
        from vilib_ros.nodes.conversions import pointcloud_to_trackframe, trackframe_to_pointcloud

        msg = trackframe_to_pointcloud(_frame(0))
        assert len(msg.points) == 0 and all(len(c.values) == 0 for c in msg.channels)
        assert len(pointcloud_to_trackframe(msg)) == 0

    def test_malformed_tracks_rejected(self):
        from vilib_ros.nodes.conversions import pointcloud_to_trackframe, trackframe_to_pointcloud

        msg = trackframe_to_pointcloud(_frame(4))
        msg.channels = msg.channels[1:]          # no id_of_point
        with pytest.raises(ValueError, match="id_of_point"):
            pointcloud_to_trackframe(msg)
        msg = trackframe_to_pointcloud(_frame(4))
        msg.channels[2].values = [1.0, 2.0]      # wrong length
        with pytest.raises(ValueError, match="values for 4 points"):
            pointcloud_to_trackframe(msg)


class TestImu:
    def test_roundtrip_and_nan(self):
        from vilib_ros.nodes.conversions import ImuConversionError, arrays_to_imu, imu_to_arrays

        msg = arrays_to_imu(1_403_715_273_000_000_123, [0.1, -0.2, 0.3], [9.7, 0.1, -0.4])
        t, g, a = imu_to_arrays(msg)
        assert t == 1_403_715_273_000_000_123
        np.testing.assert_array_equal(g, [0.1, -0.2, 0.3])
        np.testing.assert_array_equal(a, [9.7, 0.1, -0.4])
        assert msg.orientation_covariance[0] == -1.0
        msg.angular_velocity.y = float("nan")
        with pytest.raises(ImuConversionError):
            imu_to_arrays(msg)


class TestCdr:
    """Our CDR writer / readers against rclpy's own serializer (the independent reference)."""

    @pytest.mark.parametrize("frame_id", ["", "c", "cam0", "cam01", "camxyz7"])
    @pytest.mark.parametrize("n", [0, 1, 250])
    @pytest.mark.parametrize("stereo", [False, True])
    def test_tracks_bytes_deserialize_to_the_message(self, frame_id, n, stereo):
        from rclpy.serialization import deserialize_message
        from sensor_msgs.msg import PointCloud

        from vilib_ros.nodes.conversions import TracksEncoder

        f = _frame(n, stereo=stereo and n > 1)
        msg = deserialize_message(TracksEncoder().encode(f, frame_id), PointCloud)
        assert msg.header.frame_id == frame_id
        assert msg.header.stamp.sec * 10**9 + msg.header.stamp.nanosec == f.stamp_ns
        pts = np.array([(p.x, p.y, p.z) for p in msg.points]).reshape(n, 3)
        np.testing.assert_array_equal(pts[:, :2], np.asarray(f.xy, np.float32))
        np.testing.assert_array_equal(pts[:, 2], 1.0)
        ch = {c.name: np.asarray(c.values) for c in msg.channels}
        np.testing.assert_array_equal(ch["id_of_point"], f.ids.astype(np.float32))
        np.testing.assert_array_equal(ch["velocity_y_of_point"], f.velocity[:, 1].astype(np.float32))
        assert len(msg.channels) == (12 if stereo and n > 1 else 8)

    def test_tracks_bytes_equal_rclpy_except_padding(self):
        """Same length and the same bytes wherever rclpy's serializer writes data (it leaves the
        alignment padding after strings uninitialised)."""
        from rclpy.serialization import serialize_message
        from sensor_msgs.msg import ChannelFloat32, PointCloud
        from geometry_msgs.msg import Point32

        from vilib_ros.nodes.conversions import TracksEncoder

        f = _frame(7)
        m = PointCloud()
        m.header.frame_id = "cam0"
        m.header.stamp.sec, m.header.stamp.nanosec = divmod(f.stamp_ns, 10**9)
        m.points = [Point32(x=float(x), y=float(y), z=1.0) for x, y in f.xy]
        cols = [f.ids, f.uv[:, 0], f.uv[:, 1], f.velocity[:, 0], f.velocity[:, 1], f.score, f.level, f.age]
        names = ["id_of_point", "u_of_point", "v_of_point", "velocity_x_of_point", "velocity_y_of_point",
                 "score_of_point", "level_of_point", "age_of_point"]
        m.channels = [ChannelFloat32(name=nm, values=[float(v) for v in np.float32(c)]) for nm, c in zip(names, cols)]
        ref = serialize_message(m)
        got = TracksEncoder().encode(f, "cam0")
        assert len(got) == len(ref)
        diff = [i for i in range(len(ref)) if ref[i] != got[i]]
        # only the padding after strings may differ (the frame id's, then each channel name's)
        names_at = [ref.find(nm.encode()) for nm in names]
        allowed = set()
        for nm, at in zip(["cam0"] + names, [ref.find(b"cam0")] + names_at):
            end = at + len(nm) + 1
            allowed |= set(range(end, end + (-(end - 4) % 4)))
        assert set(diff) <= allowed, sorted(set(diff) - allowed)[:10]

    @pytest.mark.parametrize("frame_id", ["", "cam0", "c"])
    @pytest.mark.parametrize("encoding", ["mono8", "bgr8", "mono16"])
    def test_decode_image(self, frame_id, encoding):
        from rclpy.serialization import serialize_message

        from vilib_ros.nodes.cdr import decode_image
        from vilib_ros.nodes.conversions import image_to_mono8

        img = RNG.integers(0, 255, (48, 75, 3) if encoding == "bgr8" else (48, 75),
                           dtype=np.uint16 if encoding == "mono16" else np.uint8)
        m = _image_msg(img.reshape(48, -1).view(np.uint8) if encoding == "mono16" else img.reshape(48, -1),
                       48, 75, encoding, img.strides[0], bigendian=False)
        m.header.frame_id = frame_id
        m.header.stamp.sec, m.header.stamp.nanosec = 12, 345678901
        r = decode_image(serialize_message(m))
        assert (r.stamp_ns, r.frame_id, r.height, r.width, r.encoding, r.step) == \
            (12_345_678_901, frame_id, 48, 75, encoding, img.strides[0])
        np.testing.assert_array_equal(image_to_mono8(r), image_to_mono8(m))

    def test_truncated_is_a_clear_error(self):
        from rclpy.serialization import serialize_message

        from vilib_ros.nodes.cdr import CdrError, decode_image

        b = serialize_message(_image_msg(np.zeros((4, 4), np.uint8), 4, 4, "mono8", 4))
        for cut in (0, 3, 10, len(b) - 1):
            with pytest.raises(CdrError):
                decode_image(b[:cut])


def vins_fusion_feature_callback(msg):
    """VINS-Fusion's rosNodeTest.cpp feature_callback, index for index:
    {feature_id: [(camera_id, [x, y, z, p_u, p_v, velocity_x, velocity_y])]} plus pts_gt."""
    feature_frame, pts_gt = {}, {}
    for i in range(len(msg.points)):
        feature_id = int(msg.channels[0].values[i])
        camera_id = int(msg.channels[1].values[i])
        x, y, z = msg.points[i].x, msg.points[i].y, msg.points[i].z
        p_u, p_v = msg.channels[2].values[i], msg.channels[3].values[i]
        velocity_x, velocity_y = msg.channels[4].values[i], msg.channels[5].values[i]
        if len(msg.channels) > 5:
            pts_gt[feature_id] = (msg.channels[6].values[i], msg.channels[7].values[i], msg.channels[8].values[i])
        assert z == 1
        feature_frame.setdefault(feature_id, []).append((camera_id, [x, y, z, p_u, p_v, velocity_x, velocity_y]))
    return feature_frame, pts_gt


class TestVinsFusionLayout:
    @pytest.mark.parametrize("stereo", [False, True])
    def test_read_as_vins_fusion_does(self, stereo):
        from vilib_ros.nodes.conversions import pointcloud_to_trackframe, trackframe_to_pointcloud

        f = _frame(6, stereo=stereo)
        msg = trackframe_to_pointcloud(f, "cam0", layout="vins_fusion")
        ff, _ = vins_fusion_feature_callback(msg)
        assert sorted(ff) == sorted(f.ids.tolist())
        for k, i in enumerate(f.ids):
            obs = dict(ff[int(i)])
            x, y, z, u, v, vx, vy = obs[0]
            np.testing.assert_allclose([x, y, u, v, vx, vy],
                                       [f.xy[k, 0], f.xy[k, 1], f.uv[k, 0], f.uv[k, 1], f.velocity[k, 0],
                                        f.velocity[k, 1]], rtol=1e-6, atol=1e-6)
            if stereo and k != 1:       # track 1 has no right match
                xr, yr, _, ur, vr, _, _ = obs[1]
                np.testing.assert_allclose([xr, yr, ur, vr], [*f.xy_right[k], *f.uv_right[k]], atol=1e-5)
            else:
                assert 1 not in obs
        g = pointcloud_to_trackframe(msg)       # and our own reader gives the frame back
        np.testing.assert_array_equal(g.ids, f.ids)
        np.testing.assert_allclose(g.xy, f.xy, atol=1e-6)
        if stereo:
            assert np.isnan(g.xy_right[1]).all()
            np.testing.assert_allclose(np.delete(g.xy_right, 1, 0), np.delete(f.xy_right, 1, 0), atol=1e-6)


class TestCameraInfo:
    def _info(self, model="plumb_bob", d=(-0.28, 0.07, 0.0002, 1.8e-05, 0.0), k=(458.6, 0, 367.2, 0, 457.3, 248.4, 0, 0, 1)):
        from sensor_msgs.msg import CameraInfo

        return CameraInfo(width=752, height=480, distortion_model=model, d=list(d), k=list(k))

    def test_plumb_bob_and_equidistant(self):
        from vilib_ros.nodes.conversions import camera_from_camera_info

        c = camera_from_camera_info(self._info(), np.eye(4))
        assert (c.width, c.height, c.fx, c.fy, c.cx, c.cy) == (752, 480, 458.6, 457.3, 367.2, 248.4)
        assert c.distortion_model == "radial-tangential"
        np.testing.assert_array_equal(c.distortion, [-0.28, 0.07, 0.0002, 1.8e-05])
        e = camera_from_camera_info(self._info("equidistant", (0.1, 0.01, -0.002, 0.0003)))
        assert e.distortion_model == "equidistant"

    @pytest.mark.parametrize("kw,match", [({"model": "rational_polynomial"}, "rational_polynomial"),
                                          ({"d": (0.1, 0.0, 0.0, 0.0, 0.3)}, "k3 = 0"),
                                          ({"k": (float("nan"),) + (0,) * 8}, "K must"),
                                          ({"d": (float("nan"), 0, 0, 0, 0)}, "non-finite")])
    def test_rejected_with_the_field_named(self, kw, match):
        from vilib_ros.nodes.conversions import camera_from_camera_info

        with pytest.raises(ValueError, match=match):
            camera_from_camera_info(self._info(**kw))


class TestCompressed:
    @pytest.mark.parametrize("ext,colour", [(".png", False), (".png", True), (".jpg", False), (".jpg", True)])
    def test_png_jpeg_mono_colour(self, ext, colour):
        import cv2
        from sensor_msgs.msg import CompressedImage

        from vilib_ros.nodes.conversions import compressed_to_mono8

        grey = (np.add.outer(np.arange(60), np.arange(80)) * 2 % 256).astype(np.uint8)
        img = cv2.merge([grey, grey // 2, 255 - grey]) if colour else grey
        ok, buf = cv2.imencode(ext, img)
        out = compressed_to_mono8(CompressedImage(format=ext[1:], data=buf.tobytes()))
        ref = cv2.cvtColor(img, cv2.COLOR_BGR2GRAY) if colour else img
        tol = 0 if ext == ".png" else 12
        assert out.shape == (60, 80) and out.dtype == np.uint8
        assert np.abs(out.astype(int) - ref.astype(int)).max() <= tol

    def test_garbage_is_decode_error(self):
        from sensor_msgs.msg import CompressedImage

        from vilib_ros.nodes.conversions import ImageConversionError, compressed_to_mono8

        with pytest.raises(ImageConversionError) as e:
            compressed_to_mono8(CompressedImage(format="jpeg", data=b"not an image at all"))
        assert e.value.reason == "decode_error"


class TestDecodeImu:
    # every frame id length mod 8: the doubles' offset follows from it (the decoder computes it)
    @pytest.mark.parametrize("frame_id", ["", "i", "im", "imu", "imu0", "imu_l", "imu_li", "imu_lin", "imu_link",
                                          "body/imu0_frame"])
    def test_against_rclpy(self, frame_id):
        from rclpy.serialization import serialize_message

        from vilib_ros.nodes.cdr import decode_imu
        from vilib_ros.nodes.conversions import arrays_to_imu

        m = arrays_to_imu(1_403_715_273_000_000_123, [0.1, -0.2, 0.3], [9.7, 0.1, -0.4], frame_id)
        m.orientation.w, m.angular_velocity_covariance[4], m.linear_acceleration_covariance[8] = 0.5, 7.0, 8.0
        t, g, a = decode_imu(serialize_message(m))
        assert t == 1_403_715_273_000_000_123 and g == (0.1, -0.2, 0.3) and a == (9.7, 0.1, -0.4)

    @pytest.mark.parametrize("frame_id", ["", "imu", "imu0", "imu_link", "body/imu0_frame"])
    def test_batch_against_rclpy(self, frame_id):
        """decode_imu_batch (one np.frombuffer over a burst) reads what rclpy serialized, as
        decode_imu does one by one."""
        from rclpy.serialization import serialize_message

        from vilib_ros.nodes.cdr import decode_imu, decode_imu_batch
        from vilib_ros.nodes.conversions import arrays_to_imu

        rng = np.random.default_rng(len(frame_id))
        msgs = [serialize_message(arrays_to_imu(1_403_715_273_000_000_000 + 5_000_000 * k + k, rng.normal(size=3),
                                                rng.normal(size=3) * 9, frame_id)) for k in range(13)]
        t, rows = decode_imu_batch(msgs)
        for k, m in enumerate(msgs):
            tk, gk, ak = decode_imu(m)
            assert t[k] == tk and tuple(rows[k]) == gk + ak

    def test_batch_declines_what_it_cannot_read(self):
        from rclpy.serialization import serialize_message

        from vilib_ros.nodes.cdr import decode_imu_batch
        from vilib_ros.nodes.conversions import arrays_to_imu

        a = serialize_message(arrays_to_imu(5, [0, 0, 0], [0, 0, 9.8], "imu0"))
        b = serialize_message(arrays_to_imu(6, [0, 0, 0], [0, 0, 9.8], "imu1"))
        assert decode_imu_batch([a, b]) is not None
        assert decode_imu_batch([a, serialize_message(arrays_to_imu(6, [0, 0, 0], [0, 0, 9.8], "imu_link"))]) is None
        assert decode_imu_batch([a, b"\x00\x00" + bytes(b[2:])]) is None        # big-endian encapsulation
        assert decode_imu_batch([a[:40], b[:40]]) is None                        # truncated alike
        assert decode_imu_batch([]) == ([], [])

    def test_truncated(self):
        from rclpy.serialization import serialize_message

        from vilib_ros.nodes.cdr import CdrError, decode_imu
        from vilib_ros.nodes.conversions import arrays_to_imu

        b = serialize_message(arrays_to_imu(5, [0, 0, 0], [0, 0, 9.8]))
        with pytest.raises(CdrError):
            decode_imu(b[:-(72 + 8)])     # into the acceleration (its covariance follows: 9 doubles)
        with pytest.raises(CdrError):
            decode_imu(b[:10])            # inside the header
        with pytest.raises(CdrError):
            decode_imu(b"\x00\x00" + bytes(b[2:]))     # big-endian encapsulation


class TestEncodeImage:
    """cdr.encode_image (the player's images) read back by rclpy's own deserializer."""

    @pytest.mark.parametrize("shape,dtype,encoding", [((480, 752), np.uint8, "mono8"), ((7, 5), np.uint8, "mono8"),
                                                      ((6, 9, 3), np.uint8, "bgr8"), ((5, 3), np.uint16, "mono16")])
    @pytest.mark.parametrize("frame_id", ["cam0", "", "abc12", "x"])
    def test_rclpy_reads_what_we_write(self, shape, dtype, encoding, frame_id):
        pytest.importorskip("rclpy", reason="rclpy (ros extra) not installed")
        from rclpy.serialization import deserialize_message
        from sensor_msgs.msg import Image

        from vilib_ros.nodes.cdr import encode_image

        img = (np.arange(np.prod(shape)) % 250).astype(dtype).reshape(shape)
        m = deserialize_message(encode_image(1_500_000_123_456_789, frame_id, img, encoding), Image)
        assert (m.header.stamp.sec, m.header.stamp.nanosec) == (1_500_000, 123_456_789)
        assert m.header.frame_id == frame_id and m.encoding == encoding and m.is_bigendian == 0
        assert (m.height, m.width, m.step) == (shape[0], shape[1], img.strides[0])
        assert bytes(m.data) == img.tobytes()


class TestHeaderStamp:
    def test_stamp_of_a_serialized_tracks_message(self):
        """The player reads only the stamp of each tracks message (raw subscription)."""
        from vilib_ros.nodes.cdr import CdrError, encode_pointcloud, header_stamp_ns

        buf = encode_pointcloud(1_700_000_000_987_654_321, "cam0", np.zeros((3, 3)), ["id_of_point"], np.zeros((1, 3)))
        assert header_stamp_ns(buf) == 1_700_000_000_987_654_321
        with pytest.raises(CdrError):
            header_stamp_ns(b"\x00\x01\x00\x00\x01")


class TestEncodePath:
    """cdr.encode_path against rclpy's own deserializer: a nav_msgs/Path built pose by pose."""

    @staticmethod
    def _reference(stamp_ns, frame_id, t, P):
        from geometry_msgs.msg import PoseStamped
        from nav_msgs.msg import Path as PathMsg

        from vilib_ros.nodes.conversions import ns_to_stamp

        m = PathMsg()
        m.header.frame_id, m.header.stamp = frame_id, ns_to_stamp(stamp_ns)
        for ti, pi in zip(t.tolist(), P.tolist()):
            ps = PoseStamped()
            ps.header.frame_id, ps.header.stamp = frame_id, ns_to_stamp(ti)
            ps.pose.position.x, ps.pose.position.y, ps.pose.position.z = pi[:3]
            o = ps.pose.orientation
            o.x, o.y, o.z, o.w = pi[3:]
            m.poses.append(ps)
        return m

    # frame ids of every length mod 8: the pose doubles' alignment differs for the first pose
    @pytest.mark.parametrize("frame_id", ["", "o", "od", "odo", "odom", "odom_", "world_", "map_odom", "odom/frame"])
    @pytest.mark.parametrize("n", [0, 1, 2, 7])
    def test_equals_message_built_pose_by_pose(self, frame_id, n):
        pytest.importorskip("rclpy", reason="rclpy (ros extra) not installed")
        from nav_msgs.msg import Path as PathMsg
        from rclpy.serialization import deserialize_message, serialize_message

        from vilib_ros.nodes.cdr import encode_path

        rng = np.random.default_rng(n + len(frame_id))
        t = 1_403_715_000_000_000_000 + np.arange(n, dtype=np.int64) * 50_000_123 + 999_999_999
        P = rng.normal(size=(n, 7))
        ref = self._reference(1_403_715_999_000_000_007, frame_id, t, P)
        got = encode_path(1_403_715_999_000_000_007, frame_id, t, P)
        assert len(got) == len(serialize_message(ref))
        assert deserialize_message(got, PathMsg) == ref


class TestPathBuffer:
    """backend_outputs.PathBuffer: the last ``capacity`` poses in order, against a plain list."""

    @pytest.mark.parametrize("capacity,n", [(5, 3), (5, 5), (5, 12), (3000, 2500), (1500, 4000)])
    def test_last_capacity_poses_oldest_first(self, capacity, n):
        from vilib_ros.nodes.backend_outputs import PathBuffer

        rng = np.random.default_rng(n)
        P = rng.normal(size=(n, 7))
        buf = PathBuffer(capacity)
        for k in range(n):
            buf.append(1000 + k, P[k, :3], P[k, 3:])
        t, poses = buf.arrays()
        keep = list(range(n))[-capacity:]
        assert len(buf) == len(keep)
        np.testing.assert_array_equal(t, [1000 + k for k in keep])
        np.testing.assert_array_equal(poses, P[keep])


class TestEncodeBackendOutputs:
    """cdr.encode_odometry / encode_tf / encode_header (the backend node's per-frame messages)
    against rclpy: the messages built field by field (backend_outputs' builders), serialized by
    rclpy, equal to ours read back by rclpy's deserializer, and of the same length."""

    @staticmethod
    def _state(seed):
        from types import SimpleNamespace

        from scipy.spatial.transform import Rotation

        rng = np.random.default_rng(seed)
        q = Rotation.random(random_state=seed).as_quat()
        return SimpleNamespace(stamp_ns=1_403_715_999_000_000_007 + seed, p=rng.normal(size=3), q_xyzw=q,
                               R=Rotation.from_quat(q).as_matrix(), v=rng.normal(size=3))

    # frame ids of every length mod 8: the doubles' alignment after the strings differs
    @pytest.mark.parametrize("frame_id,child", [("", "x"), ("o", "base"), ("od", "b"), ("odo", "imu0"),
                                                ("odom", "base_link"), ("odom_", "body"), ("world_", "ab"),
                                                ("map_odom", "")])
    @pytest.mark.parametrize("with_cov", [False, True])
    def test_odometry(self, frame_id, child, with_cov):
        from nav_msgs.msg import Odometry
        from rclpy.serialization import deserialize_message, serialize_message

        from vilib_ros.nodes.backend_outputs import odometry_msg
        from vilib_ros.nodes.cdr import encode_odometry

        s = self._state(len(frame_id) + 3 * len(child))
        cov = (np.arange(36.0).reshape(6, 6), -np.arange(36.0).reshape(6, 6)) if with_cov else None
        ref = odometry_msg(s, frame_id, child, cov)
        v_body = s.R.T @ s.v
        got = encode_odometry(s.stamp_ns, frame_id, child, np.r_[s.p, s.q_xyzw], np.r_[v_body, 0, 0, 0],
                              *(cov or (None, None)))
        assert len(got) == len(serialize_message(ref))
        assert deserialize_message(got, Odometry) == ref

    @pytest.mark.parametrize("frame_id,child", [("", "x"), ("o", "base"), ("odo", "imu0"), ("odom", "base_link"),
                                                ("world_", "ab"), ("map_odom", "")])
    def test_tf(self, frame_id, child):
        from rclpy.serialization import deserialize_message, serialize_message

        from vilib_ros.nodes.backend_outputs import odom_transform
        from vilib_ros.nodes.cdr import encode_tf
        from vilib_ros.nodes.tf2_msgs_build import Tf2MsgsUnavailable, import_tf2_msgs

        try:
            TFMessage = import_tf2_msgs().TFMessage
        except Tf2MsgsUnavailable as exc:
            pytest.skip(f"tf2_msgs unavailable: {exc}")
        s = self._state(len(frame_id) + 5 * len(child))
        ref = TFMessage(transforms=[odom_transform(s, frame_id, child)])
        got = encode_tf(s.stamp_ns, frame_id, child, np.r_[s.p, s.q_xyzw])
        assert len(got) == len(serialize_message(ref))
        assert deserialize_message(got, TFMessage) == ref

    def test_header(self):
        from rclpy.serialization import deserialize_message
        from std_msgs.msg import Header

        from vilib_ros.nodes.cdr import encode_header
        from vilib_ros.nodes.conversions import ns_to_stamp

        for fid in ("", "a", "cam0", "frame_7"):
            ref = Header(stamp=ns_to_stamp(1_403_715_999_000_000_007), frame_id=fid)
            assert deserialize_message(encode_header(1_403_715_999_000_000_007, fid), Header) == ref


class TestToBody:
    """backend_outputs.to_body (the odometry's twist in the body frame, without a scipy Rotation per
    message) against scipy: ``Rotation.from_quat(q).as_matrix().T @ v``, also for quaternions that are
    not of unit length (scipy normalises them) and for both signs of q."""

    def test_against_scipy(self):
        from scipy.spatial.transform import Rotation

        from vilib_ros.nodes.backend_outputs import to_body

        rng = np.random.default_rng(3)
        for k in range(200):
            q = Rotation.random(random_state=k).as_quat() * rng.uniform(0.5, 2.0) * (1 if k % 2 else -1)
            v = rng.normal(size=3) * 10
            ref = Rotation.from_quat(q).as_matrix().T @ v
            assert np.allclose(to_body(q, v), ref, rtol=0, atol=1e-12 * max(1.0, np.abs(v).max()))

    def test_odometry_bytes_twist(self):
        from types import SimpleNamespace

        from nav_msgs.msg import Odometry
        from rclpy.serialization import deserialize_message
        from scipy.spatial.transform import Rotation

        from vilib_ros.nodes.backend_outputs import odometry_bytes

        q = Rotation.random(random_state=7).as_quat()
        s = SimpleNamespace(stamp_ns=1_403_715_999_000_000_007, p=np.array([1.0, 2.0, 3.0]), q_xyzw=q,
                            v=np.array([0.5, -1.5, 2.0]))
        m = deserialize_message(odometry_bytes(s, "odom", "base_link"), Odometry)
        t = m.twist.twist
        ref = Rotation.from_quat(q).as_matrix().T @ s.v
        assert np.allclose([t.linear.x, t.linear.y, t.linear.z], ref, atol=1e-12)
        assert (t.angular.x, t.angular.y, t.angular.z) == (0.0, 0.0, 0.0)


class TestEncodeImu:
    """cdr.encode_imu (the player's IMU samples) against rclpy: the message built field by field
    (conversions.arrays_to_imu), serialized by rclpy, equal to ours read back by rclpy's
    deserializer, of the same length, and read back by our own decode_imu."""

    # frame ids of every length mod 8: the doubles' alignment after the string differs
    @pytest.mark.parametrize("frame_id", ["", "i", "im", "imu", "imu0", "imu0_", "imu0_a", "imu0_ab", "imu0_abc"])
    def test_against_rclpy(self, frame_id):
        from rclpy.serialization import deserialize_message, serialize_message
        from sensor_msgs.msg import Imu

        from vilib_ros.nodes.cdr import decode_imu, encode_imu
        from vilib_ros.nodes.conversions import arrays_to_imu

        rng = np.random.default_rng(len(frame_id))
        g, a = rng.normal(size=3), rng.normal(9.8, 1.0, size=3)
        t = 1_403_715_999_000_000_007 + len(frame_id)
        ref = arrays_to_imu(t, g, a, frame_id)
        got = encode_imu(t, frame_id, g, a)
        assert len(got) == len(serialize_message(ref))
        assert deserialize_message(got, Imu) == ref
        t_back, g_back, a_back = decode_imu(got)
        assert t_back == t and np.array_equal(g_back, g) and np.array_equal(a_back, a)


class TestDrawTracks:
    """nodes.conversions.draw_tracks: a ring of the age's colour around every finite track,
    nothing elsewhere (drawn with one OpenCV call per colour, no loop over the tracks)."""

    @staticmethod
    def _frame(uv, age):
        from vilib_ros.types import TrackFrame

        n = len(uv)
        z = np.zeros((n, 2))
        return TrackFrame(1, np.arange(n, dtype=np.int64), np.asarray(uv, np.float32), z, z,
                          np.zeros(n, np.float32), np.zeros(n, np.int32), np.asarray(age, np.int32))

    def test_rings_coloured_by_age(self):
        from vilib_ros.nodes.conversions import draw_tracks

        img = np.full((60, 80), 100, np.uint8)
        f = self._frame([[20.0, 20.0], [50.0, 30.0], [np.nan, 5.0], [1e30, 5.0]], [0, 40, 0, 0])
        out = draw_tracks(img, f)
        assert out.shape == (60, 80, 3) and out.dtype == np.uint8
        new, old = out[14:27, 14:27].astype(int), out[24:37, 44:57].astype(int)
        # new track: blue ring (B up, R down from the grey 100), old track: red ring
        assert new[..., 0].max() > 180 and new[..., 2].min() < 60
        assert old[..., 2].max() > 180 and old[..., 0].min() < 60
        for c in ((20, 20), (50, 30)):          # the centre and a point 3 px out: grey / drawn
            assert (out[c[1], c[0]] == 100).all()
            assert (out[c[1], c[0] + 3] != 100).any()
        # nothing outside the two rings (the NaN and the far-off track are left out)
        mask = np.ones((60, 80), bool)
        mask[14:27, 14:27] = mask[24:37, 44:57] = False
        assert (out[mask] == 100).all()

    def test_no_tracks(self):
        from vilib_ros.nodes.conversions import draw_tracks

        img = np.full((10, 12), 7, np.uint8)
        out = draw_tracks(img, self._frame(np.zeros((0, 2)), []))
        assert (out == 7).all() and out.shape == (10, 12, 3)
