"""ROS 1 / ROS 2 bags through ``rosbags`` (pure Python; no ROS install needed).

* :class:`BagDataset` reads the official EuRoC ROS 1 ``.bag`` and ROS 2 bags (sqlite3 or
  mcap): ``sensor_msgs/Image`` on ``/cam{i}/image_raw`` (mono8; mono16, rgb8, bgr8, rgba8,
  bgra8 converted), ``sensor_msgs/Imu`` on ``/imu0``. Calibration comes from
  ``sensor_msgs/CameraInfo`` on ``/cam{i}/camera_info`` and extrinsics ``T_BS`` from
  ``/tf_static`` (parent ``imu0``/``body``, child ``cam{i}``) where the bag has them,
  else the EuRoC calibration (:func:`vilib_ros.camera.euroc_cam0`, ``euroc_cam1``).
  Ground truth: ``geometry_msgs/PoseStamped`` / ``TransformStamped`` / ``nav_msgs/Odometry``
  on a topic containing ``groundtruth``; failing that the official EuRoC Vicon topic
  ``/vicon/firefly_sbx/firefly_sbx`` (note: the Vicon marker pose, not the IMU pose).
  Stamps are the message header stamps (bag time where a stream's header stamps are all zero);
  images are read lazily by bag time.
* A bag whose index is damaged or missing (cut short by a full disk or a killed recorder; a
  ROS 2 bag folder without ``metadata.yaml``) is read front to back by
  :class:`~.bag_salvage.SalvageReader`: what is readable is replayed, and ``warnings`` says
  where the reading stopped. A file that is no bag at all is a :class:`~.common.DatasetError`.
Writing bags: :mod:`vilib_ros.datasets.bag_writer`.
"""
from __future__ import annotations

import logging
import re
from pathlib import Path

import numpy as np

from ..camera import CameraModel, default_camera
from .common import EUROC_IMU_NOISE, Dataset, DatasetError, FrameError, Groundtruth

log = logging.getLogger(__name__)

IMAGE_TOPIC_RE = re.compile(r"^/?cam(\d+)/image_raw$")
IMU_TOPIC = "/imu0"
GT_TOPIC = "/groundtruth/pose"
EUROC_VICON_TOPIC = "/vicon/firefly_sbx/firefly_sbx"


def is_bag(path: str | Path) -> bool:
    """A ``.bag`` file, a ROS 2 bag folder (``metadata.yaml`` or a ``.db3`` / ``.mcap`` storage
    file), or a ``.db3`` / ``.mcap`` file."""
    from .bag_salvage import storage_file

    p = Path(path)
    if p.is_file() and p.suffix in (".bag", ".db3", ".mcap"):
        return True
    return p.is_dir() and ((p / "metadata.yaml").is_file() or storage_file(p) is not None)


def _stamp_ns(header) -> int:
    return int(header.stamp.sec) * 1_000_000_000 + int(header.stamp.nanosec)


def _field(msg, *names):
    for n in names:
        if hasattr(msg, n):
            return getattr(msg, n)
    raise AttributeError(names[0])


def _quat_to_rot(q_xyzw) -> np.ndarray:
    x, y, z, w = (float(v) for v in q_xyzw)
    n = np.sqrt(x * x + y * y + z * z + w * w)
    x, y, z, w = x / n, y / n, z / n, w / n
    return np.array([
        [1 - 2 * (y * y + z * z), 2 * (x * y - z * w), 2 * (x * z + y * w)],
        [2 * (x * y + z * w), 1 - 2 * (x * x + z * z), 2 * (y * z - x * w)],
        [2 * (x * z - y * w), 2 * (y * z + x * w), 1 - 2 * (x * x + y * y)]])


def image_msg_to_array(msg, where: str = "") -> np.ndarray:
    """sensor_msgs/Image -> uint8 HxW (grey)."""
    import cv2

    h, w, step = int(msg.height), int(msg.width), int(msg.step)
    enc = str(msg.encoding).lower()
    buf = np.asarray(msg.data, dtype=np.uint8)
    if buf.size < h * step:
        raise ValueError(f"{where}: image data has {buf.size} bytes, expected {h * step}")
    rows = buf[: h * step].reshape(h, step)
    if enc in ("mono8", "8uc1"):
        return np.ascontiguousarray(rows[:, :w])
    if enc in ("mono16", "16uc1"):
        dt = ">u2" if msg.is_bigendian else "<u2"
        img16 = np.ascontiguousarray(rows[:, : 2 * w]).view(dt)
        return (img16 >> 8).astype(np.uint8)
    chans = {"rgb8": (3, cv2.COLOR_RGB2GRAY), "bgr8": (3, cv2.COLOR_BGR2GRAY),
             "rgba8": (4, cv2.COLOR_RGBA2GRAY), "bgra8": (4, cv2.COLOR_BGRA2GRAY)}
    if enc in chans:
        c, code = chans[enc]
        return cv2.cvtColor(np.ascontiguousarray(rows[:, : c * w]).reshape(h, w, c), code)
    raise ValueError(f"{where}: unsupported image encoding {msg.encoding!r}")


