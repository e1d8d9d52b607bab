"""CDR (XCDR1, little endian) of the two messages on the frontend's hot path, with NumPy.

The frontend node receives images and publishes tracks at camera rate; going through the
generated Python message classes copies every image (``deserialize`` copies the pixels into an
``array.array``) and builds one ``Point32`` object per feature of a ``sensor_msgs/PointCloud``
in Python, then converts them back one by one in C. Both messages are plain in CDR: every field
after the strings is 4-byte aligned, so

* :func:`encode_pointcloud` writes a whole tracks message from arrays (no Python object per
  point) as ``bytes`` for ``Publisher.publish`` (rclpy publishes ``bytes`` as a serialized
  message), and :func:`decode_pointcloud` reads one back into arrays;
* :func:`encode_image` writes a ``sensor_msgs/Image`` from an array (the player's images);
* :func:`decode_image` reads a serialized ``sensor_msgs/Image`` (a ``raw=True`` subscription)
  into a :class:`RawImage` whose ``data`` is a zero-copy view of the received buffer;
  :func:`decode_imu` the stamp, angular velocity and acceleration of a ``sensor_msgs/Imu``
  (without building the message object, 10-50 times per frame);
* :func:`encode_path` writes the backend's ``nav_msgs/Path`` from arrays of stamps and poses;
  :func:`encode_odometry`, :func:`encode_tf` and :func:`encode_header` its per-frame odometry,
  ``odom -> base`` transform and ``backend_processed``.

The byte layout is checked against rclpy's own serializer in ``test/test_conversions.py``.
No rclpy here.
"""
from __future__ import annotations

import struct
from dataclasses import dataclass

import numpy as np

ENCAPSULATION = b"\x00\x01\x00\x00"   # CDR_LE, options 0
_U32 = struct.Struct("<I")
_TIME = struct.Struct("<iI")


class CdrError(ValueError):
    """A serialized message that cannot be read (truncated or inconsistent lengths)."""


def _string(s: str) -> bytes:
    """CDR string: uint32 length (with the NUL), the bytes, NUL (no padding)."""
    b = s.encode("utf-8")
    return _U32.pack(len(b) + 1) + b + b"\x00"


def _pad(nbytes: int) -> bytes:
    return b"\x00" * (-nbytes % 4)


