"""The frontend's CPU pipeline: one frame at a time, with the NumPy track table, on either CPU
twin's stages (compiled or reference).

Per frame: pyramid; LK of every live track from the previous frame (from the IMU-predicted
position where a rotation is given) against the previous frame's patch
(``tracker.template: previous``) or against the track's stored reference template
(``reference``, :mod:`vilib_ros.frontend.reference.templates`); optional forward-backward check
and RANSAC; table update; templates taken again where due; redetection in free cells when live
tracks fall below the fraction (with ``reference``, the new tracks' templates are stored);
optional stereo matching.
It calls its stages only through what it is given: ``detector.detect(image, occupancy=...)``,
``tracker.track(tmpl, img, pos, pred)`` (and the template calls), ``pyramid(image, levels)`` and
``ransac(xy_old, xy_new, threshold, confidence)``: the factory
(:func:`vilib_ros.frontend.factory.make_pipeline`) gives it the compiled or the reference ones.
The GPU pipeline (:mod:`vilib_ros.frontend.gpu.pipeline`) makes the same decisions on the device.
"""
from __future__ import annotations

import time

import numpy as np

from vilib_ros.frontend.imu_prediction import predict_points
from vilib_ros.frontend.stereo import StereoMatcher
from vilib_ros.frontend.track_table import TemplateBank, TrackTable, fb_passed
from vilib_ros.types import TrackFrame, TrackStatus


class CpuPipeline:
    """One frame at a time on the host (see the module docstring). ``pyramid``: the pyramid
    function; ``ransac``: the RANSAC function, returning (outlier mask or None, ...)."""

    device = "cpu"

    def __init__(self, camera, config, detector, tracker, capacity: int, levels: int, first_id: int = 0,
                 camera_right=None, T_right_left=None, *, pyramid, ransac):
        self.camera = camera
        self.config = config
        self.detector = detector
        self.tracker = tracker
        self.pyramid = pyramid
        self.ransac = ransac
        self.levels = int(levels)
        c = config.detector
        self.table = TrackTable(capacity, detector.grid_shape, (c.cell_width, c.cell_height), first_id)
        self.stereo = (StereoMatcher(camera_right, T_right_left, tracker, self.levels, pyramid)
                       if camera_right is not None and config.stereo else None)
        tc = config.tracker
        # stored templates: reference templates, or (warp='affine') previous-frame ones taken again every frame
        self.bank = TemplateBank(capacity, tc.levels) if tc.stored_templates else None
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
        pyr = self.pyramid(image, self.levels)
        n = tab.count
        if self._prev_pyr is not None and n:
            uv0 = tab.uv[:n].copy()
            pred = predict_points(self.camera, R, uv0, tab.xy[:n]) if R is not None else uv0
            if self.bank is not None:
                res = self.tracker.track_templates(self.bank.patch, self.bank.valid, tab.tslot[:n], pyr, pred,
                                                   tab.gain[:n], tab.offset[:n], tab.affine[:n])
            else:
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
                    back = self.tracker.track(pyr, self._prev_pyr, res.pos[ok], uv0[ok], levels=c.fb_levels_used)
                    fb_pos[ok], fb_status[ok] = back.pos, back.status
                fb_ok = fb_passed(fb_pos, fb_status, uv0, c.fb_threshold)
            reject = None
            if c.ransac:
                keep = ok if fb_ok is None else ok & fb_ok
                out = self.ransac(tab.xy[:n][keep], xy_new[keep], c.ransac_threshold / float(self.camera.fx),
                                  c.ransac_confidence)[0]
                if out is not None:
                    reject = np.zeros(n, bool)
                    reject[np.flatnonzero(keep)[out]] = True
            tab.update(res.pos, res.status, xy_new, res.iterations, dt, fb_ok, reject, res.residual, res.gain,
                       res.offset, res.affine)
            if self.bank is not None:
                self._refresh_templates(pyr)
        if tab.need_detection(c.min_track_fraction * tab.capacity):
            k = tab.add(self.detector.detect(image, occupancy=tab.occupancy()), self.camera.undistort)
            if self.bank is not None and k:
                new = slice(tab.count - k, tab.count)
                self.tracker.extract_templates(pyr, tab.uv[new], self.bank.patch, self.bank.valid, tab.tslot[new])
        uv_r = xy_r = None
        if self.stereo is not None and image_right is not None:
            k = tab.count
            uv_r, xy_r, matched, rejected = self.stereo.match(pyr, image_right, tab.uv[:k], tab.xy[:k],
                                                              c.stereo_epipolar_threshold)
            tab.tally("stereo_matched", matched)
            tab.tally("stereo_rejected", rejected)
        self._prev_pyr = pyr
        return tab.frame(stamp_ns, uv_r, xy_r, {"cpu_s": time.perf_counter() - t0}, host_stats)

    def _refresh_templates(self, pyr) -> None:
        """Take the templates again, at the tracked position in this frame, of the tracks whose
        residual exceeds ``template_refresh_residual`` or whose template is ``template_max_age``
        frames old (each 0 = never); of every track with ``template='previous'``."""
        tc = self.config.tracker
        tab = self.table
        m = tab.count
        due = np.full(m, tc.template == "previous")
        if tc.template_refresh_residual > 0:
            due |= tab.residual[:m] > tc.template_refresh_residual
        if tc.template_max_age > 0:
            due |= tab.tmpl_age[:m] >= tc.template_max_age
        rows = np.flatnonzero(due)
        if rows.size:
            self.tracker.extract_templates(pyr, tab.uv[rows], self.bank.patch, self.bank.valid, tab.tslot[rows])
            tab.refresh(rows)
