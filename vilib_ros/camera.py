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
        if self.fx <= 0 or self.fy <= 0:
            raise ValueError(f"focal lengths must be positive, got fx={self.fx}, fy={self.fy}")
        self.distortion = np.asarray(self.distortion, dtype=np.float64).reshape(-1)
        self.T_BS = np.asarray(self.T_BS, dtype=np.float64).reshape(4, 4)

    @property
    def K(self) -> np.ndarray:
        return np.array([[self.fx, 0, self.cx], [0, self.fy, self.cy], [0, 0, 1.0]])

    @classmethod
    def from_euroc_yaml(cls, path: str | Path) -> "CameraModel":
        d = load_euroc_yaml(path)
        fu, fv, cu, cv = (float(v) for v in d["intrinsics"])
        w, h = (int(v) for v in d["resolution"])
        model = d.get("distortion_model", "none") or "none"
        if model in ("radtan", "plumb_bob"):
            model = "radial-tangential"
        if model in ("equi", "fisheye"):
            model = "equidistant"
        T = np.asarray(d.get("T_BS", {}).get("data", np.eye(4).ravel()), dtype=np.float64)
        return cls(w, h, fu, fv, cu, cv, model, np.asarray(d.get("distortion_coefficients", [0, 0, 0, 0])), T.reshape(4, 4))

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
