"""IMU input (:class:`ImuInput`: the checks every sample passes), buffer, noise parameters and
integration helpers."""
from __future__ import annotations

import logging
import math

import numba
import numpy as np

from ..datasets.common import EUROC_IMU_NOISE
from ._gtsam import load as load_gtsam
from .config import BackendConfig
from .schur_kernels import so3_exp

log = logging.getLogger("vilib_ros.backend.estimator")   # one logger for the estimator's parts

#: the four EuRoC names of the IMU noise and the other names a sensor.yaml may give them
IMU_NOISE_ALIASES = {
    "gyroscope_noise_density": ("gyroscope_noise_density", "gyro_noise_density", "gyro_noise", "sigma_g", "gyr_n"),
    "gyroscope_random_walk": ("gyroscope_random_walk", "gyro_random_walk", "gyro_walk", "sigma_bg", "gyr_w"),
    "accelerometer_noise_density": ("accelerometer_noise_density", "acc_noise_density", "acc_noise", "sigma_a", "acc_n"),
    "accelerometer_random_walk": ("accelerometer_random_walk", "acc_random_walk", "acc_walk", "sigma_ba", "acc_w"),
}


def normalise_imu_noise(noise: dict | None) -> dict:
    """Map a dataset's ``imu_noise`` dict (EuRoC sensor.yaml names or common aliases) to the
    four EuRoC names; missing entries take the EuRoC ADIS16448 defaults."""
    out = {name: EUROC_IMU_NOISE[name] for name in IMU_NOISE_ALIASES}
    for name, aliases in IMU_NOISE_ALIASES.items():
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
    gtsam = load_gtsam()

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
    keyframe, where NumPy's per-call overhead would dominate). The same values as NumPy's medians."""
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
    return measured_noise_scales(np.ascontiguousarray(t_ns, np.int64), np.ascontiguousarray(data, np.float64),
                                 n["gyroscope_noise_density"], n["accelerometer_noise_density"])


@numba.njit(cache=True, nogil=True, error_model="numpy")
def measured_noise_scales(t_ns, data, gyro_density, acc_density):
    """:func:`effective_noise_scale` on at least 20 samples with the datasheet densities given as
    numbers, compiled (every keyframe). The same expression, in the
    same order: the same values."""
    dt, mad = _diff_mad(t_ns, data)
    r2, s = np.sqrt(2.0), np.sqrt(dt * 1e-9)
    sg = 0.0
    sa = 0.0
    for c in range(3):
        v = 1.4826 * mad[c] / r2 * s
        sg += v * v
        w = 1.4826 * mad[c + 3] / r2 * s
        sa += w * w
    return max(1.0, np.sqrt(sg / 3) / gyro_density), max(1.0, np.sqrt(sa / 3) / acc_density)


@numba.njit(cache=True, nogil=True, error_model="numpy")
def _interp(t, d, x, out):
    """``out[:] =`` the sample at ``x`` linearly interpolated (the first / last beyond the ends)."""
    n = t.shape[0]
    i = np.searchsorted(t, x)
    if i <= 0:
        out[:] = d[0]
    elif i >= n:
        out[:] = d[n - 1]
    else:
        t0, t1 = t[i - 1], t[i]
        a = (x - t0) / (t1 - t0)
        for c in range(d.shape[1]):
            out[c] = (1 - a) * d[i - 1, c] + a * d[i, c]


@numba.njit(cache=True, nogil=True, error_model="numpy")
def _pieces(t, d, t_a, t_b):
    """:meth:`ImuBuffer.pieces` compiled (it runs on every frame): the
    same arithmetic in the same order, so the same values to the last bit."""
    i0 = np.searchsorted(t, t_a, side="right")
    i1 = np.searchsorted(t, t_b)
    k = i1 - i0 + 2
    kt = np.empty(k, np.int64)
    kd = np.empty((k, 6))
    kt[0], kt[k - 1] = t_a, t_b
    kt[1:k - 1] = t[i0:i1]
    _interp(t, d, t_a, kd[0])
    kd[1:k - 1] = d[i0:i1]
    _interp(t, d, t_b, kd[k - 1])
    m = np.empty((k - 1, 6))
    dt = np.empty(k - 1)
    n = 0
    for j in range(k - 1):
        step = (kt[j + 1] - kt[j]) * 1e-9
        if step > 0:
            dt[n] = step
            for c in range(6):
                m[n, c] = 0.5 * (kd[j, c] + kd[j + 1, c])
            n += 1
    return m[:n], dt[:n]


@numba.njit(cache=True, nogil=True, error_model="numpy")
def _mid_step_acc(m, dt, bg):
    """Each piece's specific force rotated to the middle of its step (:meth:`ImuBuffer.integrate`),
    and its angular rate: (acc (K, 3), gyro (K, 3)), compiled, the NumPy expression's order kept."""
    k = dt.shape[0]
    a = np.empty((k, 3))
    w = np.empty((k, 3))
    for j in range(k):
        h = 0.5 * dt[j]
        w[j, 0], w[j, 1], w[j, 2] = m[j, 0], m[j, 1], m[j, 2]
        t0, t1, t2 = (m[j, 0] - bg[0]) * h, (m[j, 1] - bg[1]) * h, (m[j, 2] - bg[2]) * h
        f0, f1, f2 = m[j, 3], m[j, 4], m[j, 5]
        a[j, 0] = f0 + (t1 * f2 - t2 * f1)
        a[j, 1] = f1 + (t2 * f0 - t0 * f2)
        a[j, 2] = f2 + (t0 * f1 - t1 * f0)
    return a, w


