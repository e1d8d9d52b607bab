"""The image pyramid's NumPy reference: every level halves the previous one.

Level k+1 is the 2x2 mean of level k with rounding, ``(a + b + c + d + 2) >> 2``, of size
``(h // 2, w // 2)`` (:func:`vilib_ros.frontend.config.level_shapes`), uint8. The compiled twin
is :mod:`vilib_ros.frontend.compiled.pyramid`, the GPU's :mod:`vilib_ros.frontend.gpu.pyramid`
(``kernels/pyramid.cu``).
"""
from __future__ import annotations

import numpy as np

from vilib_ros.frontend.config import check_levels


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
    check_levels(img.shape[1], img.shape[0], levels)
    out = [img]
    for _ in range(1, levels):
        out.append(halve_cpu(out[-1]))
    return out
