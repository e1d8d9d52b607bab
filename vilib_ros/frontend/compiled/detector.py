"""Compiled CPU detector: pyramid -> FAST CRF -> NMS-C with numba, the interface of
:class:`vilib_ros.frontend.reference.detector.CpuFastDetector` and bit-identical output.

Every buffer (pyramid levels, score maps, cell outputs, occupancy) is allocated at
construction; :meth:`NumbaFastDetector.detect` allocates only its small result arrays.
Made by ``make_detector(..., device='cpu')`` (see :mod:`vilib_ros.frontend.factory`).
"""
from __future__ import annotations

import numba
import numpy as np

from vilib_ros.frontend.compiled.fast import fast_score
from vilib_ros.frontend.compiled.nms import MAX_LEVELS, nms_cells, nms_full
from vilib_ros.frontend.compiled.pyramid import CpuPyramid
from vilib_ros.frontend.compiled.threads import cpu_threads
from vilib_ros.frontend.config import SCORE_CODES, check_image, check_occupancy
from vilib_ros.frontend.reference.detector import CpuFastDetector
from vilib_ros.types import CellFeatures

_DUMMY_MAP = np.zeros((1, 1), np.float32)


class NumbaFastDetector(CpuFastDetector):
    """Compiled twin of :class:`CpuFastDetector` (same methods, same results)."""

    implementation = "numba"

    def __init__(self, width: int, height: int, config=None):
        super().__init__(width, height, config)
        self.threads = cpu_threads()
        c = self.config
        if c.levels > MAX_LEVELS:  # validate() already limits levels to 1..4
            raise ValueError(f"detector levels must be <= {MAX_LEVELS}")
        self._pyr = CpuPyramid(self.width, self.height, c.levels)
        self._scores = [np.zeros(s, np.float32) for s in self._pyr.shapes]
        self._maps = tuple(self._scores) + (_DUMMY_MAP,) * (MAX_LEVELS - c.levels)
        n = self.grid_shape[0] * self.grid_shape[1]
        self._out = (np.empty(n, np.float32), np.empty(n, np.float32), np.empty(n, np.float32),
                     np.empty(n, np.int32))
        self._occ = np.zeros(n, np.uint8)
        # JIT load / compile now, not on frame 1: for writable frames and for read-only ones (a ROS
        # message's bytes viewed without a copy), which numba types separately
        blank = np.zeros((self.height, self.width), np.uint8)
        self.detect(blank)
        blank.flags.writeable = False
        self.detect(blank)

    # -- stages on the internal buffers
    def _build(self, image) -> list[np.ndarray]:
        check_image(image, self.width, self.height)
        numba.set_num_threads(self.threads)    # thread-local in numba: set for whichever thread calls
        return self._pyr.build(image)

    def _score(self, levels) -> None:
        # scalars read from the config at every call: FeatureTracker.apply_config changes them live
        c = self.config
        lut, n, t, code, border = self.lut, int(c.arc_length), int(c.threshold_int), int(SCORE_CODES[c.score]), int(c.border)
        for lv, out in zip(levels, self._scores):
            fast_score(lv, lut, n, t, code, border, out)

    # -- the CpuFastDetector interface (copies out of the reused buffers)
    def pyramid(self, image: np.ndarray) -> list[np.ndarray]:
        return [lv.copy() for lv in self._build(image)]

    def score_maps(self, image: np.ndarray) -> list[np.ndarray]:
        self._score(self._build(image))
        return [s.copy() for s in self._scores]

    def suppressed_maps(self, image: np.ndarray) -> list[np.ndarray]:
        self._score(self._build(image))
        out = []
        for s in self._scores:
            m = np.empty_like(s)
            nms_full(s, int(self.config.nms_radius), m)
            out.append(m)
        return out

    def detect(self, image: np.ndarray, occupancy=None) -> CellFeatures:
        levels = self._build(image)
        occ = check_occupancy(occupancy, self.grid_shape)
        if occ is not None:
            self._occ[:] = occ.reshape(-1)
        self._score(levels)
        c = self.config
        rows, cols = self.grid_shape
        x, y, s, lv = self._out
        nms_cells(self._maps, int(c.levels), int(c.cell_width), int(c.cell_height), int(rows), int(cols),
                  int(c.nms_radius), self._occ, occ is not None, x, y, s, lv)
        return CellFeatures(x=x.copy(), y=y.copy(), score=s.copy(), level=lv.copy(), grid_shape=self.grid_shape)
