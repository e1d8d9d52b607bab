"""Message <-> NumPy conversions shared by the nodes (no cv_bridge needed).

* :func:`image_to_mono8` - ``sensor_msgs/Image`` (mono8, mono16, rgb8, bgr8; any row
  ``step`` >= width * bytes-per-pixel; either endianness for mono16) -> uint8 HxW.
  Anything else raises :class:`ImageConversionError` whose ``reason`` is a short,
  stable key (``unsupported_encoding``, ``zero_size``, ``step_mismatch``,
  ``data_size``) that the frontend node counts in its diagnostics.
* :func:`numpy_to_image` - uint8 HxW (mono8) or HxWx3 (bgr8/rgb8) -> ``sensor_msgs/Image``.
* :class:`TracksEncoder` (serialized bytes, the node's path), :func:`trackframe_to_pointcloud`
  (a message object) and :func:`pointcloud_to_trackframe` (either back) - the tracks message.
  ``vins_mono`` layout (VINS-Mono's feature tracker): ``points`` are undistorted normalised
  coordinates (x, y, 1); channels ``id_of_point``, ``u_of_point``, ``v_of_point``,
  ``velocity_x_of_point``, ``velocity_y_of_point`` (in this order, as VINS-Mono reads them by
  index), then ``score_of_point``, ``level_of_point``, ``age_of_point`` and, for stereo frames,
  ``u_right_of_point``, ``v_right_of_point``, ``x_right_of_point``, ``y_right_of_point``
  (NaN where a track has no right match). ``vins_fusion`` layout: see :data:`FUSION_CHANNELS`.
* :func:`image_to_mono8` also takes a :class:`vilib_ros.nodes.cdr.RawImage` (raw subscription)
  and :func:`compressed_to_mono8` a ``sensor_msgs/CompressedImage`` (PNG / JPEG).
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


def compressed_to_mono8(msg) -> np.ndarray:
    """``sensor_msgs/CompressedImage`` (PNG or JPEG, grey or colour, 8 or 16 bit) -> uint8 HxW.

    Colour is converted as cv_bridge does (BGR -> grey), 16-bit PNG scaled to 8 bit; data that
    does not decode raises :class:`ImageConversionError` (``decode_error``).
    """
    import cv2

    fmt = str(getattr(msg, "format", ""))
    buf = np.frombuffer(msg.data, dtype=np.uint8)
    if buf.size == 0:
        raise ImageConversionError("zero_size", "compressed image has no data")
    img = cv2.imdecode(buf, cv2.IMREAD_UNCHANGED)
    if img is None or img.size == 0:
        from vilib_ros.nodes.input_guard import truncate

        raise ImageConversionError("decode_error", f"compressed image (format {truncate(fmt, 40)!r}, "
                                   f"{buf.size} bytes) does not decode as PNG or JPEG")
    if img.ndim == 3 and img.shape[2] == 4:
        img = cv2.cvtColor(img, cv2.COLOR_BGRA2BGR)
    if img.dtype == np.uint16:
        img = to_mono8(img if img.ndim == 2 else cv2.cvtColor(img, cv2.COLOR_BGR2GRAY), "mono16")
    elif img.ndim == 3:
        img = cv2.cvtColor(img, cv2.COLOR_BGR2GRAY)
    if img.dtype != np.uint8:
        raise ImageConversionError("unsupported_encoding", f"compressed image decodes to {img.dtype}")
    return np.ascontiguousarray(img)


CAMERA_INFO_MODELS = {"plumb_bob": "radial-tangential", "equidistant": "equidistant"}


def camera_from_camera_info(msg, T_BS=None):
    """``sensor_msgs/CameraInfo`` -> :class:`vilib_ros.camera.CameraModel` (``T_BS`` from the
    node's parameters: CameraInfo carries no extrinsics).

    ``plumb_bob`` (k1 k2 p1 p2 [k3 = 0]) and ``equidistant`` (k1..k4) are supported; an empty
    ``D`` means no distortion. Anything else raises ValueError naming the field.
    """
    from vilib_ros.camera import CameraModel

    K = np.asarray(msg.k, dtype=np.float64).reshape(-1)
    D = np.asarray(msg.d, dtype=np.float64).reshape(-1)
    w, h = int(msg.width), int(msg.height)
    model = str(msg.distortion_model)
    if K.size != 9 or not np.all(np.isfinite(K)) or K[0] <= 0 or K[4] <= 0:
        raise ValueError(f"camera_info: K must hold 9 finite numbers with fx, fy > 0, got {K.tolist()}")
    if w <= 0 or h <= 0:
        raise ValueError(f"camera_info: width x height must be positive, got {w}x{h}")
    if not np.all(np.isfinite(D)):
        raise ValueError(f"camera_info: D has non-finite values: {D.tolist()}")
    if D.size == 0 or not np.any(D):
        ours, coeffs = "none", np.zeros(4)
    elif model in CAMERA_INFO_MODELS:
        ours = CAMERA_INFO_MODELS[model]
        if D.size < 4 or (ours == "radial-tangential" and np.any(D[4:] != 0)) or (ours == "equidistant" and D.size != 4):
            raise ValueError(f"camera_info: distortion_model {model!r} with D = {D.tolist()} is not supported "
                             "(plumb_bob: k1 k2 p1 p2 with k3 = 0; equidistant: k1 k2 k3 k4)")
        coeffs = D[:4]
    else:
        from vilib_ros.nodes.input_guard import truncate

        raise ValueError(f"camera_info: distortion_model {truncate(model, 40)!r} is not supported "
                         f"(one of: {', '.join(CAMERA_INFO_MODELS)})")
    return CameraModel(w, h, float(K[0]), float(K[4]), float(K[2]), float(K[5]), ours, coeffs,
                       np.eye(4) if T_BS is None else np.asarray(T_BS, dtype=np.float64).reshape(4, 4))


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


TRACKS_LAYOUTS = ("vins_mono", "vins_fusion")
#: vins_fusion: the channels VINS-Fusion's ``feature_callback`` reads by index (0 id, 1 camera id,
#: 2-5 u, v, velocity x, y; 6-8 whenever there are more than five channels), one point per
#: observation, right-camera observations as separate points with camera id 1.
FUSION_CHANNELS = ("id_of_point", "camera_id", "u_of_point", "v_of_point", "velocity_x_of_point",
                   "velocity_y_of_point", "score_of_point", "level_of_point", "age_of_point")


class TracksEncoder:
    """TrackFrame -> serialized ``sensor_msgs/PointCloud`` (``bytes`` for ``Publisher.publish``).

    ``vins_mono``: one point per track, channels :data:`VINS_CHANNELS` + :data:`EXTRA_CHANNELS`
    (+ :data:`STEREO_CHANNELS` for stereo frames, NaN where a track has no right match).
    ``vins_fusion``: :data:`FUSION_CHANNELS`; every track as a point with camera id 0, then every
    right-image match as a point with camera id 1 (its right position, right undistorted
    coordinates, velocity 0, the track's score, level and age).
    """

    def __init__(self, layout: str = "vins_mono"):
        from vilib_ros.nodes.cdr import PointCloudEncoder

        if layout not in TRACKS_LAYOUTS:
            raise ValueError(f"tracks_layout must be one of {TRACKS_LAYOUTS}, got {layout!r}")
        self.layout = layout
        self._mono = PointCloudEncoder(VINS_CHANNELS + EXTRA_CHANNELS)
        self._stereo = PointCloudEncoder(VINS_CHANNELS + EXTRA_CHANNELS + STEREO_CHANNELS)
        self._fusion = PointCloudEncoder(FUSION_CHANNELS)

    def columns(self, frame: TrackFrame):
        """(xyz (M, 3), columns (K, M), encoder) of ``frame`` in this layout."""
        n = len(frame)
        xyz = np.ones((n, 3), np.float32)
        xyz[:, :2] = np.asarray(frame.xy).reshape(n, 2)
        uv = np.asarray(frame.uv).reshape(n, 2)
        vel = np.asarray(frame.velocity).reshape(n, 2)
        stereo = frame.uv_right is not None and frame.xy_right is not None
        if self.layout == "vins_mono":
            k = 12 if stereo else 8
            cols = np.empty((k, n), np.float32)
            cols[0], cols[1], cols[2], cols[3], cols[4] = frame.ids, uv[:, 0], uv[:, 1], vel[:, 0], vel[:, 1]
            cols[5], cols[6], cols[7] = frame.score, frame.level, frame.age
            if stereo:
                cols[8:10] = np.asarray(frame.uv_right).reshape(n, 2).T
                cols[10:12] = np.asarray(frame.xy_right).reshape(n, 2).T
            return xyz, cols, (self._stereo if stereo else self._mono)
        right = np.zeros(0, np.int64)
        if stereo:
            xr = np.asarray(frame.xy_right).reshape(n, 2)
            ur = np.asarray(frame.uv_right).reshape(n, 2)
            right = np.flatnonzero(np.isfinite(xr).all(axis=1) & np.isfinite(ur).all(axis=1))
        m = n + right.size
        xyz_all = np.ones((m, 3), np.float32)
        xyz_all[:n] = xyz
        cols = np.zeros((9, m), np.float32)
        cols[0, :n], cols[2, :n], cols[3, :n], cols[4, :n], cols[5, :n] = (frame.ids, uv[:, 0], uv[:, 1],
                                                                           vel[:, 0], vel[:, 1])
        cols[6, :n], cols[7, :n], cols[8, :n] = frame.score, frame.level, frame.age
        if right.size:
            xyz_all[n:, :2] = xr[right]
            cols[0, n:], cols[1, n:] = np.asarray(frame.ids)[right], 1.0
            cols[2, n:], cols[3, n:] = ur[right, 0], ur[right, 1]
            cols[6:9, n:] = cols[6:9, right]
        return xyz_all, cols, self._fusion

    def encode(self, frame: TrackFrame, frame_id: str) -> bytes:
        xyz, cols, enc = self.columns(frame)
        return enc.encode(frame.stamp_ns, frame_id, xyz, cols)


def trackframe_to_pointcloud(frame: TrackFrame, frame_id: str = "cam0", layout: str = "vins_mono"):
    """TrackFrame -> ``sensor_msgs/PointCloud`` message object (tests and tools; the node
    publishes :class:`TracksEncoder`'s bytes, this is the same bytes deserialized)."""
    from rclpy.serialization import deserialize_message
    from sensor_msgs.msg import PointCloud

    return deserialize_message(TracksEncoder(layout).encode(frame, frame_id), PointCloud)


def _raw_from_message(msg):
    from vilib_ros.nodes.cdr import RawPointCloud

    n = len(msg.points)
    xyz = np.array([(p.x, p.y, p.z) for p in msg.points], dtype=np.float32).reshape(n, 3)
    return RawPointCloud(stamp_to_ns(msg.header.stamp), msg.header.frame_id, xyz,
                         {c.name: np.asarray(c.values, dtype=np.float32) for c in msg.channels})


def pointcloud_to_trackframe(msg) -> TrackFrame:
    """Tracks message (a ``PointCloud`` object, or serialized ``bytes`` as a raw subscription
    gives them) in either layout -> TrackFrame (the inverse of :class:`TracksEncoder`).

    Raises ValueError when a needed channel is missing, channel lengths disagree or a point
    is not finite.
    """
    from vilib_ros.nodes.cdr import decode_pointcloud

    raw = decode_pointcloud(msg) if isinstance(msg, (bytes, bytearray, memoryview)) else _raw_from_message(msg)
    ch, xyz32 = raw.channels, raw.xyz
    n = xyz32.shape[0]
    fusion = "camera_id" in ch
    for name in (FUSION_CHANNELS[:6] if fusion else VINS_CHANNELS):
        if name not in ch:
            raise ValueError(f"tracks message lacks channel {name!r}")
    for name, v in ch.items():
        if v.shape[0] != n:
            raise ValueError(f"channel {name!r} has {v.shape[0]} values for {n} points")
    xyz = xyz32.astype(np.float64)
    if n and not np.isfinite(xyz).all():
        raise ValueError("tracks message has non-finite point coordinates")
    z = xyz[:, 2:3]
    xy = xyz[:, :2] / np.where(z == 0, 1.0, z)
    ids = np.rint(ch["id_of_point"]).astype(np.int64)
    u, v = ch["u_of_point"], ch["v_of_point"]
    uv_right = xy_right = None
    if fusion:
        cam = ch["camera_id"]
        lmask = np.rint(cam) == 0
        rows = np.flatnonzero(lmask)
        right = np.flatnonzero(np.rint(cam) == 1)
        L = rows.size
        if right.size:
            uv_right = np.full((L, 2), np.nan, np.float32)
            xy_right = np.full((L, 2), np.nan)
            if L:
                idl = ids[rows]
                order = np.argsort(idl, kind="stable")
                sorted_ids = idl[order]
                idr = ids[right]
                k = np.searchsorted(sorted_ids, idr)
                np.minimum(k, L - 1, out=k)
                ok = sorted_ids[k] == idr
                dst, src = order[k[ok]], right[ok]
                uv_right[dst, 0], uv_right[dst, 1] = u[src], v[src]
                xy_right[dst] = xy[src]
    else:
        rows = slice(None)
        if all(s in ch for s in STEREO_CHANNELS):
            uv_right = np.stack([ch["u_right_of_point"], ch["v_right_of_point"]], axis=1).astype(np.float32)
            xy_right = np.stack([ch["x_right_of_point"], ch["y_right_of_point"]], axis=1).astype(np.float64)
    m = ids[rows].shape[0]
    uv = np.empty((m, 2), np.float32)
    uv[:, 0], uv[:, 1] = u[rows], v[rows]
    vel = np.empty((m, 2), np.float64)
    vel[:, 0], vel[:, 1] = ch["velocity_x_of_point"][rows], ch["velocity_y_of_point"][rows]

    def col(name, dtype, default=0):
        return ch[name][rows].astype(dtype) if name in ch else np.full(m, default, dtype)

    return TrackFrame(stamp_ns=raw.stamp_ns, ids=ids[rows], uv=uv, xy=xy[rows], velocity=vel,
                      score=col("score_of_point", np.float32), level=col("level_of_point", np.int32),
                      age=col("age_of_point", np.int32), uv_right=uv_right, xy_right=xy_right)


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


#: draw_tracks: a circle of radius 3 px as a closed 12-gon, in 1/16 px (``cv2.polylines``' shift 4)
_CIRCLE_16 = np.round(3 * 16 * np.column_stack([np.cos(np.arange(12) * np.pi / 6),
                                                np.sin(np.arange(12) * np.pi / 6)])).astype(np.int32)
_AGE_BUCKETS = 8


def draw_tracks(image_u8: np.ndarray, frame: TrackFrame, max_age_color: int = 20) -> np.ndarray:
    """BGR debug image: each track a circle of radius 3 px coloured by its age (blue new -> red
    old, in 8 steps); tracks with a non-finite position are left out. One OpenCV call per colour
    (OpenCV drops the GIL while it draws), no Python loop over the tracks."""
    import cv2

    out = cv2.cvtColor(image_u8, cv2.COLOR_GRAY2BGR) if image_u8.ndim == 2 else image_u8.copy()
    n = len(frame)
    if n == 0:
        return out
    uv = np.asarray(frame.uv, dtype=np.float64).reshape(n, 2)
    age = np.asarray(frame.age).reshape(n)
    ok = np.isfinite(uv).all(axis=1) & (np.abs(uv) < 1e6).all(axis=1)
    bucket = np.rint(np.clip(age[ok] / float(max_age_color), 0.0, 1.0) * (_AGE_BUCKETS - 1)).astype(np.int64)
    poly = np.round(uv[ok] * 16).astype(np.int32)[:, None, :] + _CIRCLE_16[None]     # (n, 12, 2)
    for b in np.unique(bucket).tolist():
        a = b / (_AGE_BUCKETS - 1)
        cv2.polylines(out, list(poly[bucket == b]), True, (int(255 * (1 - a)), 0, int(255 * a)), 1,
                      cv2.LINE_AA, 4)
    return out
