"""The compiled CPU tracker: :class:`NumbaLKTracker`, the interface of
:class:`vilib_ros.frontend.reference.tracker.CpuLKTracker` on the compiled LK of
:mod:`vilib_ros.frontend.compiled.lk`.
"""
from __future__ import annotations

import numba
import numpy as np

from vilib_ros.frontend.compiled.lk import MAX_LEVELS, lk_extract, lk_track
from vilib_ros.frontend.compiled.pyramid import build_pyramid_compiled
from vilib_ros.frontend.compiled.threads import cpu_threads
from vilib_ros.frontend.config import MODE_INFO, PATCH_AREA
from vilib_ros.frontend.reference.tracker import CpuLKTracker
from vilib_ros.types import TrackResult


def _pyramid(img_or_pyr, levels: int, what: str) -> list[np.ndarray]:
    if isinstance(img_or_pyr, (list, tuple)):
        if len(img_or_pyr) < levels:
            raise ValueError(f"pyramid has {len(img_or_pyr)} levels, the tracker needs {levels}")
        return [np.ascontiguousarray(lv) for lv in img_or_pyr[:levels]]
    return build_pyramid_compiled(np.ascontiguousarray(img_or_pyr), levels)


def _readonly(a: np.ndarray) -> np.ndarray:
    """A read-only view: the levels handed to ``lk_track`` are all read-only, so its tuples have
    one type whether a level is a caller's read-only buffer (a ROS message's bytes, viewed
    without a copy) or an array of ours; a mixed tuple cannot be indexed in nopython mode."""
    v = a.view()
    v.flags.writeable = False
    return v


_DUMMY_LEVEL = _readonly(np.zeros((1, 1), np.uint8))


