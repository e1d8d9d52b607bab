"""The compiled CPU detector (numba: compiled.pyramid, .fast, .nms, .detector) against the
NumPy reference (build_pyramid_cpu, fast_score_cpu, nms_suppress_cpu, cell_select_cpu):
bit-identical pyramids, score maps, suppressed maps and cells, on the 95 real EuRoC frames
and on random images, for every score, N = 9..12, n = 1..4 and l = 1..3."""
from __future__ import annotations

import numpy as np
import pytest

from vilib_ros.frontend.config import SCORES, SCORE_CODES, DetectorConfig, grid_shape_for
from vilib_ros.frontend.fast_lut import build_lut
from vilib_ros.frontend.reference.detector import CpuFastDetector, cell_select_cpu, fast_score_cpu, nms_suppress_cpu
from vilib_ros.frontend.reference.pyramid import build_pyramid_cpu

pytest.importorskip("numba", reason="numba (the compiled CPU path, a third-party dependency) is not installed")

from vilib_ros.frontend.compiled.detector import NumbaFastDetector  # noqa: E402
from vilib_ros.frontend.compiled.fast import fast_score  # noqa: E402
from vilib_ros.frontend.compiled.nms import nms_cells, nms_full  # noqa: E402
from vilib_ros.frontend.compiled.pyramid import CpuPyramid, build_pyramid_compiled, halve  # noqa: E402


