"""Message <-> NumPy conversions shared by the nodes (no cv_bridge needed).

* :func:`image_to_mono8` - ``sensor_msgs/Image`` (mono8, mono16, rgb8, bgr8; any row
  ``step`` >= width * bytes-per-pixel; either endianness for mono16) -> uint8 HxW.
  Anything else raises :class:`ImageConversionError` whose ``reason`` is a short,
  stable key (``unsupported_encoding``, ``zero_size``, ``step_mismatch``,
  ``data_size``) that the frontend node counts in its diagnostics.
* :func:`numpy_to_image` - uint8 HxW (mono8) or HxWx3 (bgr8/rgb8) -> ``sensor_msgs/Image``.
* :func:`trackframe_to_pointcloud` / :func:`pointcloud_to_trackframe` - the VINS-Mono
  feature-tracker layout: ``points`` are undistorted normalised coordinates (x, y, 1);
  channels ``id_of_point``, ``u_of_point``, ``v_of_point``, ``velocity_x_of_point``,
  ``velocity_y_of_point`` (in this order, as VINS-Mono reads them by index), then
  ``score_of_point``, ``level_of_point``, ``age_of_point`` and, for stereo frames,
  ``u_right_of_point``, ``v_right_of_point``, ``x_right_of_point``, ``y_right_of_point``
  (NaN where a track has no right match).
* :func:`imu_to_arrays` - ``sensor_msgs/Imu`` -> (t_ns, gyro(3), acc(3)) with a
  :class:`ImuConversionError` for non-finite values.
* stamp helpers :func:`stamp_to_ns` / :func:`ns_to_stamp`.

The message classes are imported lazily, so this module imports without ROS.
"""
from __future__ import annotations

import numpy as np

from vilib_ros.types import TrackFrame

SUPPORTED_ENCODINGS = ("mono8", "mono16", "rgb8", "bgr8")
_BYTES_PER_PIXEL = {"mono8": 1, "mono16": 2, "rgb8": 3, "bgr8": 3}

#: Channel names of the tracks message, in order (the first five are VINS-Mono's).
VINS_CHANNELS = ("id_of_point", "u_of_point", "v_of_point", "velocity_x_of_point", "velocity_y_of_point")
EXTRA_CHANNELS = ("score_of_point", "level_of_point", "age_of_point")
STEREO_CHANNELS = ("u_right_of_point", "v_right_of_point", "x_right_of_point", "y_right_of_point")


class ImageConversionError(ValueError):
    """An image message that cannot be converted; ``reason`` is a short counter key."""

    def __init__(self, reason: str, message: str):
        super().__init__(message)
        self.reason = reason


class ImuConversionError(ValueError):
    def __init__(self, reason: str, message: str):
        super().__init__(message)
        self.reason = reason


def stamp_to_ns(stamp) -> int:
    """builtin_interfaces/Time -> integer nanoseconds."""
    return int(stamp.sec) * 1_000_000_000 + int(stamp.nanosec)


