"""Dataset input: the EuRoC ASL folder layout, ROS 1 ``.bag`` files and ROS 2 bags.

``open_dataset(path)`` returns a :class:`Dataset` with one interface for all three:

* ``<path>/mav0/cam{0,1}/data.csv`` + ``data/<stamp>.png`` + ``sensor.yaml`` (EuRoC ASL),
  ``mav0/imu0/data.csv`` (+ ``sensor.yaml`` for the noise densities), ground truth from
  ``mav0/state_groundtruth_estimate0/data.csv`` or a ``*groundtruth*.txt`` TUM file in the
  dataset folder;
* a ROS 1 ``.bag`` or a ROS 2 bag folder (sqlite3 or mcap), read through ``rosbags``
  (see :mod:`vilib_ros.datasets.bags`).

Timestamps are integer nanoseconds everywhere (never floats: 1.4e18 ns does not fit a
float64 mantissa). Quaternions are ``x, y, z, w`` (Hamilton, ``R_WB``), positions in metres.
"""
from __future__ import annotations

import logging
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

import numpy as np

from ..camera import CameraModel, euroc_cam0, load_euroc_yaml

log = logging.getLogger(__name__)

#: EuRoC (ADIS16448) continuous-time noise densities, the keys of imu0/sensor.yaml.
EUROC_IMU_NOISE = {
    "gyroscope_noise_density": 1.6968e-04,      # rad / s / sqrt(Hz)
    "gyroscope_random_walk": 1.9393e-05,        # rad / s^2 / sqrt(Hz)
    "accelerometer_noise_density": 2.0000e-03,  # m / s^2 / sqrt(Hz)
    "accelerometer_random_walk": 3.0000e-03,    # m / s^3 / sqrt(Hz)
    "rate_hz": 200.0,
}

#: Header of mav0/state_groundtruth_estimate0/data.csv, exactly as EuRoC writes it.
EUROC_GT_HEADER = (
    "#timestamp, p_RS_R_x [m], p_RS_R_y [m], p_RS_R_z [m], q_RS_w [], q_RS_x [], q_RS_y [], "
    "q_RS_z [], v_RS_R_x [m s^-1], v_RS_R_y [m s^-1], v_RS_R_z [m s^-1], "
    "b_w_RS_S_x [rad s^-1], b_w_RS_S_y [rad s^-1], b_w_RS_S_z [rad s^-1], "
    "b_a_RS_S_x [m s^-2], b_a_RS_S_y [m s^-2], b_a_RS_S_z [m s^-2]"
)
EUROC_IMU_HEADER = ("#timestamp [ns],w_RS_S_x [rad s^-1],w_RS_S_y [rad s^-1],w_RS_S_z [rad s^-1],"
                    "a_RS_S_x [m s^-2],a_RS_S_y [m s^-2],a_RS_S_z [m s^-2]")
EUROC_CAM_HEADER = "#timestamp [ns],filename"


def euroc_cam1() -> CameraModel:
    """EuRoC MAV cam1 calibration (V1_01), the default for a bag's second camera."""
    T = np.array([
        [0.0125552670891, -0.999755099723, 0.0182237714554, -0.0198435579556],
        [0.999598781151, 0.0130119051815, 0.0251588363115, 0.0453689425024],
        [-0.0253898008918, 0.0179005838253, 0.999517347078, 0.00786212447038],
        [0.0, 0.0, 0.0, 1.0]])
    return CameraModel(752, 480, 457.587, 456.134, 379.999, 255.238, "radial-tangential",
                       np.array([-0.28368365, 0.07451284, -0.00010473, -3.55590700e-05]), T)


def default_camera(cam: int) -> CameraModel:
    return euroc_cam0() if cam == 0 else euroc_cam1()


