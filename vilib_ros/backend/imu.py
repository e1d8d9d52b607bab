"""IMU buffer, noise parameters and integration helpers."""
from __future__ import annotations

import bisect

import numpy as np

from .simulation import EUROC_IMU_NOISE

_ALIASES = {
    "gyroscope_noise_density": ("gyroscope_noise_density", "gyro_noise_density", "gyro_noise", "sigma_g", "gyr_n"),
    "gyroscope_random_walk": ("gyroscope_random_walk", "gyro_random_walk", "gyro_walk", "sigma_bg", "gyr_w"),
    "accelerometer_noise_density": ("accelerometer_noise_density", "acc_noise_density", "acc_noise", "sigma_a", "acc_n"),
    "accelerometer_random_walk": ("accelerometer_random_walk", "acc_random_walk", "acc_walk", "sigma_ba", "acc_w"),
}


def normalise_imu_noise(noise: dict | None) -> dict:
    """Map a dataset's ``imu_noise`` dict (EuRoC sensor.yaml names or common aliases) to the
    four EuRoC names; missing entries take the EuRoC ADIS16448 defaults."""
    out = dict(EUROC_IMU_NOISE)
    for name, aliases in _ALIASES.items():
        for a in aliases:
            if noise and a in noise and noise[a] is not None:
                v = float(noise[a])
                if not np.isfinite(v) or v <= 0:
                    raise ValueError(f"imu_noise[{a!r}] must be a positive number, got {noise[a]!r}")
                out[name] = v
                break
    return out


def make_preintegration_params(noise: dict, gravity: float = 9.81, scale: float = 1.0, walk_scale: float = 1.0,
                               acc_scale: float | None = None):
    """gtsam PreintegrationCombinedParams with continuous-time noise densities (gtsam divides
    by dt internally) and bias random walks from the EuRoC sensor.yaml parameters; ``scale``
    multiplies the white-noise densities (``acc_scale``, where given, the accelerometer's
    instead), ``walk_scale`` the bias random walks (see ``BackendConfig.imu_noise_scale``)."""
    import gtsam

    n = normalise_imu_noise(noise)
    p = gtsam.PreintegrationCombinedParams.MakeSharedU(gravity)
    I3 = np.eye(3)
    acc_scale = scale if acc_scale is None else acc_scale
    p.setGyroscopeCovariance((scale * n["gyroscope_noise_density"]) ** 2 * I3)
    p.setAccelerometerCovariance((acc_scale * n["accelerometer_noise_density"]) ** 2 * I3)
    p.setIntegrationCovariance(1e-8 * I3)
    p.setBiasOmegaCovariance((walk_scale * n["gyroscope_random_walk"]) ** 2 * I3)
    p.setBiasAccCovariance((walk_scale * n["accelerometer_random_walk"]) ** 2 * I3)
    return p


def effective_noise_scale(t_ns: np.ndarray, data: np.ndarray, noise: dict) -> tuple[float, float]:
    """(gyro, accelerometer) white-noise density measured from samples, over the datasheet's.

    First differences remove the motion (smooth at the IMU rate) and leave sqrt(2) x the
    per-sample noise, vibration included; a median absolute deviation keeps manoeuvres out.
    Density = per-sample std x sqrt(dt). RMS over the three axes, at least 1."""
    n = normalise_imu_noise(noise)
    if len(t_ns) < 20:
        return 1.0, 1.0
    dt = float(np.median(np.diff(t_ns))) * 1e-9
    df = np.diff(np.asarray(data, float), axis=0)
    sd = 1.4826 * np.median(np.abs(df - np.median(df, axis=0)), axis=0) / np.sqrt(2) * np.sqrt(dt)
    g = float(np.sqrt(np.mean(sd[:3] ** 2))) / n["gyroscope_noise_density"]
    a = float(np.sqrt(np.mean(sd[3:] ** 2))) / n["accelerometer_noise_density"]
    return max(1.0, g), max(1.0, a)


