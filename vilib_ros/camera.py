"""Camera models: pinhole with radial-tangential or equidistant distortion.

``CameraModel.undistort(uv)`` maps pixel coordinates to undistorted normalised
coordinates (x, y) with z = 1, as the VINS-Mono feature message expects;
``CameraModel.project(xyz)`` maps camera-frame points to distorted pixels.
``CameraModel.from_euroc_yaml`` reads an EuRoC ``sensor.yaml``.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import yaml

DISTORTION_MODELS = ("radial-tangential", "equidistant", "none")
#: Names of the distortion models in EuRoC/Kalibr/ROS files -> ours.
DISTORTION_ALIASES = {"radial-tangential": "radial-tangential", "radtan": "radial-tangential",
                      "plumb_bob": "radial-tangential", "equidistant": "equidistant", "equi": "equidistant",
                      "fisheye": "equidistant", "none": "none"}


def load_euroc_yaml(path: str | Path) -> dict:
    """Parse an EuRoC/Kalibr YAML file (which starts with the OpenCV ``%YAML:1.0`` line)."""
    text = Path(path).read_text()
    lines = [ln for ln in text.splitlines() if not ln.startswith("%YAML")]
    return yaml.safe_load("\n".join(lines)) or {}


@dataclass
class CameraModel:
    width: int
    height: int
    fx: float
    fy: float
    cx: float
    cy: float
    distortion_model: str = "none"
    distortion: np.ndarray = field(default_factory=lambda: np.zeros(4))
    T_BS: np.ndarray = field(default_factory=lambda: np.eye(4))  # camera -> body

    def __post_init__(self):
        if self.distortion_model not in DISTORTION_MODELS:
            raise ValueError(
                f"distortion_model must be one of {DISTORTION_MODELS}, got {self.distortion_model!r}"
            )
        if self.width <= 0 or self.height <= 0:
            raise ValueError(f"camera size must be positive, got {self.width}x{self.height}")
        for key in ("fx", "fy", "cx", "cy"):
            if not np.isfinite(getattr(self, key)):
                raise ValueError(f"intrinsics must be finite, got {key}={getattr(self, key)}")
        if self.fx <= 0 or self.fy <= 0:
            raise ValueError(f"focal lengths must be positive, got fx={self.fx}, fy={self.fy}")
        self.distortion = np.asarray(self.distortion, dtype=np.float64).reshape(-1)
        if not np.all(np.isfinite(self.distortion)):
            raise ValueError(f"distortion coefficients must be finite, got {self.distortion.tolist()}")
        T = np.asarray(self.T_BS, dtype=np.float64)
        if T.size != 16:
            raise ValueError(f"T_BS must be a 4x4 matrix (16 numbers), got {T.size} numbers")
        self.T_BS = T.reshape(4, 4)
        if not np.all(np.isfinite(self.T_BS)):
            raise ValueError("T_BS must be finite")

    @property
    def K(self) -> np.ndarray:
        return np.array([[self.fx, 0, self.cx], [0, self.fy, self.cy], [0, 0, 1.0]])

    @classmethod
    def from_euroc_yaml(cls, path: str | Path) -> "CameraModel":
        """Read an EuRoC/Kalibr camera ``sensor.yaml``. Every error names the file and the key
        (missing, not numbers, the wrong count, non-finite, an unknown distortion model)."""
        path = Path(path)
        try:
            d = load_euroc_yaml(path)
        except (OSError, UnicodeDecodeError, yaml.YAMLError) as exc:
            raise ValueError(f"{path}: cannot read the camera calibration ({str(exc).splitlines()[0]})") from None
        if not isinstance(d, dict):
            raise ValueError(f"{path}: not a camera calibration (expected keys such as 'intrinsics', "
                             f"'resolution', got {type(d).__name__})")

        def numbers(key: str, count: int, value=None) -> np.ndarray:
            v = d.get(key) if value is None else value
            if v is None:
                raise ValueError(f"{path}: missing key '{key}'")
            try:
                a = np.asarray(v, dtype=np.float64).reshape(-1)
            except (TypeError, ValueError):
                raise ValueError(f"{path}: key '{key}' must hold {count} numbers, got {str(v)[:80]!r}") from None
            if a.size != count:
                raise ValueError(f"{path}: key '{key}' must hold {count} numbers, got {a.size}")
            if not np.all(np.isfinite(a)):
                raise ValueError(f"{path}: key '{key}' has a non-finite value: {a.tolist()}")
            return a

        fu, fv, cu, cv = numbers("intrinsics", 4)
        res = numbers("resolution", 2)
        if np.any(res != np.round(res)):
            raise ValueError(f"{path}: key 'resolution' must hold two integers, got {res.tolist()}")
        raw_model = d.get("distortion_model", "none") or "none"
        model = DISTORTION_ALIASES.get(str(raw_model).lower()) if isinstance(raw_model, str) else None
        if model is None:
            raise ValueError(f"{path}: key 'distortion_model' must be one of "
                             f"{sorted(DISTORTION_ALIASES)}, got {str(raw_model)[:80]!r}")
        dist = np.zeros(4) if model == "none" and "distortion_coefficients" not in d else \
            numbers("distortion_coefficients", 4)
        T_raw = d.get("T_BS")
        if T_raw is None:
            T = np.eye(4)
        else:
            T = numbers("T_BS", 16, T_raw.get("data") if isinstance(T_raw, dict) else T_raw)
        try:
            return cls(int(res[0]), int(res[1]), float(fu), float(fv), float(cu), float(cv), model, dist,
                       T.reshape(4, 4))
        except ValueError as exc:
            raise ValueError(f"{path}: {exc}") from None

    def to_euroc_dict(self) -> dict:
        return {
            "sensor_type": "camera",
            "T_BS": {"cols": 4, "rows": 4, "data": [float(v) for v in self.T_BS.ravel()]},
            "rate_hz": 20,
            "resolution": [int(self.width), int(self.height)],
            "camera_model": "pinhole",
            "intrinsics": [float(self.fx), float(self.fy), float(self.cx), float(self.cy)],
            "distortion_model": self.distortion_model if self.distortion_model != "none" else "radial-tangential",
            "distortion_coefficients": [float(v) for v in (self.distortion if self.distortion.size else np.zeros(4))],
        }

    def undistort(self, uv: np.ndarray) -> np.ndarray:
        """Pixels (N, 2) -> undistorted normalised coordinates (N, 2), float64."""
        uv = np.asarray(uv, dtype=np.float64).reshape(-1, 1, 2)
        if uv.shape[0] == 0:
            return np.zeros((0, 2))
        if self.distortion_model == "none" or not np.any(self.distortion):
            out = np.empty((uv.shape[0], 2))
            out[:, 0] = (uv[:, 0, 0] - self.cx) / self.fx
            out[:, 1] = (uv[:, 0, 1] - self.cy) / self.fy
            return out
        xd = (uv[:, 0, 0] - self.cx) / self.fx
        yd = (uv[:, 0, 1] - self.cy) / self.fy
        d = self.distortion
        if self.distortion_model == "equidistant":
            # theta_d = theta (1 + k1 theta^2 + ... + k4 theta^8): Newton on theta.
            rd = np.hypot(xd, yd)
            th = rd.copy()
            for _ in range(20):
                t2 = th * th
                f = th * (1 + d[0] * t2 + d[1] * t2**2 + d[2] * t2**3 + d[3] * t2**4) - rd
                df = 1 + 3 * d[0] * t2 + 5 * d[1] * t2**2 + 7 * d[2] * t2**3 + 9 * d[3] * t2**4
                th = th - f / df
            s = np.where(rd > 1e-12, np.tan(th) / np.maximum(rd, 1e-12), 1.0)
            return np.stack([xd * s, yd * s], axis=1)
        # radial-tangential: Gauss-Newton on the forward model (converges in a few steps
        # over the whole EuRoC field of view, where fixed-point iteration is slow).
        x, y = xd.copy(), yd.copy()
        k1, k2, p1, p2 = d[:4]
        for _ in range(10):
            r2 = x * x + y * y
            rad = 1 + k1 * r2 + k2 * r2 * r2
            fx = x * rad + 2 * p1 * x * y + p2 * (r2 + 2 * x * x) - xd
            fy = y * rad + p1 * (r2 + 2 * y * y) + 2 * p2 * x * y - yd
            drad = 2 * k1 + 4 * k2 * r2  # d rad / d r2
            j11 = rad + x * x * drad + 2 * p1 * y + 6 * p2 * x
            j12 = x * y * drad + 2 * p1 * x + 2 * p2 * y
            j21 = x * y * drad + 2 * p1 * x + 2 * p2 * y
            j22 = rad + y * y * drad + 6 * p1 * y + 2 * p2 * x
            det = j11 * j22 - j12 * j21
            x = x - (j22 * fx - j12 * fy) / det
            y = y - (-j21 * fx + j11 * fy) / det
        return np.stack([x, y], axis=1)

    def distort_normalised(self, xy: np.ndarray) -> np.ndarray:
        """Undistorted normalised (N, 2) -> pixels (N, 2)."""
        xy = np.asarray(xy, dtype=np.float64).reshape(-1, 2)
        x, y = xy[:, 0], xy[:, 1]
        d = self.distortion
        if self.distortion_model == "equidistant" and np.any(d):
            r = np.hypot(x, y)
            th = np.arctan(r)
            thd = th * (1 + d[0] * th**2 + d[1] * th**4 + d[2] * th**6 + d[3] * th**8)
            s = np.where(r > 1e-12, thd / np.maximum(r, 1e-12), 1.0)
            xd, yd = x * s, y * s
        elif self.distortion_model == "radial-tangential" and np.any(d):
            k1, k2, p1, p2 = d[:4]
            r2 = x * x + y * y
            rad = 1 + k1 * r2 + k2 * r2 * r2
            xd = x * rad + 2 * p1 * x * y + p2 * (r2 + 2 * x * x)
            yd = y * rad + p1 * (r2 + 2 * y * y) + 2 * p2 * x * y
        else:
            xd, yd = x, y
        return np.stack([self.fx * xd + self.cx, self.fy * yd + self.cy], axis=1)

    def project(self, xyz: np.ndarray) -> np.ndarray:
        """Camera-frame points (N, 3) -> distorted pixels (N, 2)."""
        xyz = np.asarray(xyz, dtype=np.float64).reshape(-1, 3)
        return self.distort_normalised(xyz[:, :2] / xyz[:, 2:3])


def euroc_cam0() -> CameraModel:
    """EuRoC MAV cam0 calibration (V1_01), used as the default intrinsics."""
    T = np.array([
        [0.0148655429818, -0.999880929698, 0.00414029679422, -0.0216401454975],
        [0.999557249008, 0.0149672133247, 0.025715529948, -0.064676986768],
        [-0.0257744366974, 0.00375618835797, 0.999660727178, 0.00981073058949],
        [0.0, 0.0, 0.0, 1.0]])
    return CameraModel(752, 480, 458.654, 457.296, 367.215, 248.375, "radial-tangential",
                       np.array([-0.28340811, 0.07395907, 0.00019359, 1.76187114e-05]), T)


def euroc_cam1() -> CameraModel:
    """EuRoC MAV cam1 calibration (V1_01), the default for a second camera."""
    T = np.array([
        [0.0125552670891, -0.999755099723, 0.0182237714554, -0.0198435579556],
        [0.999598781151, 0.0130119051815, 0.0251588363115, 0.0453689425024],
        [-0.0253898008918, 0.0179005838253, 0.999517347078, 0.00786212447038],
        [0.0, 0.0, 0.0, 1.0]])
    return CameraModel(752, 480, 457.587, 456.134, 379.999, 255.238, "radial-tangential",
                       np.array([-0.28368365, 0.07451284, -0.00010473, -3.55590700e-05]), T)


def default_camera(cam: int) -> CameraModel:
    """The EuRoC calibration of camera ``cam`` (0 or 1), used where a dataset has none."""
    return euroc_cam0() if cam == 0 else euroc_cam1()
