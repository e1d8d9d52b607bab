"""The EuRoC ASL folder layout.

``<root>/mav0/cam{0,1}/data.csv`` + ``data/<stamp>.png`` + ``sensor.yaml``,
``mav0/imu0/data.csv`` (+ ``sensor.yaml`` for the noise densities), ground truth from
``mav0/state_groundtruth_estimate0/data.csv`` or a ``*groundtruth*.txt`` TUM file in the
dataset folder.

A broken folder fails at open with a message naming the file (missing ``data.csv``, a line
that does not parse, no images listed); what can be skipped is skipped and counted instead:
images listed with a repeated or backward stamp, IMU samples that are not finite or go backwards
(``stats``), and, at :meth:`AslDataset.load_image`, a frame that is missing, empty, corrupt or of
another size than the camera's first readable image (:class:`~.common.FrameError`). What a user
must know about the data (no IMU) is in ``warnings``.

The calibration (``cam{i}/sensor.yaml``, ``imu0/sensor.yaml``) is read only when it is asked for
(:attr:`AslDataset.found_calibration`): a replay does not need it. A folder without a camera's
``sensor.yaml`` or the IMU's has no calibration for it; EuRoC's defaults never fill it.
"""
from __future__ import annotations

import logging
import re
import threading
from pathlib import Path

import numpy as np

from ..calibration import CalibrationSet, read_euroc_camera, read_imu_calibration
from ..camera import CameraModel, euroc_cam1, load_euroc_yaml  # noqa: F401 (old import paths)
from .common import (EUROC_CAM_HEADER, EUROC_GT_HEADER, EUROC_IMU_HEADER, EUROC_IMU_NOISE,  # noqa: F401
                     Dataset, DatasetError, FrameError, Groundtruth, monotonic_mask, read_csv_stamped,
                     read_euroc_groundtruth, read_tum)

log = logging.getLogger(__name__)


def decode_image_file(path: Path) -> np.ndarray:
    """A PNG (or any OpenCV format) as uint8 HxW grey; 16-bit keeps its high byte, colour is
    converted. Raises :class:`FrameError` (missing_file, empty_file, corrupt, unsupported_format)."""
    import cv2

    path = Path(path)
    try:
        size = path.stat().st_size
    except OSError:
        raise FrameError("missing_file", f"missing image file: {path}") from None
    if size == 0:
        raise FrameError("empty_file", f"empty image file (0 bytes): {path}")
    img = cv2.imread(str(path), cv2.IMREAD_UNCHANGED)
    if img is None:
        raise FrameError("corrupt", f"cannot decode image file (corrupt or not an image): {path}")
    if img.ndim == 3:
        img = cv2.cvtColor(img, cv2.COLOR_BGRA2GRAY if img.shape[2] == 4 else cv2.COLOR_BGR2GRAY)
    if img.dtype == np.uint16:
        img = (img >> 8).astype(np.uint8)
    elif img.dtype != np.uint8:
        raise FrameError("unsupported_format", f"unsupported image type {img.dtype} in {path}")
    return img


