"""The frontend's CPU pipeline: one frame at a time, with the NumPy track table.

Per frame: pyramid; LK of every live track from the previous frame (from the IMU-predicted
position where a rotation is given); optional forward-backward check and RANSAC; table update;
redetection in free cells when live tracks fall below the fraction; optional stereo matching.
It calls the detector and the tracker only through ``detector.detect(image, occupancy=...)``
and ``tracker.track(tmpl, img, pos, pred)``, so any CPU implementation made by
:func:`~vilib_ros.frontend.detector.make_detector` / :func:`~vilib_ros.frontend.tracker.make_tracker`
plugs in. The GPU pipeline (:mod:`vilib_ros.frontend.gpu_pipeline`) makes the same decisions on
the device.
"""
from __future__ import annotations

import time

import numpy as np

from vilib_ros.frontend.imu_prediction import predict_points
from vilib_ros.frontend.cpu_backend import build_pyramid_host
from vilib_ros.frontend.stereo import StereoMatcher
from vilib_ros.frontend.track_table import TrackTable, fb_passed, ransac_outliers
from vilib_ros.frontend.tracker import TrackStatus
from vilib_ros.types import TrackFrame


class CpuPipeline:
    device = "cpu"

    def __init__(self, camera, config, detector, tracker, capacity: int, levels: int, first_id: int = 0,
                 camera_right=None, T_right_left=None):
        self.camera = camera
        self.config = config
        self.detector = detector
        self.tracker = tracker
        self.levels = int(levels)
        c = config.detector
        self.table = TrackTable(capacity, detector.grid_shape, (c.cell_width, c.cell_height), first_id)
        self.stereo = (StereoMatcher(camera_right, T_right_left, tracker, self.levels)
                       if camera_right is not None and config.stereo else None)
        self._prev_pyr = None

    @property
    def next_id(self) -> int:
        return self.table.next_id

    @property
    def num_tracks(self) -> int:
        return self.table.count

    def counters(self) -> np.ndarray:
        return self.table.counters

    def reset(self) -> None:
        self.table.clear()
        self._prev_pyr = None

    def apply_config(self, config) -> None:
        """Take the new kernel scalars (the caller checked that nothing structural changed)."""
        self.config = config
        self.detector.config = config.detector
        self.tracker.config = config.tracker

    def run(self, image, image_right, stamp_ns: int, R, dt: float, host_stats: dict) -> TrackFrame:
        """Process one accepted frame (``R``: camera rotation prediction or None)."""
        t0 = time.perf_counter()
        c = self.config
        tab = self.table
        pyr = build_pyramid_host(image, self.levels)
        n = tab.count
        if self._prev_pyr is not None and n:
            uv0 = tab.uv[:n].copy()
            pred = predict_points(self.camera, R, uv0, tab.xy[:n]) if R is not None else uv0
            res = self.tracker.track(self._prev_pyr, pyr, uv0, pred)
            ok = res.status == TrackStatus.TRACKED
            xy_new = np.full((n, 2), np.nan)
            if ok.any():
                xy_new[ok] = self.camera.undistort(res.pos[ok])
            fb_ok = None
            if c.fb_check:
                fb_pos = np.full((n, 2), np.nan, np.float32)
                fb_status = np.full(n, TrackStatus.INACTIVE, np.int8)
                if ok.any():
                    back = self.tracker.track(pyr, self._prev_pyr, res.pos[ok], uv0[ok])
                    fb_pos[ok], fb_status[ok] = back.pos, back.status
                fb_ok = fb_passed(fb_pos, fb_status, uv0, c.fb_threshold)
            reject = None
            if c.ransac:
                keep = ok if fb_ok is None else ok & fb_ok
                out = ransac_outliers(tab.xy[:n][keep], xy_new[keep], c.ransac_threshold / float(self.camera.fx),
                                      c.ransac_confidence)
                if out is not None:
                    reject = np.zeros(n, bool)
                    reject[np.flatnonzero(keep)[out]] = True
            tab.update(res.pos, res.status, xy_new, res.iterations, dt, fb_ok, reject)
        if tab.need_detection(c.min_track_fraction * tab.capacity):
            tab.add(self.detector.detect(image, occupancy=tab.occupancy()), self.camera.undistort)
        uv_r = xy_r = None
        if self.stereo is not None and image_right is not None:
            k = tab.count
            uv_r, xy_r, matched, rejected = self.stereo.match(pyr, image_right, tab.uv[:k], tab.xy[:k],
                                                              c.stereo_epipolar_threshold)
            tab.tally("stereo_matched", matched)
            tab.tally("stereo_rejected", rejected)
        self._prev_pyr = pyr
        return tab.frame(stamp_ns, uv_r, xy_r, {"cpu_s": time.perf_counter() - t0}, host_stats)
