"""The FAST detector on the GPU: the kernels of :mod:`vilib_ros.frontend.reference.detector` (same
definitions, bit for bit), as in the paper's code (uzh-rpg/vilib: DetectorBase ->
DetectorBaseGPU -> FASTGPU).

:class:`GpuFastDetector` owns the kernels (``fast.cu``, ``nms.cu``, ``pyramid.cu``) and their
buffers. :meth:`~GpuFastDetector.detect_device` enqueues CRF + NMS-C on a pyramid that is
already on the device (the frontend's path, optionally gated by a device flag);
:meth:`~GpuFastDetector.detect` is the host convenience twin of
:meth:`vilib_ros.frontend.reference.detector.CpuFastDetector.detect`: frame in, cells out, one CUDA graph.
"""
from __future__ import annotations

import logging

import numpy as np

from vilib_ros._cuda import (CudaUnavailable, GraphCache, cuda_available, cuda_unavailable_reason,
                             get_module, host_device_pointer, launch, pinned_buffer, pinned_frames)
from vilib_ros.frontend.config import (DetectorConfig, check_geometry, check_image, check_occupancy, fast_defines,
                                       grid_shape_for, level_shapes, nms_defines)
from vilib_ros.frontend.fast_lut import build_lut
from vilib_ros.frontend.gpu.pyramid import GpuPyramid
from vilib_ros.frontend.gpu.streamed_upload import UPLOADS, StreamedUpload
from vilib_ros.types import CellFeatures

log = logging.getLogger("vilib_ros.frontend.detector")


def _score_pitch(w: int) -> int:
    """Score-map row pitch in floats: a multiple of 32 (128 bytes, one L1 line per segment)."""
    return (w + 31) // 32 * 32


def _desc(cp, ptrs_pitch_shape):
    """Level descriptor table: 4 int64 per level, [pointer, pitch, width, height]."""
    rows = [[p, pitch, w, h] for p, pitch, (h, w) in ptrs_pitch_shape]
    return cp.asarray(np.array(rows, dtype=np.int64).reshape(-1))


