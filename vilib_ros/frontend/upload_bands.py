"""A pageable frame's way to the device in row bands, so that the host copy into page-locked
memory overlaps the device reading it (uploads ``'mapped_bands'`` and ``'copy_bands'`` of
:class:`~vilib_ros.frontend.gpu_pipeline.GpuPipeline` and
:class:`~vilib_ros.frontend.detector_gpu.GpuFastDetector`).

* ``'mapped_bands'``: the frame's graph is launched first; then the host copies the frame into the
  page-locked slot band by band and, after each band, writes the frame's sequence number into that
  band's flag (page-locked, device-mapped). ``pyramid_frame`` (kernels/pyramid.cu) reads the
  sequence number from the frame parameters and each block waits for the flag of its tile's band
  before reading it over PCIe: the read of band k overlaps the host copy of band k + 1, and the
  launch itself overlaps the copy. A flag is written even where the copy fails, so the device
  never waits for a host that gave up (and the kernel's wait is bounded: 1 s).
* ``'copy_bands'``: band k is copied into the page-locked slot and its DMA copy to the device
  queued (``cudaMemcpyAsync``) before band k + 1 is copied; the pyramid kernel then reads device
  memory.

Bands are whole multiples of the pyramid kernel's 32-row tiles (a tile lies in one band).
"""
from __future__ import annotations

import numpy as np

from vilib_ros._cuda import host_device_pointer, pinned_buffer

UPLOADS = ("mapped", "copy", "pageable", "mapped_bands", "copy_bands")   # GpuPipeline / GpuFastDetector ``upload``
DEFAULT_UPLOAD = "mapped_bands"
BAND_FLAGS = 16          # flags per camera and slot (kernels/frame.cuh BAND_FLAGS)
BANDS = 4                # bands per frame (fewer where the frame has fewer 32-row tiles)
TILE_ROWS = 32           # pyramid_frame's tile height
# FrameParams (kernels/frame.cuh): the band fields, in 64-bit / 32-bit words
U64_BANDS, I32_SEQ, I32_BAND_ROWS = 10, 22, 24       # seq: one per camera (22 left, 23 right)


def band_ranges(height: int, bands: int = BANDS) -> tuple[tuple[int, int], ...]:
    """Row ranges [a, b) of the bands: ``bands`` equal multiples of 32 rows, the last one shorter."""
    tiles = -(-int(height) // TILE_ROWS)
    rows = TILE_ROWS * max(-(-tiles // int(bands)), -(-tiles // BAND_FLAGS))
    return tuple((a, min(a + rows, int(height))) for a in range(0, int(height), rows))


class BandFlags:
    """Page-locked, device-mapped band flags: ``host[slot, cam, band]`` (uint32), and
    ``dev[slot]`` the device address of a slot's flags; sequence numbers never 0."""

    def __init__(self, slots: int, keep: list):
        buf = pinned_buffer(int(slots) * 2 * BAND_FLAGS * 4, keep)
        self.host = buf.view(np.uint32).reshape(int(slots), 2, BAND_FLAGS)
        base = host_device_pointer(buf.ctypes.data)
        self.dev = [base + s * 2 * BAND_FLAGS * 4 if base else 0 for s in range(int(slots))]
        self._seq = 0

    def next_seq(self) -> int:
        self._seq = self._seq % 0xFFFFFFFF + 1
        return self._seq


class BandCopier:
    """The host copy of frames into page-locked slots in :func:`band_ranges` bands."""

    def __init__(self, height: int, width: int):
        self.ranges = band_ranges(height)
        self.rows = self.ranges[0][1] - self.ranges[0][0]
        self.width = int(width)
        self._todo: list = []          # (slot's band views, frame, the slot camera's flags)
        self.cams = 0                  # bit c: camera c's frame is deferred

    def views(self, staging: np.ndarray) -> tuple:
        """The band views of one page-locked (height, width) slot (built once per slot)."""
        return tuple(staging[a:b] for a, b in self.ranges)

    def defer(self, dst_bands: tuple, image: np.ndarray, flags: np.ndarray, cam: int = 0) -> None:
        """Copy camera ``cam``'s ``image`` at the next :meth:`flush` (after the launch that reads it)."""
        self._todo.append((dst_bands, image, flags))
        self.cams |= 1 << cam

    @property
    def pending(self) -> bool:
        return bool(self._todo)

    def flush(self, seq: int) -> None:
        """The deferred copies, band by band, each band's flag set to ``seq`` once it is in place."""
        todo = self._todo
        if not todo:
            return
        try:
            for dst, image, flags in todo:
                for i, (a, b) in enumerate(self.ranges):
                    np.copyto(dst[i], image[a:b])
                    flags[i] = seq
        except BaseException:
            for _, _, flags in todo:     # the device must not wait for a copy that will not come
                flags[:len(self.ranges)] = seq
            raise
        finally:
            todo.clear()
            self.cams = 0

    def copy_dma(self, dst_bands: tuple, image: np.ndarray, host_ptr: int, dev_ptr: int, stream_ptr: int) -> None:
        """``'copy_bands'``: each band into the page-locked slot at ``host_ptr``, then its DMA copy
        to ``dev_ptr`` queued on the stream, before the next band is copied."""
        import cupy

        rt = cupy.cuda.runtime
        w = self.width
        for i, (a, b) in enumerate(self.ranges):
            np.copyto(dst_bands[i], image[a:b])
            rt.memcpyAsync(dev_ptr + a * w, host_ptr + a * w, (b - a) * w, rt.memcpyHostToDevice, stream_ptr)
