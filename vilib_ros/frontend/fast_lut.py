"""FAST segment-test lookup table (the paper's bit-packed 8 KB table).

The 16 pixels of the radius-3 Bresenham circle are compared with the centre; the
comparison bits of one class (all *darker* or all *brighter*, the two classes are looked up
separately so that a darker and a brighter pixel never join one arc) form a 16-bit index.
Bit ``i`` of the index is circle pixel ``i`` (``CIRCLE[i]``). The table holds one bit per
index, ``2**16`` bits = 2048 ``uint32`` words = 8 KB: the upper 11 bits of the index pick
the word, the lower 5 bits pick the bit. A bit is set when the index contains a circular
run of at least ``N`` consecutive set bits.
"""
from __future__ import annotations

import functools

import numpy as np

#: Bresenham circle of radius 3, (dx, dy), clockwise starting straight above the centre
#: (the order of OpenCV's ``offsets16``, rotated).
CIRCLE: tuple[tuple[int, int], ...] = (
    (0, -3), (1, -3), (2, -2), (3, -1), (3, 0), (3, 1), (2, 2), (1, 3),
    (0, 3), (-1, 3), (-2, 2), (-3, 1), (-3, 0), (-3, -1), (-2, -2), (-1, -3),
)
ARC_LENGTHS = (9, 10, 11, 12)
LUT_WORDS = 2048


def _rotr16(m: np.ndarray, k: int) -> np.ndarray:
    """Rotate 16-bit masks right by k: bit s of the result is bit (s + k) % 16 of m."""
    k %= 16
    if k == 0:
        return m & 0xFFFF
    return ((m >> k) | (m << (16 - k))) & 0xFFFF


def _rotl16(m: np.ndarray, k: int) -> np.ndarray:
    """Rotate left by k: bit i of the result is bit (i - k) % 16 of m."""
    return _rotr16(m, (16 - k) % 16)


def arc_starts(masks: np.ndarray, arc_length: int) -> np.ndarray:
    """Bit s set where bits s .. s+N-1 (circularly) of the mask are all set."""
    m = np.asarray(masks).astype(np.int64)
    w = m & 0xFFFF
    for k in range(1, arc_length):
        w = w & _rotr16(m, k)
    return w


def arc_coverage(masks: np.ndarray, arc_length: int) -> np.ndarray:
    """Bits of the mask that lie in some circular run of at least N set bits."""
    w = arc_starts(masks, arc_length)
    c = np.zeros_like(w)
    for k in range(arc_length):
        c = c | _rotl16(w, k)
    return c


def _check_arc_length(arc_length: int) -> None:
    if int(arc_length) != arc_length or not 9 <= arc_length <= 12:
        raise ValueError(f"arc_length must be an integer in 9..12, got {arc_length!r}")


@functools.lru_cache(maxsize=None)
def _build(arc_length: int) -> bytes:
    idx = np.arange(1 << 16, dtype=np.int64)
    passing = arc_starts(idx, arc_length) != 0
    bits = passing.reshape(LUT_WORDS, 32).astype(np.uint64)
    words = (bits << np.arange(32, dtype=np.uint64)).sum(axis=1).astype(np.uint32)
    return words.tobytes()


def build_lut(arc_length: int) -> np.ndarray:
    """The 2048-word (8 KB) uint32 segment-test table for arc length N (9..12)."""
    _check_arc_length(arc_length)
    return np.frombuffer(_build(int(arc_length)), dtype=np.uint32).copy()


def lut_lookup(lut: np.ndarray, index: np.ndarray) -> np.ndarray:
    """Segment-test answer (bool) for 16-bit comparison masks, as the kernel reads it."""
    index = np.asarray(index).astype(np.int64)
    return ((lut[index >> 5].astype(np.int64) >> (index & 31)) & 1).astype(bool)
