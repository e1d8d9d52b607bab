"""FAST corner detector with combined non-maxima suppression and cell selection.

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

import logging
from dataclasses import dataclass, fields

import numpy as np

from vilib_ros.frontend.fast_lut import CIRCLE, arc_coverage, build_lut, lut_lookup
from vilib_ros.frontend.pyramid import build_pyramid_cpu, level_shapes
from vilib_ros.types import CellFeatures

log = logging.getLogger("vilib_ros.frontend.detector")

SCORES = ("sad_circle", "sad_arc", "max_threshold")
SCORE_CODES = {name: i for i, name in enumerate(SCORES)}
EMPTY_XY = -1.0


@dataclass
class DetectorConfig:
    threshold: float = 10.0     # eps, intensity levels (floor is used), 1..254
    arc_length: int = 10        # N, 9..12
    score: str = "sad_arc"      # 'sad_circle' | 'sad_arc' | 'max_threshold'
    levels: int = 2             # detection pyramid levels l, 1..4
    cell_width: int = 32        # level-0 pixels, a multiple of 32
    cell_height: int = 32       # level-0 pixels, a multiple of 2**(levels-1)
    nms_radius: int = 1         # n: (2n+1)^2 Moore neighbourhood, 1..4
    border: int = 8             # pixels skipped at every level's edge, >= 3

    def validate(self) -> "DetectorConfig":
        def is_int(v):
            return isinstance(v, (int, np.integer)) and not isinstance(v, bool)

        for f in ("arc_length", "levels", "cell_width", "cell_height", "nms_radius", "border"):
            if not is_int(getattr(self, f)):
                raise ValueError(f"DetectorConfig.{f} must be an integer, got {getattr(self, f)!r}")
        try:
            thr = float(self.threshold)
        except (TypeError, ValueError):
            raise ValueError(f"DetectorConfig.threshold must be a number, got {self.threshold!r}") from None
        if not (1.0 <= thr < 255.0):
            raise ValueError(f"DetectorConfig.threshold must be in [1, 255), got {self.threshold!r}")
        if not 9 <= self.arc_length <= 12:
            raise ValueError(f"DetectorConfig.arc_length must be in 9..12, got {self.arc_length}")
        if self.score not in SCORES:
            raise ValueError(f"DetectorConfig.score must be one of {SCORES}, got {self.score!r}")
        if not 1 <= self.levels <= 4:
            raise ValueError(f"DetectorConfig.levels must be in 1..4, got {self.levels}")
        if self.cell_width < 32 or self.cell_width % 32:
            raise ValueError(f"DetectorConfig.cell_width must be a positive multiple of 32, got {self.cell_width}")
        step = 1 << (self.levels - 1)
        if self.cell_height < step or self.cell_height % step:
            raise ValueError(f"DetectorConfig.cell_height must be a positive multiple of 2**(levels-1) = {step}, "
                             f"got {self.cell_height}")
        if not 1 <= self.nms_radius <= 4:
            raise ValueError(f"DetectorConfig.nms_radius must be in 1..4, got {self.nms_radius}")
        if self.border < 3:
            raise ValueError(f"DetectorConfig.border must be >= 3, got {self.border}")
        return self

    @property
    def threshold_int(self) -> int:
        return int(np.floor(float(self.threshold)))

    @classmethod
    def from_dict(cls, d: dict) -> "DetectorConfig":
        names = {f.name for f in fields(cls)}
        unknown = set(d) - names
        if unknown:
            raise ValueError(f"unknown DetectorConfig fields: {sorted(unknown)}")
        return cls(**d)


def grid_shape_for(width: int, height: int, config: DetectorConfig) -> tuple[int, int]:
    return (-(-height // config.cell_height), -(-width // config.cell_width))


def check_geometry(width: int, height: int, config: DetectorConfig) -> None:
    """ValueError where the image cannot hold one cell plus the border on every level."""
    config.validate()
    if int(width) != width or int(height) != height or width <= 0 or height <= 0:
        raise ValueError(f"image size must be positive integers, got {width}x{height}")
    b = config.border
    if width < config.cell_width + 2 * b or height < config.cell_height + 2 * b:
        raise ValueError(f"image {width}x{height} is smaller than one cell ({config.cell_width}x{config.cell_height}) "
                         f"plus the border ({b} px each side)")
    if width >= 1 << 14 or height >= 1 << 14:
        raise ValueError(f"image {width}x{height} is too large (max 16383 px per side)")
    hl, wl = level_shapes(width, height, config.levels)[-1]
    if wl < 2 * b + 1 or hl < 2 * b + 1:
        raise ValueError(f"pyramid level {config.levels - 1} ({wl}x{hl}) is smaller than twice the border ({b}) "
                         f"plus one pixel: use fewer levels or a smaller border")


def check_image(image, width: int, height: int) -> np.ndarray:
    if not isinstance(image, np.ndarray):
        raise ValueError(f"image must be a numpy array, got {type(image).__name__}")
    if image.size == 0:
        raise ValueError(f"image is empty (shape {image.shape})")
    if image.ndim != 2:
        raise ValueError(f"image must be 2D (mono8), got shape {image.shape}")
    if image.dtype != np.uint8:
        raise ValueError(f"image must be uint8, got {image.dtype}")
    if image.shape != (height, width):
        raise ValueError(f"image shape {image.shape} differs from the detector's {(height, width)}")
    return image


def check_occupancy(occupancy, grid_shape: tuple[int, int]):
    if occupancy is None:
        return None
    occ = np.asarray(occupancy)
    if occ.shape != tuple(grid_shape):
        raise ValueError(f"occupancy shape {occ.shape} differs from the grid shape {tuple(grid_shape)}")
    if occ.dtype != np.bool_:
        raise ValueError(f"occupancy must be a bool array, got {occ.dtype}")
    return occ


# ----------------------------------------------------------------------------- CPU reference

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
    :class:`vilib_ros.frontend.detector_gpu.GpuFastDetector`."""

    device = "cpu"

    def __init__(self, width: int, height: int, config: DetectorConfig | None = None):
        self.config = (config or DetectorConfig()).validate()
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


def make_detector(width: int, height: int, config: DetectorConfig | None = None, device: str = "auto"):
    """:class:`~vilib_ros.frontend.detector_gpu.GpuFastDetector` where CUDA works, else the CPU
    detector (compiled, or the NumPy :class:`CpuFastDetector`: :mod:`vilib_ros.frontend.cpu_backend`).

    ``auto`` falls back to the CPU with a logged reason (no CUDA, or kernels that fail to
    compile); ``cuda`` raises :class:`vilib_ros._cuda.CudaUnavailable` instead.
    """
    from vilib_ros._cuda import CudaUnavailable, resolve_device

    config = (config or DetectorConfig()).validate()
    check_geometry(width, height, config)
    from vilib_ros.frontend.cpu_backend import make_cpu_detector

    dev = resolve_device(device)
    if dev == "cpu":
        return make_cpu_detector(width, height, config)
    from vilib_ros.frontend.detector_gpu import GpuFastDetector

    try:
        return GpuFastDetector(width, height, config)
    except CudaUnavailable as exc:
        if device == "cuda":
            raise
        log.warning("GPU detector unavailable, using the CPU path: %s", exc)
        return make_cpu_detector(width, height, config)