class ImuBuffer:
    """Time-sorted IMU samples (int ns stamps, [wx wy wz ax ay az])."""

    def __init__(self):
        self.t: list[int] = []
        self.d: list[np.ndarray] = []

    def __len__(self):
        return len(self.t)

    def add(self, t_ns: int, sample: np.ndarray) -> bool:
        if self.t and t_ns <= self.t[-1]:
            return False
        self.t.append(int(t_ns))
        self.d.append(sample)
        return True

    @property
    def last_t(self) -> int | None:
        return self.t[-1] if self.t else None

    def trim_before(self, t_ns: int):
        i = bisect.bisect_left(self.t, t_ns) - 2
        if i > 1000:
            del self.t[:i]
            del self.d[:i]

    def window(self, t_a: int, t_b: int) -> tuple[np.ndarray, np.ndarray]:
        i0 = bisect.bisect_left(self.t, t_a)
        i1 = bisect.bisect_right(self.t, t_b)
        if i1 <= i0:
            return np.zeros(0, np.int64), np.zeros((0, 6))
        return np.asarray(self.t[i0:i1], np.int64), np.asarray(self.d[i0:i1])

    def max_gap(self, t_a: int, t_b: int) -> int:
        """Longest stretch of [t_a, t_b] (ns) without a sample: the spacing of the samples inside,
        and from the last sample at or before t_a / to t_b where the buffer does not reach them."""
        if not self.t:
            return int(t_b - t_a)
        i0 = max(bisect.bisect_right(self.t, t_a) - 1, 0)
        i1 = bisect.bisect_left(self.t, t_b)
        knots = self.t[i0:i1 + 1]
        gap = int(np.max(np.diff(knots))) if len(knots) > 1 else 0
        if t_a < self.t[0]:
            gap = max(gap, self.t[0] - int(t_a))
        if t_b > self.t[-1]:
            gap = max(gap, int(t_b) - self.t[-1])
        return gap

    def _at(self, t_ns: int) -> np.ndarray:
        i = bisect.bisect_left(self.t, t_ns)
        if i <= 0:
            return self.d[0]
        if i >= len(self.t):
            return self.d[-1]
        t0, t1 = self.t[i - 1], self.t[i]
        a = (t_ns - t0) / (t1 - t0)
        return (1 - a) * self.d[i - 1] + a * self.d[i]

    def segments(self, t_a: int, t_b: int):
        """Yield (measurement (6,), dt_s) pieces covering [t_a, t_b]: knots at t_a, every sample
        strictly inside and t_b (interpolated), each piece using the mean of its two knots."""
        if not self.t or t_b <= t_a:
            return
        i0 = bisect.bisect_right(self.t, t_a)
        i1 = bisect.bisect_left(self.t, t_b)
        knots_t = [t_a] + self.t[i0:i1] + [t_b]
        knots_d = [self._at(t_a)] + self.d[i0:i1] + [self._at(t_b)]
        for k in range(len(knots_t) - 1):
            dt = (knots_t[k + 1] - knots_t[k]) * 1e-9
            if dt > 0:
                yield 0.5 * (knots_d[k] + knots_d[k + 1]), dt

    def integrate(self, pim, t_a: int, t_b: int) -> int:
        """Integrate [t_a, t_b] into ``pim``. gtsam applies the rotation at the start of each
        step to the whole step's specific force (first order: a systematic error of about
        0.5 dt |w x f|, ~1e-2 m/s^2 at 200 Hz and 0.5 rad/s); the accelerometer sample is
        therefore rotated to the middle of the step first (``Exp(0.5 w dt) f``)."""
        n = 0
        bg = np.asarray(pim.biasHat().gyroscope())
        for m, dt in self.segments(t_a, t_b):
            w = m[:3]
            th = (w - bg) * (0.5 * dt)
            # first-order rotation is exact enough for |th| ~ 1e-3
            f = m[3:]
            a = f + np.array([th[1] * f[2] - th[2] * f[1], th[2] * f[0] - th[0] * f[2], th[0] * f[1] - th[1] * f[0]])
            pim.integrateMeasurement(a, w, dt)
            n += 1
        return n