@dataclass
class Groundtruth:
    """Ground-truth body (IMU) poses ``T_WB``: ``p`` (K,3) metres, ``q_xyzw`` (K,4)."""

    t_ns: np.ndarray
    p: np.ndarray
    q_xyzw: np.ndarray
    v: np.ndarray | None = None    # (K,3) world-frame velocity, m/s
    bg: np.ndarray | None = None   # (K,3) gyroscope bias, rad/s
    ba: np.ndarray | None = None   # (K,3) accelerometer bias, m/s^2

    def __len__(self) -> int:
        return int(self.t_ns.shape[0])

    def interpolate(self, t_ns) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Poses at stamps ``t_ns``: ``(p (N,3) linear, q_xyzw (N,4) slerp, valid (N,))``.

        Outside ``[t_ns[0], t_ns[-1]]`` the pose is NaN and ``valid`` False.
        """
        from scipy.spatial.transform import Rotation

        tq = np.atleast_1d(np.asarray(t_ns, dtype=np.int64))
        t = self.t_ns
        valid = (tq >= t[0]) & (tq <= t[-1]) if len(t) else np.zeros(tq.shape, bool)
        p = np.full((tq.size, 3), np.nan)
        q = np.full((tq.size, 4), np.nan)
        if not valid.any():
            return p, q, valid
        if len(t) == 1:
            p[valid], q[valid] = self.p[0], self.q_xyzw[0]
            return p, q, valid
        tv = tq[valid]
        i = np.clip(np.searchsorted(t, tv, side="right") - 1, 0, len(t) - 2)
        a = ((tv - t[i]).astype(np.float64) / (t[i + 1] - t[i]).astype(np.float64))[:, None]
        p[valid] = (1 - a) * self.p[i] + a * self.p[i + 1]
        r0 = Rotation.from_quat(self.q_xyzw[i])
        delta = (r0.inv() * Rotation.from_quat(self.q_xyzw[i + 1])).as_rotvec()
        q[valid] = (r0 * Rotation.from_rotvec(a * delta)).as_quat()
        return p, q, valid

    def write_tum(self, path: str | Path) -> None:
        """Write ``timestamp[s] tx ty tz qx qy qz qw`` (stamps with full ns precision)."""
        with open(path, "w") as f:
            f.write("# timestamp(s) tx ty tz qx qy qz qw\n")
            for t, p, q in zip(self.t_ns, self.p, self.q_xyzw):
                f.write(f"{_ns_to_str(int(t))} {p[0]:.9f} {p[1]:.9f} {p[2]:.9f} "
                        f"{q[0]:.9f} {q[1]:.9f} {q[2]:.9f} {q[3]:.9f}\n")

    def write_euroc_csv(self, path: str | Path) -> None:
        """Write EuRoC's ``state_groundtruth_estimate0/data.csv`` (missing v/bg/ba as 0)."""
        k = len(self)
        zeros = np.zeros((k, 3))
        v = self.v if self.v is not None else zeros
        bg = self.bg if self.bg is not None else zeros
        ba = self.ba if self.ba is not None else zeros
        q = self.q_xyzw
        cols = np.concatenate([self.p, q[:, 3:4], q[:, :3], v, bg, ba], axis=1)
        with open(path, "w") as f:
            f.write(EUROC_GT_HEADER + "\n")
            for t, row in zip(self.t_ns, cols):
                f.write(f"{int(t)}," + ",".join(f"{x:.12g}" for x in row) + "\n")


def _ns_to_str(t_ns: int) -> str:
    s, ns = divmod(int(t_ns), 1_000_000_000)
    return f"{s}.{ns:09d}"


def _seconds_str_to_ns(s: str) -> int:
    """'1403715273.26214' -> 1403715273262140000 exactly (no float rounding)."""
    s = s.strip()
    if "e" in s.lower():
        return int(round(float(s) * 1e9))
    neg = s.startswith("-")
    whole, _, frac = s.lstrip("+-").partition(".")
    ns = int(whole or 0) * 1_000_000_000 + int((frac + "000000000")[:9])
    return -ns if neg else ns


def read_csv_stamped(path: Path, ncols: int) -> tuple[np.ndarray, np.ndarray]:
    """Read a EuRoC CSV: int64 ns stamp column + ``ncols`` float columns.

    Raises FileNotFoundError / ValueError naming the file.
    """
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"missing EuRoC file: {path}")
    t_list: list[int] = []
    rows: list[list[float]] = []
    with open(path) as f:
        for lineno, line in enumerate(f, 1):
            line = line.strip()
            if not line or line.startswith("#"):
                continue
            parts = line.split(",")
            if len(parts) < ncols + 1:
                raise ValueError(f"{path}:{lineno}: expected {ncols + 1} columns, got {len(parts)}")
            try:
                t_list.append(int(parts[0]))
                rows.append([float(x) for x in parts[1:ncols + 1]])
            except ValueError as exc:
                raise ValueError(f"{path}:{lineno}: cannot parse line ({exc})") from None
    t = np.asarray(t_list, dtype=np.int64)
    data = np.asarray(rows, dtype=np.float64).reshape(-1, ncols)
    return t, data


def read_tum(path: str | Path) -> Groundtruth:
    path = Path(path)
    t_list, rows = [], []
    with open(path) as f:
        for lineno, line in enumerate(f, 1):
            line = line.strip()
            if not line or line.startswith("#"):
                continue
            parts = line.replace(",", " ").split()
            if len(parts) < 8:
                raise ValueError(f"{path}:{lineno}: a TUM line needs 8 columns, got {len(parts)}")
            try:
                t_list.append(_seconds_str_to_ns(parts[0]))
                rows.append([float(x) for x in parts[1:8]])
            except ValueError as exc:
                raise ValueError(f"{path}:{lineno}: cannot parse line ({exc})") from None
    d = np.asarray(rows, dtype=np.float64).reshape(-1, 7)
    return Groundtruth(np.asarray(t_list, dtype=np.int64), d[:, :3].copy(), d[:, 3:7].copy())