@numba.njit(cache=True, nogil=True, error_model="numpy")
def _steps(t, d, t_a, t_b, bg):
    """:meth:`ImuBuffer.steps`: :func:`_pieces` then :func:`_mid_step_acc` in one compiled call."""
    m, dt = _pieces(t, d, t_a, t_b)
    a, w = _mid_step_acc(m, dt, bg)
    return a, w, dt


@numba.njit(cache=True, nogil=True, error_model="numpy")
def preintegrate(delta, a, w, dt, bias):
    """gtsam's tangent-space preintegration (``TangentPreintegration::update``: the mean only, no
    Jacobians or covariance) of the steps ``a`` (K, 3) specific force, ``w`` (K, 3) angular rate, ``dt``
    (K,) s, corrected by ``bias`` (6: accelerometer, gyroscope, as ``ConstantBias.vector()``), into
    ``delta`` (10: theta, position, velocity, elapsed time) in place:
    ``theta += Jr^-1(theta) w dt``, ``p += v dt + R(theta) a dt^2 / 2``, ``v += R(theta) a dt``.
    What a non-keyframe's prediction needs, without calls into gtsam per frame; equal to gtsam's
    ``deltaRij / deltaPij / deltaVij`` to rounding (test_backend_compiled)."""
    R = np.empty((3, 3))
    for k in range(dt.shape[0]):
        h = dt[k]
        a0, a1, a2 = a[k, 0] - bias[0], a[k, 1] - bias[1], a[k, 2] - bias[2]
        w0, w1, w2 = w[k, 0] - bias[3], w[k, 1] - bias[4], w[k, 2] - bias[5]
        x, y, z = delta[0], delta[1], delta[2]
        so3_exp(x, y, z, R)
        n0 = R[0, 0] * a0 + R[0, 1] * a1 + R[0, 2] * a2
        n1 = R[1, 0] * a0 + R[1, 1] * a1 + R[1, 2] * a2
        n2 = R[2, 0] * a0 + R[2, 1] * a1 + R[2, 2] * a2
        # Jr^-1(theta) w = w + K w / 2 + C K (K w), C = 1/t^2 - (1 + cos t) / (2 t sin t)
        t2 = x * x + y * y + z * z
        if t2 < 1e-6:
            C = 1.0 / 12.0 + t2 / 720.0
        else:
            t = np.sqrt(t2)
            C = 1.0 / t2 - (1.0 + np.cos(t)) / (2.0 * t * np.sin(t))
        k0, k1, k2 = y * w2 - z * w1, z * w0 - x * w2, x * w1 - y * w0
        kk0, kk1, kk2 = y * k2 - z * k1, z * k0 - x * k2, x * k1 - y * k0
        hh = 0.5 * h * h
        for i, n in ((0, n0), (1, n1), (2, n2)):
            delta[3 + i] += delta[6 + i] * h + n * hh
            delta[6 + i] += n * h
        delta[0] += (w0 + 0.5 * k0 + C * kk0) * h
        delta[1] += (w1 + 0.5 * k1 + C * kk1) * h
        delta[2] += (w2 + 0.5 * k2 + C * kk2) * h
        delta[9] += h