class AslDataset(Dataset):
    """The EuRoC ASL folder layout (``<root>/mav0/...``)."""

    parallel_loads = True       # one PNG file per image: decoded on several threads by the replay

    def __init__(self, root: str | Path):
        root = Path(root)
        if root.name == "mav0" and (root / "cam0").is_dir():
            root = root.parent
        self.root = self.path = root
        self.name = root.name
        mav = root / "mav0"
        if not mav.is_dir():
            raise FileNotFoundError(f"not an EuRoC ASL dataset, missing folder: {mav}")
        self.stats = {"imu_non_monotonic_dropped": 0, "imu_non_finite_dropped": 0,
                      "images_non_monotonic_dropped": 0}
        self.warnings: list[str] = []
        self._cam_dirs: list[Path] = []
        self._sizes: dict[int, tuple[int, int] | None] = {}
        self._size_lock = threading.Lock()
        self._found: CalibrationSet | None = None
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
        for w in self.warnings:
            log.warning("%s", w)

    def _load_camera(self, c: int, d: Path) -> None:
        csv = d / "data.csv"
        if not csv.is_file():
            raise FileNotFoundError(f"missing EuRoC camera index: {csv}")
        names: list[str] = []
        stamps: list[int] = []
        lines: list[int] = []
        with open(csv, errors="replace") as f:
            for lineno, line in enumerate(f, 1):
                line = line.strip()
                if not line or line.startswith("#"):
                    continue
                parts = [p.strip() for p in line.split(",")]
                try:
                    stamps.append(int(parts[0]))
                except ValueError:
                    raise DatasetError(f"{csv}:{lineno}: bad timestamp {parts[0][:40]!r} "
                                       "(expected integer nanoseconds)") from None
                names.append(parts[1] if len(parts) > 1 and parts[1] else f"{parts[0]}.png")
                lines.append(lineno)
        if not stamps:
            raise DatasetError(f"{csv}: lists no images (the file is empty or holds only comments)")
        t = np.asarray(stamps, dtype=np.int64)
        keep = monotonic_mask(t)
        if not keep.all():
            bad = [lines[i] for i in np.nonzero(~keep)[0]]
            self.stats["images_non_monotonic_dropped"] += len(bad)
            self.warnings.append(f"{csv}: skipped {len(bad)} image(s) whose stamp repeats or goes back "
                                 f"(line{'s' if len(bad) > 1 else ''} {', '.join(map(str, bad[:5]))}"
                                 f"{', ...' if len(bad) > 5 else ''})")
        self._cam_dirs.append(d)
        self._stamps.append(t[keep])
        self._files.append([d / "data" / n for n, k in zip(names, keep) if k])

    def _load_imu(self, d: Path) -> None:
        csv = d / "data.csv"
        if not d.is_dir():
            self.warnings.append(f"{self.root}: no mav0/imu0 folder: the dataset has no IMU, so the backend "
                                 "cannot estimate a trajectory (the frontend tracks without IMU prediction)")
            self.imu_stamps = np.zeros(0, np.int64)
            self.imu_data = np.zeros((0, 6))
        else:
            t, data = read_csv_stamped(csv, 6)
            finite = np.all(np.isfinite(data), axis=1)
            if not finite.all():
                self.stats["imu_non_finite_dropped"] = int(np.count_nonzero(~finite))
                self.warnings.append(f"{csv}: skipped {self.stats['imu_non_finite_dropped']} IMU sample(s) "
                                     "with non-finite values")
                t, data = t[finite], data[finite]
            keep = monotonic_mask(t)
            dropped = int(np.count_nonzero(~keep))
            if dropped:
                self.warnings.append(f"{csv}: skipped {dropped} IMU sample(s) whose stamp repeats or goes back")
                self.stats["imu_non_monotonic_dropped"] = dropped
            self.imu_stamps, self.imu_data = t[keep], data[keep]
            if not len(self.imu_stamps):
                self.warnings.append(f"{csv}: holds no IMU samples: the backend cannot estimate a trajectory")

    def _load_groundtruth(self, root: Path) -> Groundtruth | None:
        csv = root / "mav0" / "state_groundtruth_estimate0" / "data.csv"
        if csv.is_file():
            return read_euroc_groundtruth(csv)
        tum = sorted(root.glob("*groundtruth*.txt")) + sorted((root / "mav0").glob("*groundtruth*.txt"))
        if tum:
            return read_tum(tum[0])
        return None

    @property
    def num_cameras(self) -> int:
        return len(self._stamps)

    @property
    def camera_labels(self) -> list[str]:
        return [f"{d.relative_to(self.root)}" for d in self._cam_dirs]

    @property
    def imu_label(self) -> str:
        return "mav0/imu0"

    @property
    def found_calibration(self) -> CalibrationSet:
        """``cam{i}/sensor.yaml`` (intrinsics, distortion, T_BS) and ``imu0/sensor.yaml`` (the IMU
        noise), read on first use; a file that is there but unusable raises CalibrationError."""
        if self._found is None:
            found = CalibrationSet()
            for c, d in enumerate(self._cam_dirs):
                y = d / "sensor.yaml"
                rel = y.relative_to(self.root)
                if not y.is_file():
                    found.why_missing[f"cam{c}"] = f"no {rel}"
                    continue
                found.cameras[c] = read_euroc_camera(y, c).camera(c)
                if found.cameras[c].T_BS is None:
                    found.why_missing[f"T_BS{c}"] = f"{rel} has no T_BS"
            y = self.root / "mav0" / "imu0" / "sensor.yaml"
            if y.is_file():
                imu = read_imu_calibration(y)
                found.imu_noise, found.imu_noise_from = imu.imu_noise, imu.imu_noise_from
            else:
                found.why_missing["imu"] = f"no {y.relative_to(self.root)}"
            self._found = found
        return self._found

    def image_size(self, cam: int) -> tuple[int, int] | None:
        """The size of camera ``cam``'s first readable image (every other image must have it)."""
        self._check_cam(cam)
        with self._size_lock:
            if cam not in self._sizes:
                self._sizes[cam] = None
                for f in self._files[cam][:50]:
                    try:
                        img = decode_image_file(f)
                    except FrameError:
                        continue
                    self._sizes[cam] = (int(img.shape[1]), int(img.shape[0]))
                    break
            return self._sizes[cam]

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
        size = self.image_size(cam)
        if size is not None and (img.shape[1], img.shape[0]) != size:
            raise FrameError("size_mismatch", f"{self._files[cam][index]}: size {img.shape[1]}x{img.shape[0]} "
                                              f"differs from the camera's other images ({size[0]}x{size[1]})")
        return img