class NumbaLKTracker(CpuLKTracker):
    """Compiled twin of :class:`CpuLKTracker` (``track_cpu`` / ``track_templates_cpu`` results
    within float rounding)."""

    implementation = "numba"

    def __init__(self, width: int, height: int, config=None, max_features: int = 1024):
        super().__init__(width, height, config, max_features)
        self.threads = cpu_threads()
        c = self.config
        self._patch = np.array([int(p) for p in c.patch_sizes[: c.levels]] + [8] * (MAX_LEVELS - c.levels), np.int64)
        # JIT load / compile now, not on frame 1 (one inactive feature on dummy levels)
        one = np.zeros((1, 2), np.float32)
        out = [np.empty((1, 2), np.float32), np.empty(1, np.int8)] + [np.empty(1, np.float32) for _ in range(3)]
        variants = [(False, False)] + ([(True, c.warp == "affine")] if c.template == "reference" else [])
        for stored, affine in variants:
            lk_track((_DUMMY_LEVEL,) * MAX_LEVELS, (_DUMMY_LEVEL,) * MAX_LEVELS, 1, self._patch, one, one,
                     np.zeros(1, np.uint8), *self._no_bank, stored, affine, self._no_affine, *self._params(affine),
                     *out, np.empty(1, np.int32), self._no_affine, 1)
        if c.template == "reference":
            lk_extract((_DUMMY_LEVEL,) * MAX_LEVELS, 1, self._patch, one, np.zeros(1, np.int64),
                       np.zeros((1, 1, PATCH_AREA), np.float32), np.zeros((1, 1), np.uint8), 1)

    #: lk_track's template-bank arguments where templates come from a pyramid, and its affine
    #: arguments without an affine warp
    _no_bank = (np.zeros((1, 1, PATCH_AREA), np.float32), np.zeros((1, 1), np.uint8), np.zeros(1, np.int64),
                np.ones(1, np.float32), np.zeros(1, np.float32))
    _no_affine = np.zeros((1, 4), np.float32)

    def _params(self, affine: bool) -> tuple:
        """The kernel scalars, read from the config at every call (FeatureTracker.apply_config
        changes them live); gain / offset slots of the translation or the affine parameters."""
        c = self.config
        npar, gslot, oslot = MODE_INFO[c.mode]
        if affine:
            gslot, oslot = (6 if gslot >= 0 else -1), ((6 + (gslot >= 0)) if oslot >= 0 else -1)
            npar = 6 + (gslot >= 0) + (oslot >= 0)
        return (int(gslot), int(oslot), int(npar), int(c.max_iterations), float(c.eps), float(c.min_eigen),
                float(c.max_residual), float(c.osc_eps), float(c.osc_growth))

    def _levels(self, pyr, what):
        L = int(self.config.levels)
        levels = _pyramid(pyr, L, what)
        for k, lv in enumerate(levels):
            want = (self.height >> k, self.width >> k)
            if lv.dtype != np.uint8 or lv.ndim != 2 or lv.shape != want:
                raise ValueError(f"{what} pyramid level {k} is {lv.dtype} {lv.shape}, expected uint8 {want}")
        return tuple(_readonly(lv) for lv in levels) + (_DUMMY_LEVEL,) * (MAX_LEVELS - L)

    def track(self, tmpl, img, tmpl_pos, pred=None, active=None, levels: int | None = None) -> TrackResult:
        """Track ``tmpl_pos`` from ``tmpl`` into ``img`` (uint8 images or pyramid lists; translation);
        ``levels``: on the finest levels only (the forward-backward check's backward track)."""
        if self.config.cpu_backend == "opencv":
            return super().track(tmpl, img, tmpl_pos, pred, active, levels)
        L = self._levels_used(levels)
        self._check(tmpl)
        self._check(img)
        tmpl_pos = np.ascontiguousarray(np.asarray(tmpl_pos, np.float32).reshape(-1, 2))
        n = tmpl_pos.shape[0]
        if n > self.max_features:
            raise ValueError(f"{n} features exceed max_features={self.max_features}")
        pred = tmpl_pos if pred is None else np.ascontiguousarray(np.asarray(pred, np.float32).reshape(-1, 2))
        if pred.shape != tmpl_pos.shape:
            raise ValueError(f"pred shape {pred.shape} differs from tmpl_pos shape {tmpl_pos.shape}")
        act = np.ones(n, np.uint8) if active is None else np.asarray(active, bool).reshape(n).view(np.uint8)
        tp, ip = self._levels(tmpl, "template"), self._levels(img, "image")
        pos = np.empty((n, 2), np.float32)
        status = np.empty(n, np.int8)
        residual, gain, offset = np.empty(n, np.float32), np.empty(n, np.float32), np.empty(n, np.float32)
        iters = np.empty(n, np.int32)
        if n:
            numba.set_num_threads(self.threads)    # thread-local in numba: set for whichever thread calls
            lk_track(tp, ip, L, self._patch, tmpl_pos, pred, np.ascontiguousarray(act),
                     *self._no_bank, False, False, self._no_affine, *self._params(False), pos, status, residual, gain,
                     offset, iters, self._no_affine, self.threads)
        return TrackResult(pos, status, residual, gain, offset, iters)

    def _bank(self, patch, valid, slots):
        L = int(self.config.levels)
        if (not isinstance(patch, np.ndarray) or patch.dtype != np.float32 or patch.ndim != 3 or patch.shape[1] < L
                or patch.shape[2] != PATCH_AREA or not patch.flags.c_contiguous):
            raise ValueError(f"template bank must be C-contiguous float32 (S, >={L}, {PATCH_AREA}), got "
                             f"{getattr(patch, 'dtype', type(patch))} {getattr(patch, 'shape', '')}")
        if not isinstance(valid, np.ndarray) or valid.dtype != np.uint8 or valid.shape != patch.shape[:2]:
            raise ValueError(f"template validity must be uint8 {patch.shape[:2]}, got "
                             f"{getattr(valid, 'dtype', type(valid))} {getattr(valid, 'shape', '')}")
        slots = np.ascontiguousarray(np.asarray(slots, np.int64).reshape(-1))
        if slots.size and not (slots.min() >= 0 and slots.max() < patch.shape[0]):
            raise ValueError(f"template slots outside 0..{patch.shape[0] - 1}")
        if slots.size > self.max_features:
            raise ValueError(f"{slots.size} features exceed max_features={self.max_features}")
        return slots

    def extract_templates(self, pyr, pos, patch, valid, slots) -> None:
        """Store the templates of the features at ``pos`` (N, 2) in ``pyr`` in rows ``slots`` of
        the bank ``patch`` / ``valid`` (in place; as :func:`~vilib_ros.frontend.reference.templates.extract_templates_cpu`)."""
        self._check(pyr)
        slots = self._bank(patch, valid, slots)
        pos = np.ascontiguousarray(np.asarray(pos, np.float32).reshape(-1, 2))
        if pos.shape[0] != slots.size:
            raise ValueError(f"{pos.shape[0]} positions for {slots.size} template slots")
        if slots.size:
            numba.set_num_threads(self.threads)
            lk_extract(self._levels(pyr, "template"), int(self.config.levels), self._patch, pos, slots, patch, valid,
                       self.threads)

    def track_templates(self, patch, valid, slots, img, pred, gain=None, offset=None, affine=None,
                        active=None) -> TrackResult:
        """Track against the stored templates ``slots`` of the bank (as
        :func:`~vilib_ros.frontend.reference.templates.track_templates_cpu`, within float rounding)."""
        self._check(img)
        slots = self._bank(patch, valid, slots)
        n = slots.size
        pred = np.ascontiguousarray(np.asarray(pred, np.float32).reshape(-1, 2))
        if pred.shape[0] != n:
            raise ValueError(f"pred shape {pred.shape} does not match {n} template slots")

        def per_feature(v, default, shape):
            if v is None:
                return np.broadcast_to(np.asarray(default, np.float32), shape).copy()
            return np.ascontiguousarray(np.asarray(v, np.float32).reshape(shape))

        g0 = per_feature(gain, 1.0, (n,))
        o0 = per_feature(offset, 0.0, (n,))
        aff = self.config.warp == "affine"
        a0 = per_feature(affine, (1.0, 0.0, 0.0, 1.0), (n, 4)) if aff else self._no_affine
        act = np.ones(n, np.uint8) if active is None else np.asarray(active, bool).reshape(n).view(np.uint8)
        ip = self._levels(img, "image")
        pos = np.empty((n, 2), np.float32)
        status = np.empty(n, np.int8)
        residual, gain_o, offset_o = np.empty(n, np.float32), np.empty(n, np.float32), np.empty(n, np.float32)
        iters = np.empty(n, np.int32)
        aff_o = np.empty((n, 4), np.float32) if aff else self._no_affine
        if n:
            numba.set_num_threads(self.threads)
            lk_track(ip, ip, int(self.config.levels), self._patch, pred, pred, np.ascontiguousarray(act), patch,
                     valid, slots, g0, o0, True, aff, a0, *self._params(aff), pos, status, residual, gain_o, offset_o,
                     iters, aff_o, self.threads)
        return TrackResult(pos, status, residual, gain_o, offset_o, iters, affine=aff_o if aff else None)