def ns_to_stamp(t_ns: int):
    from builtin_interfaces.msg import Time

    t_ns = int(t_ns)
    return Time(sec=t_ns // 1_000_000_000, nanosec=t_ns % 1_000_000_000)


def image_to_numpy(msg) -> np.ndarray:
    """Image message -> array in its own encoding: uint8 HxW, uint16 HxW or uint8 HxWx3.

    Row padding (``step`` > width * bytes-per-pixel) is dropped; the result is a copy.
    """
    enc = str(msg.encoding).lower()
    if enc not in _BYTES_PER_PIXEL:
        raise ImageConversionError(
            "unsupported_encoding",
            f"unsupported image encoding {msg.encoding!r} (supported: {', '.join(SUPPORTED_ENCODINGS)})")
    h, w, step = int(msg.height), int(msg.width), int(msg.step)
    if h <= 0 or w <= 0:
        raise ImageConversionError("zero_size", f"image has zero size ({w}x{h})")
    bpp = _BYTES_PER_PIXEL[enc]
    if step < w * bpp:
        raise ImageConversionError(
            "step_mismatch", f"row step {step} is smaller than width {w} x {bpp} bytes per pixel ({enc})")
    buf = np.frombuffer(msg.data, dtype=np.uint8)
    if buf.size < step * (h - 1) + w * bpp:
        raise ImageConversionError(
            "data_size", f"image data has {buf.size} bytes, {w}x{h} {enc} with step {step} needs {step * h}")
    if buf.size < step * h:  # last row unpadded: pad so the strided view is valid
        buf = np.concatenate([buf, np.zeros(step * h - buf.size, np.uint8)])
    rows = buf[: step * h].reshape(h, step)[:, : w * bpp]
    if enc == "mono16":
        dt = np.dtype(">u2" if msg.is_bigendian else "<u2")
        return np.ascontiguousarray(rows).view(dt).reshape(h, w).astype(np.uint16)
    if bpp == 3:
        return np.ascontiguousarray(rows).reshape(h, w, 3)
    return np.ascontiguousarray(rows)


def to_mono8(img: np.ndarray, encoding: str) -> np.ndarray:
    """Convert an array in ``encoding`` to uint8 grey (as cv_bridge does)."""
    import cv2

    enc = encoding.lower()
    if enc == "mono8":
        return img
    if enc == "mono16":
        # cv_bridge: convertTo(CV_8U, 255/65535), i.e. rounding v/257.
        return ((img.astype(np.uint32) * 255 + 32767) // 65535).astype(np.uint8)
    if enc == "rgb8":
        return cv2.cvtColor(img, cv2.COLOR_RGB2GRAY)
    if enc == "bgr8":
        return cv2.cvtColor(img, cv2.COLOR_BGR2GRAY)
    raise ImageConversionError("unsupported_encoding", f"unsupported image encoding {encoding!r}")


def image_to_mono8(msg) -> np.ndarray:
    """Image message (mono8/mono16/rgb8/bgr8) -> contiguous uint8 HxW."""
    return to_mono8(image_to_numpy(msg), str(msg.encoding))


def numpy_to_image(img: np.ndarray, encoding: str | None = None, stamp_ns: int = 0, frame_id: str = ""):
    """uint8 HxW (mono8), uint16 HxW (mono16) or uint8 HxWx3 (bgr8 by default) -> Image."""
    from sensor_msgs.msg import Image

    img = np.ascontiguousarray(img)
    if encoding is None:
        encoding = {(2, "uint8"): "mono8", (2, "uint16"): "mono16", (3, "uint8"): "bgr8"}.get(
            (img.ndim, str(img.dtype)))
        if encoding is None:
            raise ValueError(f"cannot pick an encoding for a {img.dtype} array of shape {img.shape}")
    msg = Image()
    msg.header.stamp = ns_to_stamp(stamp_ns)
    msg.header.frame_id = frame_id
    msg.height, msg.width = int(img.shape[0]), int(img.shape[1])
    msg.encoding = encoding
    msg.is_bigendian = 0
    msg.step = int(img.strides[0])
    msg.data = img.tobytes()
    return msg


def _channel(name: str, values: np.ndarray):
    from sensor_msgs.msg import ChannelFloat32

    ch = ChannelFloat32()
    ch.name = name
    ch.values = np.ascontiguousarray(values, dtype=np.float32)
    return ch


def trackframe_to_pointcloud(frame: TrackFrame, frame_id: str = "cam0"):
    """TrackFrame -> sensor_msgs/PointCloud in the VINS-Mono feature-tracker layout."""
    from geometry_msgs.msg import Point32
    from sensor_msgs.msg import PointCloud

    msg = PointCloud()
    msg.header.stamp = ns_to_stamp(frame.stamp_ns)
    msg.header.frame_id = frame_id
    n = len(frame)
    xy = np.asarray(frame.xy, dtype=np.float64).reshape(n, 2)
    pts = []
    for x, y in xy.tolist():
        p = Point32()
        p.x, p.y, p.z = x, y, 1.0
        pts.append(p)
    msg.points = pts
    uv = np.asarray(frame.uv, dtype=np.float32).reshape(n, 2)
    vel = np.asarray(frame.velocity, dtype=np.float64).reshape(n, 2)
    cols = [frame.ids, uv[:, 0], uv[:, 1], vel[:, 0], vel[:, 1], frame.score, frame.level, frame.age]
    names = VINS_CHANNELS + EXTRA_CHANNELS
    if frame.uv_right is not None and frame.xy_right is not None:
        uvr = np.asarray(frame.uv_right, dtype=np.float32).reshape(n, 2)
        xyr = np.asarray(frame.xy_right, dtype=np.float64).reshape(n, 2)
        cols += [uvr[:, 0], uvr[:, 1], xyr[:, 0], xyr[:, 1]]
        names = names + STEREO_CHANNELS
    msg.channels = [_channel(nm, np.asarray(c).reshape(n)) for nm, c in zip(names, cols)]
    return msg


def pointcloud_to_trackframe(msg) -> TrackFrame:
    """Tracks message -> TrackFrame (inverse of :func:`trackframe_to_pointcloud`).

    Raises ValueError when a VINS channel is missing or channel lengths disagree.
    """
    n = len(msg.points)
    ch = {c.name: np.asarray(c.values, dtype=np.float32) for c in msg.channels}
    for name in VINS_CHANNELS:
        if name not in ch:
            raise ValueError(f"tracks message lacks channel {name!r}")
    for name, v in ch.items():
        if v.shape[0] != n:
            raise ValueError(f"channel {name!r} has {v.shape[0]} values for {n} points")
    if n:
        xyz = np.array([(p.x, p.y, p.z) for p in msg.points], dtype=np.float64)
    else:
        xyz = np.zeros((0, 3))
    if n and not np.all(np.isfinite(xyz)):
        raise ValueError("tracks message has non-finite point coordinates")

    def col(name, dtype, default=0):
        return ch[name].astype(dtype) if name in ch else np.full(n, default, dtype)

    uv_right = xy_right = None
    if all(s in ch for s in STEREO_CHANNELS):
        uv_right = np.stack([ch["u_right_of_point"], ch["v_right_of_point"]], axis=1).astype(np.float32)
        xy_right = np.stack([ch["x_right_of_point"], ch["y_right_of_point"]], axis=1).astype(np.float64)
    return TrackFrame(
        stamp_ns=stamp_to_ns(msg.header.stamp),
        ids=np.rint(ch["id_of_point"]).astype(np.int64),
        uv=np.stack([ch["u_of_point"], ch["v_of_point"]], axis=1).astype(np.float32),
        xy=xyz[:, :2] / np.where(xyz[:, 2:3] == 0, 1.0, xyz[:, 2:3]) if n else np.zeros((0, 2)),
        velocity=np.stack([ch["velocity_x_of_point"], ch["velocity_y_of_point"]], axis=1).astype(np.float64),
        score=col("score_of_point", np.float32),
        level=col("level_of_point", np.int32),
        age=col("age_of_point", np.int32),
        uv_right=uv_right,
        xy_right=xy_right,
    )


def imu_to_arrays(msg) -> tuple[int, np.ndarray, np.ndarray]:
    """Imu message -> (t_ns, gyro (3,), acc (3,)); raises ImuConversionError on NaN/inf."""
    g = np.array([msg.angular_velocity.x, msg.angular_velocity.y, msg.angular_velocity.z], dtype=np.float64)
    a = np.array([msg.linear_acceleration.x, msg.linear_acceleration.y, msg.linear_acceleration.z],
                 dtype=np.float64)
    if not (np.all(np.isfinite(g)) and np.all(np.isfinite(a))):
        raise ImuConversionError("imu_non_finite", "IMU message has non-finite angular velocity or acceleration")
    return stamp_to_ns(msg.header.stamp), g, a


def arrays_to_imu(t_ns: int, gyro, acc, frame_id: str = "imu0"):
    from sensor_msgs.msg import Imu

    msg = Imu()
    msg.header.stamp = ns_to_stamp(t_ns)
    msg.header.frame_id = frame_id
    gx, gy, gz = (float(v) for v in gyro)
    ax, ay, az = (float(v) for v in acc)
    msg.angular_velocity.x, msg.angular_velocity.y, msg.angular_velocity.z = gx, gy, gz
    msg.linear_acceleration.x, msg.linear_acceleration.y, msg.linear_acceleration.z = ax, ay, az
    msg.orientation_covariance[0] = -1.0  # no orientation estimate (REP 145)
    return msg


def draw_tracks(image_u8: np.ndarray, frame: TrackFrame, max_age_color: int = 20) -> np.ndarray:
    """BGR debug image: each track a circle coloured by its age (blue new -> red old)."""
    import cv2

    out = cv2.cvtColor(image_u8, cv2.COLOR_GRAY2BGR) if image_u8.ndim == 2 else image_u8.copy()
    n = len(frame)
    if n == 0:
        return out
    uv = np.asarray(frame.uv, dtype=np.float64).reshape(n, 2)
    age = np.asarray(frame.age).reshape(n)
    t = np.clip(age / float(max_age_color), 0.0, 1.0)
    for (u, v), a in zip(uv.tolist(), t.tolist()):
        if not (np.isfinite(u) and np.isfinite(v)):
            continue
        color = (int(255 * (1 - a)), 0, int(255 * a))
        cv2.circle(out, (int(round(u)), int(round(v))), 3, color, 1, cv2.LINE_AA)
    return out
