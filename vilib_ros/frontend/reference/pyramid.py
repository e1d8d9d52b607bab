"""Image pyramid: every level halves the previous one.

Level k+1 is the 2x2 mean of level k with rounding, ``(a + b + c + d + 2) >> 2``, of size
``(h // 2, w // 2)``, uint8. :func:`build_pyramid_cpu` is the NumPy reference,
:class:`GpuPyramid` the preallocated CUDA twin (kernel ``kernels/pyramid.cu``).
"""
from __future__ import annotations

import numpy as np

from vilib_ros._cuda import launch

MAX_LEVELS = 8


def level_shapes(width: int, height: int, levels: int) -> list[tuple[int, int]]:
    """(h, w) of every level."""
    shapes = [(int(height), int(width))]
    for _ in range(1, levels):
        h, w = shapes[-1]
        shapes.append((h // 2, w // 2))
    return shapes


def _check(width: int, height: int, levels: int) -> None:
    if int(levels) != levels or not 1 <= levels <= MAX_LEVELS:
        raise ValueError(f"pyramid levels must be an integer in 1..{MAX_LEVELS}, got {levels!r}")
    if width < 1 or height < 1:
        raise ValueError(f"pyramid image size must be positive, got {width}x{height}")
    if (width >> (levels - 1)) < 1 or (height >> (levels - 1)) < 1:
        raise ValueError(f"image {width}x{height} is too small for {levels} pyramid levels")


def halve_cpu(img: np.ndarray) -> np.ndarray:
    """One pyramid step: rounded 2x2 mean, odd last row/column dropped."""
    h, w = img.shape[0] // 2, img.shape[1] // 2
    a = img[0:2 * h:2, 0:2 * w:2].astype(np.uint16)
    b = img[0:2 * h:2, 1:2 * w:2]
    c = img[1:2 * h:2, 0:2 * w:2]
    d = img[1:2 * h:2, 1:2 * w:2]
    return ((a + b + c + d + 2) >> 2).astype(np.uint8)


def build_pyramid_cpu(img: np.ndarray, levels: int) -> list[np.ndarray]:
    """Levels 0..levels-1 of ``img`` (uint8 HxW); level 0 is ``img`` itself."""
    img = np.asarray(img)
    if img.dtype != np.uint8 or img.ndim != 2:
        raise ValueError(f"pyramid input must be a 2D uint8 image, got {img.dtype} with shape {img.shape}")
    _check(img.shape[1], img.shape[0], levels)
    out = [img]
    for _ in range(1, levels):
        out.append(halve_cpu(out[-1]))
    return out


class GpuPyramid:
    """Preallocated device pyramid.

    ``.levels``: list of contiguous 2D ``cupy.uint8`` arrays (pitch = width), level 0 is the
    input buffer the caller uploads into; ``.build(stream)`` fills levels 1..L-1 (one launch
    per level, thread = one output pixel).
    """

    def __init__(self, width: int, height: int, levels: int):
        import cupy as cp

        _check(width, height, levels)
        self.width, self.height, self.n_levels = int(width), int(height), int(levels)
        self.shapes = level_shapes(width, height, levels)
        self.levels = [cp.zeros(s, dtype=cp.uint8) for s in self.shapes]
        self._kernel = None

    def _get_kernel(self):
        if self._kernel is None:
            from vilib_ros._cuda import get_module

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
