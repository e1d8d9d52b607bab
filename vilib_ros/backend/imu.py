"""IMU buffer, noise parameters and integration helpers."""
from __future__ import annotations

import numba
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


@numba.njit(cache=True, nogil=True, error_model="numpy")
def _diff_mad(t_ns, data):
    """(median spacing of ``t_ns``, per column of ``data`` (n, 6) the median absolute deviation of its
    first differences): :func:`effective_noise_scale`'s statistics, compiled (they run on every
    keyframe; NumPy's per-call overhead made them 0.14 ms there). The same values as NumPy's medians."""
    n = t_ns.shape[0]
    col = np.empty(n - 1)
    for i in range(n - 1):
        col[i] = float(t_ns[i + 1] - t_ns[i])
    dt = np.median(col)
    mad = np.empty(data.shape[1])
    for c in range(data.shape[1]):
        for i in range(n - 1):
            col[i] = data[i + 1, c] - data[i, c]
        m = np.median(col)
        for i in range(n - 1):
            col[i] = abs(col[i] - m)
        mad[c] = np.median(col)
    return dt, mad


def effective_noise_scale(t_ns: np.ndarray, data: np.ndarray, noise: dict) -> tuple[float, float]:
    """(gyro, accelerometer) white-noise density measured from samples, over the datasheet's.

    First differences remove the motion (smooth at the IMU rate) and leave sqrt(2) x the
    per-sample noise, vibration included; a median absolute deviation keeps manoeuvres out.
    Density = per-sample std x sqrt(dt). RMS over the three axes, at least 1."""
    n = normalise_imu_noise(noise)
    if len(t_ns) < 20:
        return 1.0, 1.0
    dt, mad = _diff_mad(np.asarray(t_ns, np.int64), np.asarray(data, np.float64))
    sd = 1.4826 * mad / np.sqrt(2) * np.sqrt(float(dt) * 1e-9)
    g = float(np.sqrt(np.mean(sd[:3] ** 2))) / n["gyroscope_noise_density"]
    a = float(np.sqrt(np.mean(sd[3:] ** 2))) / n["accelerometer_noise_density"]
    return max(1.0, g), max(1.0, a)


