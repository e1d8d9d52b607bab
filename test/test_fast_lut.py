"""The bit-packed FAST segment-test table against a brute-force segment test."""
import numpy as np
import pytest

from vilib_ros.frontend.fast_lut import CIRCLE, build_lut, lut_lookup


def brute_force_segment_test(n: int) -> np.ndarray:
    """For every 16-bit pattern: is there a circular run of >= n set bits? (explicit windows)"""
    idx = np.arange(1 << 16)
    bits = (idx[:, None] >> np.arange(16)[None, :]) & 1
    doubled = np.concatenate([bits, bits], axis=1)
    out = np.zeros(1 << 16, bool)
    for start in range(16):
        out |= doubled[:, start:start + n].all(axis=1)
    return out


class TestBuildLut:
    @pytest.mark.parametrize("n", [9, 10, 11, 12])
    def test_equals_brute_force_on_all_patterns(self, n):
        lut = build_lut(n)
        assert lut.dtype == np.uint32 and lut.shape == (2048,) and lut.nbytes == 8192
        got = lut_lookup(lut, np.arange(1 << 16))
        np.testing.assert_array_equal(got, brute_force_segment_test(n))

    @pytest.mark.parametrize("n", [9, 10, 11, 12])
    def test_word_and_bit_addressing(self, n):
        # index = 11 bits word | 5 bits bit, read by hand
        lut = build_lut(n)
        run = (1 << n) - 1                        # bits 0..n-1
        wrapped = ((run << (16 - 3)) | (run >> 3)) & 0xFFFF  # the same run crossing bit 15 -> 0
        short = (1 << (n - 1)) - 1
        for pattern, expect in ((0xFFFF, True), (0, False), (run, True), (wrapped, True), (short, False),
                                (short | (1 << n), False), (0x5555, False)):
            word, bit = pattern >> 5, pattern & 31
            assert bool((int(lut[word]) >> bit) & 1) == expect, hex(pattern)

    @pytest.mark.parametrize("n", [8, 13, 0, 9.5])
    def test_bad_arc_length(self, n):
        with pytest.raises(ValueError, match="arc_length"):
            build_lut(n)


class TestCircle:
    def test_bresenham_radius_3(self):
        pts = set(CIRCLE)
        assert len(pts) == 16
        for dx, dy in CIRCLE:
            assert abs(np.hypot(dx, dy) - 3) < 0.7
        # consecutive circle pixels are 8-neighbours (a closed contour, in order)
        for i in range(16):
            (ax, ay), (bx, by) = CIRCLE[i], CIRCLE[(i + 1) % 16]
            assert max(abs(ax - bx), abs(ay - by)) == 1
