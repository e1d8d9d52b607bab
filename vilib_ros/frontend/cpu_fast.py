"""Compiled (numba) FAST corner response: the algorithm of ``kernels/fast.cu`` and
:func:`vilib_ros.frontend.detector.fast_score_cpu`, bit for bit (the definitions are in
:mod:`vilib_ros.frontend.detector`).

Loop mapping: rows in parallel (``prange``), two passes per row. Pass 1 (branch-free, so the
compiler vectorises it over x) applies a necessary condition: a run of N >= 9 contiguous circle
pixels holds one pixel of every opposite pair (i, i + 8), so some class (darker or brighter)
must occur in all eight pairs (OpenCV's FAST prunes the same way; it changes no result). Pass 2
takes the few candidates: the 16 differences, look the darker and brighter masks up in the bit-packed 8 KB table (upper
11 bits pick the word, lower 5 the bit) and score: SAD-B, SAD-A (over the qualifying arc) or MT
(max over classes and N-windows of the window's smallest signed difference, minus 1).
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
def _pair(a, b, lo, hi):
    """Class bits of an opposite circle pair: 1 = one of them darker, 2 = one brighter."""
    a = np.int32(a)
    b = np.int32(b)
    return np.int32((a < lo) | (b < lo)) | (np.int32((a > hi) | (b > hi)) << 1)


@numba.njit(cache=True, nogil=True, inline="always")
def _view(img, y, x0, n, i):
    """Row segment of circle pixel i for the centres x0 .. x0 + n - 1 of row y."""
    return img[y + _DY[i], x0 + _DX[i]:x0 + _DX[i] + n]


@numba.njit(cache=True, nogil=True, parallel=True, boundscheck=False)
def fast_score(img, lut, arc_length, threshold, score_code, border, out):
    """Score map of ``img`` (uint8 2D C) into ``out`` (float32, same shape, fully written)."""
    h, w = img.shape
    flat = img.reshape(-1)
    t = np.int32(threshold)
    off = np.empty(16, np.int64)
    for i in range(16):
        off[i] = _DY[i] * w + _DX[i]
    n = w - 2 * border
    for y in numba.prange(h):
        orow = out[y]
        orow[:] = 0.0
        if y < border or y >= h - border or n <= 0:
            continue
        cand = np.empty(n, np.int32)
        d = np.empty(16, np.int32)
        # pass 1 (branch-free, every index a plain loop counter, so the compiler vectorises it):
        # a run of N >= 9 holds one pixel of every opposite pair (i, i + 8), so some class
        # must appear in all eight pairs
        cen = img[y, border:border + n]
        v0, v8 = _view(img, y, border, n, 0), _view(img, y, border, n, 8)
        v1, v9 = _view(img, y, border, n, 1), _view(img, y, border, n, 9)
        v2, v10 = _view(img, y, border, n, 2), _view(img, y, border, n, 10)
        v3, v11 = _view(img, y, border, n, 3), _view(img, y, border, n, 11)
        v4, v12 = _view(img, y, border, n, 4), _view(img, y, border, n, 12)
        v5, v13 = _view(img, y, border, n, 5), _view(img, y, border, n, 13)
        v6, v14 = _view(img, y, border, n, 6), _view(img, y, border, n, 14)
        v7, v15 = _view(img, y, border, n, 7), _view(img, y, border, n, 15)
        for j in range(n):
            c = np.int32(cen[j])
            lo = c - t
            hi = c + t
            k = _pair(v0[j], v8[j], lo, hi) & _pair(v4[j], v12[j], lo, hi)
            k &= _pair(v2[j], v10[j], lo, hi) & _pair(v6[j], v14[j], lo, hi)
            k &= _pair(v1[j], v9[j], lo, hi) & _pair(v3[j], v11[j], lo, hi)
            k &= _pair(v5[j], v13[j], lo, hi) & _pair(v7[j], v15[j], lo, hi)
            cand[j] = k
        # pass 2: the exact segment test and score on the few candidates
        base = y * w + border
        for j in range(n):
            if cand[j] == 0:
                continue
            x = border + j
            p = base + j
            c = np.int32(flat[p])
            dark = 0
            bright = 0
            for i in range(16):     # branch-free: the classes of a candidate are unpredictable
                v = np.int32(flat[p + off[i]]) - c
                d[i] = v
                dark |= np.int32(v < -t) << i
                bright |= np.int32(v > t) << i
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
            orow[x] = np.float32(s)
