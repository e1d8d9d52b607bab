"""Write any dataset (usually an ASL folder) as a ROS 1 ``.bag`` or a ROS 2 bag through ``rosbags``.

Topics: ``/cam{i}/image_raw`` (mono8; other names with ``image_topics``), ``camera_info`` beside
each image topic, ``/imu0`` (or ``imu_topic``), ``/tf_static`` (``imu0`` -> ``cam{i}``), and
``/groundtruth/pose`` where the dataset has ground truth; bag time = header stamp, so that
``open_dataset(write_bag(ds, ...))`` reproduces images, IMU, stamps, calibration and poses. The
calibration written is what the dataset itself holds (:attr:`~.common.Dataset.found_calibration`):
a camera without intrinsics gets no camera_info, one without ``T_BS`` no transform; ``camera_info``
/ ``tf_static`` False leave them out as a recorder of a bare camera driver would.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np

from ..camera import CameraModel
from .bags import GT_TOPIC, IMU_TOPIC, info_topic
from .common import Dataset

_TF_MSGDEF_ROS1 = "geometry_msgs/TransformStamped[] transforms\n"


def _rot_to_quat(R: np.ndarray) -> np.ndarray:
    from scipy.spatial.transform import Rotation

    return Rotation.from_matrix(np.asarray(R, float)).as_quat()  # x, y, z, w


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

    def imu(self, t_ns: int, gyro, acc, gyro_var: float, acc_var: float, topic: str = IMU_TOPIC):
        orient_cov = np.zeros(9)
        orient_cov[0] = -1.0  # REP 145: orientation not provided
        return self.T["sensor_msgs/msg/Imu"](
            header=self.header(t_ns, "imu0", topic), orientation=self.quat((0, 0, 0, 1)),
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

    def tf_static(self, t_ns: int, T_BS: dict[int, np.ndarray]):
        trs = []
        for i, T in sorted(T_BS.items()):
            tr = self.T["geometry_msgs/msg/Transform"](translation=self.vec3(T[:3, 3]),
                                                        rotation=self.quat(_rot_to_quat(T[:3, :3])))
            trs.append(self.T["geometry_msgs/msg/TransformStamped"](
                header=self.header(t_ns, "imu0", "/tf_static"), child_frame_id=f"cam{i}", transform=tr))
        return self.T["tf2_msgs/msg/TFMessage"](transforms=trs)

    def pose(self, t_ns: int, p, q):
        pose = self.T["geometry_msgs/msg/Pose"](
            position=self.T["geometry_msgs/msg/Point"](x=float(p[0]), y=float(p[1]), z=float(p[2])),
            orientation=self.quat(q))
        return self.T["geometry_msgs/msg/PoseStamped"](header=self.header(t_ns, "world", GT_TOPIC), pose=pose)


def write_bag(dataset, out_path: str | Path, kind: str = "ros2", storage: str = "sqlite3",
              max_images: int | None = None, overwrite: bool = False, image_topics: list[str] | None = None,
              imu_topic: str = IMU_TOPIC, camera_info: bool = True, tf_static: bool = True) -> Path:
    """Write ``dataset`` (a :class:`~vilib_ros.datasets.asl.Dataset` or a path) as a ROS bag.

    ``kind='ros1'`` writes a ROS 1 ``.bag`` file at ``out_path``; ``kind='ros2'`` a ROS 2 bag
    folder (``storage`` ``'sqlite3'`` or ``'mcap'``). Topics: ``image_topics[i]`` (default
    ``/cam{i}/image_raw``, mono8), ``camera_info`` beside each (where the dataset has the camera's
    intrinsics and ``camera_info``), ``imu_topic``, ``/tf_static`` (``imu0`` -> ``cam{i}``, where
    the dataset has the camera's ``T_BS`` and ``tf_static``), and ``/groundtruth/pose`` where the
    dataset has ground truth. ``max_images`` keeps the first images of cam0 and every other stream
    up to the last kept cam0 stamp. Returns the written path.
    """
    if kind not in ("ros1", "ros2"):
        raise ValueError(f"kind must be 'ros1' or 'ros2', got {kind!r}")
    if storage not in ("sqlite3", "mcap"):
        raise ValueError(f"storage must be 'sqlite3' or 'mcap', got {storage!r}")
    own = not isinstance(dataset, Dataset)
    if own:
        from . import open_dataset

        ds = open_dataset(dataset)
    else:
        ds = dataset
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
        names = list(image_topics or [])[:ds.num_cameras]
        names += [f"/cam{i}/image_raw" for i in range(len(names), ds.num_cameras)]
        _write(ds, out, kind, storage, max_images, names, imu_topic, camera_info, tf_static)
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


def _write(ds: Dataset, out: Path, kind: str, storage: str, max_images: int | None, image_topics: list[str],
           imu_topic: str, camera_info: bool, tf_static: bool) -> None:
    ros1 = kind == "ros1"
    f = _MsgFactory(ros1)
    t_stop = None
    if max_images is not None:
        st0 = ds.image_stamps(0)
        if max_images < 1 or st0.size == 0:
            raise ValueError("max_images must be >= 1 and the dataset must have cam0 images")
        t_stop = int(st0[min(max_images, st0.size) - 1])
    found = ds.found_calibration
    noise = found.imu_noise     # discrete-time variances in the messages where the dataset has the noise (else 0: unknown)
    rate = float((noise or {}).get("rate_hz", 200.0))
    gyro_var = (noise["gyroscope_noise_density"] ** 2) * rate if noise else 0.0
    acc_var = (noise["accelerometer_noise_density"] ** 2) * rate if noise else 0.0
    intrinsics = {i: c.intrinsics for i, c in found.cameras.items() if c.intrinsics is not None and camera_info}
    T_BS = {i: c.T_BS for i, c in found.cameras.items() if c.T_BS is not None and tf_static}

    if ros1:
        from rosbags.rosbag1 import Writer

        writer = Writer(out)
    else:
        from rosbags.rosbag2 import StoragePlugin, Writer

        plugin = StoragePlugin.MCAP if storage == "mcap" else StoragePlugin.SQLITE3
        writer = Writer(out, version=9, storage_plugin=plugin)
    ncam = ds.num_cameras
    with writer:
        def conn(topic, msgtype):
            return writer.add_connection(topic, msgtype, typestore=f.ts)

        c_img = [conn(image_topics[i], "sensor_msgs/msg/Image") for i in range(ncam)]
        c_info = {i: conn(info_topic(image_topics[i]), "sensor_msgs/msg/CameraInfo") for i in intrinsics}
        c_imu = conn(imu_topic, "sensor_msgs/msg/Imu")
        c_tf = conn("/tf_static", "tf2_msgs/msg/TFMessage") if T_BS else None
        gt = ds.groundtruth
        c_gt = conn(GT_TOPIC, "geometry_msgs/msg/PoseStamped") if gt is not None else None

        # Merge the ground-truth poses into the time-ordered event stream.
        gt_i = 0
        tf_written = False
        for ev in ds.iter_events():
            t = ev[1] if ev[0] == "imu" else ev[2]
            if t_stop is not None and t > t_stop:
                break
            if not tf_written and c_tf is not None:
                writer.write(c_tf, t, f.serialize(f.tf_static(t, T_BS), "tf2_msgs/msg/TFMessage"))
                tf_written = True
            while gt is not None and gt_i < len(gt) and gt.t_ns[gt_i] <= t:
                tg = int(gt.t_ns[gt_i])
                writer.write(c_gt, tg, f.serialize(f.pose(tg, gt.p[gt_i], gt.q_xyzw[gt_i]),
                                                   "geometry_msgs/msg/PoseStamped"))
                gt_i += 1
            if ev[0] == "imu":
                writer.write(c_imu, t, f.serialize(f.imu(t, ev[2], ev[3], gyro_var, acc_var, imu_topic),
                                                   "sensor_msgs/msg/Imu"))
            else:
                _, i, _, idx = ev
                topic = image_topics[i]
                img = ds.load_image(i, idx)
                if i in c_info:
                    writer.write(c_info[i], t, f.serialize(
                        f.camera_info(t, f"cam{i}", intrinsics[i], info_topic(topic)), "sensor_msgs/msg/CameraInfo"))
                writer.write(c_img[i], t, f.serialize(f.image(t, f"cam{i}", img, topic), "sensor_msgs/msg/Image"))
        while gt is not None and gt_i < len(gt) and (t_stop is None or gt.t_ns[gt_i] <= t_stop):
            tg = int(gt.t_ns[gt_i])
            writer.write(c_gt, tg, f.serialize(f.pose(tg, gt.p[gt_i], gt.q_xyzw[gt_i]), "geometry_msgs/msg/PoseStamped"))
            gt_i += 1
