"""What every data source shares: the :class:`Dataset` interface, :class:`Groundtruth`, the
errors a bad dataset raises, and the one reader/writer of TUM trajectories and EuRoC CSV files.

Timestamps are integer nanoseconds everywhere (never floats: 1.4e18 ns does not fit a
float64 mantissa). Quaternions are ``x, y, z, w`` (Hamilton, ``R_WB``), positions in metres.
No rclpy, no OpenCV here.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator

import numpy as np

from ..calibration import EUROC_IMU_NOISE, Calibration, CalibrationSet, resolve  # noqa: F401 (EUROC_IMU_NOISE: old import path)
from ..camera import CameraModel

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


@dataclass
class Topics:
    """Which topics of a bag are the left and right camera and the IMU (None: the automatic
    choice, see :class:`~.bags.BagDataset`); ``origin`` says, per field, who named it (for messages:
    "--image-topic", "cam0 rostopic of camchain.yaml")."""

    image: str | None = None
    image_right: str | None = None
    imu: str | None = None
    origin: dict = field(default_factory=dict)

    def __bool__(self) -> bool:
        return bool(self.image or self.image_right or self.imu)

    def named(self, key: str) -> str:
        """``key``'s topic and who named it, for a message."""
        topic = getattr(self, key)
        return f"{topic} ({self.origin[key]})" if key in self.origin else str(topic)


class DatasetError(ValueError):
    """A dataset that cannot be opened (the message names the file and what is wrong)."""


class FrameError(ValueError):
    """One frame that cannot be read; ``reason`` is one of :data:`FRAME_ERROR_REASONS`.

    A player skips such a frame, counts it under its reason and goes on."""

    def __init__(self, reason: str, message: str):
        super().__init__(message)
        self.reason = reason


#: Why a frame is skipped (a fixed set, so counters and logs stay bounded).
FRAME_ERROR_REASONS = ("missing_file", "empty_file", "corrupt", "unsupported_format", "size_mismatch",
                       "unreadable_message")


# ----------------------------------------------------------------------------- stamps, TUM, CSV
def ns_to_str(t_ns: int) -> str:
    """Integer nanoseconds -> ``'<s>.<9 digits>'`` (exact)."""
    s, ns = divmod(int(t_ns), 1_000_000_000)
    return f"{s}.{ns:09d}"


def seconds_str_to_ns(s: str) -> int:
    """'1403715273.26214' -> 1403715273262140000 exactly (no float rounding)."""
    s = s.strip()
    if "e" in s.lower():
        return int(round(float(s) * 1e9))
    neg = s.startswith("-")
    whole, _, frac = s.lstrip("+-").partition(".")
    ns = int(whole or 0) * 1_000_000_000 + int((frac + "000000000")[:9])
    return -ns if neg else ns


def write_tum(path: str | Path, t_ns, p, q_xyzw, header: bool = True) -> Path:
    """Write ``timestamp[s] tx ty tz qx qy qz qw`` lines (stamps with full ns precision)."""
    path = Path(path)
    with open(path, "w") as f:
        if header:
            f.write("# timestamp(s) tx ty tz qx qy qz qw\n")
        for t, pi, qi in zip(np.asarray(t_ns, dtype=np.int64), np.asarray(p, float), np.asarray(q_xyzw, float)):
            f.write(ns_to_str(int(t)) + " " + " ".join(f"{x:.9f}" for x in (*pi[:3], *qi[:4])) + "\n")
    return path


def read_tum(path: str | Path) -> "Groundtruth":
    """Read a TUM trajectory (``t x y z qx qy qz qw``; commas accepted) into a :class:`Groundtruth`.

    Raises ``ValueError`` naming the file and line for a short or unparsable line."""
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
                t_list.append(seconds_str_to_ns(parts[0]))
                rows.append([float(x) for x in parts[1:8]])
            except ValueError as exc:
                raise ValueError(f"{path}:{lineno}: cannot parse line ({exc})") from None
    d = np.asarray(rows, dtype=np.float64).reshape(-1, 7)
    return Groundtruth(np.asarray(t_list, dtype=np.int64), d[:, :3].copy(), d[:, 3:7].copy())


