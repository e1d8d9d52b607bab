"""Calibration: each camera's intrinsics and distortion, its extrinsics ``T_BS`` and the IMU noise,
with where each value came from. Nothing here guesses: a value no source gives is refused with
one line naming the ways to give it (:class:`CalibrationMissing`).

Sources, in order of precedence for every value on its own:

1. files the user gives: Kalibr's ``camchain-imucam.yaml`` (or ``camchain.yaml``) or an EuRoC camera
   ``sensor.yaml`` (:func:`read_camera_calibration`), Kalibr's ``imu.yaml`` or EuRoC's
   ``imu0/sensor.yaml`` (:func:`read_imu_calibration`);
2. what the dataset holds (:attr:`vilib_ros.datasets.Dataset.found_calibration`): an ASL folder's
   ``sensor.yaml`` files, a bag's ``sensor_msgs/CameraInfo`` and ``/tf_static``;
3. EuRoC's published calibration, only where the dataset says it is EuRoC's own (a bag on EuRoC's
   topics ``/cam0/image_raw``, ``/cam1/image_raw``, ``/imu0``), and said so.

Frames: ``T_BS`` maps camera coordinates into the body (IMU) frame, ``p_B = T_BS p_S``. Kalibr's
``T_cam_imu`` maps IMU coordinates into the camera frame, so ``T_BS = inv(T_cam_imu)``; its
``T_cn_cnm1`` maps camera n-1 into camera n. A Kalibr-format file with ``T_imu_cam`` (as OpenVINS
writes it) holds ``T_BS`` itself. No rclpy, no OpenCV here.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from .camera import DISTORTION_ALIASES, CameraModel, default_camera, load_euroc_yaml

#: EuRoC (ADIS16448) continuous-time noise densities, the keys of EuRoC's imu0/sensor.yaml and Kalibr's imu.yaml.
EUROC_IMU_NOISE = {
    "gyroscope_noise_density": 1.6968e-04,      # rad / s / sqrt(Hz)
    "gyroscope_random_walk": 1.9393e-05,        # rad / s^2 / sqrt(Hz)
    "accelerometer_noise_density": 2.0000e-03,  # m / s^2 / sqrt(Hz)
    "accelerometer_random_walk": 3.0000e-03,    # m / s^3 / sqrt(Hz)
    "rate_hz": 200.0,
}
IMU_NOISE_KEYS = ("gyroscope_noise_density", "gyroscope_random_walk", "accelerometer_noise_density",
                  "accelerometer_random_walk")

#: What the refusal proposes, per kind of missing value.
GIVE_CAMERA = "--calibration camchain-imucam.yaml (Kalibr) or --calibration cam0/sensor.yaml (EuRoC)"
GIVE_CAMERA1 = "--calibration camchain-imucam.yaml (Kalibr, with cam1), or --mono"
GIVE_BOTH = ("--calibration camchain-imucam.yaml (Kalibr, cam0 and cam1), or --mono with --calibration "
             "cam0/sensor.yaml (EuRoC)")
GIVE_IMU = "--imu-calibration imu.yaml (Kalibr) or --imu-calibration imu0/sensor.yaml (EuRoC)"
EUROC_DEFAULTS = "EuRoC's defaults"


class CalibrationError(ValueError):
    """A calibration that cannot be used (unreadable file, bad value, wrong resolution); the
    message names the file and the value."""


class CalibrationMissing(CalibrationError):
    """No source gives a calibration value a run needs; the one-line message names the ways to give it."""


@dataclass
class CameraCalibration:
    """What one source says about one camera: intrinsics (``intrinsics.T_BS`` is not used) and/or
    ``T_BS``, each with where it came from as ``(where, how)`` (a file or bag; the entry or
    topic in it), and the image topic the source names."""

    intrinsics: CameraModel | None = None
    intrinsics_from: tuple[str, str] = ("", "")
    T_BS: np.ndarray | None = None
    T_BS_from: tuple[str, str] = ("", "")
    rostopic: str | None = None


@dataclass
class CalibrationSet:
    """Everything one source gives (a dataset, or the user's files): cameras by index, IMU noise.

    ``why_missing`` holds, for a dataset, why a value is absent (``"cam0"``, ``"T_BS0"``, ``"imu"``:
    e.g. "no camera_info in the bag, not EuRoC's topics"); ``notes`` what the user must know about
    the values (a time shift that is not applied)."""

    cameras: dict[int, CameraCalibration] = field(default_factory=dict)
    imu_noise: dict | None = None
    imu_noise_from: tuple[str, str] = ("", "")
    imu_rostopic: str | None = None
    why_missing: dict[str, str] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)

    def camera(self, i: int) -> CameraCalibration:
        return self.cameras.get(i) or CameraCalibration()

    def merged(self, other: "CalibrationSet | None") -> "CalibrationSet":
        """This set with ``other``'s values filling what this one lacks (value by value)."""
        if other is None:
            return self
        out = CalibrationSet(imu_noise=self.imu_noise, imu_noise_from=self.imu_noise_from,
                             imu_rostopic=self.imu_rostopic or other.imu_rostopic,
                             why_missing=dict(other.why_missing), notes=self.notes + other.notes)
        if out.imu_noise is None:
            out.imu_noise, out.imu_noise_from = other.imu_noise, other.imu_noise_from
        for i in sorted(set(self.cameras) | set(other.cameras)):
            a, b = self.camera(i), other.camera(i)
            out.cameras[i] = CameraCalibration(
                a.intrinsics if a.intrinsics is not None else b.intrinsics,
                a.intrinsics_from if a.intrinsics is not None else b.intrinsics_from,
                a.T_BS if a.T_BS is not None else b.T_BS, a.T_BS_from if a.T_BS is not None else b.T_BS_from,
                a.rostopic or b.rostopic)
        return out


@dataclass
class Calibration:
    """The calibration a run uses: ``cameras`` (intrinsics and ``T_BS`` together), ``imu_noise``
    (None where no IMU noise is needed), ``sources`` rows ``(value, where, how, summary)``,
    ``defaults`` the values taken from EuRoC's defaults, ``notes`` what the user must know."""

    cameras: list[CameraModel]
    imu_noise: dict | None
    sources: list[tuple[str, str, str, str]]
    defaults: list[str] = field(default_factory=list)
    defaults_why: str = ""
    notes: list[str] = field(default_factory=list)

    def console_lines(self) -> list[str]:
        """One line naming where each value came from (grouped by source), a loud line where
        EuRoC's defaults are used, and the notes."""
        by_source: dict[str, list[str]] = {}
        for what, where, _, _ in self.sources:
            by_source.setdefault(where, []).append(what)
        lines = ["calibration: " + "; ".join(f"{', '.join(w)} from {s}" for s, w in by_source.items())]
        if self.defaults:
            give = [h for h, on in ((GIVE_CAMERA, any(d.startswith("cam") for d in self.defaults)),
                                    (GIVE_IMU, "IMU noise" in self.defaults)) if on]
            lines.append(f"WARNING: EuRoC's defaults are used for {', '.join(self.defaults)} ({self.defaults_why}); "
                         f"on any other camera or IMU the trajectory is wrong: give {', and '.join(give)}")
        lines += [f"warning: {n}" for n in self.notes]
        return lines

    def report_lines(self) -> list[str]:
        """The report's section: a table of every value, where it came from, and what it is."""
        lines = ["## Calibration", ""]
        if self.defaults:
            lines += [f"**EuRoC's defaults are used for {', '.join(self.defaults)}** ({self.defaults_why}): "
                      "on any other camera or IMU the trajectory is wrong.", ""]
        lines += ["| value | from | is |", "|---|---|---|"]
        lines += [f"| {what} | {where} ({how}) | {summary} |" for what, where, how, summary in self.sources]
        lines += [f"- **note**: {n}" for n in self.notes]
        return lines + [""]


# ----------------------------------------------------------------------------- readers
def _where(path) -> str:
    """A source's path as the report names it (absolute: a relative one says nothing later)."""
    return str(Path(path).resolve())


def _load(path: Path, what: str) -> dict:
    import yaml

    try:
        d = load_euroc_yaml(path)
    except FileNotFoundError:
        raise FileNotFoundError(f"{what} not found: {path}") from None
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as exc:
        raise CalibrationError(f"{path}: cannot read the {what} ({str(exc).splitlines()[0]})") from None
    if not isinstance(d, dict):
        raise CalibrationError(f"{path}: not a {what} (a YAML mapping expected, got {type(d).__name__})")
    return d


def _numbers(path, key: str, value, count: int) -> np.ndarray:
    if value is None:
        raise CalibrationError(f"{path}: missing key '{key}'")
    try:
        a = np.asarray(value, dtype=np.float64).reshape(-1)
    except (TypeError, ValueError):
        raise CalibrationError(f"{path}: key '{key}' must hold {count} numbers, got {str(value)[:80]!r}") from None
    if a.size != count:
        raise CalibrationError(f"{path}: key '{key}' must hold {count} numbers, got {a.size}")
    if not np.all(np.isfinite(a)):
        raise CalibrationError(f"{path}: key '{key}' has a non-finite value: {a.tolist()}")
    return a


def rigid(path, key: str, value) -> np.ndarray:
    """A 4x4 rigid transform from a YAML value (rows, a flat list, or EuRoC's ``{data: [...]}``):
    bottom row ``0 0 0 1`` and an orthonormal rotation with determinant +1, else CalibrationError."""
    if isinstance(value, dict):
        value = value.get("data")
    T = _numbers(path, key, value, 16).reshape(4, 4)
    R = T[:3, :3]
    if not np.allclose(T[3], [0, 0, 0, 1], atol=1e-9) or not np.allclose(R @ R.T, np.eye(3), atol=1e-4) \
            or np.linalg.det(R) < 0:
        raise CalibrationError(f"{path}: key '{key}' is not a rigid transform (rotation not orthonormal "
                               "or bottom row not 0 0 0 1)")
    return T


def inverse(T: np.ndarray) -> np.ndarray:
    """Inverse of a rigid transform (exact: R^T, -R^T t)."""
    out = np.eye(4)
    out[:3, :3] = T[:3, :3].T
    out[:3, 3] = -T[:3, :3].T @ T[:3, 3]
    return out


def _kalibr_camera(path: Path, name: str, d: dict) -> CameraModel:
    where = f"{path} ({name})"
    model = d.get("camera_model", "pinhole")
    if model != "pinhole":
        raise CalibrationError(f"{where}: camera_model {model!r} is not supported (pinhole with radtan, "
                               "equidistant or no distortion)")
    fu, fv, cu, cv = _numbers(where, "intrinsics", d.get("intrinsics"), 4)
    res = _numbers(where, "resolution", d.get("resolution"), 2)
    if np.any(res != np.round(res)) or np.any(res <= 0):
        raise CalibrationError(f"{where}: key 'resolution' must hold two positive integers, got {res.tolist()}")
    raw = d.get("distortion_model", "none")
    dm = DISTORTION_ALIASES.get(str(raw).lower()) if isinstance(raw, str) else None
    if dm is None:
        raise CalibrationError(f"{where}: distortion_model {str(raw)[:40]!r} is not supported (radtan, equidistant, none)")
    dist = np.zeros(4) if dm == "none" else _numbers(where, "distortion_coeffs", d.get("distortion_coeffs"), 4)
    try:
        return CameraModel(int(res[0]), int(res[1]), float(fu), float(fv), float(cu), float(cv), dm, dist)
    except ValueError as exc:
        raise CalibrationError(f"{where}: {exc}") from None


def read_kalibr_camchain(path: str | Path) -> CalibrationSet:
    """Kalibr's ``camchain-imucam.yaml`` / ``camchain.yaml``: ``cam0``, ``cam1``, ... with
    ``camera_model`` (pinhole), ``intrinsics`` [fu, fv, pu, pv], ``distortion_model``
    (radtan / equidistant / none), ``distortion_coeffs``, ``resolution``, ``rostopic``, and the
    extrinsics ``T_cam_imu`` (IMU -> camera; ``T_BS`` is its inverse) or ``T_imu_cam`` (camera ->
    IMU, as OpenVINS writes it), or for cam n > 0 ``T_cn_cnm1`` chained to cam n-1's."""
    path = Path(path)
    d = _load(path, "camera calibration")
    names = sorted((k for k in d if isinstance(k, str) and k.startswith("cam") and k[3:].isdigit()),
                   key=lambda k: int(k[3:]))
    if not names or names[0] != "cam0":
        raise CalibrationError(f"{path}: not a Kalibr camchain (no 'cam0' entry)")
    out = CalibrationSet()
    T_cam_imu: dict[int, np.ndarray] = {}
    for i, name in enumerate(names):
        if name != f"cam{i}":
            break
        c = d[name]
        if not isinstance(c, dict):
            raise CalibrationError(f"{path}: '{name}' is not a mapping")
        cam = CameraCalibration(_kalibr_camera(path, name, c), (_where(path), f"Kalibr {name}"))
        topic = c.get("rostopic")
        cam.rostopic = str(topic) if isinstance(topic, str) and topic else None
        where = f"{path} ({name})"
        if c.get("T_cam_imu") is not None:
            T_cam_imu[i] = rigid(where, "T_cam_imu", c["T_cam_imu"])
            cam.T_BS, cam.T_BS_from = inverse(T_cam_imu[i]), (_where(path), f"Kalibr {name} T_cam_imu, inverted")
            if c.get("T_imu_cam") is not None and not np.allclose(
                    rigid(where, "T_imu_cam", c["T_imu_cam"]), cam.T_BS, atol=1e-6):
                raise CalibrationError(f"{where}: T_cam_imu and T_imu_cam are not each other's inverse")
        elif c.get("T_imu_cam") is not None:
            cam.T_BS, cam.T_BS_from = rigid(where, "T_imu_cam", c["T_imu_cam"]), (_where(path), f"{name} T_imu_cam")
            T_cam_imu[i] = inverse(cam.T_BS)
        elif i > 0 and c.get("T_cn_cnm1") is not None and (i - 1) in T_cam_imu:
            T_cam_imu[i] = rigid(where, "T_cn_cnm1", c["T_cn_cnm1"]) @ T_cam_imu[i - 1]
            cam.T_BS = inverse(T_cam_imu[i])
            cam.T_BS_from = (_where(path), f"Kalibr {name} T_cn_cnm1 after cam{i - 1}'s T_cam_imu")
        shift = c.get("timeshift_cam_imu")
        if isinstance(shift, (int, float)) and shift != 0:
            out.notes.append(f"{path}: {name} timeshift_cam_imu {float(shift):g} s is not applied (the stamps are "
                             "used as recorded)")
        out.cameras[i] = cam
    return out


def read_euroc_camera(path: str | Path, cam: int = 0) -> CalibrationSet:
    """An EuRoC camera ``sensor.yaml`` (intrinsics, distortion, resolution, ``T_BS``) as camera ``cam``."""
    path = Path(path)
    d = _load(path, "camera calibration")
    try:
        model = CameraModel.from_euroc_yaml(path)
    except ValueError as exc:
        raise CalibrationError(str(exc)) from None
    c = CameraCalibration(model, (_where(path), "EuRoC sensor.yaml"))
    if d.get("T_BS") is not None:
        c.T_BS, c.T_BS_from = rigid(path, "T_BS", d["T_BS"]), (_where(path), "EuRoC sensor.yaml T_BS")
    return CalibrationSet(cameras={cam: c})


def read_camera_calibration(path: str | Path) -> CalibrationSet:
    """``--calibration FILE``: a Kalibr camchain (``cam0:`` ...) or an EuRoC camera ``sensor.yaml``
    (``intrinsics:`` at the top, taken as cam0)."""
    path = Path(path)
    d = _load(path, "camera calibration")
    if isinstance(d.get("cam0"), dict):
        return read_kalibr_camchain(path)
    if "intrinsics" in d:
        return read_euroc_camera(path, 0)
    if any(k in d for k in IMU_NOISE_KEYS) or isinstance(d.get("imu0"), dict):
        raise CalibrationError(f"{path}: this is an IMU calibration: give it with --imu-calibration")
    raise CalibrationError(f"{path}: neither a Kalibr camchain (no 'cam0') nor an EuRoC camera sensor.yaml "
                           "(no 'intrinsics')")


def read_imu_calibration(path: str | Path) -> CalibrationSet:
    """``--imu-calibration FILE``: Kalibr's ``imu.yaml`` (the four noise keys at the top, or under
    ``imu0`` as Kalibr's results write it; ``rostopic``, ``update_rate``) or EuRoC's
    ``imu0/sensor.yaml`` (the same four keys, ``rate_hz``). All four keys are required."""
    path = Path(path)
    d = _load(path, "IMU calibration")
    kalibr = False
    if isinstance(d.get("imu0"), dict):
        d, kalibr = d["imu0"], True
    if "intrinsics" in d or isinstance(d.get("cam0"), dict):
        raise CalibrationError(f"{path}: this is a camera calibration: give it with --calibration")
    kalibr = kalibr or "update_rate" in d or "rostopic" in d
    missing = [k for k in IMU_NOISE_KEYS if k not in d]
    if missing:
        raise CalibrationError(f"{path}: missing {', '.join(missing)} (an IMU calibration holds "
                               f"{', '.join(IMU_NOISE_KEYS)})")
    noise = {}
    for k in IMU_NOISE_KEYS:
        try:
            v = float(d[k])
        except (TypeError, ValueError):
            v = float("nan")
        if not (np.isfinite(v) and v > 0):
            raise CalibrationError(f"{path}: key '{k}' must be a positive number, got {d[k]!r}")
        noise[k] = v
    rate = d.get("update_rate", d.get("rate_hz"))
    if rate is not None:
        try:
            noise["rate_hz"] = float(rate)
        except (TypeError, ValueError):
            raise CalibrationError(f"{path}: key 'update_rate' must be a number, got {rate!r}") from None
    topic = d.get("rostopic")
    how = "Kalibr imu.yaml" if kalibr else "EuRoC sensor.yaml"
    return CalibrationSet(imu_noise=noise, imu_noise_from=(_where(path), how),
                          imu_rostopic=str(topic) if isinstance(topic, str) and topic else None)


def read_given(calibration: str | Path | None = None, imu_calibration: str | Path | None = None) -> CalibrationSet | None:
    """The user's files as one set (None where none is given)."""
    if not calibration and not imu_calibration:
        return None
    cams = read_camera_calibration(calibration) if calibration else CalibrationSet()
    imu = read_imu_calibration(imu_calibration) if imu_calibration else CalibrationSet()
    return cams.merged(imu)


# ----------------------------------------------------------------------------- resolution
def _summary_camera(c: CameraModel) -> str:
    dist = "" if c.distortion_model == "none" else f", {c.distortion_model} " + \
        " ".join(f"{v:.4g}" for v in c.distortion)
    return f"{c.width}x{c.height}, f {c.fx:.2f} {c.fy:.2f}, c {c.cx:.2f} {c.cy:.2f}{dist}"


def _summary_T(T: np.ndarray) -> str:
    from scipy.spatial.transform import Rotation

    ang = np.degrees(np.linalg.norm(Rotation.from_matrix(T[:3, :3]).as_rotvec()))
    return f"t [{T[0, 3]:.4f}, {T[1, 3]:.4f}, {T[2, 3]:.4f}] m, rotation {ang:.2f} deg"


def resolve(found: CalibrationSet, given: CalibrationSet | None = None, n_cameras: int = 1,
            labels: list[str] | None = None, imu_label: str = "the IMU", where: str = "",
            image_sizes: list | None = None, need_imu: bool = True, euroc_defaults: str | None = None) -> Calibration:
    """Every value for ``n_cameras`` cameras (and the IMU noise where ``need_imu``): from ``given``
    (the user's files), else ``found`` (the dataset's own), else EuRoC's defaults where
    ``euroc_defaults`` says why they apply; raises :class:`CalibrationMissing` (one line, every
    missing value and the ways to give it) or :class:`CalibrationError` (a camera whose calibrated
    resolution is not its images' ``image_sizes[i]`` (w, h))."""
    labels = labels or [f"cam{i}" for i in range(n_cameras)]
    prefix = f"{where}: " if where else ""
    src = (given or CalibrationSet()).merged(found)
    cameras, sources, defaults, missing, give = [], [], [], [], []
    for i in range(n_cameras):
        c = src.camera(i)
        intr, intr_from, T, T_from = c.intrinsics, c.intrinsics_from, c.T_BS, c.T_BS_from
        if euroc_defaults and i < 2:
            if intr is None:
                intr, intr_from = default_camera(i), (EUROC_DEFAULTS, euroc_defaults)
                defaults.append(f"cam{i} intrinsics")
            if T is None:
                T, T_from = default_camera(i).T_BS, (EUROC_DEFAULTS, euroc_defaults)
                defaults.append(f"cam{i} T_BS")
        hint = GIVE_CAMERA if i == 0 else GIVE_CAMERA1
        if intr is None:
            why = found.why_missing.get(f"cam{i}", "")
            missing.append(f"no calibration for {labels[i]}" + (f" ({why})" if why else ""))
            give.append(hint)
            continue
        if T is None:
            why = found.why_missing.get(f"T_BS{i}", "")
            missing.append(f"no extrinsics (T_BS) for {labels[i]}" + (f" ({why})" if why else ""))
            give.append(hint)
            continue
        size = image_sizes[i] if image_sizes and i < len(image_sizes) else None
        if size is not None and tuple(size) != (intr.width, intr.height):
            raise CalibrationError(f"{prefix}the calibration of {labels[i]} ({intr_from[0]}, {intr_from[1]}) is "
                                   f"{intr.width}x{intr.height}, its images are {size[0]}x{size[1]}"
                                   + (f": give {hint}" if intr_from[0] == EUROC_DEFAULTS else ""))
        cam = CameraModel(intr.width, intr.height, intr.fx, intr.fy, intr.cx, intr.cy, intr.distortion_model,
                          intr.distortion.copy(), np.asarray(T, float).copy())
        cameras.append(cam)
        sources.append((f"cam{i} intrinsics", *intr_from, _summary_camera(cam)))
        sources.append((f"cam{i} T_BS", *T_from, _summary_T(cam.T_BS)))
    noise, noise_from = src.imu_noise, src.imu_noise_from
    if need_imu and noise is None and euroc_defaults:
        noise, noise_from = dict(EUROC_IMU_NOISE), (EUROC_DEFAULTS, euroc_defaults)
        defaults.append("IMU noise")
    if need_imu and noise is None:
        why = found.why_missing.get("imu", "")
        missing.append(f"no IMU noise for {imu_label}" + (f" ({why})" if why else ""))
        give.append(GIVE_IMU)
    if missing:
        hints = list(dict.fromkeys(give))
        if GIVE_CAMERA in hints and GIVE_CAMERA1 in hints:
            hints.remove(GIVE_CAMERA1)
            hints[hints.index(GIVE_CAMERA)] = GIVE_BOTH
        raise CalibrationMissing(prefix + " and ".join(missing) + ": give " + ", and ".join(hints))
    if not need_imu:
        noise = None
    if noise is not None:
        noise = dict(noise)
        sources.append(("IMU noise", *noise_from, ", ".join(f"{k} {noise[k]:.4g}" for k in IMU_NOISE_KEYS)))
    return Calibration(cameras, noise, sources, defaults,
                       euroc_defaults or "", list(dict.fromkeys(src.notes)))