class GpuFastDetector:
    """CUDA FAST CRF + NMS-C (kernels ``fast.cu``, ``nms.cu``; pyramid ``pyramid.cu``).

    Everything is allocated at construction: score maps (pitched float32), the 8 KB LUT, the
    cell outputs on the device, and for :meth:`detect` a device pyramid plus page-locked host
    buffers (frame, occupancy, cell results). :meth:`detect` reads the frame where it lies:
    with ``upload='streamed'`` (default) the graph is launched first and a pageable frame is
    then copied into the staging buffer in bands that the pyramid kernel waits for
    (:mod:`vilib_ros.frontend.gpu.streamed_upload`); with ``'mapped'`` the pyramid kernel reads
    page-locked host memory directly (a pageable frame is copied into the staging buffer first;
    frames from :meth:`pinned_frames` are read in place); with ``'copy'`` a copy into the device pyramid
    comes first; with ``'pageable'`` that copy is made straight from the caller's array (the
    driver stages it). The NMS-C kernel writes the cells straight into page-locked host
    memory. With ``use_graph`` the sequence is one CUDA graph launch.
    """

    device = "cuda"
    SMEM_LIMIT = 48 * 1024

    def __init__(self, width: int, height: int, config: DetectorConfig | None = None,
                 warps_per_cell: int = 8, use_graph: bool = True, nms_kernel: str = "auto",
                 static_geometry: bool = True, upload: str = "streamed"):
        self.config = config or DetectorConfig()
        check_geometry(width, height, self.config)
        if not cuda_available():
            raise CudaUnavailable(cuda_unavailable_reason())
        import cupy as cp

        if not 1 <= warps_per_cell <= 32:
            raise ValueError(f"warps_per_cell must be in 1..32, got {warps_per_cell}")
        if nms_kernel not in ("auto", "smem", "global"):
            raise ValueError(f"nms_kernel must be 'auto', 'smem' or 'global', got {nms_kernel!r}")
        if upload not in UPLOADS:
            raise ValueError(f"upload must be one of {UPLOADS}, got {upload!r}")
        self._cp = cp
        c = self.config
        self.width, self.height = int(width), int(height)
        self.grid_shape = grid_shape_for(self.width, self.height, c)
        self.n_cells = self.grid_shape[0] * self.grid_shape[1]
        self.warps_per_cell = int(warps_per_cell)
        self.upload = upload
        # NMS-C variant: 'global' reads the score maps through L1; 'smem' first stages each
        # cell (+ nms_radius apron, every level) in shared memory. Identical results; 'auto'
        # picks the faster of the two for the radius: 'global' for n = 1, 'smem' for n >= 2.
        # static_geometry: cell size and level count compiled in.
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
        self.static_geometry = bool(static_geometry)
        try:
            fast = get_module("fast", fast_defines(c))
            nms = get_module("nms", nms_defines(c, self.warps_per_cell, static_geometry))
            pyr = get_module("pyramid")
            self._k_crf = fast.get_function("fast_crf_levels")
            self._k_nms = {"global": nms.get_function("nms_cell"), "smem": nms.get_function("nms_cell_smem")}
            self._k_cell_select = nms.get_function("cell_select")
            self._k_nms_full = nms.get_function("nms_full")
            self._k_pyramid = pyr.get_function("pyramid_frame")
        except CudaUnavailable:
            raise
        except Exception as exc:
            raise CudaUnavailable(f"detector kernels failed to load: {exc.__class__.__name__}: {exc}") from exc

        self.stream = cp.cuda.Stream(non_blocking=True)
        self.lut = cp.asarray(build_lut(c.arc_length))
        shapes = level_shapes(self.width, self.height, c.levels)
        self.scores = [cp.zeros((h, _score_pitch(w)), cp.float32) for h, w in shapes]
        self.suppressed = [cp.zeros((h, _score_pitch(w)), cp.float32) for h, w in shapes]
        self._desc = _desc(cp, [(m.data.ptr, m.shape[1], s) for m, s in zip(self.scores, shapes)])
        self._desc_sup = _desc(cp, [(m.data.ptr, m.shape[1], s) for m, s in zip(self.suppressed, shapes)])
        n = self.n_cells
        self._cells = cp.zeros(4 * n, cp.float32)
        self.out_x, self.out_y, self.out_score = self._cells[:n], self._cells[n:2 * n], self._cells[2 * n:3 * n]
        self.out_level = self._cells[3 * n:].view(cp.int32)
        self._occ_dev = cp.zeros(n, cp.uint8)
        self._level_descs: dict[int, tuple] = {}
        # detect(): own pyramid, page-locked frame / occupancy / cells / frame parameters
        self.pyramid = GpuPyramid(self.width, self.height, c.levels)
        self._pinned_keep: list = []
        self._frame_host = pinned_buffer(self.width * self.height, self._pinned_keep).reshape(self.height, self.width)
        self._cells_host = pinned_buffer(16 * n, self._pinned_keep).view(np.float32)
        self._occ_host = pinned_buffer(max(n, 16), self._pinned_keep)[:n]
        self._prm_host = pinned_buffer(128, self._pinned_keep).view(np.uint64)
        self._streamer = StreamedUpload(self.width, self.height, self._pinned_keep)
        self._deferred = None               # (staging, frame): the streamed copy still to make
        self._prm_dev = cp.zeros(128, cp.uint8)
        self._dptr = {"cells": host_device_pointer(self._cells_host.ctypes.data),
                      "occ": host_device_pointer(self._occ_host.ctypes.data),
                      "prm": host_device_pointer(self._prm_host.ctypes.data)}
        if not all(self._dptr.values()):
            raise CudaUnavailable("page-locked host memory is not mapped into the device's address space")
        self._pinned_ptrs: dict[int, int] = {self._frame_host.ctypes.data: host_device_pointer(self._frame_host.ctypes.data)}
        self._lvl_table = cp.asarray(np.array([lv.data.ptr for lv in self.pyramid.levels], np.uint64))
        self.graphs = GraphCache(self.stream, use_graph, name="detector")
        # every kernel once on an empty frame, outside graph capture (module loading must not
        # happen inside a capture)
        cp.cuda.Device().synchronize()
        src, _ = self.prepare(self._frame_host)
        self.enqueue_frame(src, False, True)
        self.enqueue_frame(src, False, True, baseline=True)
        self.stream.synchronize()

    # -- kernels
    def levels_desc(self, pyramid):
        """Device descriptor of a :class:`GpuPyramid`'s detection levels (made once per pyramid)."""
        hit = self._level_descs.get(id(pyramid))
        if hit is None:
            c = self.config
            if pyramid.n_levels < c.levels or tuple(pyramid.levels[0].shape) != (self.height, self.width):
                raise ValueError(f"pyramid must be {self.width}x{self.height} with at least {c.levels} levels")
            lv = pyramid.levels[:c.levels]
            hit = (_desc(self._cp, [(a.data.ptr, a.shape[1], a.shape) for a in lv]), pyramid)
            self._level_descs[id(pyramid)] = hit
        return hit[0]

    def enqueue_crf(self, levels_desc, stream, checked: bool = True, gate=None, block_rows: int = 0) -> None:
        """FAST CRF on every detection level of the pyramid described by ``levels_desc``.
        ``block_rows``: rows of blocks in the grid (0 = one per 8 image rows); each block then
        loops over the rows (fewer blocks make a gated-off launch cheaper)."""
        c = self.config
        rows = (self.height + 7) // 8
        grid = ((self.width + 31) // 32, min(rows, block_rows) if block_rows > 0 else rows, c.levels)
        launch(self._k_crf, grid, (32, 8, 1), (levels_desc, self._desc, np.int32(c.levels), self.lut,
                                               np.int32(c.threshold_int), np.int32(c.border),
                                               np.uint64(0) if gate is None else gate),
               stream=stream, checked=checked)

    def enqueue_nms(self, stream, checked: bool = True, occupancy=None, gate=None, outputs=None,
                    baseline: bool = False) -> None:
        """NMS-C on the score maps (or the baseline: full-map NMS + cell selection) into
        ``outputs`` (x, y, score, level pointers; default the device buffers)."""
        c = self.config
        rows, cols = self.grid_shape
        out = outputs if outputs is not None else (self.out_x, self.out_y, self.out_score, self.out_level)
        use_occ = occupancy is not None
        tail = (occupancy if use_occ else self._occ_dev, np.int32(1 if use_occ else 0), *out,
                np.uint64(0) if gate is None else gate)

        def cells(kern, desc, smem=0):
            args = (desc, np.int32(c.levels), np.int32(c.cell_width), np.int32(c.cell_height), np.int32(cols), *tail)
            launch(kern, (cols, rows, 1), (32, self.warps_per_cell, 1), args, shared_mem=smem, stream=stream,
                   checked=checked)

        if baseline:
            launch(self._k_nms_full, ((self.width + 31) // 32, (self.height + 7) // 8, c.levels), (32, 8, 1),
                   (self._desc, self._desc_sup), stream=stream, checked=checked)
            cells(self._k_cell_select, self._desc_sup)
        else:
            cells(self._k_nms[self.nms_kernel], self._desc, self.nms_smem_bytes if self.nms_kernel == "smem" else 0)

    def enqueue(self, levels_desc, stream, checked: bool = True, occupancy=None, gate=None, outputs=None,
                baseline: bool = False, block_rows: int = 0) -> None:
        """CRF + NMS-C. ``occupancy``: uint8 per cell (device array, or a mapped host pointer),
        or None; ``gate``: int64 device flag, both kernels do nothing while it is 0."""
        self.enqueue_crf(levels_desc, stream, checked, gate, block_rows)
        self.enqueue_nms(stream, checked, occupancy, gate, outputs, baseline)

    def detect_device(self, pyramid, occupancy_dev=None, stream=None, gate=None):
        """Enqueue CRF + NMS-C on an already built :class:`GpuPyramid` (no synchronisation).

        Returns device arrays ``(x, y, score, level)`` (views of this detector's output
        buffers, overwritten by the next call). ``occupancy_dev``: cupy bool/uint8 (rows, cols).
        ``stream``: a ``cupy.cuda.Stream``; default the current stream. ``gate``: int64 device
        flag (cupy array of one element); nothing runs while it is 0.
        """
        cp = self._cp
        occ = None
        if occupancy_dev is not None:
            if tuple(occupancy_dev.shape) != self.grid_shape or occupancy_dev.dtype.itemsize != 1:
                raise ValueError(f"occupancy_dev must be a bool/uint8 array of shape {self.grid_shape}")
            occ = cp.ascontiguousarray(occupancy_dev).view(cp.uint8).reshape(-1)
        stream = stream if stream is not None else cp.cuda.get_current_stream()
        self.enqueue(self.levels_desc(pyramid), stream, occupancy=occ, gate=gate)
        return self.out_x, self.out_y, self.out_score, self.out_level

    # -- host convenience
    def pinned_frames(self, count: int) -> list[np.ndarray]:
        """``count`` page-locked frame buffers; :meth:`detect` reads them without a host copy."""
        return pinned_frames(count, self.height, self.width, self._pinned_keep, self._pinned_ptrs)

    def prepare(self, image, occupancy=None, stream_ok: bool = False) -> tuple[int, bool]:
        """Check the frame, stage it in page-locked memory unless it is there already (or the
        upload is 'pageable'; or 'streamed' with ``stream_ok``: then :attr:`_deferred` holds the
        copy still to make), set the frame parameters; returns (host address of the frame,
        whether occupancy is used)."""
        check_image(image, self.width, self.height)
        occ = check_occupancy(occupancy, self.grid_shape)
        dptr = self._pinned_ptrs.get(image.ctypes.data) if image.flags.c_contiguous else None
        self._deferred = None
        if dptr is None and self.upload == "pageable" and image.flags.c_contiguous:
            src, dptr = image.ctypes.data, 0
        elif dptr is None:
            if self.upload == "streamed" and stream_ok:
                self._deferred = (self._frame_host, image)
            else:
                np.copyto(self._frame_host, image)
            src, dptr = self._frame_host.ctypes.data, self._pinned_ptrs[self._frame_host.ctypes.data]
        else:
            src = image.ctypes.data
        prm = self._prm_host.view(np.uint8)
        if self._deferred is None:
            StreamedUpload.disarm(prm)
        else:
            self._streamer.arm(prm)
        if occ is not None:
            self._occ_host[:] = occ.reshape(-1)
        # the pyramid kernel reads the frame at src[0]: the page-locked frame itself ('mapped'),
        # or its copy in level 0
        self._prm_host[0] = dptr if self.upload in ("mapped", "streamed") else self.pyramid.levels[0].data.ptr
        self._prm_host[1] = 0
        return src, occ is not None

    def upload_frame(self, src_host_ptr: int) -> None:
        """The frame into level 0 of the pyramid ('copy', 'pageable'), on :attr:`stream`."""
        cp = self._cp
        cp.cuda.runtime.memcpyAsync(self.pyramid.levels[0].data.ptr, src_host_ptr, self.width * self.height,
                                    cp.cuda.runtime.memcpyHostToDevice, self.stream.ptr)

    def enqueue_pyramid(self, src_host_ptr: int, checked: bool = True) -> None:
        """The frame into the pyramid (the upload, but for 'pageable', which goes before the graph:
        a copy from pageable memory cannot be captured) and levels 1..l-1, on :attr:`stream`."""
        s = self.stream
        if self.upload == "copy":
            self.upload_frame(src_host_ptr)
        grid = ((self.width + 127) // 128, (self.height + 31) // 32, 1)
        launch(self._k_pyramid, grid, (256, 1, 1),
               (np.uint64(self._dptr["prm"]), self._prm_dev, self._lvl_table, np.int32(len(self.pyramid.levels)),
                np.int32(self.width), np.int32(self.height), np.int32(min(self.config.levels - 1, 5)), np.int32(0)),
               stream=s, checked=checked)

    def host_outputs(self) -> tuple:
        """Device addresses of the page-locked cell results (x, y, score, level)."""
        n, cells = self.n_cells, self._dptr["cells"]
        return tuple(np.uint64(cells + 4 * n * i) for i in range(4))

    def enqueue_frame(self, src_host_ptr: int, use_occ: bool, checked: bool, baseline: bool = False) -> None:
        """The whole detection of a prepared frame on :attr:`stream`: pyramid, CRF, NMS-C with
        the cells written to page-locked host memory. No synchronisation."""
        self.enqueue_pyramid(src_host_ptr, checked)
        occ = np.uint64(self._dptr["occ"]) if use_occ else None
        self.enqueue(self.levels_desc(self.pyramid), self.stream, checked, occupancy=occ,
                     outputs=self.host_outputs(), baseline=baseline)

    def cells_host(self) -> CellFeatures:
        """Copies of the last :meth:`detect`'s cells (after synchronisation)."""
        n = self.n_cells
        h = self._cells_host
        return CellFeatures(x=h[:n].copy(), y=h[n:2 * n].copy(), score=h[2 * n:3 * n].copy(),
                            level=h[3 * n:].view(np.int32).copy(), grid_shape=self.grid_shape)

    def _run(self, image, occupancy, baseline):
        streams = self.upload == "streamed" and self.graphs.enabled and self.graphs.error is None
        src, use_occ = self.prepare(image, occupancy, stream_ok=streams)
        if self.upload == "pageable":
            self.upload_frame(src)
        key = (use_occ, baseline, self.upload, src if self.upload == "copy" else 0)
        g = self.graphs.get(key, lambda: self.enqueue_frame(src, use_occ, False, baseline))
        deferred = self._deferred
        if g is not None:
            try:
                g.launch(self.stream)
            finally:                        # the streamed copy, the graph already running
                if deferred is not None:
                    self._streamer.fill(*deferred)
        else:
            if deferred is not None:
                self._streamer.fill(*deferred)
            self.enqueue_frame(src, use_occ, True, baseline)
        self.stream.synchronize()           # a fault of the graph's kernels shows here
        if self._streamer.take_timeouts():
            log.warning("the pyramid stopped waiting for the frame's streamed copy: its cells are not valid")
        return self.cells_host()

    def detect(self, image: np.ndarray, occupancy=None) -> CellFeatures:
        """Cells of one frame (synchronous): the host twin of ``CpuFastDetector.detect``."""
        return self._run(image, occupancy, False)

    def detect_baseline(self, image: np.ndarray, occupancy=None) -> CellFeatures:
        """Full-map NMS then a separate cell selection (the paper's baseline)."""
        return self._run(image, occupancy, True)

    @property
    def graph_error(self) -> str | None:
        return self.graphs.error

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
