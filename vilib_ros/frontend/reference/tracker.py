"""The CPU tracker objects' reference: :class:`CpuLKTracker` (the NumPy reference LK of
:mod:`vilib_ros.frontend.reference.lk` and :mod:`vilib_ros.frontend.reference.templates`, or
OpenCV's pyramidal LK for ``cpu_backend='opencv'``, translation only), with the interface of
its twins :class:`vilib_ros.frontend.compiled.tracker.NumbaLKTracker` and
:class:`vilib_ros.frontend.gpu.tracker.GpuLKTracker`.
"""
from __future__ import annotations

import dataclasses

import numpy as np

from vilib_ros.frontend.config import TrackerConfig
from vilib_ros.frontend.reference.lk import track_cpu
from vilib_ros.frontend.reference.templates import extract_templates_cpu, track_templates_cpu
from vilib_ros.types import TrackResult, TrackStatus


def track_opencv(tmpl_img, img, tmpl_pos, pred=None, window: int = 21, levels: int = 3,
                 max_iterations: int = 30, eps: float = 0.01) -> TrackResult:
    """OpenCV ``calcOpticalFlowPyrLK`` (translation only) in the same result format."""
    import cv2

    p0 = np.ascontiguousarray(np.asarray(tmpl_pos, np.float32).reshape(-1, 1, 2))
    n = p0.shape[0]
    if n == 0:
        z = np.zeros(0, np.float32)
        return TrackResult(np.zeros((0, 2), np.float32), np.zeros(0, np.int8), z, z, z, np.zeros(0, np.int32))
    flags = 0
    p1 = None
    if pred is not None:
        p1 = np.ascontiguousarray(np.asarray(pred, np.float32).reshape(-1, 1, 2)).copy()
        flags = cv2.OPTFLOW_USE_INITIAL_FLOW
    p1, st, err = cv2.calcOpticalFlowPyrLK(
        tmpl_img, img, p0, p1, winSize=(window, window), maxLevel=levels - 1,
        criteria=(cv2.TERM_CRITERIA_COUNT | cv2.TERM_CRITERIA_EPS, max_iterations, eps), flags=flags)
    status = np.where(st.ravel() == 1, TrackStatus.TRACKED, TrackStatus.DIVERGED).astype(np.int8)
    return TrackResult(p1.reshape(-1, 2).astype(np.float32), status, err.ravel().astype(np.float32),
                       np.ones(n, np.float32), np.zeros(n, np.float32), np.zeros(n, np.int32))


class CpuLKTracker:
    """CPU twin of :class:`~vilib_ros.frontend.gpu.tracker.GpuLKTracker` (NumPy reference, or
    OpenCV for translation). ``config``: a validated TrackerConfig (default: the defaults)."""

    device = "cpu"

    def __init__(self, width: int, height: int, config: TrackerConfig | None = None, max_features: int = 1024):
        self.config = config or TrackerConfig()
        self.width, self.height, self.max_features = int(width), int(height), int(max_features)

    def _check(self, img):
        if isinstance(img, (list, tuple)):
            img = img[0]
        img = np.asarray(img)
        if img.dtype != np.uint8 or img.shape != (self.height, self.width):
            raise ValueError(f"tracker built for uint8 {self.height}x{self.width} images, got {img.dtype} {img.shape}")

    def _levels_used(self, levels: int | None) -> int:
        """The levels a track uses: ``levels`` (the finest ones), else the config's."""
        if levels is None:
            return int(self.config.levels)
        if not 1 <= levels <= self.config.levels:
            raise ValueError(f"levels must be in 1..{self.config.levels}, got {levels!r}")
        return int(levels)

    def track(self, tmpl, img, tmpl_pos, pred=None, active=None, levels: int | None = None) -> TrackResult:
        """Track ``tmpl_pos`` from ``tmpl`` into ``img`` (uint8 images or pyramid lists); ``levels``:
        on the finest levels only (the forward-backward check's backward track), else the config's."""
        L = self._levels_used(levels)
        cfg = self.config if L == self.config.levels else dataclasses.replace(self.config, levels=L)
        self._check(tmpl)
        self._check(img)
        tmpl_pos = np.asarray(tmpl_pos, np.float32).reshape(-1, 2)
        if tmpl_pos.shape[0] > self.max_features:
            raise ValueError(f"{tmpl_pos.shape[0]} features exceed max_features={self.max_features}")
        if self.config.cpu_backend == "opencv":
            t0 = tmpl[0] if isinstance(tmpl, (list, tuple)) else tmpl
            i0 = img[0] if isinstance(img, (list, tuple)) else img
            res = track_opencv(t0, i0, tmpl_pos, pred, window=int(cfg.patch_sizes[0]) + 1,
                               levels=cfg.levels, max_iterations=cfg.max_iterations)
            if active is not None:
                a = np.asarray(active, bool)
                res.status[~a] = TrackStatus.INACTIVE
            return res
        return track_cpu(tmpl, img, tmpl_pos, pred, cfg, active)

    def extract_templates(self, pyr, pos, patch, valid, slots) -> None:
        """Store the templates of the features at ``pos`` (N, 2) in pyramid ``pyr`` in rows
        ``slots`` of the template bank ``patch`` / ``valid`` (see :mod:`vilib_ros.frontend.reference.templates`)."""
        self._check(pyr)
        slots = np.asarray(slots, np.int64).reshape(-1)
        if slots.size:
            patch[slots], valid[slots] = extract_templates_cpu(pyr, pos, self.config)

    def track_templates(self, patch, valid, slots, img, pred, gain=None, offset=None, affine=None,
                        active=None) -> TrackResult:
        """Track the features whose templates are rows ``slots`` of the template bank into
        ``img`` (uint8 image or pyramid list), from ``pred``, the illumination ``gain`` /
        ``offset`` and (warp='affine') the warp ``affine``
        (:func:`~vilib_ros.frontend.reference.templates.track_templates_cpu`)."""
        self._check(img)
        n = np.asarray(slots).reshape(-1).shape[0]
        if n > self.max_features:
            raise ValueError(f"{n} features exceed max_features={self.max_features}")
        return track_templates_cpu(patch, valid, slots, img, pred, self.config, gain, offset, affine, active)
