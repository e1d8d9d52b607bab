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

from vilib_ros._cuda import launch
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
    """NumPy reference and fallback; same interface as :class:`GpuFastDetector`."""

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


# ----------------------------------------------------------------------------- GPU

def _score_pitch(w: int) -> int:
    """Score-map row pitch in floats: a multiple of 32 (128 bytes, one L1 line per segment)."""
    return (w + 31) // 32 * 32


class GpuFastDetector:
    """CUDA detector (kernels ``pyramid.cu``, ``fast.cu``, ``nms.cu``).

    Everything is allocated at construction: the device pyramid, score maps (pitched
    float32), the LUT (uploaded once), the cell outputs, the occupancy buffer, and pinned
    host buffers for the frame, the occupancy and the cell results. ``detect()`` = copy into
    pinned (skipped for frames in :meth:`pinned_frames` buffers) -> async upload -> pyramid ->
    CRF -> NMS-C -> async download -> synchronise. With ``use_graph`` (default) everything
    after the upload is one CUDA Graph launch; ``use_graph=False`` launches the kernels.
    """

    device = "cuda"
    MAX_GRAPHS = 256

    SMEM_LIMIT = 48 * 1024

    def __init__(self, width: int, height: int, config: DetectorConfig | None = None,
                 warps_per_cell: int = 8, use_graph: bool = True, nms_kernel: str = "auto",
                 static_geometry: bool = True):
        from vilib_ros._cuda import CudaUnavailable, cuda_available, cuda_unavailable_reason, get_module
        from vilib_ros.frontend.pyramid import GpuPyramid

        self.config = (config or DetectorConfig()).validate()
        check_geometry(width, height, self.config)
        if not cuda_available():
            raise CudaUnavailable(cuda_unavailable_reason())
        import cupy as cp

        if not 1 <= warps_per_cell <= 32:
            raise ValueError(f"warps_per_cell must be in 1..32, got {warps_per_cell}")
        if nms_kernel not in ("auto", "smem", "global"):
            raise ValueError(f"nms_kernel must be 'auto', 'smem' or 'global', got {nms_kernel!r}")
        self._cp = cp
        c = self.config
        self.width, self.height = int(width), int(height)
        self.grid_shape = grid_shape_for(self.width, self.height, c)
        self.n_cells = self.grid_shape[0] * self.grid_shape[1]
        self.warps_per_cell = int(warps_per_cell)
        # NMS-C variant: 'global' reads the score maps through L1; 'smem' first stages each
        # cell (+ nms_radius apron, every level) in shared memory. Identical results; 'auto'
        # (default) = 'global' for n = 1, 'smem' for n >= 2 (with static_geometry), the faster
        # one on the H100 (bench/results/perf_notes.md).
        # static_geometry: compile the cell size and level count into the NMS kernels (-D),
        # which turns the per-pixel index divisions into shifts / multiplies.
        r = c.nms_radius
        if nms_kernel == "auto":
            nms_kernel = "global" if r <= 1 else "smem"
        self.nms_smem_bytes = 4 * sum(((c.cell_width >> k) + 2 * r) * ((c.cell_height >> k) + 2 * r)
                                      for k in range(c.levels))
        if nms_kernel == "smem" and self.nms_smem_bytes > self.SMEM_LIMIT:
            log.info("cell tile needs %d B of shared memory (> %d): using the global-memory NMS-C kernel",
                     self.nms_smem_bytes, self.SMEM_LIMIT)
            nms_kernel = "global"
        self.nms_kernel = nms_kernel
        try:
            fast = get_module("fast", {"FAST_N": c.arc_length, "FAST_SCORE": SCORE_CODES[c.score]})
            nms_defs = {"NMS_R": c.nms_radius, "NMS_MAX_THREADS": 512 if self.warps_per_cell <= 16 else 1024}
            if static_geometry:
                nms_defs.update(NMS_CW=c.cell_width, NMS_CH=c.cell_height, NMS_LEVELS=c.levels)
            self.static_geometry = bool(static_geometry)
            nms = get_module("nms", nms_defs)
            get_module("pyramid")
            self._k_crf = fast.get_function("fast_crf")
            self._k_nms_cell = nms.get_function("nms_cell")
            self._k_nms_cell_smem = nms.get_function("nms_cell_smem")
            self._k_cell_select = nms.get_function("cell_select")
            self._k_nms_full = nms.get_function("nms_full")
        except CudaUnavailable:
            raise
        except Exception as exc:
            raise CudaUnavailable(f"detector kernels failed to load: {exc.__class__.__name__}: {exc}") from exc

        self.stream = cp.cuda.Stream(non_blocking=True)
        self.pyramid = GpuPyramid(self.width, self.height, c.levels)
        self.lut = cp.asarray(build_lut(c.arc_length))
        shapes = level_shapes(self.width, self.height, c.levels)
        self.scores = [cp.zeros((h, _score_pitch(w)), cp.float32) for h, w in shapes]
        self.suppressed = [cp.zeros((h, _score_pitch(w)), cp.float32) for h, w in shapes]
        self._desc = self._make_desc(self.scores, shapes)
        self._desc_sup = self._make_desc(self.suppressed, shapes)
        n = self.n_cells
        self._cells = cp.zeros(4 * n, cp.float32)
        self.out_x, self.out_y, self.out_score = self._cells[:n], self._cells[n:2 * n], self._cells[2 * n:3 * n]
        self.out_level = self._cells[3 * n:].view(cp.int32)
        self._occ_dev = cp.zeros(n, cp.uint8)
        self._frame_mem = cp.cuda.alloc_pinned_memory(self.width * self.height)
        self._frame_host = np.frombuffer(self._frame_mem, np.uint8, self.width * self.height).reshape(
            self.height, self.width)
        self._cells_mem = cp.cuda.alloc_pinned_memory(16 * n)
        self._cells_host = np.frombuffer(self._cells_mem, np.float32, 4 * n)
        self._occ_mem = cp.cuda.alloc_pinned_memory(n)
        self._occ_host = np.frombuffer(self._occ_mem, np.uint8, n)
        self._pinned_ptrs: set[int] = {self._frame_host.ctypes.data}
        self._pinned_keep: list = []
        self.use_graph = bool(use_graph)
        self._graphs: dict = {}
        self.graph_error: str | None = None
        self._k_spin = None
        # buffers above were filled on the legacy stream; run the whole sequence once so that
        # every kernel is loaded before any graph capture
        cp.cuda.Device().synchronize()
        self._upload(self._frame_host.ctypes.data)
        self._enqueue_after_upload(False, checked=True)
        self.stream.synchronize()

    # -- setup helpers
    def _make_desc(self, maps, shapes):
        cp = self._cp
        rows = [[m.data.ptr, m.shape[1], w, h] for m, (h, w) in zip(maps, shapes)]
        return cp.asarray(np.array(rows, dtype=np.int64).reshape(-1))

    def pinned_frames(self, count: int) -> list[np.ndarray]:
        """``count`` pinned host frame buffers; ``detect()`` uploads from them without a host copy."""
        cp = self._cp
        out = []
        for _ in range(int(count)):
            mem = cp.cuda.alloc_pinned_memory(self.width * self.height)
            a = np.frombuffer(mem, np.uint8, self.width * self.height).reshape(self.height, self.width)
            self._pinned_keep.append(mem)
            self._pinned_ptrs.add(a.ctypes.data)
            out.append(a)
        return out

    def register_pinned(self, arrays) -> None:
        """Let ``detect()`` upload straight from these page-locked host frames (no host copy).

        Each must be a C-contiguous uint8 (height, width) array in pinned memory that the
        caller keeps alive; pageable arrays raise ValueError.
        """
        cp = self._cp
        for a in arrays:
            if not isinstance(a, np.ndarray) or a.dtype != np.uint8 or a.shape != (self.height, self.width) \
                    or not a.flags.c_contiguous:
                raise ValueError(f"pinned frames must be C-contiguous uint8 {(self.height, self.width)} arrays")
            try:
                mtype = int(getattr(cp.cuda.runtime.pointerGetAttributes(a.ctypes.data), "type", -1))
            except Exception:  # pageable memory on some CUDA versions raises instead
                mtype = -1
            if mtype != int(getattr(cp.cuda.runtime, "memoryTypeHost", 1)):
                raise ValueError("register_pinned: array is not in page-locked (pinned) host memory")
            self._pinned_ptrs.add(a.ctypes.data)

    def poison(self) -> None:
        """Fill outputs and score maps with garbage (tests: unwritten cells show)."""
        self._cells.fill(np.nan)
        self.out_level.fill(-7)
        for m in self.scores + self.suppressed:
            m.fill(np.nan)
        for lv in self.pyramid.levels[1:]:
            lv.fill(0xFF)
        self._cells_host[:] = np.nan
        self.stream.synchronize()
        self._cp.cuda.Device().synchronize()

    # -- kernel sequence
    def _enqueue_crf(self, levels, checked, stream=None):
        c = self.config
        for k in range(c.levels):
            img, sc = levels[k], self.scores[k]
            h, w = img.shape
            grid = ((w + 31) // 32, (h + 7) // 8, 1)
            args = (img, np.int32(img.shape[1]), np.int32(w), np.int32(h), self.lut, np.int32(c.threshold_int),
                    np.int32(c.border), sc, np.int32(sc.shape[1]))
            launch(self._k_crf, grid, (32, 8, 1), args, stream=stream, checked=checked)

    def _cell_args(self, desc, occ, use_occ):
        c = self.config
        return (desc, np.int32(c.levels), np.int32(c.cell_width), np.int32(c.cell_height),
                np.int32(self.grid_shape[1]), occ, np.int32(1 if use_occ else 0),
                self.out_x, self.out_y, self.out_score, self.out_level)

    def _enqueue_nms(self, occ, use_occ, checked, stream=None, baseline=False):
        rows, cols = self.grid_shape
        block = (32, self.warps_per_cell, 1)

        def go(kern, grid, blk, args, smem=0):
            launch(kern, grid, blk, args, stream=stream, shared_mem=smem, checked=checked)

        if baseline:
            h, w = self.height, self.width
            go(self._k_nms_full, ((w + 31) // 32, (h + 7) // 8, self.config.levels), (32, 8, 1),
               (self._desc, self._desc_sup))
            go(self._k_cell_select, (cols, rows, 1), block, self._cell_args(self._desc_sup, occ, use_occ))
        elif self.nms_kernel == "smem":
            go(self._k_nms_cell_smem, (cols, rows, 1), block, self._cell_args(self._desc, occ, use_occ),
               self.nms_smem_bytes)
        else:
            go(self._k_nms_cell, (cols, rows, 1), block, self._cell_args(self._desc, occ, use_occ))

    def _upload(self, src_ptr):
        cp = self._cp
        cp.cuda.runtime.memcpyAsync(self.pyramid.levels[0].data.ptr, src_ptr, self.width * self.height,
                                    cp.cuda.runtime.memcpyHostToDevice, self.stream.ptr)

    def _enqueue_after_upload(self, use_occ, checked, events=None, baseline=False):
        cp = self._cp
        s = self.stream
        if use_occ:
            cp.cuda.runtime.memcpyAsync(self._occ_dev.data.ptr, self._occ_host.ctypes.data, self.n_cells,
                                        cp.cuda.runtime.memcpyHostToDevice, s.ptr)
        if events:
            events[1].record(s)
        self.pyramid.launches(stream=s, checked=checked)
        if events:
            events[2].record(s)
        self._enqueue_crf(self.pyramid.levels, checked, stream=s)
        if events:
            events[3].record(s)
        self._enqueue_nms(self._occ_dev, use_occ, checked, stream=s, baseline=baseline)
        if events:
            events[4].record(s)
        cp.cuda.runtime.memcpyAsync(self._cells_host.ctypes.data, self._cells.data.ptr, 16 * self.n_cells,
                                    cp.cuda.runtime.memcpyDeviceToHost, s.ptr)
        if events:
            events[5].record(s)

    def _graph(self, src_ptr, use_occ):
        """The captured graph (upload from ``src_ptr`` .. download) for a pinned source."""
        key = (src_ptr, use_occ)
        g = self._graphs.get(key)
        if g is not None or not self.use_graph:
            return g
        if len(self._graphs) >= self.MAX_GRAPHS:
            self._graphs.clear()
        cp = self._cp
        s = self.stream
        try:
            s.synchronize()
            s.begin_capture()
            try:
                self._upload(src_ptr)
                self._enqueue_after_upload(use_occ, checked=False)
            finally:
                g = s.end_capture()
        except Exception as exc:  # capture unsupported: keep the launch path
            self.graph_error = f"{exc.__class__.__name__}: {exc}"
            log.warning("CUDA graph capture failed, launching kernels directly: %s", self.graph_error)
            self.use_graph = False
            try:
                cp.cuda.runtime.getLastError()
            except Exception:
                pass
            return None
        self._graphs[key] = g
        return g

    # -- public API
    def _prepare(self, image, occupancy):
        check_image(image, self.width, self.height)
        occ = check_occupancy(occupancy, self.grid_shape)
        if image.ctypes.data in self._pinned_ptrs and image.flags.c_contiguous:
            src = image.ctypes.data
        else:
            np.copyto(self._frame_host, image)
            src = self._frame_host.ctypes.data
        if occ is not None:
            self._occ_host[:] = occ.reshape(-1)
        return src, occ is not None

    def _result(self) -> CellFeatures:
        n = self.n_cells
        h = self._cells_host
        return CellFeatures(x=h[:n].copy(), y=h[n:2 * n].copy(), score=h[2 * n:3 * n].copy(),
                            level=h[3 * n:].view(np.int32).copy(), grid_shape=self.grid_shape)

    def detect(self, image: np.ndarray, occupancy=None) -> CellFeatures:
        src, use_occ = self._prepare(image, occupancy)
        g = self._graph(src, use_occ)
        if g is not None:
            g.launch(self.stream)
        else:
            self._upload(src)
            self._enqueue_after_upload(use_occ, checked=True)
        self.stream.synchronize()
        return self._result()

    def detect_baseline(self, image: np.ndarray, occupancy=None) -> CellFeatures:
        """Full-map NMS then a separate cell selection (the paper's baseline), no graph."""
        src, use_occ = self._prepare(image, occupancy)
        self._upload(src)
        self._enqueue_after_upload(use_occ, checked=True, baseline=True)
        self.stream.synchronize()
        return self._result()

    def detect_timed(self, image: np.ndarray, events, baseline: bool = False, spin_cycles: int = 0) -> CellFeatures:
        """Launch path with CUDA events between stages (6 events: before upload, after upload,
        pyramid, CRF, NMS, download); the caller reads elapsed times after this returns.

        ``spin_cycles > 0`` first occupies the GPU with a spin kernel so the whole sequence is
        queued before it runs: the events then time GPU execution, not host launch gaps.
        """
        src, use_occ = self._prepare(image, None)
        if spin_cycles > 0:
            if self._k_spin is None:
                from vilib_ros._cuda import get_module

                self._k_spin = get_module("bench_util").get_function("gpu_spin")
            self._k_spin((1, 1, 1), (1, 1, 1), (np.int64(spin_cycles),), stream=self.stream)
        events[0].record(self.stream)
        self._upload(src)
        self._enqueue_after_upload(use_occ, checked=False, events=events, baseline=baseline)
        self.stream.synchronize()
        return self._result()

    def detect_device(self, pyramid, occupancy_dev=None, stream=None):
        """Enqueue CRF + NMS-C on an already built :class:`GpuPyramid` (no synchronisation).

        Returns device arrays ``(x, y, score, level)`` (views of this detector's output
        buffers, overwritten by the next call). ``occupancy_dev``: cupy bool/uint8 (rows, cols).
        ``stream``: a ``cupy.cuda.Stream``; default the current stream.
        """
        cp = self._cp
        c = self.config
        if len(pyramid.levels) < c.levels or tuple(pyramid.levels[0].shape) != (self.height, self.width):
            raise ValueError(f"pyramid must be {self.width}x{self.height} with at least {c.levels} levels")
        use_occ = occupancy_dev is not None
        occ = self._occ_dev
        if use_occ:
            if tuple(occupancy_dev.shape) != self.grid_shape or occupancy_dev.dtype.itemsize != 1:
                raise ValueError(f"occupancy_dev must be a bool/uint8 array of shape {self.grid_shape}")
            occ = cp.ascontiguousarray(occupancy_dev).view(cp.uint8).reshape(-1)
        stream = stream if stream is not None else cp.cuda.get_current_stream()
        self._enqueue_crf(pyramid.levels, True, stream=stream)
        self._enqueue_nms(occ, use_occ, True, stream=stream)
        return self.out_x, self.out_y, self.out_score, self.out_level

    def score_maps_host(self) -> list[np.ndarray]:
        """The last frame's score maps (host copies, padding columns dropped)."""
        self.stream.synchronize()
        return [m[:, :w].get() for m, (h, w) in zip(self.scores, level_shapes(self.width, self.height, self.config.levels))]

    def suppressed_maps_host(self) -> list[np.ndarray]:
        """The last baseline run's suppressed maps (host copies)."""
        self.stream.synchronize()
        return [m[:, :w].get() for m, (h, w) in zip(self.suppressed, level_shapes(self.width, self.height, self.config.levels))]

    def pyramid_host(self) -> list[np.ndarray]:
        self.stream.synchronize()
        return self.pyramid.to_host()


def make_detector(width: int, height: int, config: DetectorConfig | None = None, device: str = "auto"):
    """GpuFastDetector where CUDA works, else the CPU detector (compiled, or the NumPy
    CpuFastDetector: :mod:`vilib_ros.frontend.cpu_backend`).

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
    try:
        return GpuFastDetector(width, height, config)
    except CudaUnavailable as exc:
        if device == "cuda":
            raise
        log.warning("GPU detector unavailable, using the CPU path: %s", exc)
        return make_cpu_detector(width, height, config)
