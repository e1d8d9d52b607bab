"""The image pyramid on the GPU (``kernels/pyramid.cu``): the levels of
:mod:`vilib_ros.frontend.reference.pyramid`, bit for bit, in preallocated device buffers."""
from __future__ import annotations

import numpy as np

from vilib_ros._cuda import get_module, launch
from vilib_ros.frontend.config import check_levels, level_shapes


class GpuPyramid:
    """Preallocated device pyramid.

    ``.levels``: list of contiguous 2D ``cupy.uint8`` arrays (pitch = width), level 0 is the
    input buffer the caller uploads into; ``.build(stream)`` fills levels 1..L-1 (one launch
    per level, thread = one output pixel).
    """

    def __init__(self, width: int, height: int, levels: int):
        import cupy as cp

        check_levels(width, height, levels)
        self.width, self.height, self.n_levels = int(width), int(height), int(levels)
        self.shapes = level_shapes(width, height, levels)
        self.levels = [cp.zeros(s, dtype=cp.uint8) for s in self.shapes]
        self._kernel = None

    def _get_kernel(self):
        if self._kernel is None:
            self._kernel = get_module("pyramid").get_function("pyramid_halve")
        return self._kernel

    def launches(self, stream=None, checked: bool = True) -> None:
        """Enqueue the level builds on ``stream`` (``checked=False`` inside graph capture)."""
        kern = self._get_kernel()
        block = (32, 8, 1)
        for k in range(1, self.n_levels):
            src, dst = self.levels[k - 1], self.levels[k]
            h, w = dst.shape
            grid = ((w + 31) // 32, (h + 7) // 8, 1)
            args = (src, np.int32(src.shape[1]), dst, np.int32(w), np.int32(w), np.int32(h))
            if checked:
                launch(kern, grid, block, args, stream=stream)
            else:
                kern(grid, block, args, stream=stream)

    def build(self, stream=None) -> None:
        """Fill levels 1..L-1 from ``levels[0]`` (asynchronous on ``stream``)."""
        self.launches(stream=stream, checked=True)

    def upload(self, img: np.ndarray, stream=None) -> None:
        """Convenience: copy a host image into level 0 (synchronous w.r.t. the host array)."""
        img = np.asarray(img)
        if img.dtype != np.uint8 or img.shape != self.shapes[0]:
            raise ValueError(f"expected a uint8 image of shape {self.shapes[0]}, got {img.dtype} {img.shape}")
        self.levels[0].set(np.ascontiguousarray(img), stream=stream)

    def to_host(self) -> list[np.ndarray]:
        return [lv.get() for lv in self.levels]
