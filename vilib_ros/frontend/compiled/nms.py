"""Compiled (numba) non-maxima suppression combined with cell selection (NMS-C): the
algorithm of ``kernels/nms.cu`` and of ``nms_suppress_cpu`` + ``cell_select_cpu`` in
:mod:`vilib_ros.frontend.reference.detector`, with identical output (definitions there).

Loop mapping: cells in parallel (``prange``); each cell walks its level-k region (cells
``(cw >> k) x (ch >> k)`` on level k, one grid for all levels) in raster order, level 0 first,
and keeps the first pixel whose score beats the best so far *and* survives suppression. Only
pixels that would become the cell's winner are tested against their Moore neighbourhood, in
spiral order (ring 1 first, so most losers leave after a few reads): a neighbour with a
greater score, or an equal one earlier in raster order, suppresses. Outside the map counts as
0. Strict ``>`` while scanning gives the reference's ties: lower level, then lower y, then x.
"""
from __future__ import annotations

import numba
import numpy as np

MAX_LEVELS = 4


def _spiral(n: int) -> tuple[tuple[int, int], ...]:
    """(dx, dy) of the (2n+1)^2 - 1 neighbours, ring by ring, each ring clockwise from top-left."""
    out = []
    for r in range(1, n + 1):
        out += [(dx, -r) for dx in range(-r, r + 1)]
        out += [(r, dy) for dy in range(-r + 1, r + 1)]
        out += [(dx, r) for dx in range(r - 1, -r - 1, -1)]
        out += [(-r, dy) for dy in range(r - 1, -r, -1)]
    return tuple(out)


_SPIRAL = np.array(_spiral(4), np.int64)   # rings 1..4; radius n uses the first (2n+1)^2 - 1


@numba.njit(cache=True, nogil=True, inline="always")
def _survives(m, x, y, s, n_nb, spiral):
    """True when no neighbour in the first ``n_nb`` spiral offsets suppresses (x, y) of score s."""
    h, w = m.shape
    for i in range(n_nb):
        dx = spiral[i, 0]
        dy = spiral[i, 1]
        xx = x + dx
        yy = y + dy
        if xx < 0 or yy < 0 or xx >= w or yy >= h:
            continue
        q = m[yy, xx]
        if q > s:
            return False
        if q == s and (dy < 0 or (dy == 0 and dx < 0)):
            return False
    return True


@numba.njit(cache=True, nogil=True, parallel=True, boundscheck=False)
def nms_cells(maps, n_levels, cell_width, cell_height, rows, cols, radius, occupancy, use_occupancy,
              out_x, out_y, out_score, out_level):
    """One winner per cell over ``maps[0:n_levels]`` (float32 2D score maps, level k halves k-1).

    ``occupancy``: uint8 (rows * cols,), nonzero = skip the cell (read when ``use_occupancy``).
    Outputs (rows * cols,): x, y (level-0 px, -1 when empty), score (0), level (-1).
    """
    spiral = _SPIRAL
    n_nb = (2 * radius + 1) * (2 * radius + 1) - 1
    for cell in numba.prange(rows * cols):
        r = cell // cols
        c = cell - r * cols
        best = np.float32(0.0)
        bx = -1
        by = -1
        bl = -1
        if not (use_occupancy and occupancy[cell] != 0):
            for k in range(n_levels):
                m = maps[k]
                h, w = m.shape
                cw = cell_width >> k
                ch = cell_height >> k
                y0 = r * ch
                x0 = c * cw
                y1 = min(y0 + ch, h)
                x1 = min(x0 + cw, w)
                for y in range(y0, y1):
                    row = m[y]
                    for x in range(x0, x1):
                        s = row[x]
                        if s > best and _survives(m, x, y, s, n_nb, spiral):
                            best = s
                            bx = x << k
                            by = y << k
                            bl = k
        if bl < 0:
            out_x[cell] = -1.0
            out_y[cell] = -1.0
            out_score[cell] = 0.0
            out_level[cell] = -1
        else:
            out_x[cell] = np.float32(bx)
            out_y[cell] = np.float32(by)
            out_score[cell] = best
            out_level[cell] = bl


@numba.njit(cache=True, nogil=True, parallel=True, boundscheck=False)
def nms_full(score, radius, out):
    """Whole-map suppression (``nms_suppress_cpu``): surviving scores, others 0."""
    h, w = score.shape
    spiral = _SPIRAL
    n_nb = (2 * radius + 1) * (2 * radius + 1) - 1
    for y in numba.prange(h):
        for x in range(w):
            s = score[y, x]
            if s > 0 and _survives(score, x, y, s, n_nb, spiral):
                out[y, x] = s
            else:
                out[y, x] = 0.0
