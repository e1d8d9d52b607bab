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
* :func:`write_bag` converts any dataset (usually an ASL folder) to a ROS 1 ``.bag`` or a
  ROS 2 bag, writing the messages above (bag time = header stamp) so that
  ``open_dataset(write_bag(ds, ...))`` reproduces images, IMU, stamps, calibration and poses.
"""
from __future__ import annotations

import logging
import re
from pathlib import Path

import numpy as np

from ..camera import CameraModel
from .asl import EUROC_IMU_NOISE, Dataset, Groundtruth, default_camera, open_dataset

log = logging.getLogger(__name__)

IMAGE_TOPIC_RE = re.compile(r"^/?cam(\d+)/image_raw$")
IMU_TOPIC = "/imu0"
GT_TOPIC = "/groundtruth/pose"
EUROC_VICON_TOPIC = "/vicon/firefly_sbx/firefly_sbx"

_TF_MSGDEF_ROS1 = "geometry_msgs/TransformStamped[] transforms\n"


def is_bag(path: str | Path) -> bool:
    p = Path(path)
    if p.is_file() and p.suffix == ".bag":
        return True
    if p.is_dir() and (p / "metadata.yaml").is_file():
        return True
    if p.is_file() and p.suffix in (".db3", ".mcap") and (p.parent / "metadata.yaml").is_file():
        return True
    return False


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


def _rot_to_quat(R: np.ndarray) -> np.ndarray:
    from scipy.spatial.transform import Rotation

    return Rotation.from_matrix(np.asarray(R, float)).as_quat()  # x, y, z, w


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
        from rosbags.highlevel import AnyReader
        from rosbags.typesys import Stores, get_typestore

        p = Path(path)
        if p.is_file() and p.suffix in (".db3", ".mcap"):
            p = p.parent
        if not p.exists():
            raise FileNotFoundError(f"bag not found: {p}")
        self.path = p
        self.name = p.stem if p.is_file() else p.name
        self.stats = {"imu_non_monotonic_dropped": 0, "images_non_monotonic_dropped": 0}
        try:
            self._reader = AnyReader([p], default_typestore=get_typestore(Stores.ROS2_JAZZY))
            self._reader.open()
        except Exception as exc:  # rosbags raises its own error types
            raise ValueError(f"cannot open bag {p}: {exc}") from exc
        try:
            self._scan()
        except Exception:
            self._reader.close()
            raise

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
            raise ValueError(f"{self.path}: no sensor_msgs/Image topic /cam0/image_raw in the bag")
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
        for conn, bag_t, raw in self._reader.messages(connections=want):
            k = id(conn)
            if k in cam_of:
                i = cam_of[k]
                msg = self._reader.deserialize(raw, conn.msgtype)
                img_t[i].append(_stamp_ns(msg.header))
                img_loc[i].append((conn, bag_t, img_t[i][-1]))
                if img_size[i] is None:
                    img_size[i] = (int(msg.width), int(msg.height))
                continue
            msg = self._reader.deserialize(raw, conn.msgtype)
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
            msg = self._reader.deserialize(raw, c.msgtype)
            if _stamp_ns(msg.header) == stamp:
                img = image_msg_to_array(msg, f"{self.path} cam{cam} image {index}")
                cam_m = self.cameras[cam]
                if img.shape != (cam_m.height, cam_m.width):
                    raise ValueError(f"{self.path}: cam{cam} image {index} is {img.shape[1]}x{img.shape[0]}, "
                                     f"calibration says {cam_m.width}x{cam_m.height}")
                return img
        raise ValueError(f"{self.path}: cam{cam} image {index} (header stamp {stamp}) not found at bag time {bag_t}")

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


# ----------------------------------------------------------------------------- writing


class _MsgFactory:
    """Builds rosbags message objects for one typestore (ROS 1 Noetic or ROS 2 Jazzy)."""

    def __init__(self, ros1: bool):
        from rosbags.typesys import Stores, get_types_from_msg, get_typestore

        self.ros1 = ros1
        self.ts = get_typestore(Stores.ROS1_NOETIC if ros1 else Stores.ROS2_JAZZY)
        if "tf2_msgs/msg/TFMessage" not in self.ts.types:
            self.ts.register(get_types_from_msg(_TF_MSGDEF_ROS1, "tf2_msgs/msg/TFMessage"))
        self.T = self.ts.types
        self._seq: dict[str, int] = {}

    def serialize(self, msg, msgtype: str) -> bytes:
        return self.ts.serialize_ros1(msg, msgtype) if self.ros1 else self.ts.serialize_cdr(msg, msgtype)

    def header(self, t_ns: int, frame_id: str, seq_key: str | None = None):
        s, ns = divmod(int(t_ns), 1_000_000_000)
        stamp = self.T["builtin_interfaces/msg/Time"](sec=s, nanosec=ns)
        if self.ros1:
            key = seq_key or frame_id
            seq = self._seq.get(key, 0)
            self._seq[key] = seq + 1
            return self.T["std_msgs/msg/Header"](seq=seq, stamp=stamp, frame_id=frame_id)
        return self.T["std_msgs/msg/Header"](stamp=stamp, frame_id=frame_id)

    def vec3(self, v):
        return self.T["geometry_msgs/msg/Vector3"](x=float(v[0]), y=float(v[1]), z=float(v[2]))

    def quat(self, q):
        return self.T["geometry_msgs/msg/Quaternion"](x=float(q[0]), y=float(q[1]), z=float(q[2]), w=float(q[3]))

    def image(self, t_ns: int, frame_id: str, img: np.ndarray, topic: str):
        h, w = img.shape
        return self.T["sensor_msgs/msg/Image"](
            header=self.header(t_ns, frame_id, topic), height=h, width=w, encoding="mono8",
            is_bigendian=0, step=w, data=np.ascontiguousarray(img, dtype=np.uint8).reshape(-1))

    def imu(self, t_ns: int, gyro, acc, gyro_var: float, acc_var: float):
        orient_cov = np.zeros(9)
        orient_cov[0] = -1.0  # REP 145: orientation not provided
        return self.T["sensor_msgs/msg/Imu"](
            header=self.header(t_ns, "imu0", IMU_TOPIC), orientation=self.quat((0, 0, 0, 1)),
            orientation_covariance=orient_cov, angular_velocity=self.vec3(gyro),
            angular_velocity_covariance=np.diag([gyro_var] * 3).reshape(-1),
            linear_acceleration=self.vec3(acc),
            linear_acceleration_covariance=np.diag([acc_var] * 3).reshape(-1))

    def camera_info(self, t_ns: int, frame_id: str, cam: CameraModel, topic: str):
        if cam.distortion_model == "equidistant":
            model, D = "equidistant", np.asarray(cam.distortion[:4], float)
        else:
            model, D = "plumb_bob", np.concatenate([np.asarray(cam.distortion[:4], float), [0.0]])
        K = cam.K.reshape(-1)
        P = np.concatenate([cam.K, np.zeros((3, 1))], axis=1).reshape(-1)
        roi = self.T["sensor_msgs/msg/RegionOfInterest"](x_offset=0, y_offset=0, height=0, width=0, do_rectify=False)
        names = ("D", "K", "R", "P") if self.ros1 else ("d", "k", "r", "p")
        kw = dict(zip(names, (D, K, np.eye(3).reshape(-1), P)))
        return self.T["sensor_msgs/msg/CameraInfo"](
            header=self.header(t_ns, frame_id, topic), height=cam.height, width=cam.width,
            distortion_model=model, binning_x=0, binning_y=0, roi=roi, **kw)

    def tf_static(self, t_ns: int, cams: list[CameraModel]):
        trs = []
        for i, cam in enumerate(cams):
            tr = self.T["geometry_msgs/msg/Transform"](translation=self.vec3(cam.T_BS[:3, 3]),
                                                        rotation=self.quat(_rot_to_quat(cam.T_BS[:3, :3])))
            trs.append(self.T["geometry_msgs/msg/TransformStamped"](
                header=self.header(t_ns, "imu0", "/tf_static"), child_frame_id=f"cam{i}", transform=tr))
        return self.T["tf2_msgs/msg/TFMessage"](transforms=trs)

    def pose(self, t_ns: int, p, q):
        pose = self.T["geometry_msgs/msg/Pose"](
            position=self.T["geometry_msgs/msg/Point"](x=float(p[0]), y=float(p[1]), z=float(p[2])),
            orientation=self.quat(q))
        return self.T["geometry_msgs/msg/PoseStamped"](header=self.header(t_ns, "world", GT_TOPIC), pose=pose)


def write_bag(dataset, out_path: str | Path, kind: str = "ros2", storage: str = "sqlite3",
              max_images: int | None = None, overwrite: bool = False) -> Path:
    """Write ``dataset`` (a :class:`~vilib_ros.datasets.asl.Dataset` or a path) as a ROS bag.

    ``kind='ros1'`` writes a ROS 1 ``.bag`` file at ``out_path``; ``kind='ros2'`` a ROS 2 bag
    folder (``storage`` ``'sqlite3'`` or ``'mcap'``). Topics: ``/cam{i}/image_raw`` (mono8),
    ``/cam{i}/camera_info``, ``/imu0``, ``/tf_static`` (``imu0`` -> ``cam{i}``), and
    ``/groundtruth/pose`` where the dataset has ground truth. ``max_images`` keeps the first
    images of cam0 and every other stream up to the last kept cam0 stamp.
    Returns the written path.
    """
    if kind not in ("ros1", "ros2"):
        raise ValueError(f"kind must be 'ros1' or 'ros2', got {kind!r}")
    if storage not in ("sqlite3", "mcap"):
        raise ValueError(f"storage must be 'sqlite3' or 'mcap', got {storage!r}")
    own = not isinstance(dataset, Dataset)
    ds = open_dataset(dataset) if own else dataset
    out = Path(out_path)
    if kind == "ros1" and out.suffix != ".bag":
        out = out.with_suffix(".bag")
    if out.exists():
        if not overwrite:
            raise FileExistsError(f"bag output exists: {out}")
        import shutil

        shutil.rmtree(out) if out.is_dir() else out.unlink()
    out.parent.mkdir(parents=True, exist_ok=True)
    try:
        _write(ds, out, kind, storage, max_images)
    except BaseException:
        import shutil

        if out.is_dir():
            shutil.rmtree(out, ignore_errors=True)
        elif out.exists():
            out.unlink()
        raise
    finally:
        if own:
            ds.close()
    return out


def _write(ds: Dataset, out: Path, kind: str, storage: str, max_images: int | None) -> None:
    ros1 = kind == "ros1"
    f = _MsgFactory(ros1)
    t_stop = None
    if max_images is not None:
        st0 = ds.image_stamps(0)
        if max_images < 1 or st0.size == 0:
            raise ValueError("max_images must be >= 1 and the dataset must have cam0 images")
        t_stop = int(st0[min(max_images, st0.size) - 1])
    rate = float(ds.imu_noise.get("rate_hz", 200.0))
    gyro_var = (ds.imu_noise["gyroscope_noise_density"] ** 2) * rate
    acc_var = (ds.imu_noise["accelerometer_noise_density"] ** 2) * rate

    if ros1:
        from rosbags.rosbag1 import Writer

        writer = Writer(out)
    else:
        from rosbags.rosbag2 import StoragePlugin, Writer

        plugin = StoragePlugin.MCAP if storage == "mcap" else StoragePlugin.SQLITE3
        writer = Writer(out, version=9, storage_plugin=plugin)
    ncam = len(ds.cameras)
    with writer:
        def conn(topic, msgtype):
            return writer.add_connection(topic, msgtype, typestore=f.ts)

        c_img = [conn(f"/cam{i}/image_raw", "sensor_msgs/msg/Image") for i in range(ncam)]
        c_info = [conn(f"/cam{i}/camera_info", "sensor_msgs/msg/CameraInfo") for i in range(ncam)]
        c_imu = conn(IMU_TOPIC, "sensor_msgs/msg/Imu")
        c_tf = conn("/tf_static", "tf2_msgs/msg/TFMessage")
        gt = ds.groundtruth
        c_gt = conn(GT_TOPIC, "geometry_msgs/msg/PoseStamped") if gt is not None else None

        # Merge the ground-truth poses into the time-ordered event stream.
        gt_i = 0
        tf_written = False
        for ev in ds.iter_events():
            t = ev[1] if ev[0] == "imu" else ev[2]
            if t_stop is not None and t > t_stop:
                break
            if not tf_written:
                writer.write(c_tf, t, f.serialize(f.tf_static(t, ds.cameras), "tf2_msgs/msg/TFMessage"))
                tf_written = True
            while gt is not None and gt_i < len(gt) and gt.t_ns[gt_i] <= t:
                tg = int(gt.t_ns[gt_i])
                writer.write(c_gt, tg, f.serialize(f.pose(tg, gt.p[gt_i], gt.q_xyzw[gt_i]),
                                                   "geometry_msgs/msg/PoseStamped"))
                gt_i += 1
            if ev[0] == "imu":
                writer.write(c_imu, t, f.serialize(f.imu(t, ev[2], ev[3], gyro_var, acc_var), "sensor_msgs/msg/Imu"))
            else:
                _, i, _, idx = ev
                topic = f"/cam{i}/image_raw"
                img = ds.load_image(i, idx)
                writer.write(c_info[i], t, f.serialize(
                    f.camera_info(t, f"cam{i}", ds.cameras[i], f"/cam{i}/camera_info"), "sensor_msgs/msg/CameraInfo"))
                writer.write(c_img[i], t, f.serialize(f.image(t, f"cam{i}", img, topic), "sensor_msgs/msg/Image"))
        while gt is not None and gt_i < len(gt) and (t_stop is None or gt.t_ns[gt_i] <= t_stop):
            tg = int(gt.t_ns[gt_i])
            writer.write(c_gt, tg, f.serialize(f.pose(tg, gt.p[gt_i], gt.q_xyzw[gt_i]), "geometry_msgs/msg/PoseStamped"))
            gt_i += 1
