"""The imaging conditions of the generator's cameras (:mod:`.sequence` applies them): auto-exposure steps,
vignetting, the sub-frames of an exposure's motion blur, and shot plus read noise."""
from __future__ import annotations

import numpy as np

from .scene import NEAR


def auto_exposure_gains(t_s: np.ndarray, mean_interval_s: float, step_max: float,
                        rng: np.random.Generator) -> np.ndarray:
    """The gain at each time of ``t_s`` (ascending): 1 at first, changed in steps at random times (exponential
    intervals of mean ``mean_interval_s``), each by a factor of 1.1 to ``1 + step_max`` up or down (back
    towards 1 the more likely the farther the gain is from it, as an exposure control returns to its set
    point), kept within [0.6, 1.6]."""
    gains = np.ones(len(t_s))
    gain, next_t = 1.0, float(rng.exponential(mean_interval_s))
    for i, ti in enumerate(t_s):
        while ti >= next_t:
            f = 1.0 + float(rng.uniform(min(0.1, step_max), step_max))
            p_up = float(np.clip(0.5 - np.log(gain) / (2 * np.log(1.6)), 0.1, 0.9))
            gain = float(np.clip(gain * f if rng.random() < p_up else gain / f, 0.6, 1.6))
            next_t += float(rng.exponential(mean_interval_s))
        gains[i] = gain
    return gains


def vignette_falloff(camera, amount: float) -> np.ndarray:
    """``1 - amount * (r / r_corner)^2`` per pixel (float32 HxW) of ``camera`` (a
    :class:`vilib_ros.camera.CameraModel`): ``r`` the distance from the principal point, ``r_corner`` that
    of the farthest image corner."""
    c = camera
    u, v = np.meshgrid(np.arange(c.width, dtype=np.float64), np.arange(c.height, dtype=np.float64))
    r2 = (u - c.cx) ** 2 + (v - c.cy) ** 2
    corners = [(x - c.cx) ** 2 + (y - c.cy) ** 2 for x in (0, c.width - 1) for y in (0, c.height - 1)]
    return (1.0 - amount * r2 / max(corners)).astype(np.float32)


def image_motion_px(camera, X_w: np.ndarray, T_wc_start: np.ndarray, T_wc_end: np.ndarray) -> float:
    """The largest distance (px) that the world points ``X_w`` (N, 3) move in ``camera``'s image between the
    camera poses ``T_wc_start`` and ``T_wc_end`` (points behind the camera at either end left out)."""
    ends = []
    for T in (T_wc_start, T_wc_end):
        Xc = (X_w - T[:3, 3]) @ T[:3, :3]
        front = Xc[:, 2] > NEAR
        ends.append((np.where(front[:, None], Xc, np.nan), front))
    both = ends[0][1] & ends[1][1]
    if not both.any():
        return 0.0
    d = camera.project(ends[1][0][both]) - camera.project(ends[0][0][both])
    return float(np.nanmax(np.linalg.norm(d, axis=1)))


def subframe_offsets_ns(motion_px: float, exposure_s: float, step_px: float, max_n: int = 63) -> np.ndarray:
    """Sub-frame times (ns, relative to the middle of the exposure): the midpoints of ``n`` equal parts of
    ``[-exposure_s / 2, exposure_s / 2]``, ``n`` odd (the middle is one of them) and large enough that an
    image motion of ``motion_px`` over the exposure moves at most ``step_px`` from one to the next (at most
    ``max_n``)."""
    if exposure_s <= 0:
        return np.zeros(1, np.int64)
    n = max(1, int(np.ceil(motion_px / step_px)))
    n = min(n + (1 - n % 2), max_n)
    return np.rint(((np.arange(n) + 0.5) / n - 0.5) * exposure_s * 1e9).astype(np.int64)


def sensor_noise(img: np.ndarray, rng: np.random.Generator, e_per_grey: float, read_sigma: float) -> np.ndarray:
    """``img`` (float32, grey levels) with photon shot noise (Poisson in electrons, ``e_per_grey`` of them per
    grey level; 0: none), then Gaussian read noise of ``read_sigma`` grey levels (0: none)."""
    if e_per_grey > 0:
        img = (rng.poisson(np.clip(img, 0, None).astype(np.float64) * e_per_grey) / e_per_grey).astype(np.float32)
    if read_sigma > 0:
        img = img + rng.standard_normal(img.shape, dtype=np.float32) * np.float32(read_sigma)
    return img
