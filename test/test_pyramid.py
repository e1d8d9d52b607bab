"""Image pyramid, the CPU twins: the NumPy reference (reference.pyramid.build_pyramid_cpu) against a
per-pixel loop, the compiled twin (numba: compiled.pyramid) against the reference, bit for bit.
(The GPU twin: test_pyramid_gpu.py.)"""
import numpy as np
import pytest

from conftest import compiled_twin
from vilib_ros.frontend.config import level_shapes
from vilib_ros.frontend.factory import compiled_available
from vilib_ros.frontend.reference.pyramid import build_pyramid_cpu

if compiled_available():      # the compiled twin's modules import numba
    from vilib_ros.frontend.compiled.pyramid import CpuPyramid, build_pyramid_compiled, halve


def loop_halve(img):
    h, w = img.shape[0] // 2, img.shape[1] // 2
    out = np.zeros((h, w), np.uint8)
    for y in range(h):
        for x in range(w):
            s = int(img[2 * y, 2 * x]) + int(img[2 * y, 2 * x + 1]) + int(img[2 * y + 1, 2 * x]) + int(img[2 * y + 1, 2 * x + 1])
            out[y, x] = (s + 2) >> 2
    return out


class TestBuildPyramidCpu:
    """The reference against the rounded 2x2 mean written out pixel by pixel."""

    @pytest.mark.parametrize("shape", [(31, 45), (32, 48), (17, 66)])
    def test_matches_loop(self, shape):
        rng = np.random.default_rng(1)
        img = rng.integers(0, 256, shape, dtype=np.uint8)
        pyr = build_pyramid_cpu(img, 3)
        assert len(pyr) == 3 and pyr[0] is img
        ref = img
        for k in range(1, 3):
            ref = loop_halve(ref)
            assert pyr[k].dtype == np.uint8
            np.testing.assert_array_equal(pyr[k], ref)
        assert [p.shape for p in pyr] == level_shapes(shape[1], shape[0], 3)

    def test_rounding(self):
        img = np.array([[0, 1], [1, 0]], np.uint8)      # (2 + 2) >> 2 = 1
        assert build_pyramid_cpu(img, 2)[1][0, 0] == 1
        img = np.array([[255, 255], [255, 254]], np.uint8)
        assert build_pyramid_cpu(img, 2)[1][0, 0] == 255

    @pytest.mark.parametrize("bad", [np.zeros((8, 8), np.float32), np.zeros((8, 8, 3), np.uint8), np.zeros((0, 8), np.uint8)])
    def test_bad_input(self, bad):
        with pytest.raises(ValueError):
            build_pyramid_cpu(bad, 2)

    def test_too_many_levels(self):
        with pytest.raises(ValueError, match="levels"):
            build_pyramid_cpu(np.zeros((8, 8), np.uint8), 5)



@compiled_twin
class TestHalve:
    """compiled.pyramid.halve against the reference's second level."""

    @pytest.mark.parametrize("shape", [(480, 752), (37, 51), (2, 2), (3, 9)])
    def test_matches_reference(self, shape):
        img = np.random.default_rng(shape[0]).integers(0, 256, shape).astype(np.uint8)
        dst = np.full((shape[0] // 2, shape[1] // 2), 7, np.uint8)
        halve(img, dst)
        np.testing.assert_array_equal(dst, build_pyramid_cpu(img, 2)[1])


@compiled_twin
class TestBuildPyramidCompiled:
    """compiled.pyramid.build_pyramid_compiled against the reference, bit for bit."""

    def test_real_frames_bit_identical(self, frames):
        for img in frames:
            for a, b in zip(build_pyramid_compiled(img, 2), build_pyramid_cpu(img, 2)):
                np.testing.assert_array_equal(a, b)

    @pytest.mark.parametrize("levels", [1, 3, 5, 8])
    def test_odd_sizes_all_levels(self, levels):
        img = np.random.default_rng(levels).integers(0, 256, (481, 755)).astype(np.uint8)
        got, ref = build_pyramid_compiled(img, levels), build_pyramid_cpu(img, levels)
        assert [g.shape for g in got] == [r.shape for r in ref]
        for a, b in zip(got, ref):
            np.testing.assert_array_equal(a, b)

    def test_non_contiguous_input(self):
        big = np.random.default_rng(1).integers(0, 256, (100, 160)).astype(np.uint8)
        view = big[:, :150]     # row padding, as a ROS image with step > width
        for a, b in zip(build_pyramid_compiled(view, 3), build_pyramid_cpu(view, 3)):
            np.testing.assert_array_equal(a, b)

    @pytest.mark.parametrize("bad,match", [(np.zeros((8, 8), np.float32), "uint8"), (np.zeros((8, 8, 3), np.uint8), "2D")])
    def test_bad_input(self, bad, match):
        with pytest.raises(ValueError, match=match):
            build_pyramid_compiled(bad, 2)

    def test_too_many_levels(self):
        with pytest.raises(ValueError, match="too small"):
            build_pyramid_compiled(np.zeros((8, 8), np.uint8), 5)


@compiled_twin
class TestCpuPyramid:
    """compiled.pyramid.CpuPyramid: preallocated levels, the reference's values."""

    def test_buffers_reused_and_equal(self, frames):
        pyr = CpuPyramid(752, 480, 5)
        first = pyr.build(frames[0])
        ids = [id(lv) for lv in first[1:]]
        for img in frames[1:4]:
            got = pyr.build(img)
            assert [id(lv) for lv in got[1:]] == ids
            for a, b in zip(got, build_pyramid_cpu(img, 5)):
                np.testing.assert_array_equal(a, b)

    def test_wrong_size(self):
        with pytest.raises(ValueError, match="shape"):
            CpuPyramid(752, 480, 2).build(np.zeros((480, 751), np.uint8))
