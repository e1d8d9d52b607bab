"""The NumPy reference of the FAST corner detector with combined non-maxima suppression and cell
selection: the definitions every twin follows bit for bit (the compiled one in
:mod:`vilib_ros.frontend.compiled.detector`, the GPU one in :mod:`vilib_ros.frontend.gpu.detector`).

Pipeline (the paper's, Nagy et al. IROS 2020): image pyramid -> FAST corner response on
detection levels 0..l-1 -> NMS within the (2n+1)^2 Moore neighbourhood combined with one
maximum per grid cell (NMS-C), one grid shared by all levels.

Definitions (identical on CPU and GPU; the tests check this exactly):

* Threshold: ``t = floor(threshold)``; circle pixel i is *brighter* when ``I_i - I_c > t``
  and *darker* when ``I_c - I_i > t`` (OpenCV's and the paper's ``> I_c + eps``).
* Segment test: the darker mask and the brighter mask (16 bits each, bit i = circle pixel i,
  see :data:`vilib_ros.frontend.fast_lut.CIRCLE`) are looked up separately in the 8 KB bit table;
  a corner has a circular run of >= N same-class pixels. Score 0 where it fails, and within
  ``border`` pixels of the level's edge.
* ``sad_circle`` (SAD-B): sum over all 16 circle pixels of ``|I_i - I_c|``.
* ``sad_arc`` (SAD-A): sum of ``|I_i - I_c|`` over the circle pixels lying in a same-class
  run of length >= N (for N >= 9 there is only one such run: the qualifying arc).
* ``max_threshold`` (MT): the largest integer t' for which the segment test still passes,
  ``max over classes and N-windows of (min signed difference in the window) - 1``.
* Suppression (radius n): a pixel survives when its score is > 0, no neighbour in its
  (2n+1)^2 window has a strictly greater score, and no neighbour with an equal score comes
  before it in raster order (smaller (y, x)). Outside the map counts as 0.
* Cell selection: cells ``cell_width x cell_height`` level-0 pixels, ``ceil`` tiling (the last
  row/column of cells may be partial); on level k the cell is ``(cw >> k) x (ch >> k)``
  level-k pixels. The winner is the surviving pixel with the highest score; ties go to the
  lower level, then the lower y, then the lower x. Positions are scaled to level 0 by
  ``2**k``. Empty cells (nothing survives, or marked occupied): level -1, score 0, x = y = -1.
"""
from __future__ import annotations

import numpy as np

from vilib_ros.frontend.config import (DetectorConfig, check_geometry, check_image, check_occupancy,
                                       grid_shape_for)
from vilib_ros.frontend.fast_lut import CIRCLE, arc_coverage, build_lut, lut_lookup
from vilib_ros.frontend.reference.pyramid import build_pyramid_cpu
from vilib_ros.types import CellFeatures

EMPTY_XY = -1.0


def fast_score_cpu(img: np.ndarray, arc_length: int, threshold: float, score: str, border: int,
                   lut: np.ndarray | None = None) -> np.ndarray:
    """FAST corner response map (float32, same shape as ``img``), vectorised NumPy."""
    if lut is None:
        lut = build_lut(arc_length)
    t = int(np.floor(float(threshold)))
    h, w = img.shape
    out = np.zeros((h, w), np.float32)
    if h <= 2 * border or w <= 2 * border:
        return out
    I = img.astype(np.int32)
    c = I[border:h - border, border:w - border]
    diffs = np.stack([I[border + dy:h - border + dy, border + dx:w - border + dx] - c for dx, dy in CIRCLE])
    weights = (1 << np.arange(16, dtype=np.int64))[:, None, None]
    dark = ((diffs < -t) * weights).sum(axis=0)
    bright = ((diffs > t) * weights).sum(axis=0)
    passing = lut_lookup(lut, dark) | lut_lookup(lut, bright)
    absd = np.abs(diffs)
    if score == "sad_circle":
        s = absd.sum(axis=0)
    elif score == "sad_arc":
        cov = arc_coverage(dark, arc_length) | arc_coverage(bright, arc_length)
        s = (absd * ((cov[None] >> np.arange(16)[:, None, None]) & 1)).sum(axis=0)
    elif score == "max_threshold":
        best = None
        for v in (diffs, -diffs):
            vv = np.concatenate([v, v])  # circular windows
            m = v.copy()
            for k in range(1, arc_length):
                m = np.minimum(m, vv[k:k + 16])
            b = m.max(axis=0)
            best = b if best is None else np.maximum(best, b)
        s = best - 1
    else:
        raise ValueError(f"unknown score {score!r}")
    out[border:h - border, border:w - border] = np.where(passing, s, 0).astype(np.float32)
    return out


