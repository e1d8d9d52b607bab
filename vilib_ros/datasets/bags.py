"""ROS 1 / ROS 2 bags through ``rosbags`` (pure Python; no ROS install needed).

* :class:`BagDataset` reads the official EuRoC ROS 1 ``.bag`` and ROS 2 bags (sqlite3 or
  mcap): ``sensor_msgs/Image`` (mono8; mono16, rgb8, bgr8, rgba8, bgra8 converted) and
  ``sensor_msgs/Imu``. Which topics (:func:`choose_topics`): those named (:class:`~.common.Topics`),
  else EuRoC's ``/cam0/image_raw``, ``/cam1/image_raw``, ``/imu0``, else the only topic of its
  type; two image topics (left or right?) or two IMU topics are refused, listing the candidates.
  The calibration the bag holds (:attr:`BagDataset.found_calibration`): ``sensor_msgs/CameraInfo``
  beside each image topic (``<namespace>/camera_info``) and ``T_BS`` from ``/tf_static`` (the
  chain from the IMU message's frame to the image's); a bag holds no IMU noise. EuRoC's defaults
  may fill the rest only for a bag on EuRoC's own topics (:attr:`BagDataset.euroc_defaults`).
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

from ..calibration import CalibrationError, CalibrationSet, CameraCalibration
from ..camera import CameraModel
from .common import Dataset, DatasetError, FrameError, Groundtruth, Topics

log = logging.getLogger(__name__)

IMAGE_TOPIC_RE = re.compile(r"^/?cam(\d+)/image_raw$")
#: EuRoC's own topics: a bag on them may take EuRoC's default calibration (said so)
EUROC_IMAGE_TOPICS = ("/cam0/image_raw", "/cam1/image_raw")
IMU_TOPIC = "/imu0"
IMAGE_TYPE, IMU_TYPE, INFO_TYPE = "sensor_msgs/msg/Image", "sensor_msgs/msg/Imu", "sensor_msgs/msg/CameraInfo"
#: IMU frames tried for the /tf_static chain where the IMU message's own frame is not in it
IMU_FRAMES = ("imu0", "imu", "body", "imu4")
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


def camera_from_info(msg, T_BS: np.ndarray | None = None, where: str = "camera_info") -> CameraModel:
    """sensor_msgs/CameraInfo -> CameraModel (``T_BS`` identity where not given). Raises
    CalibrationError for a message that holds no calibration (K all zero: an uncalibrated driver)
    or one this camera model cannot represent (a distortion model or coefficient it lacks)."""
    K = np.asarray(_field(msg, "k", "K"), float).reshape(3, 3)
    D = np.asarray(_field(msg, "d", "D"), float).reshape(-1)
    model = str(msg.distortion_model).lower()
    if not np.any(K):
        raise CalibrationError(f"{where}: K is all zero (the driver publishes no calibration)")
    if model in ("plumb_bob", "rational_polynomial", "radial-tangential", "radtan"):
        dm = "radial-tangential"
    elif model in ("equidistant", "fisheye"):
        dm = "equidistant"
    elif model in ("", "none") and not np.any(D):
        dm = "none"
    else:
        raise CalibrationError(f"{where}: distortion model {msg.distortion_model!r} is not supported "
                               "(plumb_bob, equidistant, none)")
    if np.any(np.abs(D[4:]) > 1e-12):
        raise CalibrationError(f"{where}: distortion coefficients beyond the fourth ({D[4:].tolist()}) are "
                               "not supported (k1 k2 p1 p2, or equidistant k1..k4)")
    dist = np.concatenate([D, np.zeros(4)])[:4]
    try:
        return CameraModel(int(msg.width), int(msg.height), float(K[0, 0]), float(K[1, 1]), float(K[0, 2]),
                           float(K[1, 2]), dm, dist, np.eye(4) if T_BS is None else T_BS)
    except ValueError as exc:
        raise CalibrationError(f"{where}: {exc}") from None


def info_topic(image_topic: str) -> str:
    """The CameraInfo topic beside an image topic (image_transport's convention: the same namespace)."""
    return image_topic.rsplit("/", 1)[0] + "/camera_info" if "/" in image_topic else "camera_info"


def choose_topics(where, image_topics: list[str], imu_topics: list[str], topics: Topics | None = None) -> Topics:
    """The left camera's, right camera's and IMU's topics of a bag with these ``sensor_msgs/Image``
    and ``sensor_msgs/Imu`` topics: those named in ``topics`` (each must exist), else EuRoC's
    (``/cam0/image_raw`` with ``/cam1/image_raw`` where present, ``/imu0``), else the only one of its
    type. Raises DatasetError where a choice would be a guess (two image topics and no way to tell
    left from right, two IMU topics), listing the candidates."""
    t = Topics(**{k: getattr(topics, k) for k in ("image", "image_right", "imu")}, origin=dict(topics.origin)) \
        if topics else Topics()
    images, imus = sorted(set(image_topics)), sorted(set(imu_topics))
    for key, have, kind in (("image", images, "Image"), ("image_right", images, "Image"), ("imu", imus, "Imu")):
        name = getattr(t, key)
        if name and name not in have:
            raise DatasetError(f"{where}: no sensor_msgs/{kind} topic {t.named(key)} in the bag "
                               f"({kind} topics: {', '.join(have) or 'none'})")
    if t.image_right and t.image_right == t.image:
        raise DatasetError(f"{where}: the left and right camera topics are both {t.image}")
    if not t.image:
        if t.image_right:
            raise DatasetError(f"{where}: a right camera topic ({t.named('image_right')}) needs the left one: "
                               "give --image-topic")
        if EUROC_IMAGE_TOPICS[0] in images:
            t.image = EUROC_IMAGE_TOPICS[0]
            t.image_right = EUROC_IMAGE_TOPICS[1] if EUROC_IMAGE_TOPICS[1] in images else None
        elif len(images) == 1:
            t.image = images[0]
        elif not images:
            raise DatasetError(f"{where}: no sensor_msgs/Image topic in the bag")
        else:
            raise DatasetError(f"{where}: {len(images)} sensor_msgs/Image topics and no way to tell which is the "
                               f"left camera: give --image-topic (and --image-right-topic for stereo) "
                               f"from {', '.join(images)}")
    if not t.imu:
        if IMU_TOPIC in imus:
            t.imu = IMU_TOPIC
        elif len(imus) == 1:
            t.imu = imus[0]
        elif len(imus) > 1:
            raise DatasetError(f"{where}: {len(imus)} sensor_msgs/Imu topics and no way to tell which to use: "
                               f"give --imu-topic from {', '.join(imus)}")
    return t


def tf_chain(edges: dict[tuple[str, str], np.ndarray], a: str, b: str) -> np.ndarray | None:
    """``T_a_b`` (b's coordinates into a's) along static transforms ``edges[(parent, child)] =
    T_parent_child``, walked either way; None where no chain joins the two frames."""
    from ..calibration import inverse

    nbr: dict[str, list[tuple[str, np.ndarray]]] = {}
    for (parent, child), T in edges.items():
        nbr.setdefault(parent, []).append((child, T))
        nbr.setdefault(child, []).append((parent, inverse(T)))
    if a not in nbr or b not in nbr:
        return None
    seen, todo = {a: np.eye(4)}, [a]
    while todo:
        f = todo.pop(0)
        if f == b:
            return seen[f]
        for g, T in nbr[f]:
            if g not in seen:
                seen[g] = seen[f] @ T
                todo.append(g)
    return None


class BagDataset(Dataset):
    """A ROS 1 ``.bag`` or ROS 2 bag opened with ``rosbags.highlevel.AnyReader``."""

    def __init__(self, path: str | Path, topics: Topics | None = None):
        self.topics = topics
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
            raise DatasetError(f"{p}: no readable image on {self.topics.image} in the bag")
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
        self.topics = t = choose_topics(self.path, [c.topic for c in conns if c.msgtype == IMAGE_TYPE],
                                        [c.topic for c in conns if c.msgtype == IMU_TYPE], self.topics)
        cam_topics = [t.image] + ([t.image_right] if t.image_right else [])
        ncam = len(cam_topics)
        cam_of = {id(c): i for i, topic in enumerate(cam_topics) for c in conns
                  if c.topic == topic and c.msgtype == IMAGE_TYPE}
        imu_conns = [c for c in conns if c.topic == t.imu and c.msgtype == IMU_TYPE]
        info_of = {id(c): i for i, topic in enumerate(cam_topics) for c in conns
                   if c.topic == info_topic(topic) and c.msgtype == INFO_TYPE}
        tf_conns = [c for c in conns if c.topic == "/tf_static" and c.msgtype == "tf2_msgs/msg/TFMessage"]
        gt_types = ("geometry_msgs/msg/PoseStamped", "geometry_msgs/msg/TransformStamped", "nav_msgs/msg/Odometry")
        gt_conns = [c for c in conns if "groundtruth" in c.topic and c.msgtype in gt_types]
        if not gt_conns:
            gt_conns = [c for c in conns if c.topic == EUROC_VICON_TOPIC and c.msgtype in gt_types]
            if gt_conns:
                log.info("%s: ground truth from the Vicon topic (marker pose, not the IMU pose)", self.path)
        gt_conns = [c for c in gt_conns if c.topic == gt_conns[0].topic] if gt_conns else []

        want = [c for c in conns if id(c) in cam_of or id(c) in info_of] + imu_conns + gt_conns + tf_conns
        kind = {}
        for c in imu_conns:
            kind[id(c)] = "imu"
        for c in gt_conns:
            kind[id(c)] = "gt"
        for c in tf_conns:
            kind[id(c)] = "tf"

        img_t: list[list[int]] = [[] for _ in range(ncam)]
        img_loc: list[list[tuple]] = [[] for _ in range(ncam)]
        self._sizes: list[tuple | None] = [None] * ncam
        self._frames: list[str | None] = [None] * ncam
        self._imu_frame: str | None = None
        imu_t, imu_v, imu_bag_t = [], [], []
        gt_t, gt_p, gt_q = [], [], []
        self._infos: dict[int, object] = {}
        self._tf: dict[tuple[str, str], np.ndarray] = {}
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
                if self._sizes[i] is None:
                    self._sizes[i] = (int(msg.width), int(msg.height))
                    self._frames[i] = str(msg.header.frame_id).lstrip("/")
                continue
            kd = kind.get(k)
            if kd == "imu":
                a, w = msg.linear_acceleration, msg.angular_velocity
                imu_t.append(_stamp_ns(msg.header))
                imu_bag_t.append(bag_t)
                imu_v.append((w.x, w.y, w.z, a.x, a.y, a.z))
                if self._imu_frame is None:
                    self._imu_frame = str(msg.header.frame_id).lstrip("/")
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
                    T = np.eye(4)
                    rot = tr.transform.rotation
                    T[:3, :3] = _quat_to_rot((rot.x, rot.y, rot.z, rot.w))
                    tt = tr.transform.translation
                    T[:3, 3] = (tt.x, tt.y, tt.z)
                    self._tf[(tr.header.frame_id.lstrip("/"), tr.child_frame_id.lstrip("/"))] = T
            elif k in info_of:
                self._infos.setdefault(info_of[k], msg)

        if unreadable:
            self.stats["messages_unreadable"] = unreadable
            self.warnings.append(f"{self.path}: skipped {unreadable} message(s) that cannot be deserialized")
        self._stamps, self._locs = [], []
        for i in range(ncam):
            t_i = np.asarray(img_t[i], dtype=np.int64)
            if t_i.size > 1 and not np.any(t_i):
                log.warning("%s: %s images have zero header stamps: using bag time", self.path, cam_topics[i])
                self.stats["header_stamps_missing"] = self.stats.get("header_stamps_missing", 0) + t_i.size
                t_i = np.asarray([lc[1] for lc in img_loc[i]], dtype=np.int64)
            order = np.argsort(t_i, kind="stable")
            t_i = t_i[order]
            locs = [img_loc[i][j] for j in order]
            keep = np.concatenate([[True], np.diff(t_i) > 0]) if t_i.size else np.zeros(0, bool)
            dropped = int(np.count_nonzero(~keep))
            if dropped:
                log.warning("%s: %s: dropped %d images with repeated stamps", self.path, cam_topics[i], dropped)
                self.stats["images_non_monotonic_dropped"] += dropped
            self._stamps.append(t_i[keep])
            self._locs.append([lc for lc, kp in zip(locs, keep) if kp])
        self._found = None

        stamps = np.asarray(imu_t, dtype=np.int64)
        if stamps.size > 1 and not np.any(stamps):
            log.warning("%s: IMU messages have zero header stamps: using bag time", self.path)
            self.stats["header_stamps_missing"] = self.stats.get("header_stamps_missing", 0) + stamps.size
            stamps = np.asarray(imu_bag_t, dtype=np.int64)
        v = np.asarray(imu_v, dtype=np.float64).reshape(-1, 6)
        order = np.argsort(stamps, kind="stable")
        stamps, v = stamps[order], v[order]
        keep = np.concatenate([[True], np.diff(stamps) > 0]) if stamps.size else np.zeros(0, bool)
        if np.count_nonzero(~keep):
            self.stats["imu_non_monotonic_dropped"] = int(np.count_nonzero(~keep))
            log.warning("%s: dropped %d IMU samples with repeated stamps", self.path, np.count_nonzero(~keep))
        self.imu_stamps, self.imu_data = stamps[keep], v[keep]
        if gt_t:
            stamps = np.asarray(gt_t, dtype=np.int64)
            order = np.argsort(stamps, kind="stable")
            self.groundtruth = Groundtruth(stamps[order], np.asarray(gt_p, float)[order],
                                           np.asarray(gt_q, float)[order])
        else:
            self.groundtruth = None

    # --- streams and calibration ----------------------------------------------------------
    @property
    def num_cameras(self) -> int:
        return len(self._stamps)

    @property
    def camera_labels(self) -> list[str]:
        return [self.topics.image] + ([self.topics.image_right] if self.topics.image_right else [])

    @property
    def imu_label(self) -> str:
        return self.topics.imu or "the IMU"

    @property
    def euroc_defaults(self) -> str | None:
        """Why EuRoC's defaults may fill what the bag lacks: it is on EuRoC's own topics."""
        t = self.topics
        if t.image == EUROC_IMAGE_TOPICS[0] and t.image_right in (None, EUROC_IMAGE_TOPICS[1]) \
                and t.imu in (None, IMU_TOPIC):
            return "a bag on EuRoC's own topics " + ", ".join(x for x in (t.image, t.image_right, t.imu) if x)
        return None

    def image_size(self, cam: int) -> tuple[int, int] | None:
        self._check_cam(cam)
        return self._sizes[cam]

    @property
    def found_calibration(self) -> CalibrationSet:
        """CameraInfo beside each image topic (intrinsics, distortion), ``T_BS`` from /tf_static
        (the IMU message's frame to the image's); never IMU noise (a bag holds none)."""
        if self._found is not None:
            return self._found
        found = CalibrationSet()
        euroc = ", not EuRoC's topics" if self.euroc_defaults is None else ""
        for i, topic in enumerate(self.camera_labels):
            cam = CameraCalibration()
            info = info_topic(topic)
            if i in self._infos:
                cam.intrinsics = camera_from_info(self._infos[i], where=f"{self.path}: {info}")
                cam.intrinsics_from = (str(self.path.resolve()), info)
            else:
                found.why_missing[f"cam{i}"] = f"no {info} in the bag{euroc}"
            frame = self._frames[i]
            for imu_frame in dict.fromkeys(x for x in (self._imu_frame, *IMU_FRAMES) if x):
                for cam_frame in (frame or f"cam{i}",):       # EuRoC's frame name where the image has none
                    T = tf_chain(self._tf, imu_frame, cam_frame)
                    if T is not None and cam.T_BS is None:
                        cam.T_BS = T
                        cam.T_BS_from = (str(self.path.resolve()), f"/tf_static {imu_frame} -> {cam_frame}")
            if cam.T_BS is None:
                found.why_missing[f"T_BS{i}"] = (f"no /tf_static from the IMU's frame "
                                                 f"{self._imu_frame or '?'} to {frame or '?'} in the bag{euroc}")
            found.cameras[i] = cam
        found.why_missing["imu"] = f"a bag holds no IMU noise{euroc}"
        self._found = found
        return found

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
                size = self._sizes[cam]
                if size is not None and (img.shape[1], img.shape[0]) != size:
                    raise FrameError("size_mismatch", f"{self.path}: cam{cam} image {index} is "
                                                      f"{img.shape[1]}x{img.shape[0]}, the camera's first image "
                                                      f"{size[0]}x{size[1]}")
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