def _header(stamp_ns: int, frame_id: str) -> bytes:
    stamp_ns = int(stamp_ns)
    head = ENCAPSULATION + _TIME.pack(stamp_ns // 1_000_000_000, stamp_ns % 1_000_000_000) + _string(frame_id)
    return head + _pad(len(head) - 4)


class PointCloudEncoder:
    """Serialized ``sensor_msgs/PointCloud`` from arrays; the channel names are encoded once.

    ``encode(stamp_ns, frame_id, xyz, columns)``: ``xyz`` (N, 3) and ``columns`` (K, N),
    anything convertible to float32; K must equal ``len(names)``.
    """

    def __init__(self, names):
        self.names = tuple(names)
        self._name_bytes = []
        for nm in self.names:
            b = _string(nm)
            self._name_bytes.append(b + _pad(len(b)))
        self._k = _U32.pack(len(self.names))
        self._frame_cache: tuple[str, bytes] = ("\x00", b"")

    def encode(self, stamp_ns: int, frame_id: str, xyz, columns) -> bytes:
        xyz = np.ascontiguousarray(xyz, dtype="<f4")
        n = int(xyz.shape[0])
        if xyz.shape != (n, 3):
            raise ValueError(f"xyz must be (N, 3), got {xyz.shape}")
        cols = np.ascontiguousarray(columns, dtype="<f4").reshape(len(self.names), n)
        if self._frame_cache[0] != frame_id:
            b = _string(frame_id)
            self._frame_cache = (frame_id, b + _pad(8 + len(b)))
        stamp_ns = int(stamp_ns)
        nb = _U32.pack(n)
        parts = [ENCAPSULATION, _TIME.pack(stamp_ns // 1_000_000_000, stamp_ns % 1_000_000_000),
                 self._frame_cache[1], nb, xyz.data, self._k]
        for name, col in zip(self._name_bytes, cols):
            parts += (name, nb, col.data)
        return b"".join(parts)


def encode_image(stamp_ns: int, frame_id: str, img: np.ndarray, encoding: str) -> bytes:
    """Serialized ``sensor_msgs/Image`` of a C-contiguous ``img`` (rows of ``img.strides[0]``
    bytes) for ``Publisher.publish``: one copy of the pixels, no message object (rclpy's
    serializer would be the player's main cost per frame)."""
    img = np.ascontiguousarray(img)
    if img.dtype.byteorder == ">":
        raise ValueError("big-endian pixel data is not supported")
    head = _header(stamp_ns, frame_id) + struct.pack("<II", int(img.shape[0]), int(img.shape[1])) + _string(encoding)
    head += b"\x00"                                # is_bigendian
    head += _pad(len(head) - 4)
    # the pixels joined from the array's buffer: one copy (img.tobytes() then join would copy twice)
    return b"".join((head, struct.pack("<II", int(img.strides[0]), img.nbytes), img.data))


def _pad8(head: bytes) -> bytes:
    """``head`` (encapsulation included) padded so that the next field is 8-byte aligned in CDR."""
    return head + b"\x00" * (-(len(head) - 4) % 8)


_ZERO36 = bytes(36 * 8)


def encode_odometry(stamp_ns: int, frame_id: str, child_frame_id: str, pose7, twist6,
                    pose_covariance=None, twist_covariance=None) -> bytes:
    """Serialized ``nav_msgs/Odometry``: ``pose7`` x y z qx qy qz qw, ``twist6`` linear then
    angular, covariances (6x6, row-major) or zeros, without building a message object (the backend
    node publishes one per frame)."""
    head = _pad8(_header(stamp_ns, frame_id) + _string(child_frame_id))
    cp = _ZERO36 if pose_covariance is None else np.ascontiguousarray(pose_covariance, "<f8").reshape(36).tobytes()
    ct = _ZERO36 if twist_covariance is None else np.ascontiguousarray(twist_covariance, "<f8").reshape(36).tobytes()
    return b"".join((head, np.asarray(pose7, "<f8").reshape(7).tobytes(), cp,
                     np.asarray(twist6, "<f8").reshape(6).tobytes(), ct))


def encode_tf(stamp_ns: int, frame_id: str, child_frame_id: str, pose7) -> bytes:
    """Serialized ``tf2_msgs/TFMessage`` holding one ``TransformStamped`` (``pose7`` x y z qx qy qz qw)."""
    stamp_ns = int(stamp_ns)
    head = ENCAPSULATION + _U32.pack(1) + _TIME.pack(stamp_ns // 1_000_000_000, stamp_ns % 1_000_000_000)
    fid = _string(frame_id)
    head = _pad8(head + fid + _pad(len(fid)) + _string(child_frame_id))
    return head + np.asarray(pose7, "<f8").reshape(7).tobytes()


_IMU_BODY = struct.Struct("<4d9d3d9d3d9d")    # orientation, its covariance, gyro, cov, accel, cov
_NO_COV = (0.0,) * 9
_NO_ORIENTATION = (0.0, 0.0, 0.0, 1.0, -1.0) + (0.0,) * 8   # identity, covariance[0] = -1 (REP 145)


def encode_imu(stamp_ns: int, frame_id: str, gyro, acc) -> bytes:
    """Serialized ``sensor_msgs/Imu`` as :func:`vilib_ros.nodes.conversions.arrays_to_imu` builds it
    (no orientation: covariance[0] = -1, other covariances 0), without the message object and
    rclpy's serializer (the player publishes 10 per stereo frame)."""
    gx, gy, gz = gyro
    ax, ay, az = acc
    return _pad8(_header(stamp_ns, frame_id)) + _IMU_BODY.pack(
        *_NO_ORIENTATION, float(gx), float(gy), float(gz), *_NO_COV, float(ax), float(ay), float(az), *_NO_COV)


def encode_header(stamp_ns: int, frame_id: str = "") -> bytes:
    """Serialized ``std_msgs/Header``."""
    return _header(stamp_ns, frame_id)


def encode_pointcloud(stamp_ns: int, frame_id: str, xyz, names, columns) -> bytes:
    """One-off :meth:`PointCloudEncoder.encode` (tests, tools)."""
    return PointCloudEncoder(names).encode(stamp_ns, frame_id, xyz, columns)


def _pose_stamped_dtype(start: int, nbytes_frame_id: int) -> np.dtype:
    """``geometry_msgs/PoseStamped`` with a frame id of ``nbytes_frame_id`` bytes (NUL included),
    starting at payload offset ``start``: the pose's doubles are 8-aligned from the payload start."""
    pose = -(-(start + 12 + nbytes_frame_id) // 8) * 8 - start
    return np.dtype({"names": ["sec", "nanosec", "len", "frame_id", "pose"],
                     "formats": ["<i4", "<u4", "<u4", f"S{nbytes_frame_id}", ("<f8", 7)],
                     "offsets": [0, 4, 8, 12, pose], "itemsize": pose + 56})


def encode_path(stamp_ns: int, frame_id: str, stamps_ns, poses) -> bytes:
    """Serialized ``nav_msgs/Path`` of N poses in ``frame_id`` (every ``PoseStamped`` has it):
    ``stamps_ns`` (N,), ``poses`` (N, 7) as x, y, z, qx, qy, qz, qw. No Python object per pose
    (the node republishes a growing path; through the message classes that is O(N) Python work)."""
    t = np.asarray(stamps_ns, dtype=np.int64).reshape(-1)
    P = np.asarray(poses, dtype=np.float64).reshape(len(t), 7)
    head = _header(stamp_ns, frame_id) + _U32.pack(len(t))
    if not len(t):
        return head
    fid = frame_id.encode("utf-8")
    sec, nsec = t // 1_000_000_000, t % 1_000_000_000
    parts = [head]
    start = len(head) - 4           # payload offset of the first PoseStamped (4-aligned)
    for rows in (slice(0, 1), slice(1, None)):
        dt = _pose_stamped_dtype(start, len(fid) + 1)
        n = len(t[rows])
        a = np.zeros(n, dtype=dt)
        a["sec"], a["nanosec"], a["len"], a["frame_id"], a["pose"] = sec[rows], nsec[rows], len(fid) + 1, fid, P[rows]
        parts.append(a.tobytes())
        start += dt.itemsize       # the rest start 8-aligned: one layout for all of them
    return b"".join(parts)


class _Reader:
    __slots__ = ("buf", "pos")

    def __init__(self, buf):
        self.buf = memoryview(buf).cast("B")
        if len(self.buf) < 4 or bytes(self.buf[:2]) != b"\x00\x01":
            raise CdrError("not a little-endian CDR message (encapsulation "
                           f"{bytes(self.buf[:4]).hex() or 'missing'})")
        self.pos = 4

    def _need(self, n):
        if self.pos + n > len(self.buf):
            raise CdrError(f"message truncated at byte {self.pos} (needs {n} more of {len(self.buf)})")

    def align(self, a):
        self.pos += -(self.pos - 4) % a

    def u32(self) -> int:
        self.align(4)
        self._need(4)
        v = _U32.unpack_from(self.buf, self.pos)[0]
        self.pos += 4
        return v

    def u8(self) -> int:
        self._need(1)
        v = self.buf[self.pos]
        self.pos += 1
        return v

    def time_ns(self) -> int:
        self.align(4)
        self._need(8)
        sec, nsec = _TIME.unpack_from(self.buf, self.pos)
        self.pos += 8
        return sec * 1_000_000_000 + nsec

    def string(self, limit: int = 1 << 20) -> str:
        n = self.u32()
        if n > limit:
            raise CdrError(f"string of {n} bytes (more than {limit})")
        self._need(n)
        s = bytes(self.buf[self.pos: self.pos + max(0, n - 1)]).decode("utf-8", "replace")
        self.pos += n
        return s

    def array(self, dtype, count: int):
        dt = np.dtype(dtype)
        self.align(min(dt.itemsize, 8))
        nbytes = dt.itemsize * count
        self._need(nbytes)
        a = np.frombuffer(self.buf, dtype=dt, count=count, offset=self.pos)
        self.pos += nbytes
        return a


@dataclass
class RawImage:
    """The fields of a ``sensor_msgs/Image``; ``data`` views the received buffer (read-only)."""

    stamp_ns: int
    frame_id: str
    height: int
    width: int
    encoding: str
    is_bigendian: int
    step: int
    data: np.ndarray


def decode_image(buf) -> RawImage:
    """Serialized ``sensor_msgs/Image`` -> :class:`RawImage` (no copy of the pixels)."""
    r = _Reader(buf)
    stamp = r.time_ns()
    frame_id = r.string(4096)
    height, width = r.u32(), r.u32()
    encoding = r.string(4096)
    big = r.u8()
    step = r.u32()
    n = r.u32()
    data = r.array(np.uint8, n)
    return RawImage(stamp, frame_id, height, width, encoding, big, step, data)


def header_stamp_ns(buf) -> int:
    """The ``header.stamp`` of any serialized message that starts with a ``std_msgs/Header``."""
    return _Reader(buf).time_ns()


_IMU_AT = struct.Struct("<3d")


_IMU_HEAD = struct.Struct("<4xiII")     # encapsulation, sec, nanosec, frame id length


def decode_imu(buf) -> tuple[int, tuple, tuple]:
    """Serialized ``sensor_msgs/Imu`` -> (t_ns, (wx, wy, wz), (ax, ay, az)) without building the
    message: the frame id's length fixes every later offset, so the fields are read where they are
    (no reader object per message, at 10-50 samples per frame)."""
    n = len(buf)
    if n < 16 or buf[0] != 0 or buf[1] != 1:
        raise CdrError("not a little-endian CDR message (encapsulation "
                       f"{bytes(buf[:4]).hex() or 'missing'})")
    sec, nsec, slen = _IMU_HEAD.unpack_from(buf, 0)
    if slen > 4096:
        raise CdrError(f"string of {slen} bytes (more than 4096)")
    base = 4 + ((12 + slen + 7) & ~7)      # orientation (4 doubles) + its covariance (9), 8-aligned
    if base + 25 * 8 + 24 > n:
        raise CdrError(f"message truncated at byte {n} (needs {base + 25 * 8 + 24})")
    return sec * 1_000_000_000 + nsec, _IMU_AT.unpack_from(buf, base + 13 * 8), _IMU_AT.unpack_from(buf, base + 25 * 8)


def decode_imu_batch(bufs) -> tuple[list, list] | None:
    """Serialized ``sensor_msgs/Imu`` messages of one size -> (stamps in ns, rows of gyro xyz + acc xyz)
    with one ``struct.iter_unpack`` over the joined bytes (a burst of samples waiting for the node:
    one C call for the burst, no NumPy call, whose fixed cost per call is what a burst of 10 is
    made of). None where they cannot all be read that way (sizes or frame ids differ, one is not
    little-endian CDR or is truncated): then :func:`decode_imu` them one by one, which says what
    is wrong with which."""
    k = len(bufs)
    if k == 0:
        return [], []
    n = len(bufs[0])
    if n < 16 or any(len(b) != n for b in bufs):
        return None
    slen = _U32.unpack_from(bufs[0], 12)[0]
    base = 4 + ((12 + slen + 7) & ~7)
    if slen > 4096 or base + 25 * 8 + 24 > n:
        return None
    st = _IMU_STRUCTS.get((n, base))
    if st is None:       # encapsulation, sec, nanosec, frame id length, gyro at base + 104, acc at base + 200
        st = _IMU_STRUCTS[(n, base)] = struct.Struct(
            f"<H2xiII{base + 13 * 8 - 16}x3d{9 * 8}x3d{n - (base + 25 * 8 + 24)}x")
    t, rows = [], []
    for enc, sec, nsec, sl, gx, gy, gz, ax, ay, az in st.iter_unpack(b"".join(bufs)):
        if enc != 0x0100 or sl != slen:     # bytes 00 01: little-endian CDR; every frame id as long
            return None
        t.append(sec * 1_000_000_000 + nsec)
        rows.append((gx, gy, gz, ax, ay, az))
    return t, rows


#: structs of serialized Imu messages, per (size, offset of the orientation)
_IMU_STRUCTS: dict = {}


@dataclass
class RawPointCloud:
    stamp_ns: int
    frame_id: str
    xyz: np.ndarray                      # (N, 3) float32, read-only view
    channels: dict[str, np.ndarray]      # name -> (len,) float32 view, in message order


def decode_pointcloud(buf) -> RawPointCloud:
    """Serialized ``sensor_msgs/PointCloud`` -> arrays (views of ``buf``)."""
    r = _Reader(buf)
    stamp = r.time_ns()
    frame_id = r.string(4096)
    n = r.u32()
    xyz = r.array("<f4", 3 * n).reshape(n, 3)
    k = r.u32()
    if k > 4096:
        raise CdrError(f"{k} channels")
    channels = {}
    for _ in range(k):
        name = r.string(4096)
        m = r.u32()
        channels[name] = r.array("<f4", m)
    return RawPointCloud(stamp, frame_id, xyz, channels)