@numba.njit(cache=True, nogil=True, error_model="numpy")
def predict_nav(delta, T_i, v_i, gravity, T, v):
    """gtsam's ``PreintegrationBase::predict`` from the state (pose ``T_i`` (4, 4) body -> world, ``v_i``)
    with the bias the preintegration ``delta`` (:func:`preintegrate`) was made with (no bias
    correction): ``correctPIM`` (initial velocity, gravity ``gravity`` m/s^2 along -z) then
    ``NavState::retract``. Writes the pose ``T`` (4, 4) and the velocity ``v`` (3,)."""
    R_i, p_i = T_i[:3, :3], T_i[:3, 3]
    dT = delta[9]
    E = np.empty((3, 3))
    so3_exp(delta[0], delta[1], delta[2], E)
    dp, dv = np.empty(3), np.empty(3)
    for i in range(3):
        # R_i^T v_i dt + R_i^T g dt^2 / 2, R_i^T g dt with g = (0, 0, -gravity)
        rv = R_i[0, i] * v_i[0] + R_i[1, i] * v_i[1] + R_i[2, i] * v_i[2]
        rg = -R_i[2, i] * gravity
        dp[i] = delta[3 + i] + dT * rv + 0.5 * dT * dT * rg
        dv[i] = delta[6 + i] + dT * rg
    for i in range(3):
        for j in range(3):
            T[i, j] = R_i[i, 0] * E[0, j] + R_i[i, 1] * E[1, j] + R_i[i, 2] * E[2, j]
        T[i, 3] = p_i[i] + R_i[i, 0] * dp[0] + R_i[i, 1] * dp[1] + R_i[i, 2] * dp[2]
        v[i] = v_i[i] + R_i[i, 0] * dv[0] + R_i[i, 1] * dv[1] + R_i[i, 2] * dv[2]
    T[3, 0], T[3, 1], T[3, 2], T[3, 3] = 0.0, 0.0, 0.0, 1.0


@numba.njit(cache=True, nogil=True, error_model="numpy")
def _max_gap(t, t_a, t_b):
    """:meth:`ImuBuffer.max_gap` compiled (every frame)."""
    n = t.shape[0]
    if n == 0:
        return t_b - t_a
    i0 = max(np.searchsorted(t, t_a, side="right") - 1, 0)
    i1 = min(np.searchsorted(t, t_b), n - 1)
    gap = 0
    for i in range(i0, i1):
        g = t[i + 1] - t[i]
        if g > gap:
            gap = g
    if t_a < t[0]:
        gap = max(gap, t[0] - t_a)
    if t_b > t[n - 1]:
        gap = max(gap, t_b - t[n - 1])
    return gap


@numba.njit(cache=True, nogil=True, error_model="numpy")
def batch_ok(t, d, last, max_gyro, max_acc):
    """Whether every sample of a batch passes :meth:`ImuInput.add`'s checks (finite, within the
    sensor's range, stamps increasing and after ``last``; ``last`` < 0: no sample before), in one
    compiled pass (every frame's batch)."""
    n = t.shape[0]
    if n and last >= 0 and t[0] <= last:
        return False
    for i in range(n):
        if i and t[i] <= t[i - 1]:
            return False
        for c in range(6):
            v = d[i, c]
            if not np.isfinite(v) or abs(v) > (max_gyro if c < 3 else max_acc):
                return False
    return True