def camera_from_info(msg, T_BS: np.ndarray) -> CameraModel:
    K = np.asarray(_field(msg, "k", "K"), float).reshape(3, 3)
    D = np.asarray(_field(msg, "d", "D"), float).reshape(-1)
    model = str(msg.distortion_model).lower()
    if model in ("plumb_bob", "rational_polynomial", "radial-tangential", "radtan"):
        dm, dist = "radial-tangential", np.concatenate([D, np.zeros(4)])[:4]
    elif model in ("equidistant", "fisheye"):
        dm, dist = "equidistant", np.concatenate([D, np.zeros(4)])[:4]
    else:
        dm, dist = "none", np.zeros(4)
    if dm != "none" and not np.any(dist):
        dm = "radial-tangential"
    return CameraModel(int(msg.width), int(msg.height), float(K[0, 0]), float(K[1, 1]), float(K[0, 2]),
                       float(K[1, 2]), dm, dist, T_BS)


class BagDataset(Dataset):
    """A ROS 1 ``.bag`` or ROS 2 bag opened with ``rosbags.highlevel.AnyReader``."""

    def __init__(self, path: str | Path):
        p = Path(path)
        if not p.exists():
            raise FileNotFoundError(f"bag not found: {p}")
        if p.is_file() and p.suffix in (".db3", ".mcap") and (p.parent / "metadata.yaml").is_file():
            p = p.parent
        self.path = p
        self.name = p.stem if p.is_file() else p.name
        self.stats = {"imu_non_monotonic_dropped": 0, "images_non_monotonic_dropped": 0}
        self.warnings: list[str] = []
        self._reader = self._open_reader(p)
        try:
            self._scan()
        except DatasetError:
            self._reader.close()
            raise
        except Exception as exc:  # noqa: BLE001 - the index opened, but the data behind it is damaged
            from .bag_salvage import SalvageReader

            self._reader.close()
            if isinstance(self._reader, SalvageReader):
                raise DatasetError(f"cannot read bag {p}: {exc}") from None
            self._reader = self._salvage(p, f"reading it failed midway ({type(exc).__name__}: {exc})")
            self.stats = {"imu_non_monotonic_dropped": 0, "images_non_monotonic_dropped": 0, "bag_salvaged": 1}
            try:
                self._scan()
            except Exception:
                self._reader.close()
                raise
        if not len(self._stamps[0]):
            self._reader.close()
            raise DatasetError(f"{p}: no readable cam0 image in the bag")
        for w in self.warnings:
            log.warning("%s", w)

    def _open_reader(self, p: Path):
        """``rosbags``' indexed reader; for a damaged or missing index the front-to-back one."""
        from rosbags.highlevel import AnyReader
        from rosbags.typesys import Stores, get_typestore

        why = None
        if p.is_dir() and not (p / "metadata.yaml").is_file():
            why = "no metadata.yaml"
        elif p.suffix in (".db3", ".mcap"):
            why = "a storage file without its bag folder's metadata.yaml"
        else:
            try:
                reader = AnyReader([p], default_typestore=get_typestore(Stores.ROS2_JAZZY))
                reader.open()
                return reader
            except Exception as exc:  # noqa: BLE001 - rosbags raises its own error types
                why = f"its index is damaged or missing ({exc})"
        return self._salvage(p, why)

    def _salvage(self, p: Path, why: str):
        from .bag_salvage import SalvageReader

        try:
            reader = SalvageReader(p)
        except (ValueError, OSError) as exc:
            raise DatasetError(f"cannot open bag {p}: {why}; reading it front to back failed too: {exc}") from None
        self.warnings.append(f"{p}: {why}: read front to back" +
                             (f"; {reader.stopped}: the rest of the bag is not replayed" if reader.stopped else ""))
        self.stats["bag_salvaged"] = 1
        return reader

    def _scan(self) -> None:
        r = self._reader
        conns = r.connections
        cam_conns: dict[int, list] = {}
        for c in conns:
            m = IMAGE_TOPIC_RE.match(c.topic)
            if m and c.msgtype == "sensor_msgs/msg/Image":
                cam_conns.setdefault(int(m.group(1)), []).append(c)
        if not cam_conns:
            imgs = sorted({c.topic for c in conns if c.msgtype == "sensor_msgs/msg/Image"})
            for i, t in enumerate(imgs):
                cam_conns[i] = [c for c in conns if c.topic == t]
        if 0 not in cam_conns:
            raise DatasetError(f"{self.path}: no readable sensor_msgs/Image topic /cam0/image_raw in the bag")
        ncam = 0
        while ncam in cam_conns:
            ncam += 1
        imu_conns = [c for c in conns if c.topic == IMU_TOPIC and c.msgtype == "sensor_msgs/msg/Imu"]
        if not imu_conns:
            imu_conns = [c for c in conns if c.msgtype == "sensor_msgs/msg/Imu"][:1]
        info_conns = {i: [c for c in conns if c.topic == f"/cam{i}/camera_info"
                          and c.msgtype == "sensor_msgs/msg/CameraInfo"] for i in range(ncam)}
        tf_conns = [c for c in conns if c.topic == "/tf_static" and c.msgtype == "tf2_msgs/msg/TFMessage"]
        gt_types = ("geometry_msgs/msg/PoseStamped", "geometry_msgs/msg/TransformStamped", "nav_msgs/msg/Odometry")
        gt_conns = [c for c in conns if "groundtruth" in c.topic and c.msgtype in gt_types]
        if not gt_conns:
            gt_conns = [c for c in conns if c.topic == EUROC_VICON_TOPIC and c.msgtype in gt_types]
            if gt_conns:
                log.info("%s: ground truth from the Vicon topic (marker pose, not the IMU pose)", self.path)
        gt_conns = [c for c in gt_conns if c.topic == gt_conns[0].topic] if gt_conns else []

        cam_of = {id(c): i for i, cl in cam_conns.items() if i < ncam for c in cl}
        want = [c for i in range(ncam) for c in cam_conns[i]] + imu_conns + gt_conns + tf_conns
        want += [c for i in range(ncam) for c in info_conns[i]]
        kind = {}
        for c in imu_conns:
            kind[id(c)] = "imu"
        for c in gt_conns:
            kind[id(c)] = "gt"
        for c in tf_conns:
            kind[id(c)] = "tf"
        info_of = {id(c): i for i in range(ncam) for c in info_conns[i]}

        img_t: list[list[int]] = [[] for _ in range(ncam)]
        img_loc: list[list[tuple]] = [[] for _ in range(ncam)]
        img_size: list[tuple | None] = [None] * ncam
        imu_t, imu_v, imu_bag_t = [], [], []
        gt_t, gt_p, gt_q = [], [], []
        infos: dict[int, object] = {}
        tfs: dict[str, np.ndarray] = {}
        unreadable = 0
        for conn, bag_t, raw in self._reader.messages(connections=want):
            k = id(conn)
            try:
                msg = self._reader.deserialize(raw, conn.msgtype)
            except Exception:  # noqa: BLE001 - a damaged message is skipped and counted
                unreadable += 1
                continue
            if k in cam_of:
                i = cam_of[k]
                img_t[i].append(_stamp_ns(msg.header))
                img_loc[i].append((conn, bag_t, img_t[i][-1]))
                if img_size[i] is None:
                    img_size[i] = (int(msg.width), int(msg.height))
                continue
            kd = kind.get(k)
            if kd == "imu":
                a, w = msg.linear_acceleration, msg.angular_velocity
                imu_t.append(_stamp_ns(msg.header))
                imu_bag_t.append(bag_t)
                imu_v.append((w.x, w.y, w.z, a.x, a.y, a.z))
            elif kd == "gt":
                if conn.msgtype == "geometry_msgs/msg/PoseStamped":
                    pos, ori = msg.pose.position, msg.pose.orientation
                elif conn.msgtype == "geometry_msgs/msg/TransformStamped":
                    pos, ori = msg.transform.translation, msg.transform.rotation
                else:
                    pos, ori = msg.pose.pose.position, msg.pose.pose.orientation
                gt_t.append(_stamp_ns(msg.header))
                gt_p.append((pos.x, pos.y, pos.z))
                gt_q.append((ori.x, ori.y, ori.z, ori.w))
            elif kd == "tf":
                for tr in msg.transforms:
                    if tr.header.frame_id.lstrip("/") in ("imu0", "imu", "body", "imu4"):
                        T = np.eye(4)
                        r = tr.transform.rotation
                        T[:3, :3] = _quat_to_rot((r.x, r.y, r.z, r.w))
                        tt = tr.transform.translation
                        T[:3, 3] = (tt.x, tt.y, tt.z)
                        tfs[tr.child_frame_id.lstrip("/")] = T
            elif k in info_of:
                infos.setdefault(info_of[k], msg)

        if unreadable:
            self.stats["messages_unreadable"] = unreadable
            self.warnings.append(f"{self.path}: skipped {unreadable} message(s) that cannot be deserialized")
        self.cameras = []
        self._stamps, self._locs = [], []
        for i in range(ncam):
            t = np.asarray(img_t[i], dtype=np.int64)
            if t.size > 1 and not np.any(t):
                log.warning("%s: cam%d images have zero header stamps: using bag time", self.path, i)
                self.stats["header_stamps_missing"] = self.stats.get("header_stamps_missing", 0) + t.size
                t = np.asarray([lc[1] for lc in img_loc[i]], dtype=np.int64)
            order = np.argsort(t, kind="stable")
            t = t[order]
            locs = [img_loc[i][j] for j in order]
            keep = np.concatenate([[True], np.diff(t) > 0]) if t.size else np.zeros(0, bool)
            dropped = int(np.count_nonzero(~keep))
            if dropped:
                log.warning("%s: cam%d: dropped %d images with repeated stamps", self.path, i, dropped)
                self.stats["images_non_monotonic_dropped"] += dropped
            self._stamps.append(t[keep])
            self._locs.append([lc for lc, kp in zip(locs, keep) if kp])
            T_BS = tfs.get(f"cam{i}")
            if i in infos:
                cam = camera_from_info(infos[i], T_BS if T_BS is not None else default_camera(i).T_BS)
            else:
                cam = default_camera(i)
                if T_BS is not None:
                    cam.T_BS = T_BS
                if img_size[i] is not None and img_size[i] != (cam.width, cam.height):
                    raise ValueError(f"{self.path}: cam{i} images are {img_size[i][0]}x{img_size[i][1]} and the "
                                     "bag has no /cam{i}/camera_info; the EuRoC default calibration does not fit")
            self.cameras.append(cam)

        t = np.asarray(imu_t, dtype=np.int64)
        if t.size > 1 and not np.any(t):
            log.warning("%s: IMU messages have zero header stamps: using bag time", self.path)
            self.stats["header_stamps_missing"] = self.stats.get("header_stamps_missing", 0) + t.size
            t = np.asarray(imu_bag_t, dtype=np.int64)
        v = np.asarray(imu_v, dtype=np.float64).reshape(-1, 6)
        order = np.argsort(t, kind="stable")
        t, v = t[order], v[order]
        keep = np.concatenate([[True], np.diff(t) > 0]) if t.size else np.zeros(0, bool)
        if np.count_nonzero(~keep):
            self.stats["imu_non_monotonic_dropped"] = int(np.count_nonzero(~keep))
            log.warning("%s: dropped %d IMU samples with repeated stamps", self.path, np.count_nonzero(~keep))
        self.imu_stamps, self.imu_data = t[keep], v[keep]
        self.imu_noise = dict(EUROC_IMU_NOISE)
        if gt_t:
            t = np.asarray(gt_t, dtype=np.int64)
            order = np.argsort(t, kind="stable")
            self.groundtruth = Groundtruth(t[order], np.asarray(gt_p, float)[order], np.asarray(gt_q, float)[order])
        else:
            self.groundtruth = None

    def image_stamps(self, cam: int = 0) -> np.ndarray:
        self._check_cam(cam)
        return self._stamps[cam]

    def load_image(self, cam: int, index: int) -> np.ndarray:
        self._check_cam(cam)
        n = len(self._locs[cam])
        if not -n <= index < n:
            raise IndexError(f"{self.name}: cam{cam} image index {index} out of range ({n} images)")
        conn, bag_t, stamp = self._locs[cam][index]
        for c, _, raw in self._reader.messages(connections=[conn], start=bag_t, stop=bag_t + 1):
            try:
                msg = self._reader.deserialize(raw, c.msgtype)
            except Exception as exc:  # noqa: BLE001
                raise FrameError("unreadable_message", f"{self.path}: cam{cam} image {index}: {exc}") from None
            if _stamp_ns(msg.header) == stamp:
                try:
                    img = image_msg_to_array(msg, f"{self.path} cam{cam} image {index}")
                except ValueError as exc:
                    raise FrameError("unsupported_format", str(exc)) from None
                cam_m = self.cameras[cam]
                if img.shape != (cam_m.height, cam_m.width):
                    raise FrameError("size_mismatch", f"{self.path}: cam{cam} image {index} is "
                                                      f"{img.shape[1]}x{img.shape[0]}, calibration says "
                                                      f"{cam_m.width}x{cam_m.height}")
                return img
        raise FrameError("unreadable_message", f"{self.path}: cam{cam} image {index} (header stamp {stamp}) "
                                               f"not found at bag time {bag_t}")

    def close(self) -> None:
        r = getattr(self, "_reader", None)
        if r is not None:
            try:
                r.close()
            except Exception:  # already closed
                pass
            self._reader = None

    def __del__(self):
        self.close()

