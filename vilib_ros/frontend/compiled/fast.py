"""Compiled (numba) FAST corner response: the algorithm of ``kernels/fast.cu`` and
:func:`vilib_ros.frontend.reference.detector.fast_score_cpu`, bit for bit (the definitions are in
:mod:`vilib_ros.frontend.reference.detector`).

Loop mapping: rows in parallel (``prange``), two passes per row over 16 row segments (one per
circle pixel, indexed by the loop counter). Pass 1 (branch-free uint8 compares, so the compiler
vectorises it over x) applies a necessary condition: a run of N >= 9 contiguous circle pixels
holds one pixel of every opposite pair (i, i + 8), so some class (darker or brighter) must occur
in all eight pairs (OpenCV's FAST prunes the same way; it changes no result; few pixels of a
natural image pass). Pass 2 takes those candidates: the 16 differences, the darker and brighter
masks looked up in the bit-packed 8 KB table (upper 11 bits pick the word, lower 5 the bit), and
the score: SAD-B, SAD-A (over the qualifying arc) or MT (max over classes and N-windows of the
window's smallest signed difference, minus 1).
"""
from __future__ import annotations

import numba
import numpy as np

from vilib_ros.frontend.fast_lut import CIRCLE

_DX = tuple(int(d[0]) for d in CIRCLE)
_DY = tuple(int(d[1]) for d in CIRCLE)
SCORE_SAD_CIRCLE, SCORE_SAD_ARC, SCORE_MAX_THRESHOLD = 0, 1, 2


@numba.njit(cache=True, nogil=True, inline="always")
def _rotr16(m, k):
    return ((m >> k) | (m << (16 - k))) & 0xFFFF


@numba.njit(cache=True, nogil=True, inline="always")
def _coverage(m, n):
    """Bits of the 16-bit mask m lying in a circular run of >= n set bits."""
    w = m
    for k in range(1, n):
        w &= _rotr16(m, k)
    c = 0
    for k in range(n):
        c |= ((w << k) | (w >> (16 - k))) & 0xFFFF
    return c


@numba.njit(cache=True, nogil=True, inline="always")
def _dark(a, b, lo):
    """One of an opposite pair darker than the centre (all uint8: no widening, wide vectors)."""
    return (a < lo) | (b < lo)


@numba.njit(cache=True, nogil=True, inline="always")
def _bright(a, b, hi):
    return (a > hi) | (b > hi)


@numba.njit(cache=True, nogil=True, inline="always")
def _view(img, y, x0, n, i):
    """Row segment of circle pixel i for the centres x0 .. x0 + n - 1 of row y."""
    return img[y + _DY[i], x0 + _DX[i]:x0 + _DX[i] + n]


@numba.njit(cache=True, nogil=True, parallel=True, boundscheck=False)
def fast_score(img, lut, arc_length, threshold, score_code, border, out):
    """Score map of ``img`` (uint8 2D C) into ``out`` (float32, same shape, fully written)."""
    h, w = img.shape
    t = np.int32(threshold)
    n = w - 2 * border
    for y in numba.prange(h):
        orow = out[y]
        orow[:] = 0.0
        if y < border or y >= h - border or n <= 0:
            continue
        cand = np.empty(n, np.bool_)
        lo = np.empty(n, np.uint8)
        hi = np.empty(n, np.uint8)
        d = np.empty(16, np.int32)
        cen = img[y, border:border + n]
        # thresholds as uint8: darker = below max(c - t, 0), brighter = above min(c + t, 255)
        # (exact: no uint8 is below 0 or above 255)
        for j in range(n):
            c = np.int32(cen[j])
            lo[j] = np.uint8(max(c - t, 0))
            hi[j] = np.uint8(min(c + t, 255))
        # pass 1 (branch-free, every index a plain loop counter, uint8 compares: the compiler
        # vectorises it): a run of N >= 9 holds one pixel of every opposite pair (i, i + 8),
        # so some class must appear in all eight pairs
        v0, v8 = _view(img, y, border, n, 0), _view(img, y, border, n, 8)
        v1, v9 = _view(img, y, border, n, 1), _view(img, y, border, n, 9)
        v2, v10 = _view(img, y, border, n, 2), _view(img, y, border, n, 10)
        v3, v11 = _view(img, y, border, n, 3), _view(img, y, border, n, 11)
        v4, v12 = _view(img, y, border, n, 4), _view(img, y, border, n, 12)
        v5, v13 = _view(img, y, border, n, 5), _view(img, y, border, n, 13)
        v6, v14 = _view(img, y, border, n, 6), _view(img, y, border, n, 14)
        v7, v15 = _view(img, y, border, n, 7), _view(img, y, border, n, 15)
        for j in range(n):
            a = lo[j]
            dk = (_dark(v0[j], v8[j], a) & _dark(v4[j], v12[j], a) & _dark(v2[j], v10[j], a)
                  & _dark(v6[j], v14[j], a) & _dark(v1[j], v9[j], a) & _dark(v3[j], v11[j], a)
                  & _dark(v5[j], v13[j], a) & _dark(v7[j], v15[j], a))
            b = hi[j]
            br = (_bright(v0[j], v8[j], b) & _bright(v4[j], v12[j], b) & _bright(v2[j], v10[j], b)
                  & _bright(v6[j], v14[j], b) & _bright(v1[j], v9[j], b) & _bright(v3[j], v11[j], b)
                  & _bright(v5[j], v13[j], b) & _bright(v7[j], v15[j], b))
            cand[j] = dk | br
        # pass 2: the exact segment test and score on the few candidates
        for j in range(n):
            if not cand[j]:
                continue
            c = np.int32(cen[j])
            d[0], d[1], d[2], d[3] = np.int32(v0[j]) - c, np.int32(v1[j]) - c, np.int32(v2[j]) - c, np.int32(v3[j]) - c
            d[4], d[5], d[6], d[7] = np.int32(v4[j]) - c, np.int32(v5[j]) - c, np.int32(v6[j]) - c, np.int32(v7[j]) - c
            d[8], d[9], d[10], d[11] = (np.int32(v8[j]) - c, np.int32(v9[j]) - c, np.int32(v10[j]) - c,
                                        np.int32(v11[j]) - c)
            d[12], d[13], d[14], d[15] = (np.int32(v12[j]) - c, np.int32(v13[j]) - c, np.int32(v14[j]) - c,
                                          np.int32(v15[j]) - c)
            dark = 0
            bright = 0
            for i in range(16):     # branch-free: the classes of a candidate are unpredictable
                dark |= np.int32(d[i] < -t) << i
                bright |= np.int32(d[i] > t) << i
            passing = ((lut[dark >> 5] >> (dark & 31)) & 1) | ((lut[bright >> 5] >> (bright & 31)) & 1)
            if passing == 0:
                continue
            s = 0
            if score_code == SCORE_SAD_CIRCLE:
                for i in range(16):
                    s += abs(d[i])
            elif score_code == SCORE_SAD_ARC:
                cov = _coverage(dark, arc_length) | _coverage(bright, arc_length)
                for i in range(16):
                    s += abs(d[i]) * ((cov >> i) & 1)
            else:
                best = -1000
                for sign in (1, -1):
                    for st in range(16):
                        m = 1000
                        for k in range(arc_length):
                            v = sign * d[(st + k) & 15]
                            if v < m:
                                m = v
                        if m > best:
                            best = m
                s = best - 1
            orow[border + j] = np.float32(s)