def blocky(shape, seed, block=3, noise=4):
    """Random blocks plus noise: many corners of every kind, many score ties."""
    rng = np.random.default_rng(seed)
    small = rng.integers(0, 256, (shape[0] // block + 1, shape[1] // block + 1))
    img = np.kron(small, np.ones((block, block)))[:shape[0], :shape[1]]
    return np.clip(img + rng.integers(-noise, noise + 1, shape), 0, 255).astype(np.uint8)


def _compiled_score(img, n, threshold, score, border):
    out = np.full(img.shape, np.nan, np.float32)   # poisoned: every pixel must be written
    fast_score(np.ascontiguousarray(img), build_lut(n), n, int(np.floor(threshold)), SCORE_CODES[score], border, out)
    return out


def _reference_detect(img, cfg, occupancy=None):
    """The NumPy reference chain, keeping the intermediate maps."""
    levels = build_pyramid_cpu(img, cfg.levels)
    scores = [fast_score_cpu(lv, cfg.arc_length, cfg.threshold, cfg.score, cfg.border) for lv in levels]
    sup = [nms_suppress_cpu(s, cfg.nms_radius) for s in scores]
    cells = cell_select_cpu(sup, cfg, grid_shape_for(img.shape[1], img.shape[0], cfg), occupancy)
    return levels, scores, sup, cells


def _assert_cells_equal(got, ref):
    assert got.grid_shape == ref.grid_shape
    for f in ("x", "y", "score", "level"):
        a, b = getattr(got, f), getattr(ref, f)
        assert a.dtype == b.dtype, f
        np.testing.assert_array_equal(a, b, err_msg=f)


@pytest.fixture(scope="module")
def euroc_reference(frames):
    """Reference pyramid, score maps and cells (default config, and with an occupancy) per frame."""
    cfg = DetectorConfig()
    gs = grid_shape_for(752, 480, cfg)
    occ = np.random.default_rng(0).random(gs) < 0.3
    out = []
    for img in frames:
        levels, scores, sup, cells = _reference_detect(img, cfg)
        out.append((levels, scores, cells, cell_select_cpu(sup, cfg, gs, occ)))
    return cfg, occ, out


class TestHalve:
    @pytest.mark.parametrize("shape", [(480, 752), (37, 51), (2, 2), (3, 9)])
    def test_matches_reference(self, shape):
        img = np.random.default_rng(shape[0]).integers(0, 256, shape).astype(np.uint8)
        dst = np.full((shape[0] // 2, shape[1] // 2), 7, np.uint8)
        halve(img, dst)
        np.testing.assert_array_equal(dst, build_pyramid_cpu(img, 2)[1])


class TestBuildPyramidCompiled:
    def test_real_frames_bit_identical(self, frames, euroc_reference):
        for img, (levels, _, _, _) in zip(frames, euroc_reference[2]):
            for a, b in zip(build_pyramid_compiled(img, 2), levels):
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


class TestCpuPyramid:
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


class TestFastScore:
    def test_real_frames_bit_identical(self, frames, euroc_reference):
        cfg = euroc_reference[0]
        for img, (levels, scores, _, _) in zip(frames, euroc_reference[2]):
            for lv, ref in zip(levels, scores):
                np.testing.assert_array_equal(_compiled_score(lv, cfg.arc_length, cfg.threshold, cfg.score,
                                                              cfg.border), ref)

    @pytest.mark.parametrize("score", SCORES)
    @pytest.mark.parametrize("n", [9, 10, 11, 12])
    def test_random_images_all_scores_and_arcs(self, score, n):
        img = blocky((61, 83), seed=n, block=2 + n % 3)
        for threshold, border in ((10.0, 3), (5.5, 8), (30.0, 4)):
            ref = fast_score_cpu(img, n, threshold, score, border)
            got = _compiled_score(img, n, threshold, score, border)
            np.testing.assert_array_equal(got, ref)
        assert np.count_nonzero(fast_score_cpu(img, n, 10.0, score, 3)) > 20, "too few corners to be meaningful"

    @pytest.mark.parametrize("score", SCORES)
    def test_real_frame_every_score(self, frames, score):
        img = frames[47]
        for n in (9, 12):
            np.testing.assert_array_equal(_compiled_score(img, n, 10.0, score, 3), fast_score_cpu(img, n, 10.0, score, 3))

    @pytest.mark.parametrize("shape,border", [((6, 40), 3), ((40, 6), 3), ((17, 17), 8), ((7, 7), 3)])
    def test_tiny_images_are_zero_outside_the_border(self, shape, border):
        img = blocky(shape, seed=3)
        np.testing.assert_array_equal(_compiled_score(img, 9, 5, "sad_arc", border), fast_score_cpu(img, 9, 5, "sad_arc", border))

    def test_saturated_contrast(self):
        img = np.zeros((40, 40), np.uint8)
        img[::2, ::3] = 255
        img[20, 20] = 255
        for score in SCORES:
            np.testing.assert_array_equal(_compiled_score(img, 9, 254, score, 3), fast_score_cpu(img, 9, 254, score, 3))
            np.testing.assert_array_equal(_compiled_score(img, 9, 1, score, 3), fast_score_cpu(img, 9, 1, score, 3))


class TestNmsFull:
    @pytest.mark.parametrize("n", [1, 2, 3, 4])
    def test_matches_reference_with_ties(self, n):
        rng = np.random.default_rng(n)
        score = (rng.integers(0, 4, (37, 45)) * (rng.random((37, 45)) < 0.6)).astype(np.float32)
        out = np.full_like(score, np.nan)
        nms_full(score, n, out)
        np.testing.assert_array_equal(out, nms_suppress_cpu(score, n))


class TestNmsCells:
    @pytest.mark.parametrize("levels", [1, 2, 3])
    @pytest.mark.parametrize("n", [1, 2, 3, 4])
    def test_random_images(self, levels, n):
        cfg = DetectorConfig(levels=levels, nms_radius=n, cell_width=32, cell_height=32 if levels < 3 else 16,
                             score="max_threshold" if n % 2 else "sad_arc", arc_length=9, border=3)
        img = blocky((150, 200), seed=10 * levels + n)
        gs = grid_shape_for(200, 150, cfg)
        occ = np.random.default_rng(n).random(gs) < 0.25
        for o in (None, occ):
            _, scores, _, ref = _reference_detect(img, cfg, o)
            det = NumbaFastDetector(200, 150, cfg)
            _assert_cells_equal(det.detect(img, occupancy=o), ref)
            assert ref.count > gs[0] * gs[1] // 2

    def test_poisoned_outputs_all_written(self):
        cfg = DetectorConfig(levels=2)
        img = blocky((96, 128), seed=5)
        levels = build_pyramid_cpu(img, 2)
        maps = tuple(fast_score_cpu(lv, 10, 10, "sad_arc", 8) for lv in levels) + (np.zeros((1, 1), np.float32),) * 2
        rows, cols = grid_shape_for(128, 96, cfg)
        outs = [np.full(rows * cols, np.nan, np.float32) for _ in range(3)] + [np.full(rows * cols, -7, np.int32)]
        nms_cells(maps, 2, 32, 32, rows, cols, 1, np.zeros(rows * cols, np.uint8), False, *outs)
        ref = cell_select_cpu([nms_suppress_cpu(m, 1) for m in maps[:2]], cfg, (rows, cols))
        for a, f in zip(outs, ("x", "y", "score", "level")):
            np.testing.assert_array_equal(a, getattr(ref, f))

    def test_partial_cells_and_tie_across_levels(self):
        # width 100 = 3 full cells + a partial one; a level-1 corner ties a level-0 corner in its cell
        cfg = DetectorConfig(levels=2, border=3, cell_width=32, cell_height=32)
        m0 = np.zeros((70, 100), np.float32)
        m1 = np.zeros((35, 50), np.float32)
        m0[10, 97] = 5.0      # in the partial last column of cells
        m0[40, 10] = 9.0
        m1[22, 6] = 9.0       # same cell (row 1, col 0) on level 1: the lower level must win
        m1[3, 20] = 4.0       # cell (0, 1) only on level 1: reported at (40, 6)
        rows, cols = grid_shape_for(100, 70, cfg)
        maps = (m0, m1) + (np.zeros((1, 1), np.float32),) * 2
        outs = [np.empty(rows * cols, np.float32) for _ in range(3)] + [np.empty(rows * cols, np.int32)]
        nms_cells(maps, 2, 32, 32, rows, cols, 1, np.zeros(rows * cols, np.uint8), False, *outs)
        ref = cell_select_cpu([m0, m1], cfg, (rows, cols))
        for a, f in zip(outs, ("x", "y", "score", "level")):
            np.testing.assert_array_equal(a, getattr(ref, f))
        assert (outs[3][cols], outs[0][cols], outs[1][cols]) == (0, 10, 40)
        assert (outs[3][1], outs[0][1], outs[1][1]) == (1, 40, 6)


class TestNumbaFastDetector:
    def test_real_frames_cells_bit_identical(self, frames, euroc_reference):
        cfg, occ, ref = euroc_reference
        det = NumbaFastDetector(752, 480, cfg)
        for img, (_, _, cells, cells_occ) in zip(frames, ref):
            _assert_cells_equal(det.detect(img), cells)
            _assert_cells_equal(det.detect(img, occupancy=occ), cells_occ)
        assert np.mean([r[2].count for r in ref]) > 200

    def test_interface_matches_reference_detector(self, frames):
        cfg = DetectorConfig(levels=3, cell_height=32, nms_radius=2, score="sad_circle", arc_length=11)
        det, ref = NumbaFastDetector(752, 480, cfg), CpuFastDetector(752, 480, cfg)
        img = frames[60]
        for method in ("pyramid", "score_maps", "suppressed_maps"):
            got, want = getattr(det, method)(img), getattr(ref, method)(img)
            assert len(got) == len(want) == 3
            for a, b in zip(got, want):
                assert a.dtype == b.dtype
                np.testing.assert_array_equal(a, b)
        first = det.score_maps(img)
        det.detect(frames[61])              # internal buffers are reused ...
        np.testing.assert_array_equal(first[0], ref.score_maps(img)[0])   # ... returned maps are copies
        assert det.grid_shape == ref.grid_shape and det.device == "cpu" and isinstance(det, CpuFastDetector)

    def test_bad_input_reads_as_message(self):
        det = NumbaFastDetector(752, 480, DetectorConfig())
        with pytest.raises(ValueError, match="uint8"):
            det.detect(np.zeros((480, 752), np.float32))
        with pytest.raises(ValueError, match="shape"):
            det.detect(np.zeros((480, 750), np.uint8))
        with pytest.raises(ValueError, match="occupancy"):
            det.detect(np.zeros((480, 752), np.uint8), occupancy=np.zeros((2, 2), bool))