@numba.njit(cache=True, nogil=True, error_model="numpy")
def gaps_over(t, last, max_gap_ns):
    """Indices ``k`` where the step to ``t[k]`` (from ``t[k - 1]``, or from ``last`` for k = 0 when
    ``last`` >= 0) exceeds ``max_gap_ns``."""
    out = []
    prev = last if last >= 0 else (t[0] if t.shape[0] else 0)
    for k in range(t.shape[0]):
        if t[k] - prev > max_gap_ns:
            out.append(k)
        prev = t[k]
    return out


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
        return int(_max_gap(self.t, int(t_a), int(t_b)))

    def pieces(self, t_a: int, t_b: int) -> tuple[np.ndarray, np.ndarray]:
        """(measurements (K, 6), dt_s (K,)) covering [t_a, t_b]: knots at t_a, every sample
        strictly inside and t_b (interpolated), each piece the mean of its two knots; pieces of
        zero length are left out."""
        if self._b == self._a or t_b <= t_a:
            return np.zeros((0, 6)), np.zeros(0)
        return _pieces(self.t, self.d, int(t_a), int(t_b))

    def steps(self, t_a: int, t_b: int, bg: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(specific force (K, 3) rotated to the middle of each step by the rate less ``bg``, angular rate
        (K, 3), dt_s (K,)) covering [t_a, t_b]: what :meth:`integrate` feeds gtsam, in one compiled call."""
        if self._b == self._a or t_b <= t_a:
            return np.zeros((0, 3)), np.zeros((0, 3)), np.zeros(0)
        return _steps(self.t, self.d, int(t_a), int(t_b), bg)

    def integrate(self, pim, t_a: int, t_b: int) -> int:
        """Integrate [t_a, t_b] into ``pim``. gtsam applies the rotation at the start of each
        step to the whole step's specific force (first order: a systematic error of about
        0.5 dt |w x f|, ~1e-2 m/s^2 at 200 Hz and 0.5 rad/s); the accelerometer sample is
        therefore rotated to the middle of the step first (``Exp(0.5 w dt) f``, first order:
        exact enough for |0.5 w dt| ~ 1e-3)."""
        a, w, dt = self.steps(t_a, t_b, np.array(pim.biasHat().gyroscope(), np.float64))  # writable: one signature
        integrate_steps(pim, a, w, dt)
        return len(dt)


def integrate_steps(pim, a: np.ndarray, w: np.ndarray, dt: np.ndarray) -> None:
    """The steps of :meth:`ImuBuffer.steps` into gtsam's preintegration ``pim``, one call each."""
    step = pim.integrateMeasurement
    for ak, wk, dk in zip(a, w, dt.tolist()):
        step(ak, wk, dk)


@numba.njit(cache=True, nogil=True, error_model="numpy")
def propagate_imu(R, p, v, bg, ba, m, dt, gravity):
    """The state (R world <- body, p, v) carried through the IMU pieces ``m`` (K, 6: gyro, acc) of
    ``dt`` (K,) s with biases ``bg``, ``ba`` (:meth:`VioEstimator.propagate`, the IMU-rate output):
    position and velocity by the step's world acceleration (gravity ``gravity`` m/s^2 along -z),
    then the rotation by Rodrigues' formula of the bias-corrected rate over the step. Compiled: it
    runs at the IMU rate. Returns new (R, p, v)."""
    R, p, v = R.copy(), p.copy(), v.copy()
    E, Rn = np.empty((3, 3)), np.empty((3, 3))
    for k in range(dt.shape[0]):
        h = dt[k]
        w0, w1, w2 = m[k, 0] - bg[0], m[k, 1] - bg[1], m[k, 2] - bg[2]
        a0, a1, a2 = m[k, 3] - ba[0], m[k, 4] - ba[1], m[k, 5] - ba[2]
        for i in range(3):
            acc = R[i, 0] * a0 + R[i, 1] * a1 + R[i, 2] * a2 - (gravity if i == 2 else 0.0)
            p[i] = p[i] + v[i] * h + 0.5 * acc * h * h
            v[i] = v[i] + acc * h
        so3_exp(w0 * h, w1 * h, w2 * h, E)
        for i in range(3):
            for j in range(3):
                Rn[i, j] = R[i, 0] * E[0, j] + R[i, 1] * E[1, j] + R[i, 2] * E[2, j]
        R[:, :] = Rn
    return R, p, v


def warm_up() -> None:
    """Compile (or load from numba's cache) the compiled helpers here now (the estimator calls it at
    construction: a cold cache's compilation is not to be paid by the first keyframe)."""
    t, d = np.arange(3, dtype=np.int64), np.zeros((3, 6))
    measured_noise_scales(t, d, 1.0, 1.0)
    m, dt = _pieces(t, d, 0, 2)
    _mid_step_acc(m, dt, np.zeros(3))
    a, w, dt = _steps(t, d, 0, 2, np.zeros(3))
    delta = np.zeros(10)
    preintegrate(delta, a, w, dt, np.zeros(6))
    predict_nav(delta, np.eye(4), np.zeros(3), 9.81, np.empty((4, 4)), np.empty(3))
    _max_gap(t, 0, 2)
    batch_ok(t, d, -1, 1.0, 1.0)
    gaps_over(t, -1, 10)
    propagate_imu(np.eye(3), np.zeros(3), np.zeros(3), np.zeros(3), np.zeros(3), d, np.ones(3) * 0.01, 9.81)


