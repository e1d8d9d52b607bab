"""Image pyramid: CPU against a per-pixel loop, GPU against CPU."""
import numpy as np
import pytest

from vilib_ros.frontend.pyramid import build_pyramid_cpu, level_shapes


def loop_halve(img):
    h, w = img.shape[0] // 2, img.shape[1] // 2
    out = np.zeros((h, w), np.uint8)
    for y in range(h):
        for x in range(w):
            s = int(img[2 * y, 2 * x]) + int(img[2 * y, 2 * x + 1]) + int(img[2 * y + 1, 2 * x]) + int(img[2 * y + 1, 2 * x + 1])
            out[y, x] = (s + 2) >> 2
    return out


class TestBuildPyramidCpu:
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


@pytest.mark.gpu
class TestGpuPyramid:
    @pytest.mark.parametrize("shape", [(480, 752), (101, 77)])
    def test_equals_cpu(self, shape, request):
        """Regression: both cases requested the EuRoC frames, so the random images were never
        compared wherever the real frames were missing; the EuRoC-sized case now adds two real
        frames where they exist, and the random images run everywhere there is a GPU."""
        from vilib_ros.frontend.pyramid import GpuPyramid

        rng = np.random.default_rng(2)
        imgs = [rng.integers(0, 256, shape, dtype=np.uint8)]
        if shape == (480, 752):
            from conftest import euroc_dir

            if euroc_dir() is not None:
                frames = request.getfixturevalue("euroc_frames")
                imgs += [frames[0], frames[50]]
        pyr = GpuPyramid(shape[1], shape[0], 5)
        for img in imgs:
            for lv in pyr.levels[1:]:
                lv.fill(0xAB)  # poison
            pyr.upload(img)
            pyr.build()
            got = pyr.to_host()
            ref = build_pyramid_cpu(img, 5)
            for g, r in zip(got, ref):
                np.testing.assert_array_equal(g, r)
