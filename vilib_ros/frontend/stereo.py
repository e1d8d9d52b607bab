"""Stereo matching of the live tracks into the right image.

Every live track (left position ``uv``, undistorted ``xy``) is tracked from the left into the
right image with the same LK, starting at the rotation-only prediction ``R_right_left x``
(a point at infinity: the right-image position minus the disparity), then undistorted with
the right camera; a match survives when LK tracks it and it lies within
``epipolar_threshold`` right-image pixels of the epipolar line of ``xy`` (0 = no check).
Unmatched tracks get NaN. :class:`StereoMatcher` is the CPU implementation; the GPU pipeline
runs the same steps in its ``lk_frontend`` stereo launch (``kernels/lk.cu``) with the arrays
made here (:func:`cam_params`, :func:`essential_rl`).
"""
from __future__ import annotations

import numpy as np

from vilib_ros.frontend.imu_prediction import predict_points
from vilib_ros.types import TrackStatus

CAM_MODEL_CODE = {"none": 0, "radial-tangential": 1, "equidistant": 2}


def cam_params(cam) -> np.ndarray:
    """A camera for the kernels (``kernels/camera.cuh``): fx, fy, cx, cy, 4 distortion
    coefficients, model code, unused (float32, 12 entries)."""
    d = np.zeros(4)
    d[: min(4, cam.distortion.size)] = cam.distortion[:4]
    model = cam.distortion_model if np.any(d) else "none"
    return np.array([cam.fx, cam.fy, cam.cx, cam.cy, *d, CAM_MODEL_CODE[model], 0, 0, 0], np.float32)


def essential_rl(T_right_left) -> np.ndarray:
    """E with x_right^T E x_left = 0 for X_right = T_right_left X_left."""
    T = np.asarray(T_right_left, np.float64).reshape(4, 4)
    t = T[:3, 3]
    tx = np.array([[0, -t[2], t[1]], [t[2], 0, -t[0]], [-t[1], t[0], 0]])
    return tx @ T[:3, :3]


def epipolar_ok(E, xy_left, xy_right, fx_right: float, threshold: float, ok) -> np.ndarray:
    """``ok`` and within ``threshold`` right-image pixels of the epipolar line (0 = no check)."""
    if threshold <= 0 or xy_left.shape[0] == 0:
        return ok
    xl = np.concatenate([xy_left, np.ones((xy_left.shape[0], 1))], 1)
    xr = np.concatenate([np.nan_to_num(xy_right), np.ones((xy_right.shape[0], 1))], 1)
    El = xl @ E.T                    # epipolar lines in the right image (normalised)
    dist_px = np.abs(np.sum(xr * El, 1)) / (np.hypot(El[:, 0], El[:, 1]) + 1e-12) * float(fx_right)
    return ok & (np.nan_to_num(dist_px, nan=np.inf) < threshold)


class StereoMatcher:
    """CPU stereo matching with a tracker that has ``track(tmpl, img, pos, pred)`` and a
    ``pyramid(image, levels)`` function for the right image."""

    def __init__(self, camera_right, T_right_left, tracker, levels: int, pyramid):
        self.camera_right = camera_right
        self.pyramid = pyramid
        self.R_rl = np.asarray(T_right_left, np.float64).reshape(4, 4)[:3, :3]
        self.E = essential_rl(T_right_left)
        self.tracker = tracker
        self.levels = int(levels)

    def match(self, pyr_left, image_right, uv, xy, epipolar_threshold: float):
        """(uv_right float32, xy_right float64, matched, rejected) for the tracks ``uv``, ``xy``."""
        n = uv.shape[0]
        uv_r = np.full((n, 2), np.nan, np.float32)
        xy_r = np.full((n, 2), np.nan)
        if n == 0:
            return uv_r, xy_r, 0, 0
        pyr_r = self.pyramid(image_right, self.levels)
        pred = predict_points(self.camera_right, self.R_rl.T, uv, xy)
        res = self.tracker.track(pyr_left, pyr_r, uv, pred)
        ok = res.status == TrackStatus.TRACKED
        xy_m = np.full((n, 2), np.nan)
        if ok.any():
            xy_m[ok] = self.camera_right.undistort(res.pos[ok])
        good = epipolar_ok(self.E, xy, xy_m, self.camera_right.fx, epipolar_threshold,
                           ok & np.isfinite(xy_m).all(1))
        uv_r[good] = res.pos[good]
        xy_r[good] = xy_m[good]
        return uv_r, xy_r, int(np.count_nonzero(good)), int(np.count_nonzero(ok & ~good))