class ImuInput:
    """The estimator's IMU input: every sample checked (finite, within the sensor's range
    ``imu_max_gyro`` / ``imu_max_acc``, later than the last one) and counted in ``stats``
    (``imu_samples``, ``imu_skipped``, ``imu_out_of_range``, ``imu_gaps``), a bad one skipped with a
    throttled warning (``warn``: :class:`vilib_ros.log_throttle.ThrottledWarnings`); the good ones in
    ``buffer``. A hole longer than ``imu_max_gap_s`` is counted and said: nothing integrates across it."""

    def __init__(self, config: BackendConfig, stats: dict, warn):
        self.config = config
        self.stats = stats
        self._warn = warn
        self.buffer = ImuBuffer()

    def add(self, t_ns: int, gyro, acc) -> None:
        try:
            g0, g1, g2 = gyro
            a0, a1, a2 = acc
            s = (float(g0), float(g1), float(g2), float(a0), float(a1), float(a2))
        except (TypeError, ValueError):
            g = np.asarray(gyro, dtype=np.float64).reshape(-1)
            a = np.asarray(acc, dtype=np.float64).reshape(-1)
            if g.shape != (3,) or a.shape != (3,):
                raise ValueError(f"gyro and acc must have 3 elements, got {g.shape} and {a.shape}") from None
            s = tuple(float(x) for x in (*g, *a))
        t_ns = int(t_ns)
        cfg = self.config
        if not all(map(math.isfinite, s)):
            self.stats["imu_skipped"] += 1
            self._warn("imu_nan", "skipping non-finite IMU sample at %d", t_ns)
            return
        mg, ma = max(map(abs, s[:3])), max(map(abs, s[3:]))
        if mg > cfg.imu_max_gyro or ma > cfg.imu_max_acc:
            self.stats["imu_skipped"] += 1
            self.stats["imu_out_of_range"] += 1
            self._warn("imu_range", "skipping IMU sample at %d beyond the sensor range (|gyro| <= %g rad/s, "
                       "|acc| <= %g m/s^2): max |gyro| %.3g, max |acc| %.3g", t_ns, cfg.imu_max_gyro, cfg.imu_max_acc,
                       mg, ma)
            return
        last = self.buffer.last_t
        if not self.buffer.add(t_ns, s):
            self.stats["imu_skipped"] += 1
            self._warn("imu_order", "skipping non-monotonic IMU sample at %d", t_ns)
            return
        if last is not None and t_ns - last > cfg.imu_max_gap_s * 1e9:
            self._note_gap(last, t_ns)
        self.stats["imu_samples"] += 1

    def add_batch(self, t_ns, data) -> None:
        """Many samples at once (stamps (N,), [gyro, acc] (N, 6)): the same checks, counts and warnings
        as :meth:`add` per sample, vectorised where every sample is good."""
        t = np.ascontiguousarray(t_ns, np.int64).reshape(-1)
        d = np.ascontiguousarray(data, np.float64).reshape(len(t), 6)
        if not len(t):
            return
        cfg = self.config
        last = self.buffer.last_t
        lst = -1 if last is None else last
        if not batch_ok(t, d, lst, cfg.imu_max_gyro, cfg.imu_max_acc):
            for ti, di in zip(t.tolist(), d):
                self.add(ti, di[:3], di[3:])
            return
        self.buffer.extend(t, d)
        for k in gaps_over(t, lst, int(cfg.imu_max_gap_s * 1e9)):
            self._note_gap(int(t[k - 1]) if k else lst, int(t[k]))
        self.stats["imu_samples"] += len(t)

    def _note_gap(self, last: int, t_ns: int) -> None:
        self.stats["imu_gaps"] += 1
        log.warning("IMU gap of %.3f s (%d -> %d) is longer than imu_max_gap_s = %g: not integrated across",
                    (t_ns - last) * 1e-9, last, t_ns, self.config.imu_max_gap_s)