def nms_suppress_cpu(score: np.ndarray, radius: int) -> np.ndarray:
    """Scores of the pixels that survive radius-n suppression (others 0), vectorised."""
    h, w = score.shape
    n = radius
    p = np.zeros((h + 2 * n, w + 2 * n), score.dtype)
    p[n:n + h, n:n + w] = score
    sup = score <= 0
    for dy in range(-n, n + 1):
        for dx in range(-n, n + 1):
            if dx == 0 and dy == 0:
                continue
            q = p[n + dy:n + dy + h, n + dx:n + dx + w]
            sup |= q > score
            if dy < 0 or (dy == 0 and dx < 0):
                sup |= q == score
    return np.where(sup, 0, score).astype(np.float32)


def cell_select_cpu(maps: list[np.ndarray], config: DetectorConfig, grid_shape: tuple[int, int],
                    occupancy: np.ndarray | None = None) -> CellFeatures:
    """One winner per cell over all levels' (already suppressed) maps."""
    rows, cols = grid_shape
    n = rows * cols
    best_s = np.zeros(n, np.float32)
    best_x = np.full(n, EMPTY_XY, np.float32)
    best_y = np.full(n, EMPTY_XY, np.float32)
    best_l = np.full(n, -1, np.int32)
    for k, m in enumerate(maps):
        cw, ch = config.cell_width >> k, config.cell_height >> k
        pad = np.zeros((rows * ch, cols * cw), np.float32)
        hh, ww = min(m.shape[0], rows * ch), min(m.shape[1], cols * cw)
        pad[:hh, :ww] = m[:hh, :ww]
        cells = pad.reshape(rows, ch, cols, cw).transpose(0, 2, 1, 3).reshape(n, ch * cw)
        idx = np.argmax(cells, axis=1)  # first maximum in raster order: lower y, then lower x
        val = cells[np.arange(n), idx]
        better = val > best_s
        r, c = np.divmod(np.arange(n), cols)
        yy = r * ch + idx // cw
        xx = c * cw + idx % cw
        best_s = np.where(better, val, best_s)
        best_x = np.where(better, (xx << k).astype(np.float32), best_x)
        best_y = np.where(better, (yy << k).astype(np.float32), best_y)
        best_l = np.where(better, k, best_l).astype(np.int32)
    if occupancy is not None:
        occ = occupancy.reshape(-1)
        best_s[occ] = 0
        best_x[occ] = EMPTY_XY
        best_y[occ] = EMPTY_XY
        best_l[occ] = -1
    return CellFeatures(x=best_x.astype(np.float32), y=best_y.astype(np.float32), score=best_s.astype(np.float32),
                        level=best_l.astype(np.int32), grid_shape=(rows, cols))


class CpuFastDetector:
    """NumPy reference and fallback; same interface as
    :class:`vilib_ros.frontend.gpu.detector.GpuFastDetector`. ``config``: a validated
    :class:`~vilib_ros.frontend.config.DetectorConfig` (default: the defaults)."""

    device = "cpu"

    def __init__(self, width: int, height: int, config: DetectorConfig | None = None):
        self.config = config or DetectorConfig()
        check_geometry(width, height, self.config)
        self.width, self.height = int(width), int(height)
        self.grid_shape = grid_shape_for(self.width, self.height, self.config)
        self.lut = build_lut(self.config.arc_length)

    def pyramid(self, image: np.ndarray) -> list[np.ndarray]:
        check_image(image, self.width, self.height)
        return build_pyramid_cpu(image, self.config.levels)

    def score_maps(self, image: np.ndarray) -> list[np.ndarray]:
        c = self.config
        return [fast_score_cpu(lv, c.arc_length, c.threshold, c.score, c.border, self.lut)
                for lv in self.pyramid(image)]

    def suppressed_maps(self, image: np.ndarray) -> list[np.ndarray]:
        return [nms_suppress_cpu(s, self.config.nms_radius) for s in self.score_maps(image)]

    def detect(self, image: np.ndarray, occupancy=None) -> CellFeatures:
        check_image(image, self.width, self.height)
        occ = check_occupancy(occupancy, self.grid_shape)
        return cell_select_cpu(self.suppressed_maps(image), self.config, self.grid_shape, occ)