def read_euroc_groundtruth(path: str | Path) -> Groundtruth:
    t, d = read_csv_stamped(Path(path), 16)
    q_xyzw = np.concatenate([d[:, 4:7], d[:, 3:4]], axis=1)
    return Groundtruth(t, d[:, 0:3].copy(), q_xyzw, d[:, 7:10].copy(), d[:, 10:13].copy(), d[:, 13:16].copy())


def _monotonic_mask(t: np.ndarray) -> np.ndarray:
    """Keep samples whose stamp is strictly greater than every earlier kept stamp."""
    if t.size == 0:
        return np.zeros(0, bool)
    prev_max = np.maximum.accumulate(np.concatenate([[np.iinfo(np.int64).min], t[:-1]]))
    return t > prev_max


class Dataset:
    """Common interface of every dataset source (subclasses fill the attributes)."""

    name: str
    cameras: list[CameraModel]
    imu_stamps: np.ndarray   # int64 (M,)
    imu_data: np.ndarray     # float64 (M, 6) wx wy wz ax ay az
    imu_noise: dict
    groundtruth: Groundtruth | None
    stats: dict

    def image_stamps(self, cam: int = 0) -> np.ndarray:
        raise NotImplementedError

    def load_image(self, cam: int, index: int) -> np.ndarray:
        raise NotImplementedError

    @property
    def num_cameras(self) -> int:
        return len(self.cameras)

    def _check_cam(self, cam: int) -> None:
        if not 0 <= cam < len(self.cameras):
            raise ValueError(f"{self.name}: camera index {cam} out of range (dataset has {len(self.cameras)})")

    def iter_events(self) -> Iterator[tuple]:
        """Time-ordered ``("imu", t_ns, gyro, acc)`` and ``("image", cam, t_ns, index)``.

        At equal stamps IMU samples come first (so the IMU up to an image's time is known when
        the image arrives), then cameras in index order.
        """
        streams = [(self.imu_stamps, 0, -1)]
        for c in range(len(self.cameras)):
            streams.append((self.image_stamps(c), 1, c))
        t_all = np.concatenate([s[0] for s in streams])
        kind = np.concatenate([np.full(s[0].shape, s[1]) for s in streams])
        cam = np.concatenate([np.full(s[0].shape, s[2]) for s in streams])
        idx = np.concatenate([np.arange(s[0].shape[0]) for s in streams])
        order = np.lexsort((idx, cam, kind, t_all))
        for i in order:
            t = int(t_all[i])
            if kind[i] == 0:
                row = self.imu_data[idx[i]]
                yield ("imu", t, row[:3].copy(), row[3:6].copy())
            else:
                yield ("image", int(cam[i]), t, int(idx[i]))

    def close(self) -> None:
        pass

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __repr__(self) -> str:
        n = [len(self.image_stamps(c)) for c in range(len(self.cameras))]
        return (f"<{type(self).__name__} {self.name!r}: images {n}, imu {len(self.imu_stamps)}, "
                f"groundtruth {'yes' if self.groundtruth is not None else 'no'}>")


def decode_image_file(path: Path) -> np.ndarray:
    import cv2

    if not Path(path).is_file():
        raise FileNotFoundError(f"missing image file: {path}")
    img = cv2.imread(str(path), cv2.IMREAD_UNCHANGED)
    if img is None:
        raise ValueError(f"cannot decode image file (corrupt or not an image): {path}")
    if img.ndim == 3:
        img = cv2.cvtColor(img, cv2.COLOR_BGRA2GRAY if img.shape[2] == 4 else cv2.COLOR_BGR2GRAY)
    if img.dtype == np.uint16:
        img = (img >> 8).astype(np.uint8)
    elif img.dtype != np.uint8:
        raise ValueError(f"unsupported image type {img.dtype} in {path}")
    return img


