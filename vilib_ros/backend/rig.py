"""The camera rig as the backend sees it: cam0 (and cam1) in the body frame, the stereo geometry between
them, and the visual factors' sigma in normalised coordinates. Plain NumPy, read by the estimator's
members (landmark map, keyframe policy, both smoothers); nothing here changes after construction."""
from __future__ import annotations

import logging

import numpy as np

from ..camera import CameraModel

log = logging.getLogger("vilib_ros.backend.estimator")   # one logger for the estimator's parts


class CameraRig:
    """cam0 (``T_BS0``: camera in body, 4x4) and the optional cam1. With cam1: the pair's baseline (m),
    ``R_c0_c1`` (cam1's orientation in cam0), ``T_c1c0`` (cam0 -> cam1) and whether the pair is
    rectified (cam1 along cam0's +x, off that axis by less than 5 % of the baseline, turned by less
    than 3 degrees): then a right observation is a stereo measurement in cam0's orientation, else a
    projection through cam1's own pose. ``sigma``: ``pixel_sigma / fx`` of cam0."""

    def __init__(self, cam0: CameraModel, cam1: CameraModel | None, pixel_sigma: float):
        self.cam0, self.cam1 = cam0, cam1
        self.T_BS0 = cam0.T_BS.copy()
        self.T_BS1 = cam1.T_BS if cam1 is not None else None
        self.sigma = pixel_sigma / cam0.fx
        self.rectified = True
        self.baseline = 0.0
        self.R_c0_c1 = np.eye(3)
        self.T_c1c0 = np.eye(4)
        if cam1 is not None:
            T_c0_c1 = np.linalg.inv(cam0.T_BS) @ cam1.T_BS
            self.R_c0_c1 = T_c0_c1[:3, :3]
            t = T_c0_c1[:3, 3]
            self.baseline = float(np.linalg.norm(t))
            self.T_c1c0 = np.linalg.inv(T_c0_c1)
            ang = np.degrees(np.arccos(np.clip((np.trace(self.R_c0_c1) - 1) / 2, -1, 1)))
            self.rectified = bool(t[0] > 0 and np.hypot(t[1], t[2]) < 0.05 * self.baseline and ang < 3.0)
            if not self.rectified:
                log.info("stereo pair not rectified (offset %s, %.2f deg): right observations use "
                         "projection factors", t, ang)

    def cam_T_cw(self, T_wb: np.ndarray):
        """(R, t) world -> cam0 for the body pose ``T_wb``."""
        T_wc = T_wb @ self.T_BS0
        R = T_wc[:3, :3].T
        return R, -R @ T_wc[:3, 3]

    def rectify_right(self, xr: np.ndarray) -> np.ndarray:
        """Right normalised coordinates re-expressed in a camera with cam0's orientation."""
        f = np.column_stack([xr, np.ones(len(xr))]) @ self.R_c0_c1.T
        with np.errstate(divide="ignore", invalid="ignore"):
            return f[:, :2] / f[:, 2:3]
