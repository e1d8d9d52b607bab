"""Compiled (numba) image pyramid: the 2x2 mean of :mod:`vilib_ros.frontend.reference.pyramid`,
bit-identical to :func:`vilib_ros.frontend.reference.pyramid.build_pyramid_cpu`.

Level k+1 = ``(a + b + c + d + 2) >> 2`` over the 2x2 blocks of level k, size ``(h // 2, w // 2)``.
:class:`CpuPyramid` holds the level buffers (allocated once) and refills them per frame.
"""
from __future__ import annotations

import numba
import numpy as np

from vilib_ros.frontend.config import check_levels, level_shapes


@numba.njit(cache=True, nogil=True, boundscheck=False)
def halve(src, dst):
    """dst[y, x] = rounded mean of src[2y:2y+2, 2x:2x+2] (uint8 2D C arrays; one row at a time)."""
    h, w = dst.shape
    for y in range(h):
        r0 = src[2 * y]
        r1 = src[2 * y + 1]
        d = dst[y]
        for x in range(w):
            a = np.int32(r0[2 * x]) + np.int32(r0[2 * x + 1])
            d[x] = (a + np.int32(r1[2 * x]) + np.int32(r1[2 * x + 1]) + 2) >> 2


def build_pyramid_compiled(img: np.ndarray, levels: int) -> list[np.ndarray]:
    """Compiled twin of :func:`build_pyramid_cpu`: levels 0..levels-1, level 0 is ``img``."""
    img = np.asarray(img)
    if img.dtype != np.uint8 or img.ndim != 2:
        raise ValueError(f"pyramid input must be a 2D uint8 image, got {img.dtype} with shape {img.shape}")
    check_levels(img.shape[1], img.shape[0], levels)
    out = [img]
    for h, w in level_shapes(img.shape[1], img.shape[0], levels)[1:]:
        dst = np.empty((h, w), np.uint8)
        halve(np.ascontiguousarray(out[-1]), dst)
        out.append(dst)
    return out


class CpuPyramid:
    """Preallocated pyramid of ``levels`` levels for ``width x height`` frames.

    :meth:`build` fills levels 1.. from a frame and returns the level list (level 0 is the
    frame itself, made contiguous); the buffers are reused by the next call.
    """

    def __init__(self, width: int, height: int, levels: int):
        check_levels(width, height, levels)
        self.shapes = level_shapes(width, height, levels)
        self.levels: list[np.ndarray] = [np.zeros(s, np.uint8) for s in self.shapes]

    def build(self, img: np.ndarray) -> list[np.ndarray]:
        img = np.ascontiguousarray(img)
        if img.dtype != np.uint8 or img.shape != self.shapes[0]:
            raise ValueError(f"expected a uint8 image of shape {self.shapes[0]}, got {img.dtype} {img.shape}")
        self.levels[0] = img
        for k in range(1, len(self.shapes)):
            halve(self.levels[k - 1], self.levels[k])
        return self.levels