class ImuBuffer:
    """Time-sorted IMU samples (int ns stamps, [wx wy wz ax ay az]) in growing NumPy arrays:
    windows are slices (no per-sample Python objects), appends are amortised O(1)."""

    def __init__(self, capacity: int = 4096):
        self._t = np.zeros(capacity, np.int64)
        self._d = np.zeros((capacity, 6))
        self._a = 0           # first live sample
        self._b = 0           # one past the last

    def __len__(self):
        return self._b - self._a

    @property
    def t(self) -> np.ndarray:
        """Stamps of the buffered samples (a view)."""
        return self._t[self._a:self._b]

    @property
    def d(self) -> np.ndarray:
        """Samples (N, 6) (a view)."""
        return self._d[self._a:self._b]

    def _room(self, n: int) -> None:
        if self._b + n <= len(self._t):
            return
        live = self._b - self._a
        cap = max(len(self._t), 2 * (live + n))
        t, d = np.zeros(cap, np.int64), np.zeros((cap, 6))
        t[:live], d[:live] = self._t[self._a:self._b], self._d[self._a:self._b]
        self._t, self._d, self._a, self._b = t, d, 0, live

    def add(self, t_ns: int, sample) -> bool:
        if self._b > self._a and t_ns <= self._t[self._b - 1]:
            return False
        self._room(1)
        self._t[self._b] = t_ns
        self._d[self._b] = sample
        self._b += 1
        return True

    def extend(self, t_ns: np.ndarray, samples: np.ndarray) -> None:
        """Append samples already known to be increasing and later than the last one."""
        n = len(t_ns)
        self._room(n)
        self._t[self._b:self._b + n] = t_ns
        self._d[self._b:self._b + n] = samples
        self._b += n

    @property
    def last_t(self) -> int | None:
        return int(self._t[self._b - 1]) if self._b > self._a else None

    def trim_before(self, t_ns: int):
        i = int(np.searchsorted(self.t, t_ns, side="left")) - 2
        if i > 1000:
            self._a += i

    def window(self, t_a: int, t_b: int) -> tuple[np.ndarray, np.ndarray]:
        t = self.t
        i0 = int(np.searchsorted(t, t_a, side="left"))
        i1 = int(np.searchsorted(t, t_b, side="right"))
        if i1 <= i0:
            return np.zeros(0, np.int64), np.zeros((0, 6))
        return t[i0:i1], self.d[i0:i1]

    def max_gap(self, t_a: int, t_b: int) -> int:
        """Longest stretch of [t_a, t_b] (ns) without a sample: the spacing of the samples inside,
        and from the last sample at or before t_a / to t_b where the buffer does not reach them."""
        t = self.t
        if not len(t):
            return int(t_b - t_a)
        i0 = max(int(np.searchsorted(t, t_a, side="right")) - 1, 0)
        i1 = int(np.searchsorted(t, t_b, side="left"))
        knots = t[i0:i1 + 1]
        gap = int(np.max(np.diff(knots))) if len(knots) > 1 else 0
        if t_a < t[0]:
            gap = max(gap, int(t[0]) - int(t_a))
        if t_b > t[-1]:
            gap = max(gap, int(t_b) - int(t[-1]))
        return gap

    def _at(self, t_ns: int) -> np.ndarray:
        t, d = self.t, self.d
        i = int(np.searchsorted(t, t_ns, side="left"))
        if i <= 0:
            return d[0]
        if i >= len(t):
            return d[-1]
        t0, t1 = int(t[i - 1]), int(t[i])
        a = (t_ns - t0) / (t1 - t0)
        return (1 - a) * d[i - 1] + a * d[i]

    def pieces(self, t_a: int, t_b: int) -> tuple[np.ndarray, np.ndarray]:
        """(measurements (K, 6), dt_s (K,)) covering [t_a, t_b]: knots at t_a, every sample
        strictly inside and t_b (interpolated), each piece the mean of its two knots; pieces of
        zero length are left out."""
        t = self.t
        if not len(t) or t_b <= t_a:
            return np.zeros((0, 6)), np.zeros(0)
        i0 = int(np.searchsorted(t, t_a, side="right"))
        i1 = int(np.searchsorted(t, t_b, side="left"))
        kt = np.empty(i1 - i0 + 2, np.int64)
        kt[0], kt[1:-1], kt[-1] = t_a, t[i0:i1], t_b
        kd = np.empty((i1 - i0 + 2, 6))
        kd[0], kd[1:-1], kd[-1] = self._at(t_a), self.d[i0:i1], self._at(t_b)
        dt = np.diff(kt) * 1e-9
        m = 0.5 * (kd[:-1] + kd[1:])
        keep = dt > 0
        if not keep.all():
            m, dt = m[keep], dt[keep]
        return m, dt

    def segments(self, t_a: int, t_b: int):
        """Yield (measurement (6,), dt_s) pieces covering [t_a, t_b] (see :meth:`pieces`)."""
        m, dt = self.pieces(t_a, t_b)
        for k in range(len(dt)):
            yield m[k], float(dt[k])

    def integrate(self, pim, t_a: int, t_b: int) -> int:
        """Integrate [t_a, t_b] into ``pim``. gtsam applies the rotation at the start of each
        step to the whole step's specific force (first order: a systematic error of about
        0.5 dt |w x f|, ~1e-2 m/s^2 at 200 Hz and 0.5 rad/s); the accelerometer sample is
        therefore rotated to the middle of the step first (``Exp(0.5 w dt) f``, first order:
        exact enough for |0.5 w dt| ~ 1e-3)."""
        m, dt = self.pieces(t_a, t_b)
        if not len(dt):
            return 0
        bg = np.asarray(pim.biasHat().gyroscope())
        w = np.ascontiguousarray(m[:, :3])
        f = m[:, 3:]
        th = (w - bg) * (0.5 * dt)[:, None]
        a = np.empty_like(f)
        a[:, 0] = f[:, 0] + (th[:, 1] * f[:, 2] - th[:, 2] * f[:, 1])
        a[:, 1] = f[:, 1] + (th[:, 2] * f[:, 0] - th[:, 0] * f[:, 2])
        a[:, 2] = f[:, 2] + (th[:, 0] * f[:, 1] - th[:, 1] * f[:, 0])
        for k in range(len(dt)):
            pim.integrateMeasurement(a[k], w[k], float(dt[k]))
        return len(dt)


def warm_up() -> None:
    """Compile (or load from numba's cache) :func:`_diff_mad` now (the estimator calls it at
    construction: a cold cache costs ~1 s, not to be paid by the first keyframe)."""
    _diff_mad(np.arange(3, dtype=np.int64), np.zeros((3, 6)))