class AslDataset(Dataset):
    """The EuRoC ASL folder layout (``<root>/mav0/...``)."""

    def __init__(self, root: str | Path):
        root = Path(root)
        if root.name == "mav0" and (root / "cam0").is_dir():
            root = root.parent
        self.root = root
        self.name = root.name
        mav = root / "mav0"
        if not mav.is_dir():
            raise FileNotFoundError(f"not an EuRoC ASL dataset, missing folder: {mav}")
        self.stats = {"imu_non_monotonic_dropped": 0}
        self.cameras = []
        self._stamps: list[np.ndarray] = []
        self._files: list[list[Path]] = []
        cam_dirs = sorted((d for d in mav.glob("cam[0-9]*") if re.fullmatch(r"cam\d+", d.name)),
                          key=lambda d: int(d.name[3:]))
        if not cam_dirs or cam_dirs[0].name != "cam0":
            raise FileNotFoundError(f"missing camera folder: {mav / 'cam0'}")
        for c, d in enumerate(cam_dirs):
            if d.name != f"cam{c}":
                break
            self._load_camera(c, d)
        self._load_imu(mav / "imu0")
        self.groundtruth = self._load_groundtruth(root)

    def _load_camera(self, c: int, d: Path) -> None:
        csv = d / "data.csv"
        if not csv.is_file():
            raise FileNotFoundError(f"missing EuRoC camera index: {csv}")
        names: list[str] = []
        stamps: list[int] = []
        with open(csv) as f:
            for lineno, line in enumerate(f, 1):
                line = line.strip()
                if not line or line.startswith("#"):
                    continue
                parts = [p.strip() for p in line.split(",")]
                try:
                    stamps.append(int(parts[0]))
                except ValueError:
                    raise ValueError(f"{csv}:{lineno}: bad timestamp {parts[0]!r}") from None
                names.append(parts[1] if len(parts) > 1 and parts[1] else f"{parts[0]}.png")
        t = np.asarray(stamps, dtype=np.int64)
        if t.size > 1 and np.any(np.diff(t) <= 0):
            raise ValueError(f"{csv}: image timestamps are not strictly increasing")
        yaml_path = d / "sensor.yaml"
        if yaml_path.is_file():
            cam = CameraModel.from_euroc_yaml(yaml_path)
        else:
            log.warning("%s missing: using the EuRoC cam%d calibration", yaml_path, c)
            cam = default_camera(c)
        self.cameras.append(cam)
        self._stamps.append(t)
        self._files.append([d / "data" / n for n in names])

    def _load_imu(self, d: Path) -> None:
        csv = d / "data.csv"
        if not d.is_dir():
            log.warning("%s: no imu0 folder, the dataset has no IMU", self.root)
            self.imu_stamps = np.zeros(0, np.int64)
            self.imu_data = np.zeros((0, 6))
        else:
            t, data = read_csv_stamped(csv, 6)
            keep = _monotonic_mask(t)
            dropped = int(np.count_nonzero(~keep))
            if dropped:
                log.warning("%s: dropped %d non-monotonic IMU samples", csv, dropped)
                self.stats["imu_non_monotonic_dropped"] = dropped
            self.imu_stamps, self.imu_data = t[keep], data[keep]
        self.imu_noise = dict(EUROC_IMU_NOISE)
        y = d / "sensor.yaml"
        if y.is_file():
            vals = load_euroc_yaml(y)
            for k in EUROC_IMU_NOISE:
                if k in vals:
                    self.imu_noise[k] = float(vals[k])

    def _load_groundtruth(self, root: Path) -> Groundtruth | None:
        csv = root / "mav0" / "state_groundtruth_estimate0" / "data.csv"
        if csv.is_file():
            return read_euroc_groundtruth(csv)
        tum = sorted(root.glob("*groundtruth*.txt")) + sorted((root / "mav0").glob("*groundtruth*.txt"))
        if tum:
            return read_tum(tum[0])
        return None

    def image_stamps(self, cam: int = 0) -> np.ndarray:
        self._check_cam(cam)
        return self._stamps[cam]

    def image_path(self, cam: int, index: int) -> Path:
        self._check_cam(cam)
        return self._files[cam][index]

    def load_image(self, cam: int, index: int) -> np.ndarray:
        self._check_cam(cam)
        n = len(self._files[cam])
        if not -n <= index < n:
            raise IndexError(f"{self.name}: cam{cam} image index {index} out of range ({n} images)")
        img = decode_image_file(self._files[cam][index])
        c = self.cameras[cam]
        if img.shape != (c.height, c.width):
            raise ValueError(f"{self._files[cam][index]}: size {img.shape[1]}x{img.shape[0]} differs "
                             f"from the calibration's {c.width}x{c.height}")
        return img


def open_dataset(path: str | Path) -> Dataset:
    """Open an EuRoC ASL folder, a ROS 1 ``.bag`` or a ROS 2 bag (sqlite3 / mcap)."""
    p = Path(path)
    if not p.exists():
        raise FileNotFoundError(f"dataset not found: {p}")
    if p.is_dir() and ((p / "mav0").is_dir() or (p.name == "mav0" and (p / "cam0").is_dir())):
        return AslDataset(p)
    from . import bags

    if bags.is_bag(p):
        return bags.BagDataset(p)
    raise ValueError(f"{p}: not an EuRoC ASL folder (no mav0/), a ROS 1 .bag, or a ROS 2 bag "
                     "(no metadata.yaml)")