def read_csv_stamped(path: str | Path, ncols: int) -> tuple[np.ndarray, np.ndarray]:
    """Read a EuRoC CSV: int64 ns stamp column + ``ncols`` float columns.

    Raises FileNotFoundError / ValueError naming the file (and the line)."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"missing EuRoC file: {path}")
    t_list: list[int] = []
    rows: list[list[float]] = []
    with open(path, errors="replace") as f:
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
    return np.asarray(t_list, dtype=np.int64), np.asarray(rows, dtype=np.float64).reshape(-1, ncols)


def read_euroc_groundtruth(path: str | Path) -> "Groundtruth":
    """``state_groundtruth_estimate0/data.csv``: stamp, p, q_wxyz, v, b_w, b_a."""
    t, d = read_csv_stamped(path, 16)
    q_xyzw = np.concatenate([d[:, 4:7], d[:, 3:4]], axis=1)
    return Groundtruth(t, d[:, 0:3].copy(), q_xyzw, d[:, 7:10].copy(), d[:, 10:13].copy(), d[:, 13:16].copy())


def monotonic_mask(t: np.ndarray) -> np.ndarray:
    """Keep samples whose stamp is strictly greater than every earlier kept stamp."""
    if t.size == 0:
        return np.zeros(0, bool)
    prev_max = np.maximum.accumulate(np.concatenate([[np.iinfo(np.int64).min], t[:-1]]))
    return t > prev_max


# ----------------------------------------------------------------------------- types
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

    def write_tum(self, path: str | Path) -> Path:
        """Write the poses as a TUM file (:func:`write_tum`)."""
        return write_tum(path, self.t_ns, self.p, self.q_xyzw)

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


class Dataset:
    """Common interface of every dataset source (subclasses fill the attributes).

    Reading the streams needs no calibration: ``num_cameras``, ``image_stamps``, ``load_image``, the
    IMU and ground truth are what a replay uses. The calibration is resolved apart
    (:meth:`resolve_calibration`: the user's files, else :attr:`found_calibration`, what the dataset
    itself holds, else EuRoC's defaults where :attr:`euroc_defaults` says why they apply) and set with
    :meth:`use_calibration`; ``cameras`` and ``imu_noise`` are that calibration's (without one set,
    the dataset's own, which raises :class:`~vilib_ros.calibration.CalibrationMissing` where it is
    incomplete).

    ``warnings`` lists what a user must know about the data (no IMU, a truncated bag); ``stats``
    counts what was dropped while opening it. ``parallel_loads``: whether ``load_image`` may run on
    several threads at once (plain image files; not a bag reader)."""

    parallel_loads = False
    name: str
    path: Path
    imu_stamps: np.ndarray   # int64 (M,)
    imu_data: np.ndarray     # float64 (M, 6) wx wy wz ax ay az
    groundtruth: Groundtruth | None
    stats: dict
    warnings: list[str]
    #: why EuRoC's defaults may fill what the dataset lacks (None: they may not)
    euroc_defaults: str | None = None
    #: the calibration in use (:meth:`use_calibration`)
    calibration: Calibration | None = None

    @property
    def num_cameras(self) -> int:
        raise NotImplementedError

    @property
    def camera_labels(self) -> list[str]:
        """How messages name each camera's stream (a folder, a topic)."""
        return [f"cam{i}" for i in range(self.num_cameras)]

    @property
    def imu_label(self) -> str:
        return "the IMU"

    @property
    def found_calibration(self) -> CalibrationSet:
        """What the dataset itself holds of the calibration (raises CalibrationError for a file or
        message that holds one but cannot be used)."""
        raise NotImplementedError

    def image_size(self, cam: int) -> tuple[int, int] | None:
        """The (width, height) of camera ``cam``'s images, None where no image can be read."""
        raise NotImplementedError

    def resolve_calibration(self, given: CalibrationSet | None = None, cameras: int | None = None,
                            need_imu: bool | None = None) -> Calibration:
        """The calibration of the first ``cameras`` cameras (default all) and, where ``need_imu``
        (default: the dataset has an IMU), the IMU noise: :func:`vilib_ros.calibration.resolve`."""
        n = self.num_cameras if cameras is None else min(int(cameras), self.num_cameras)
        return resolve(self.found_calibration, given, n, self.camera_labels[:n], self.imu_label,
                       where=str(getattr(self, "path", self.name)), image_sizes=[self.image_size(c) for c in range(n)],
                       need_imu=self.has_imu if need_imu is None else need_imu, euroc_defaults=self.euroc_defaults)

    def use_calibration(self, calibration: Calibration) -> None:
        self.calibration = calibration

    def _own_calibration(self, need_imu: bool) -> Calibration:
        cache = self.__dict__.setdefault("_own_calibrations", {})
        if need_imu not in cache:
            cache[need_imu] = self.resolve_calibration(need_imu=need_imu)
        return cache[need_imu]

    @property
    def cameras(self) -> list[CameraModel]:
        if self.calibration is not None:
            return self.calibration.cameras
        return self._own_calibration(False).cameras

    @property
    def imu_noise(self) -> dict:
        if self.calibration is not None and self.calibration.imu_noise is not None:
            return self.calibration.imu_noise
        return self._own_calibration(True).imu_noise

    def image_stamps(self, cam: int = 0) -> np.ndarray:
        raise NotImplementedError

    def load_image(self, cam: int, index: int) -> np.ndarray:
        """The image as uint8 HxW; raises :class:`FrameError` for a frame that cannot be read."""
        raise NotImplementedError

    @property
    def has_imu(self) -> bool:
        return len(self.imu_stamps) > 0

    def _check_cam(self, cam: int) -> None:
        if not 0 <= cam < self.num_cameras:
            raise ValueError(f"{self.name}: camera index {cam} out of range (dataset has {self.num_cameras})")

    def iter_events(self) -> Iterator[tuple]:
        """Time-ordered ``("imu", t_ns, gyro, acc)`` and ``("image", cam, t_ns, index)``.

        At equal stamps IMU samples come first (so the IMU up to an image's time is known when
        the image arrives), then cameras in index order.
        """
        streams = [(self.imu_stamps, 0, -1)]
        for c in range(self.num_cameras):
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
        n = [len(self.image_stamps(c)) for c in range(self.num_cameras)]
        return (f"<{type(self).__name__} {self.name!r}: images {n}, imu {len(self.imu_stamps)}, "
                f"groundtruth {'yes' if self.groundtruth is not None else 'no'}>")
