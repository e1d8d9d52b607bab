"""The estimator's keyframe policy (:class:`KeyframePolicy`): which frame becomes a keyframe and whether the
vehicle is at rest.

A frame becomes a keyframe when ``kf_max_interval_s`` has passed, when fewer than ``kf_min_tracks``
tracks or fewer than ``kf_track_fraction`` of the last keyframe's tracks remain, or when the
rotation-compensated median parallax reaches ``kf_parallax_px`` (never sooner than
``kf_min_interval_s``). At rest (median parallax since the last keyframe below ``still_parallax_px``
and a static IMU window) the keyframe gets a zero-velocity prior and a no-motion pose factor
(``zero_velocity_updates``): without them a monocular estimator drifts while a vehicle waits on the
ground. Without tracks every frame after ``kf_min_interval_s`` is a keyframe, so that the IMU carries the
state with an update each (tracking losses: :mod:`.health`).
"""
from __future__ import annotations

import numba
import numpy as np

from .config import BackendConfig
from .imu import ImuBuffer
from .initialisation import is_static
from .rig import CameraRig
from .window import KeyframeWindow


@numba.njit(cache=True, nogil=True, error_model="numpy")
def parallax_px(srt_ids, order, kf_xy, ids, xy, R_cc):
    """(tracks shared with a keyframe, the median distance between their keyframe bearings and the
    current ones rotated by ``R_cc`` into the keyframe camera; normalised coordinates). The keyframe's
    track ids come sorted (``srt_ids``, their rows ``order`` in ``kf_xy``). Compiled: it runs on every
    frame."""
    m, n = srt_ids.shape[0], ids.shape[0]
    d = np.empty(n)
    k = 0
    if m == 0:
        return 0, np.nan
    for j in range(n):
        p = np.searchsorted(srt_ids, ids[j])
        if p >= m:
            p = 0
        if srt_ids[p] != ids[j]:
            continue
        i = order[p]
        bx, by = xy[j, 0], xy[j, 1]
        f0 = bx * R_cc[0, 0] + by * R_cc[0, 1] + R_cc[0, 2]
        f1 = bx * R_cc[1, 0] + by * R_cc[1, 1] + R_cc[1, 2]
        f2 = bx * R_cc[2, 0] + by * R_cc[2, 1] + R_cc[2, 2]
        ux, uy = f0 / f2 - kf_xy[i, 0], f1 / f2 - kf_xy[i, 1]
        d[k] = np.sqrt(ux * ux + uy * uy)
        k += 1
    if k == 0:
        return 0, np.nan
    v = d[:k]
    v = np.sort(v[~np.isnan(v)])
    c = v.shape[0]
    return k, ((v[(c - 1) // 2] + v[c // 2]) / 2 if c else np.nan)


def warm_up() -> None:
    """Compile (or load from numba's cache) :func:`parallax_px` now (at the estimator's construction)."""
    ids = np.arange(3, dtype=np.int64)
    parallax_px(ids, ids, np.zeros((3, 2)), ids, np.zeros((3, 2)), np.eye(3))


class KeyframePolicy:
    """See the module docstring. Reads the newest keyframe of ``window`` and the IMU ``imu``; counts
    its decisions in ``stats`` (``kf_time``, ``kf_tracks``, ``kf_parallax``)."""

    def __init__(self, config: BackendConfig, rig: CameraRig, window: KeyframeWindow, imu: ImuBuffer,
                 stats: dict):
        self.config = config
        self.rig = rig
        self.window = window
        self.imu = imu
        self.stats = stats
        self._parallax_cache = (None, None)     # ((frame stamp, keyframe index), parallax)

    def is_keyframe(self, fr, T_pred) -> bool:
        cfg = self.config
        kf = self.window.last
        dt = (fr.stamp_ns - kf.t_ns) * 1e-9
        if dt < cfg.kf_min_interval_s:
            return False
        if dt >= cfg.kf_max_interval_s:
            self.stats["kf_time"] += 1
            return True
        if len(fr) < cfg.kf_min_tracks:
            self.stats["kf_tracks"] += 1
            return True
        n_common, par = self.parallax(fr, T_pred)
        if n_common == 0 or n_common < cfg.kf_track_fraction * max(len(kf.obs[0]), 1):
            self.stats["kf_tracks"] += 1
            return True
        if par >= cfg.kf_parallax_px:
            self.stats["kf_parallax"] += 1
            return True
        return False

    def parallax(self, fr, T_pred):
        """(tracks shared with the last keyframe, their rotation-compensated median parallax, px)."""
        kf = self.window.last
        ck = (fr.stamp_ns, kf.idx)
        if self._parallax_cache[0] == ck:
            return self._parallax_cache[1]
        res = self._parallax_uncached(fr, T_pred, kf)
        self._parallax_cache = (ck, res)
        return res

    def _parallax_uncached(self, fr, T_pred, kf):
        srt, order = kf.sorted_ids()
        # the current bearings are rotated into the keyframe camera
        R_bs = self.rig.T_BS0[:3, :3]
        R_bb = kf.T[:3, :3].T @ T_pred[:3, :3]
        R_cc = R_bs.T @ R_bb @ R_bs
        n, med = parallax_px(srt, order, kf.obs[1], fr.ids, fr.xy, R_cc)
        return n, (med * self.rig.cam0.fx if n else np.inf)

    def is_still(self, fr, T_pred) -> bool:
        """No motion since the last keyframe: the tracks show no parallax and the IMU window
        passes the rest test (both needed: parallax alone is blind to motion along the rays)."""
        cfg = self.config
        if not cfg.zero_velocity_updates:
            return False
        n, par = self.parallax(fr, T_pred)
        if n < cfg.kf_min_tracks or par > cfg.still_parallax_px:
            return False
        _, win = self.imu.window(self.window.last.t_ns, fr.stamp_ns)
        return is_static(win, cfg, cfg.gravity, tolerance=1.5)
