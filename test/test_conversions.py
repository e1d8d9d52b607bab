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
