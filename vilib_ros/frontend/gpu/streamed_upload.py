"""The streamed upload: the frame is launched first and copied into page-locked memory after.

With ``upload='mapped'`` the host copies a pageable frame into a page-locked slot and then
launches the frame; the pyramid kernel reads the slot over PCIe. The copy and the read then
follow each other. With ``upload='streamed'`` the host launches the frame FIRST and then copies
it in :data:`BANDS` bands of rows; after each band it releases the band's pyramid tiles (32 x 128
pixels, one block of ``kernels/pyramid.cu`` each) by storing the frame's number into each tile's
flag, and each block (``pf_wait_tile``) waits for its flag. The host copy and the device's read
of the frame overlap; only the last band's read is left after the copy.

Every tile has its own flag in its own 128-byte line: strong loads of ONE address from many
blocks (the 90 tiles of a 752x480 frame) are served one after the other over PCIe, while loads of
distinct lines overlap.

Only a frame with nothing else in flight streams (``process()``, ``detect()``), launched from a
captured CUDA graph: a direct launch in checked mode synchronises right after the kernel, before
the host could copy. Only the left camera streams (``GpuPipeline._launch_split`` says why).
The flags only grow (modulo 2**32): a frame waits for values above the last frame's. A block
that waits longer than 1 s (a host that died mid-copy) goes on and sets the timeout line:
:meth:`StreamedUpload.take_timeouts` reads and clears it.
"""
from __future__ import annotations

import numpy as np

from vilib_ros._cuda import host_device_pointer, pinned_buffer

#: how a frame gets to the device (``upload`` of GpuPipeline and GpuFastDetector; the list is in
#: :mod:`vilib_ros.frontend.gpu.pipeline`'s docstring)
UPLOADS = ("streamed", "mapped", "copy", "pageable")
BANDS = 4
TILE_ROWS, TILE_COLS = 32, 128      # kernels/pyramid.cu PF_TH, PF_TW: one block's tile, never split between bands
FLAG_WORDS = 32                     # kernels/pyramid.cu PF_FLAG_WORDS: one 128-byte line per flag
# FrameParams (kernels/frame.cuh): ``ready`` as the 10th 64-bit word, ready_base and timeout_tile
# as the 22nd and 23rd 32-bit words
U64_READY, U32_BASE, I32_TIMEOUT = 10, 22, 23


def band_rows(height: int, bands: int = BANDS) -> int:
    """Rows per band: whole pyramid tiles, ``bands`` bands or fewer."""
    tiles = -(-int(height) // TILE_ROWS)
    return -(-tiles // max(1, int(bands))) * TILE_ROWS


class StreamedUpload:
    """The tile flags and the band layout of ``width`` x ``height`` frames."""

    def __init__(self, width: int, height: int, keep: list, bands: int = BANDS):
        self.height = int(height)
        self.rows = band_rows(self.height, bands)
        self.bounds = [(y, min(y + self.rows, self.height)) for y in range(0, self.height, self.rows)]
        tx, ty = -(-int(width) // TILE_COLS), -(-self.height // TILE_ROWS)
        self.tiles = tx * ty
        lines = pinned_buffer((self.tiles + 1) * FLAG_WORDS * 4, keep).view(np.uint32).reshape(-1, FLAG_WORDS)
        self._flags = lines[:, 0]           # a tile's flag: word 0 of its line; the last line: timeouts
        per_band = self.rows // TILE_ROWS * tx
        self._band_flags = [self._flags[b * per_band:min((b + 1) * per_band, self.tiles)]
                            for b in range(len(self.bounds))]
        self._dev = host_device_pointer(lines.ctypes.data)
        self._value = 0                     # the flags' value once the armed frame is copied
        self.timeouts = 0

    def arm(self, prm: np.ndarray) -> None:
        """Fill the streamed-upload fields of one FrameParams (``prm``: its 128 page-locked bytes
        as uint8) for the next :meth:`fill`. A frame armed and never filled leaves the flags below
        the next frame's value: its blocks time out, and the next frame is not confused by it."""
        prm.view(np.uint64)[U64_READY] = self._dev
        u32 = prm.view(np.uint32)
        u32[U32_BASE] = self._value
        u32[I32_TIMEOUT] = self.tiles
        self._value = (self._value + 1) & 0xFFFFFFFF

    @staticmethod
    def disarm(prm: np.ndarray) -> None:
        """The frame in ``prm`` is complete at its launch: no tile to wait for."""
        prm.view(np.uint64)[U64_READY] = 0

    def fill(self, staging: np.ndarray, image: np.ndarray) -> None:
        """Copy ``image`` into ``staging`` band by band, each band's tiles released to the device
        when copied. Every tile is released even if a copy fails, so no block waits for the timeout."""
        value = self._value
        done = 0
        try:
            for (y0, y1), flags in zip(self.bounds, self._band_flags):
                np.copyto(staging[y0:y1], image[y0:y1])
                flags[:] = value
                done += 1
        finally:
            if done < len(self.bounds):
                self._flags[:self.tiles] = value

    def take_timeouts(self) -> int:
        """Frames whose pyramid gave up waiting since the last call (counted in :attr:`timeouts`)."""
        if self._flags[self.tiles] == 0:
            return 0
        self._flags[self.tiles] = 0
        self.timeouts += 1
        return 1
